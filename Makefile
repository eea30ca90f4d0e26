# make setup : build .venv (torch 2.13.0 CPU first, then the project with its extras)
# make test  : lint + the test suite (runs setup when needed)
# make demo  : a short optimizer example
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PIP    := $(BIN)/python -m pip install -q --disable-pip-version-check -c constraints.txt

.PHONY: setup test lint demo clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) torch==2.13.0
	$(PIP) -e ".[test,docjepa]"
	touch $(STAMP)

lint: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

test: lint
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 OMP_NUM_THREADS=2 $(BIN)/python -m pytest -q

demo: setup
	HF_HUB_OFFLINE=1 $(BIN)/rsngd demo

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
