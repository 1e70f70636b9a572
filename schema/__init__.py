"""The GraphQL schema: Strawberry types, inputs and payloads; field bodies stay thin."""
