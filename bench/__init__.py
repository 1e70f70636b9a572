"""Benchmarks: scripts that print their figures against a baseline measured in the same run."""
