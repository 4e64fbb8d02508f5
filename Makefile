# One-command setup: the first `make test` / `make demo` creates .venv and installs tapeml into it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test demo lint pytest lit bench clean fuzz

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,examples]'
	touch $(STAMP)

test: lint pytest lit

lint: $(STAMP)
	$(BIN)/ruff check tapeml tests examples bench

pytest: $(STAMP)
	$(BIN)/pytest

lit: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/lit -sv lit

demo: $(STAMP)
	$(BIN)/python examples/demo.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

bench: $(STAMP)
	$(BIN)/python bench/run.py

# A long run of the tapeml-opt mutation fuzzer (tests/fuzz_cli.py; pytest runs 250 cases of it).
FUZZ_CASES ?= 5000
FUZZ_SEED ?= 1
fuzz: $(STAMP)
	$(BIN)/python tests/fuzz_cli.py --cases $(FUZZ_CASES) --seed $(FUZZ_SEED)
