# One-command setup: the first `make test` / `make demo` creates .venv and installs tapeml into it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: test demo lint pytest lit bench clean fuzz

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,examples,onnx]'
	# basic-pitch for its ONNX note model, a test input; not its dependencies (tensorflow)
	$(BIN)/pip install --quiet --no-deps 'basic-pitch==0.4.*'
	touch $(STAMP)

test: lint pytest lit

lint: $(STAMP)
	$(BIN)/ruff check tapeml tests examples bench

# a file's tests on one worker: the compiled programs a test module shares are compiled once
pytest: $(STAMP)
	$(BIN)/pytest -n auto --dist loadfile

lit: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/lit -sv lit

demo: $(STAMP)
	$(BIN)/python examples/demo.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

# the peers (jax, torch) only for `make bench`: `make test` never needs them
$(BENCH_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BIN)/python bench/run.py
	$(BIN)/python bench/onnx_models.py
	$(BIN)/python bench/data_parallel.py
	$(BIN)/python bench/iree_steps.py

# Long runs of the fuzzers make test runs a slice of: the tapeml-opt mutation fuzzer
# (tests/fuzz_cli.py; pytest runs 150 cases), generated programs on edge values through every
# stage (tests/test_edge_values_programs.py; pytest runs 6) and through IREE
# (tests/test_stablehlo.py; pytest runs 8).
FUZZ_CASES ?= 5000
FUZZ_SEED ?= 1
FUZZ_PROGRAMS ?= 300
fuzz: $(STAMP)
	$(BIN)/python tests/fuzz_cli.py --cases $(FUZZ_CASES) --seed $(FUZZ_SEED)
	TAPEML_FUZZ_EXAMPLES=$(FUZZ_PROGRAMS) $(BIN)/pytest tests/test_edge_values_programs.py -k generated
	TAPEML_FUZZ_EXAMPLES=$(FUZZ_PROGRAMS) $(BIN)/pytest tests/test_stablehlo.py -k generated
