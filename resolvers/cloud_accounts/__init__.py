"""Cloud account reads and writes."""
