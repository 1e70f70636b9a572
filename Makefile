# The two commands the README leads with: `make serve` and `make test`.
# Each installs what it needs first, so both work on a fresh machine.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
GRAPHIQL := api/graphiql
FRONTEND := tests/frontend

.PHONY: install runtime graphiql browser frontend serve demo test lint bench schema

# Everything: what serves, and what tests, checks and benchmarks need besides.
install: $(VENV)/.installed-dev graphiql

# What serves, alone: `make serve` needs no test tools (moto, mypy, kubernetes-validate and
# the rest are two thirds of the install), and gets the rest when `make test` asks.
runtime: $(VENV)/.installed graphiql

# Every setuptools editable install ends with an "Editable installation." note (each of its
# modes has one); it is information, not a problem, so it is not printed.
EDITABLE := PYTHONWARNINGS='ignore:Editable installation' $(BIN)/pip install --quiet --disable-pip-version-check

# A current pip first: it resolves and installs this set in two thirds of the CPU time
# of the pip that venv ships (20 s instead of 30 s on a 2-core machine).
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(EDITABLE) --upgrade pip
	$(EDITABLE) -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed pyproject.toml
	$(EDITABLE) -e '.[dev]'
	touch $@

# GraphiQL and React from the npm registry, pinned in package.json; served by us, never from a CDN.
graphiql: $(GRAPHIQL)/node_modules/.installed

$(GRAPHIQL)/node_modules/.installed: $(GRAPHIQL)/package.json
	npm install --prefix $(GRAPHIQL) --no-audit --no-fund --no-package-lock --loglevel=error
	touch $@

# The client libraries the README's frontend set-ups are written for (graphql-ws, Apollo
# Client, urql, graphql-codegen, esbuild, TypeScript), pinned; for tests/test_frontend_clients.py.
frontend: $(FRONTEND)/node_modules/.installed

$(FRONTEND)/node_modules/.installed: $(FRONTEND)/package.json
	npm install --prefix $(FRONTEND) --no-audit --no-fund --no-package-lock --loglevel=error
	touch $@

# Headless Chromium for the GraphiQL browser test (Debian's package).
browser:
	@command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)

serve: runtime
	$(BIN)/spacedock serve

# The server beside a simulated fleet (sim/), seeded; the simulators need the test tools.
demo: install
	$(BIN)/spacedock demo

# Tests wait on servers and clusters more than on the CPU, so more workers than cores pay
# (4 workers: ~11 instead of ~29 minutes on a busy machine); --dist loadscope keeps each
# module (and its one shared server) on one worker. TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 4

test: install browser frontend
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
	$(BIN)/python bench/admission.py
	$(BIN)/python bench/abuse.py

schema: install
	$(BIN)/spacedock export-schema
