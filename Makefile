# The same commands for people and CI: `make run`, `make test`.
.PHONY: setup servers run test check pytest bench clean

VENV := .venv
PY := $(VENV)/bin/python
CONFIG ?= config/dynamiq.gcfg

setup:  ## create .venv and install (idempotent, quick when nothing changed)
	@./setup.sh

servers:  ## install the servers the tests drive, where this machine allows it
	@bash scripts/servers

run: setup  ## start one node on the embedded store at http://127.0.0.1:8081
	$(VENV)/bin/dynamiq serve -c $(CONFIG)

test: servers check pytest  ## the whole suite: style, types, layering, tests

check: setup
	$(VENV)/bin/ruff check dynamiq tests bench examples
	$(VENV)/bin/ruff format --check dynamiq tests bench examples
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

pytest: setup
	$(PY) -m pytest $(PYTEST_ARGS)

bench: setup  ## workload W1 beside the raw store and the peers (see bench/README.md)
	$(PY) -m bench.w1 $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
