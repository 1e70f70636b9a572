"""The access part of the schema: roles, tokens and the audit log."""
