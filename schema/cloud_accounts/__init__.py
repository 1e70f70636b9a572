"""The cloud accounts part of the schema."""
