# make demo: set up .venv and run the main job on the bundled defaults.
# make test: set up .venv and run the whole test suite.
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH ?= torch==2.13.0
STAMP := $(VENV)/.hobbit-installed

.PHONY: demo test venv bench clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet -e '.[test,ray]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/hobbit demo

test: $(STAMP)
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) outputs multirun build *.egg-info
