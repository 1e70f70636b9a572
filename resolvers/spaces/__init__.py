"""Space, status event, namespace and environment reads and writes."""
