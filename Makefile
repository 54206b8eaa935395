# Each target bootstraps .venv from pyproject.toml on a fresh machine (Python 3.11, git, make).
# Bytecode is compiled at install (site-packages) and before each target (our own packages): where
# PYTHONDONTWRITEBYTECODE is set, no process caches it, and every test subprocess, Dagster run worker and CLI
# call would compile its imports again (docs/BENCHMARKS.md). `compileall` rewrites only what changed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The wheel's extras the venv gets (pyproject.toml; docs/deploy.md, "Installing"): dev brings ui, postgres, s3 and dbt,
# what the tests and `make dev` use. E.g. `make EXTRAS=dev,simulator,k8s`.
EXTRAS ?= dev,simulator

.PHONY: demo test lint bench dev clean bytecode

$(VENV)/.installed: pyproject.toml setup.py simulator/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -e ./simulator -e '.[$(EXTRAS)]' || $(BIN)/python -m pip install --quiet -e ./simulator -e '.[$(EXTRAS)]'
	touch $@

$(VENV)/.installed-bench: $(VENV)/.installed
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -e ./simulator -e '.[$(EXTRAS),bench]' || $(BIN)/python -m pip install --quiet -e ./simulator -e '.[$(EXTRAS),bench]'
	touch $@

# Our own packages' bytecode (site-packages' is compiled at install); instant when nothing changed.
bytecode: $(VENV)/.installed
	$(BIN)/python -m compileall -q pipeline simulator bench tests

demo: bytecode
	$(BIN)/lessonsync demo

# The hygiene gates, each in seconds: formatting and lint (ruff), types (mypy over pipeline/, [tool.mypy]) and the
# SQL models' style (sqlfluff, .sqlfluff).
lint: bytecode
	$(BIN)/ruff format --check pipeline simulator bench tests
	$(BIN)/ruff check pipeline simulator bench tests
	$(BIN)/mypy
	$(BIN)/sqlfluff lint dbt_like_sql --processes 1

# The gates and the import contracts ([tool.importlinter] in pyproject.toml) first: they fail in seconds, before the suite.
test: bytecode lint
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m pytest -n 3 --maxschedchunk 2

bench: $(VENV)/.installed-bench bytecode
	$(BIN)/python -m bench

# Full refresh, backfill and rebuild --into, 5 times each at default settings, each verified exact, with peak RSS
# (docs/BENCHMARKS.md, "Soak at default settings"); SOAK_SCALE=medium for the larger one. Not part of `make test`.
.PHONY: soak
soak: $(VENV)/.installed bytecode
	$(BIN)/python -m bench.soak --scale $${SOAK_SCALE:-small}

# `dg dev` (webserver + daemon) on this dg project ([tool.dg] in pyproject.toml; `dagster dev -w workspace.yaml`
# loads the same code location). The Dagster home is the one `lessonsync sync` and the demo record their runs in
# (DAGSTER_HOME, else the data directory's), so the UI shows them.
dev: bytecode
	home="$$($(BIN)/python -m pipeline.instance)" && DAGSTER_HOME="$$home" \
	  VIRTUAL_ENV="$(CURDIR)/$(VENV)" PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/dg dev

clean:
	rm -rf $(VENV) data/warehouse.duckdb data/lake data/inbox.sqlite3* data/analytics.duckdb data/marts
