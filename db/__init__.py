"""Persistence: tables, the engine, migrations and every SQL query spacedock runs."""
