# The same commands for people and CI: `make run`, `make test`.
.PHONY: run test check lint pytest bench clean

VENV := .venv
PY := $(VENV)/bin/python
CONFIG ?= config/dynamiq.gcfg

$(PY): setup.sh pyproject.toml
	./setup.sh
	@touch $(PY)

run: $(PY)  ## start one node on the embedded store at http://127.0.0.1:8081
	$(VENV)/bin/dynamiq serve -c $(CONFIG)

test: $(PY) check pytest  ## the whole suite: style, types, layering, tests

check: $(PY)
	$(VENV)/bin/ruff check dynamiq tests bench
	$(VENV)/bin/ruff format --check dynamiq tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

pytest: $(PY)
	$(PY) -m pytest $(PYTEST_ARGS)

bench: $(PY)  ## workload W1 against one node, plus the raw store ceiling
	$(PY) -m bench.w1

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
