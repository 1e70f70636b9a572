"""Transport and process: the Starlette app, GraphQL over HTTP and WebSocket, auth,
settings, the lifespan that runs background loops, and the CLI."""
