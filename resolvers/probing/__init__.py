"""Live status events and probe results for subscriptions."""
