# One command each: `make demo` runs the main job on the embedded store, `make test` runs the
# tests. Both create the virtual environment and install what they need on first use: the demo
# only the runtime dependencies, tests and lint the dev tools as well. Each install has its own
# stamp, so either target works first from a clean clone. Every third-party package comes from
# the hashed locks (requirements.lock, requirements-dev.lock; `make lock` regenerates them after
# a change to pyproject.toml); the project and its local distributions are then installed
# without dependencies.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
RUNTIME := $(VENV)/.installed-runtime
DEV := $(VENV)/.installed-dev
LOCK := requirements.lock
DEV_LOCK := requirements-dev.lock
# Distributions of this repository that the project depends on by name: never in a hashed lock.
LOCAL_DISTS := $(patsubst %/pyproject.toml,%,$(wildcard clients/python/pyproject.toml))
EDITABLES := $(foreach dist,$(LOCAL_DISTS),-e $(dist)) -e .

.PHONY: venv demo test lint bench durability ci clean lock pin-images

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(RUNTIME): pyproject.toml $(LOCK) | $(BIN)/python
	@echo "Installing the runtime dependencies into $(VENV) (first run only, about a minute)"
	$(BIN)/python -m pip install --quiet --require-hashes -r $(LOCK)
	$(BIN)/python -m pip install --quiet --no-deps $(EDITABLES)
	touch $(RUNTIME)

# The dev extra includes the runtime dependencies, so it satisfies the runtime stamp too.
$(DEV): pyproject.toml $(DEV_LOCK) | $(BIN)/python
	@echo "Installing the project and its test tools into $(VENV) (first run only, a few minutes)"
	$(BIN)/python -m pip install --quiet --require-hashes -r $(DEV_LOCK)
	$(BIN)/python -m pip install --quiet --no-deps $(EDITABLES)
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
	$(BIN)/dream bench observability
	$(BIN)/dream bench bundle_codec
	$(BIN)/dream bench portability
	$(BIN)/dream bench erasure
	$(BIN)/dream bench open_loop
	$(BIN)/dream bench lists

# The history checker's long run: every fault case on both stores (docs/durability.md).
durability: $(RUNTIME)
	$(BIN)/dream bench durability

ci:
	bash .ci/run

# The hashed locks for Linux and Python 3.11 (the image's platform), the dev one constrained to
# the runtime one's versions. Pins already in a lock are kept; LOCK_ARGS=--upgrade moves every
# pin to the newest release pyproject.toml allows. uv runs from its own venv, not a dependency.
UV_VERSION ?= 0.13.9
LOCK_TOOLS := $(VENV)/lock-tools
UV := $(LOCK_TOOLS)/bin/uv
LOCK_FLAGS = --python-version 3.11 --python-platform linux --generate-hashes --quiet \
	--custom-compile-command "make lock" --no-emit-package artifact-dreaming-client $(LOCK_ARGS)

$(UV):
	$(PYTHON) -m venv $(LOCK_TOOLS)
	$(LOCK_TOOLS)/bin/python -m pip install --quiet 'uv==$(UV_VERSION)'

lock: | $(UV)
	: > $(LOCK_TOOLS)/local.in
	for dist in $(LOCAL_DISTS); do echo "-e $(CURDIR)/$$dist" >> $(LOCK_TOOLS)/local.in; done
	$(UV) pip compile pyproject.toml $(LOCK_TOOLS)/local.in $(LOCK_FLAGS) -o $(LOCK)
	$(UV) pip compile pyproject.toml $(LOCK_TOOLS)/local.in --extra dev -c $(LOCK) $(LOCK_FLAGS) \
		-o $(DEV_LOCK)

# Rewrites the FROM lines of the Dockerfile and compose.yaml's images to tag@sha256:digest, asking
# the registry; needs the network to reach it (docs/deployment.md).
pin-images: $(DEV)
	$(BIN)/python -m devkit.pin_images Dockerfile compose.yaml

clean:
	rm -rf $(VENV) .dream .pytest_cache .mypy_cache .ruff_cache
