# One command each: `make demo` runs the main job on the embedded store, `make test` runs the
# tests. Both create the virtual environment and install what they need on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo test lint bench ci clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/dream demo

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/dream bench core
	$(BIN)/dream bench http
	$(BIN)/dream bench dream
	$(BIN)/dream bench execution
	$(BIN)/dream bench review
	$(BIN)/dream bench audit

ci:
	bash .ci/run

clean:
	rm -rf $(VENV) .dream .pytest_cache .mypy_cache .ruff_cache
