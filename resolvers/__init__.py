"""What each GraphQL field does: authorize, call the domain, shape the payload; a package
per domain (access, cloudspaces, cloud_accounts, probing, spaces) and what they share (common)."""
