"""What every domain of the schema shares: enums, the Relay types, payload basics, the resolver info."""
