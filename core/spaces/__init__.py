"""Spaces and what hangs off them: registration, cluster endpoints and credentials, namespaces, environments, kubeconfig import, and the status model (health, status rules, statuses, reasons)."""
