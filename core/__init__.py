"""The domain: orgs and roles, cloud accounts, spaces, environments, the probe loop and events."""
