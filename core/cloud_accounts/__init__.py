"""Cloud accounts: credentials, discovery, cluster grants."""
