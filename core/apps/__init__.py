"""Apps: Git and Helm sources delivered by Flux into CloudSpaces and environments (issue 23)."""
