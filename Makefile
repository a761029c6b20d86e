# make demo:      set up .venv and run the main job on the bundled defaults.
# make test:      set up .venv and run the whole test suite.
# make test-fast: the quick loop: every test not marked slow or serial, on every core.
# make lint:      ruff check, ruff format --check and basedpyright (basic mode).
# make docs:      build the documentation site (mkdocs --strict) into site/.
# make bench:     the simulator's speed benchmark (ratios measured side by side in one run).
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH ?= torch==2.13.0
STAMP := $(VENV)/.hobbit-installed
DEV_STAMP := $(VENV)/.hobbit-dev-installed
# make test's workers: one per core, up to four (the first to need the compiled core compiles it, the others wait and load it)
JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$(( n < 4 ? n : 4 )))

.PHONY: demo test test-fast lint docs bench venv clean

# torch first, from its own line: a bare `torch` requirement must never pull a CUDA build
$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet -e '.[test,ray]'
	touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[test,ray,lint,docs]'
	touch $(DEV_STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/hobbit demo

# Two passes: the tests that only compute, on every core (one file per worker, in order); then, alone, the
# ones that measure this machine's time (marked serial), which a busy core would skew.
test: $(STAMP)
	$(PY) -m pytest -q -n $(JOBS) --dist loadfile -m "not serial"
	$(PY) -m pytest -q -m serial

test-fast: $(STAMP)
	$(PY) -m pytest -q -n $(JOBS) --dist loadfile -m "not serial and not slow"

lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/basedpyright

docs: $(DEV_STAMP)
	$(PY) -m hobbit.docs_gen docs/reference
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

bench: $(STAMP)
	$(PY) benchmarks/sim_speed.py

clean:
	rm -rf $(VENV) outputs multirun build site *.egg-info
