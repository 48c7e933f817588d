# The same commands for people and CI: `make run`, `make test`.
.PHONY: setup lock servers run test check docs pytest bench clean

VENV := .venv
PY := $(VENV)/bin/python
CONFIG ?= config/dynamiq.gcfg

setup:  ## create .venv and install from uv.lock (idempotent, quick when nothing changed)
	@./setup.sh

lock:  ## renew uv.lock to the newest releases pyproject.toml allows, and install them
	@./setup.sh --renew

servers:  ## install the servers the tests drive, where this machine allows it
	@bash scripts/servers

run: setup  ## start one node on the embedded store at http://127.0.0.1:8081
	$(VENV)/bin/dynamiq serve -c $(CONFIG)

test: servers check docs pytest  ## the whole suite: style, types, layering, the site, tests

check: setup
	.uv/bin/uv lock --check
	$(VENV)/bin/ruff check dynamiq tests bench examples docsite
	$(VENV)/bin/ruff format --check dynamiq tests bench examples docsite
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

docs: setup  ## build the documentation site into site/, strictly (a dead link fails)
	$(PY) -m docsite.build

pytest: setup
	$(PY) -m pytest $(PYTEST_ARGS)

bench: setup  ## workload W1 beside the raw store and the peers (see bench/README.md)
	$(PY) -m bench.w1 $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .uv site .pytest_cache .mypy_cache .ruff_cache .hypothesis
