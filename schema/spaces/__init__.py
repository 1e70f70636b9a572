"""The spaces part of the schema: spaces, status events, namespaces, environments."""
