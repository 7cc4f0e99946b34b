# Usher: every target sets up what it needs from nothing (a .venv with the project installed).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: setup test test-long lint typecheck run schemas reference docs bench bench-quick clean lock

# The runtime dependencies are installed at requirements.lock's versions (the image's), so the
# suite runs with what the image ships whenever PyPI moves on; dev tools float within their ranges.
$(STAMP): pyproject.toml requirements.lock
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install -q --disable-pip-version-check -c requirements.lock -e ".[dev]"
	@touch $(STAMP)

setup: $(STAMP)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: setup
	$(BIN)/mypy schemas usher services migrations bench

test: lint typecheck
	$(BIN)/pytest -n 2 --dist loadfile

# Nightly-style: the admission-protocol state machine and the wire contract's properties with
# many more, longer examples (tests/long.py), the both-zones race at 2,000 jobs, more load seeds,
# every hostile value against a real `usher up` (its counts printed).
test-long: setup
	USHER_LONG_TESTS=1 $(BIN)/pytest tests/core/test_protocol_machine.py tests/test_schemas.py tests/core/test_hostile_values.py
	USHER_LONG_TESTS=1 $(BIN)/pytest tests/e2e/test_resilience.py -k two_zone_dequeuers
	USHER_LOAD_SEEDS=11,12,13,14,15 $(BIN)/pytest tests/e2e/test_borrowing_load.py
	USHER_LONG_TESTS=1 $(BIN)/pytest -s tests/e2e/test_hostile_up.py

run: setup
	$(BIN)/usher up --burst-zones eci

# requirements.lock: the image's pinned packages, from this environment (tests/deploy/lockfile.py).
lock: setup
	$(BIN)/python -m tests.deploy.lockfile > requirements.lock

schemas: setup
	$(BIN)/python -m schemas.export

# The generated reference pages of the docs site (command line, metrics, schemas, annotations).
reference: setup
	$(BIN)/python -m usher.cli.reference_docs

# The docs site into site/ (--strict: a broken link or a page missing from the nav fails).
docs: setup
	$(BIN)/mkdocs build --strict

bench: setup
	$(BIN)/python -m bench

bench-quick: setup
	$(BIN)/python -m bench --quick

clean:
	rm -rf $(VENV) site .mypy_cache .pytest_cache .ruff_cache .hypothesis
