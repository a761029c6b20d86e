# make demo: set up .venv and run the main job on the bundled defaults.
# make test: set up .venv and run the whole test suite.
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH ?= torch==2.13.0
STAMP := $(VENV)/.hobbit-installed
# make test's workers: one per core, up to four (the first to need the compiled core compiles it, the others wait and load it)
JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$(( n < 4 ? n : 4 )))

.PHONY: demo test venv bench clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet -e '.[test,ray]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/hobbit demo

# Two passes: the tests that only compute, on every core (one file per worker, in order); then, alone, the
# ones that measure this machine's time (marked serial), which a busy core would skew.
test: $(STAMP)
	$(PY) -m pytest -q -n $(JOBS) --dist loadfile -m "not serial"
	$(PY) -m pytest -q -m serial

clean:
	rm -rf $(VENV) outputs multirun build *.egg-info
