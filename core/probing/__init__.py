"""The probe loop: claims due spaces, probes them, writes results and status transitions."""
