"""Simulated infrastructure on loopback: Kubernetes API servers, a host cluster running
Flux's controllers and the vCluster chart, and the AWS, GCP, Azure, OIDC and model
endpoints spacedock talks to.

The tests, the benches and `spacedock demo` all run these same simulators, so what the
demo shows is what the suite proves. Each refuses what the real system refuses (see
sim/upstream/ for the schemas they check against) and listens on 127.0.0.1 only.
"""
