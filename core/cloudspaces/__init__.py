"""CloudSpaces: lifecycle, capacity, host access, vCluster settings and manifests, the reconciler."""
