"""Test support: the server under test, a gql client, and stand-in servers."""
