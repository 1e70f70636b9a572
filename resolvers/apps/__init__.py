"""Apps: reads, mutations and the appChanged subscription (issue 23)."""
