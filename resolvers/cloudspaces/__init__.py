"""CloudSpace fields, mutations and the phase subscription."""
