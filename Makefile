# Two commands do all set-up on a fresh machine: `make demo` and `make test` (`make test-all`: every tier).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
RESULTS ?= results/demo

.PHONY: install demo test test-all lint faults bench clean-demo

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

# A real grid (deep linear nets, depth sweep, BCGD) on an embedded local Ray; Parquet + PNG figure.
demo: $(STAMP)
	$(VENV)/bin/convgrid run grids/deep_linear/demo_depth.yaml --results $(RESULTS)
	$(VENV)/bin/convgrid report $(RESULTS) --out $(RESULTS)/report
	@echo "Parquet results: $(RESULTS)/runs, $(RESULTS)/curves   report and figures: $(RESULTS)/report"

# The fast tier (a few minutes): everything but the tests that start Ray, kill processes or need a
# local S3/PostgreSQL. `make test-all` runs every tier; CI runs it.
# Two pytest workers (pytest-xdist), each taking whole test files (`loadfile`), so a module's shared Ray
# cluster is started once: most of the slow tier waits (Ray starts, killed drivers' leases), and two
# workers overlap those waits; TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2
XDIST := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

test: $(STAMP)
	$(PY) -m pytest -q $(XDIST) -m "not ray and not faults and not services and not soak"

test-all: $(STAMP)
	$(PY) -m pytest -q $(XDIST) -m "not soak"

# ruff (lint + format check) and mypy, configured in pyproject.toml; zero findings is the bar.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The whole fault matrix of docs/reliability.md (real signals at 20 random moments per row, every byte of
# two committed parts flipped, and every test of the faults tier; about an hour).
faults: $(STAMP)
	$(PY) -m tests.fault_matrix --moments 20
	$(PY) -m tests.fuzz_parts
	$(PY) -m pytest -q -m "faults or soak"

bench: $(STAMP)
	$(PY) benchmarks/overhead.py

clean-demo:
	rm -rf $(RESULTS)
