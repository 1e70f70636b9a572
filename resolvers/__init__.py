"""What each GraphQL field does: authorize, call the domain, shape the payload."""
