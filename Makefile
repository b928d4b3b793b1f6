# One command each: `make demo` runs the main job on the embedded store, `make test` runs the
# tests. Both create the virtual environment and install what they need on first use: the demo
# only the runtime dependencies, tests and lint the dev tools as well. Each install has its own
# stamp, so either target works first from a clean clone.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
RUNTIME := $(VENV)/.installed-runtime
DEV := $(VENV)/.installed-dev

.PHONY: venv demo test lint bench durability ci clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(RUNTIME): pyproject.toml | $(BIN)/python
	@echo "Installing the runtime dependencies into $(VENV) (first run only, about a minute)"
	$(BIN)/python -m pip install --quiet -e .
	touch $(RUNTIME)

# The dev extra includes the runtime dependencies, so it satisfies the runtime stamp too.
$(DEV): pyproject.toml | $(BIN)/python
	@echo "Installing the project and its test tools into $(VENV) (first run only, a few minutes)"
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(RUNTIME) $(DEV)

venv: $(DEV)

demo: $(RUNTIME)
	$(BIN)/dream demo

test: $(DEV)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(DEV)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

bench: $(RUNTIME)
	$(BIN)/dream bench core
	$(BIN)/dream bench http
	$(BIN)/dream bench dream
	$(BIN)/dream bench execution
	$(BIN)/dream bench review
	$(BIN)/dream bench audit
	$(BIN)/dream bench freshness
	$(BIN)/dream bench backlog
	$(BIN)/dream bench auto_dream
	$(BIN)/dream bench mcp
	$(BIN)/dream bench scale
	$(BIN)/dream bench durability

# The history checker's long run: every fault case on both stores (docs/durability.md).
durability: $(RUNTIME)
	$(BIN)/dream bench durability

ci:
	bash .ci/run

clean:
	rm -rf $(VENV) .dream .pytest_cache .mypy_cache .ruff_cache
