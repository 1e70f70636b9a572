"""The GraphQL schema: Strawberry types, inputs and payloads, a package per domain whose
Query, Mutation and Subscription parts roots.py merges; field bodies stay thin."""
