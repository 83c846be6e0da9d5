# The README's commands: `make demo`, `make test` and `make lint` (CI runs the last two). Each builds .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The CPU build of torch (a GPU user installs their own CUDA torch into .venv first, and it is kept).
TORCH ?= torch==2.13.0

.PHONY: demo test test-fast lint venv clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) -m tvm_rl.cli demo

# Two workers (the tests leave a core idle most of the time: subprocesses, builds, timing); worksteal balances the
# long end-to-end tests, which would otherwise queue behind one module on one worker. PYTEST_WORKERS=0 runs serially.
PYTEST_WORKERS ?= 2
test: $(STAMP)
	$(PY) -m pytest -q --durations=40 -n $(PYTEST_WORKERS) --dist worksteal tests benchmarks/tests

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow" -n $(PYTEST_WORKERS) tests benchmarks/tests

# ruff (lint + import order) and mypy, configured in pyproject.toml; CI runs it before the tests.
lint: $(STAMP)
	$(PY) -m ruff check tvm_rl tests benchmarks tutorials conftest.py
	$(PY) -m mypy

clean:
	rm -rf $(VENV) build *.egg-info
