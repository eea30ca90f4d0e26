# make setup : build .venv (torch 2.13.0 CPU first, then the project with its extras)
# make test  : lint + the fast test suite (runs setup when needed)
# make test-slow : the over-fitting and end-to-end tests, torchrun launches included (CI runs both)
# make demo  : Document-JEPA end to end (synthetic + real pages fetched from Debian, pre-training, fine-tuning,
#              calibration, held-out and real-page benchmarks, report; about 20 min on 2 cores, up to twice that
#              on a slow machine)
# make demo-rsngd : a short optimizer example (about 1 minute)
# make bench : the optimizer benchmark on the cpu preset (Shakespeare, tuned settings; about 20 minutes)
# make docs  : the documentation site into runs/site (strict: a broken link or image fails)
# make gpu   : the GPU evidence in one command, inside BUDGET seconds (default 480), on a lent GPU machine
#              (docs/gpu.md); make gpu DRY=1: the same code on the CPU at tiny shapes (the test suite runs it)
# make gpu-data : the corpora, tokenizer and wheels make gpu needs there, into runs/gpu-data (carried along);
#              PREPARE_ARGS="--docjepa --real-train DIR" GPU_DATA=runs/gpu-docjepa: only docjepa-train's (the
#              question tower trimmed, the real training pages shrunk: docs/gpu.md)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PIP    := $(BIN)/python -m pip install -q --disable-pip-version-check -c constraints.txt

.PHONY: setup test test-slow lint docs demo demo-rsngd bench gpu gpu-data clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) torch==2.13.0
	$(PIP) -e ".[test,docjepa,engine,bench,lang,docs]"
	@# Debian packages, best effort, each group on its own: Tesseract for OCR, real fonts for the synthetic
	@# documents (Pillow's built-in font is the fallback), PostgreSQL and chromium + chromium-driver for the data
	@# engine's tests (a test that needs one skips, saying why, when it is missing).
	@if command -v apt-get >/dev/null; then \
		need=""; \
		{ command -v tesseract >/dev/null && test -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf; } || \
			need="$$need tesseract-ocr+fonts-dejavu-core+fonts-liberation2"; \
		ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need="$$need postgresql"; \
		{ command -v chromium >/dev/null && command -v chromedriver >/dev/null; } || need="$$need chromium+chromium-driver"; \
		if [ -n "$$need" ]; then apt-get update -qq || true; fi; \
		for group in $$need; do \
			apt-get install -y -qq $$(echo $$group | tr + ' ') >/dev/null 2>&1 || echo "warning: $$group not installed"; \
		done; \
	else echo "warning: no apt-get: tesseract, postgresql, chromium not installed (their tests skip)"; fi
	touch $(STAMP)

lint: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

TEST_ENV := HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 OMP_NUM_THREADS=2

test: lint
	$(TEST_ENV) $(BIN)/python -m pytest -q -m "not slow"

test-slow: setup
	$(TEST_ENV) $(BIN)/python -m pytest -q -m slow

docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir runs/site

demo: setup
	HF_HUB_OFFLINE=1 $(BIN)/docjepa demo --out runs/demo

demo-rsngd: setup
	HF_HUB_OFFLINE=1 $(BIN)/rsngd demo

bench: setup
	HF_HUB_OFFLINE=1 $(BIN)/rsngd bench --preset cpu --data shakespeare --out runs/bench/results.json
	$(BIN)/rsngd bench report runs/bench/results.json --out runs/bench/report

# A GPU machine has its own Python with torch and no .venv: the project runs from src/ there, with the wheels it
# lacks (runs/gpu-data/wheels) installed beside it.
BUDGET   ?= 480
GPU_DATA ?= runs/gpu-data
GPU_PY   := $(if $(wildcard $(BIN)/python),$(BIN)/python,python3)

gpu: $(if $(DRY),setup)
	@if [ -z "$(DRY)" ] && ls $(GPU_DATA)/wheels/*.whl >/dev/null 2>&1; then \
		$(GPU_PY) -m pip install -q --no-index --no-deps --no-compile --target runs/gpu-site $(GPU_DATA)/wheels/*.whl; fi
	@if [ -z "$(DRY)" ] && [ -f $(GPU_DATA)/tower.tar.xz ]; then tar xJf $(GPU_DATA)/tower.tar.xz -C $(GPU_DATA); fi
	HF_HUB_OFFLINE=1 PYTHONPATH=src:runs/gpu-site $(GPU_PY) benchmarks/scripts/gpu.py run --budget-s $(BUDGET) \
		$(if $(DRY),--dry-run,$(if $(wildcard $(GPU_DATA)),--shared $(GPU_DATA) --cache $(GPU_DATA)/cache)) \
		$(if $(and $(if $(DRY),,1),$(wildcard $(GPU_DATA)/tower.tar.xz)),--question-tower $(GPU_DATA)/tower) \
		$(if $(and $(if $(DRY),,1),$(wildcard $(GPU_DATA)/real-train)),--real-train $(GPU_DATA)/real-train) $(GPU_ARGS)

gpu-data: setup
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/scripts/gpu.py prepare $(GPU_DATA) $(PREPARE_ARGS)

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
