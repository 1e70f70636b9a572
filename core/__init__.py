"""The domain, a package per domain: orgs, access, cloudspaces, cloud_accounts, probing,
spaces and what they share (common); README "How it is built" gives the order they import in."""
