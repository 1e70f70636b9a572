"""Orgs as a whole: what a new org starts with, whichever domain it touches."""
