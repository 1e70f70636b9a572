"""The App Advisor: rules over a snapshot of each READY CloudSpace's vCluster, findings kept across runs, the loop that runs them, and explanations from a model."""
