# neurobench-rig: `make run` sets up and measures on the virtual bench; `make test` runs the suite.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: run test lint bench sim clean firmware-host lava-env

run: $(STAMP) firmware-host  ## Create .venv, install, measure ASC on the virtual bench.
	$(BIN)/rig measure asc --device sim

test: $(STAMP) firmware-host lava-env  ## Install test deps, build the shims, run the whole suite.
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)  ## Speed and memory figures (printed, never asserted).
	@for f in benchmarks/*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

sim: $(STAMP)  ## Start a virtual bench in the foreground and print its ports.
	$(BIN)/rig sim

firmware-host:  ## Build the C DUT shim for Linux (the virtual bench runs it when gcc is here).
	@if command -v $(CC) >/dev/null 2>&1; then \
		$(MAKE) -C firmware/dut/host OUT=$(CURDIR)/build/firmware; \
	else echo "no C compiler: the virtual bench will use its Python DUT"; fi

# The Loihi 2 shim runs Lava, which needs Python 3.10 (facts.md): its own environment.
PYTHON310 ?= $(firstword $(shell python3.10 -c 'import sys; print(sys.executable)' 2>/dev/null) \
	$(wildcard $(HOME)/.pyenv/versions/3.10*/bin/python3.10) $(wildcard /usr/bin/python3.10))
LAVA_VENV := .venv-lava
LAVA_STAMP := $(LAVA_VENV)/.installed-$(shell cksum firmware/loihi2/requirements.txt 2>/dev/null | cut -d' ' -f1)

lava-env: $(LAVA_STAMP)  ## Python 3.10 environment with lava-nc 0.9.0 + lava-optimization 0.4.0.

$(LAVA_STAMP):
	@if [ -z "$(PYTHON310)" ] || [ ! -f firmware/loihi2/requirements.txt ]; then \
		echo "no Python 3.10 (or no firmware/loihi2): the Loihi 2 shim is unavailable"; \
	else \
		$(PYTHON310) -m venv $(LAVA_VENV) && \
		$(LAVA_VENV)/bin/python -m pip install -q -r firmware/loihi2/requirements.txt && \
		rm -f $(LAVA_VENV)/.installed-* && touch $@; \
	fi

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test]'
	rm -f $(VENV)/.installed-* && touch $@

clean:
	rm -rf $(VENV) $(LAVA_VENV) build *.egg-info .pytest_cache .ruff_cache
