"""Who may do what: roles, tokens, authentication, sessions, the audit log and its housekeeping."""
