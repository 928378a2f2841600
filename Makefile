# The set-up commands of the README: `make demo`, `make test` (lint, then the whole suite with the notebooks) and
# `make test-fast` (lint, then the tests not marked slow); the tests run on two pytest-xdist workers of one thread
# each. Each creates .venv in the repo root when missing and installs the pinned dependencies.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "torch==2.13.0"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/interp verify
	$(BIN)/interp report --checkpoint main-onehot --out report.html

lint: $(STAMP)
	$(BIN)/ruff check interp analyses tests

test: lint
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest tests --nbmake notebooks -n 2

test-fast: lint
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest tests -m "not slow" -n 2

clean:
	rm -rf $(VENV)
