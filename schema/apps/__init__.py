"""Apps in the graph: App, AppRevision, their sources, workloads and events (issue 23)."""
