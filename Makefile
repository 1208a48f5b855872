# neurobench-rig: `make run` sets up and measures on the virtual bench; `make test` runs the suite.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: run test lint bench sim clean firmware-host

run: $(STAMP) firmware-host  ## Create .venv, install, measure ASC on the virtual bench.
	$(BIN)/rig measure asc --device sim

test: $(STAMP) firmware-host  ## Install test deps, build the host shim, run the whole suite.
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

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test]'
	rm -f $(VENV)/.installed-* && touch $@

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
