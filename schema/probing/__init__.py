"""The probing part of the schema: status and probe subscriptions."""
