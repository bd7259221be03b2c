# Switchboard. `make run` and `make test` work on a fresh machine with Python 3.11+.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
ARGS   ?=
JOBS   ?= auto
CONSTRAINTS ?= constraints.txt

.PHONY: help install run chat test test-fast test-plain test-browser lint bench soak clean

$(STAMP): pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(if $(CONSTRAINTS),-c $(CONSTRAINTS)) -e '.[all,dev]'
	touch $(STAMP)

install: $(STAMP)  ## create .venv and install the project with every extra and the dev tools, at the versions CI tested (constraints.txt)

run: $(STAMP)  ## start every enabled platform; with none, a terminal chat
	$(BIN)/switchboard run $(ARGS)

chat: $(STAMP)  ## terminal chat with the agent
	$(BIN)/switchboard chat $(ARGS)

# The tests start Python hundreds of times: let them keep compiled bytecode even
# where PYTHONDONTWRITEBYTECODE is set (each process would compile the project again).
test test-fast test-plain: export PYTHONDONTWRITEBYTECODE :=

test: $(STAMP)  ## import contract + the whole test suite, on every core (JOBS=0: one process), then test-plain
	$(BIN)/lint-imports
	$(BIN)/pytest -n $(JOBS) $(ARGS)
	$(MAKE) --no-print-directory test-plain

test-plain: $(STAMP)  ## the store and pipeline tests again on the plain path ([database] fast_path = false: bot/store/compat.py)
	SWITCHBOARD_TEST_FAST_PATH=0 $(BIN)/pytest -n $(JOBS) -q -m "not fast_path and not e2e and not slow and not perf" tests/store tests/pipeline

test-fast: $(STAMP)  ## the tests that are not e2e, slow or perf: what to run while working (under a minute)
	$(BIN)/pytest -n $(JOBS) -m "not e2e and not slow and not perf" $(ARGS)

test-browser: $(STAMP)  ## the admin dashboard in headless Chromium (needs chromium + chromium-driver)
	$(BIN)/pytest -m browser tests/web/admin/test_browser.py $(ARGS)

lint: $(STAMP)  ## ruff (lint and format) + mypy --strict on the core + import contracts (layers, no cycles)
	$(BIN)/ruff check bot adapters migrations tests
	$(BIN)/ruff format --check bot adapters migrations tests
	$(BIN)/mypy --strict bot
	$(BIN)/lint-imports

bench: $(STAMP)  ## benchmarks (printed figures, no assertions)
	$(BIN)/python -m tests.benchmarks.pipeline $(ARGS)
	$(BIN)/python -m tests.benchmarks.turn_floors
	$(BIN)/python -m tests.benchmarks.context
	$(BIN)/python -m tests.benchmarks.agent_costs
	$(BIN)/python -m tests.benchmarks.media
	$(BIN)/python -m tests.benchmarks.load
	$(BIN)/python -m tests.benchmarks.frontdoor
	$(BIN)/python -m tests.benchmarks.frontdoor --burst 1000
	$(BIN)/python -m tests.benchmarks.mechanisms
	@if [ -n "$$SWITCHBOARD_TEST_POSTGRES_URL" ]; then \
		$(BIN)/python -m tests.benchmarks.frontdoor --database postgres && \
		$(BIN)/python -m tests.benchmarks.frontdoor --burst 1000 --database postgres && \
		$(BIN)/python -m tests.benchmarks.mechanisms --database postgres; fi
	$(BIN)/python -m tests.benchmarks.flow
	$(BIN)/python -m tests.benchmarks.instructions
	$(BIN)/python -m tests.benchmarks.startup

soak: $(STAMP)  ## the real service under kills, database cuts and platform faults, checked message by message (SOAK_MINUTES, SOAK_SEED, SOAK_DATABASE=postgres|sqlite|both; not part of `make test`)
	$(BIN)/python -m tests.soak

clean:  ## remove .venv, the tool caches, __pycache__ dirs and build output
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build dist *.egg-info
	find . -path ./.git -prune -o -type d -name __pycache__ -prune -exec rm -rf {} +

help:  ## list the targets
	@awk 'BEGIN { FS = ":.*## " } /^[a-z][a-z_-]*:.*## / { printf "  make %-8s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)
