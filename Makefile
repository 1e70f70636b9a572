# The two commands the README leads with: `make serve` and `make test`.
# Each installs what it needs first, so both work on a fresh machine.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
GRAPHIQL := api/graphiql

.PHONY: install graphiql browser serve test lint bench schema

install: $(VENV)/.installed graphiql

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

# GraphiQL and React from the npm registry, pinned in package.json; served by us, never from a CDN.
graphiql: $(GRAPHIQL)/node_modules/.installed

$(GRAPHIQL)/node_modules/.installed: $(GRAPHIQL)/package.json
	npm install --prefix $(GRAPHIQL) --no-audit --no-fund --no-package-lock --loglevel=error
	touch $@

# Headless Chromium for the GraphiQL browser test (Debian's package).
browser:
	@command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)

serve: install
	$(BIN)/spacedock serve

# Tests wait on servers and clusters more than on the CPU, so more workers than cores pay
# (4 workers: ~11 instead of ~29 minutes on a busy machine); --dist loadscope keeps each
# module (and its one shared server) on one worker. TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 4

test: install browser
	$(BIN)/pytest -q -rs -n $(TEST_WORKERS) --dist loadscope

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .
	$(BIN)/lint-imports
	$(BIN)/spacedock export-schema --check

bench: install
	$(BIN)/python bench/graphql_reads.py
	$(BIN)/python bench/fanout.py
	$(BIN)/python bench/probe.py
	$(BIN)/python bench/cloudspaces.py
	$(BIN)/python bench/abuse.py

schema: install
	$(BIN)/spacedock export-schema
