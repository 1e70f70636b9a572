"""Every outbound adapter: cloud SDKs and Kubernetes clients live here and nowhere else."""
