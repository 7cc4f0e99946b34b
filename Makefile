# Usher: every target sets up what it needs from nothing (a .venv with the project installed).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: setup test test-long lint typecheck run schemas bench bench-quick clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install -q --disable-pip-version-check -e ".[dev]"
	@touch $(STAMP)

setup: $(STAMP)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: setup
	$(BIN)/mypy schemas usher services migrations

test: lint typecheck
	$(BIN)/pytest

# Nightly-style: the admission-protocol state machine with many more, longer examples.
test-long: setup
	USHER_LONG_TESTS=1 $(BIN)/pytest tests/core/test_protocol_machine.py
	USHER_LONG_TESTS=1 $(BIN)/pytest tests/e2e/test_resilience.py -k accepting_both_zones
	USHER_LOAD_SEEDS=11,12,13,14,15 $(BIN)/pytest tests/e2e/test_borrowing_load.py

run: setup
	$(BIN)/usher up --burst-zones eci

schemas: setup
	$(BIN)/python -m schemas.export

bench: setup
	$(BIN)/python -m bench

bench-quick: setup
	$(BIN)/python -m bench --quick

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
