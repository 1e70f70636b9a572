"""Roles, tokens and the audit log."""
