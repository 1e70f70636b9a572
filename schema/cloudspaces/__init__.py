"""The CloudSpace part of the schema."""
