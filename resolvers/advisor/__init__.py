"""App Advisor fields, mutations and the adviceChanged subscription."""
