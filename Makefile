# neurobench-rig: `make run` sets up and measures on the virtual bench; `make test` runs the suite.

# Bytecode caches on, whatever the shell says (PYTHONDONTWRITEBYTECODE=1 is common in containers):
# the suite starts hundreds of Python processes, and without caches every one compiles the rig's
# modules again (`rig --help`: 0.93 s of CPU instead of 0.60) and every pytest process rewrites
# the asserts of every test module again (collecting: 17 s of CPU instead of 8).
unexport PYTHONDONTWRITEBYTECODE
# The rig's Python: 3.11 by default; `make test PYTHON=python3.13` (or 3.12) finds that one on the
# PATH, else as pyenv installs it (as for 3.10 below), and gives it its own environment beside the
# default one (.venv-3.13), so that the two sit side by side.
PYTHON ?= python3.11
PY_VERSION := $(patsubst python%,%,$(notdir $(PYTHON)))
PYTHON_EXE := $(firstword $(shell $(PYTHON) -c 'import sys; print(sys.executable)' 2>/dev/null) \
	$(wildcard $(HOME)/.pyenv/versions/$(PY_VERSION)*/bin/python$(PY_VERSION)) \
	$(wildcard /usr/bin/python$(PY_VERSION)))
VENV   := $(if $(filter python3.11,$(PYTHON)),.venv,.venv-$(PY_VERSION))
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: run test lint bench sim clean firmware-host firmware-arm lava-env system-deps
.PHONY: firmware-avr test-setup docs soak

run: $(STAMP) firmware-host  ## Create .venv, install, measure ASC on the virtual bench.
	$(BIN)/rig measure asc --device sim

# The suite in two parts: everything not marked `serial` on $(TEST_WORKERS) xdist workers (whole
# files to a worker, so module fixtures are built once; three on two cores, because many e2e
# tests wait on a simulated or emulated device rather than compute; files in the conftest's
# order, the `slow` ones first, not xdist's by number of tests), then the `serial` tests
# alone (timing-sensitive: README, "Tests"), collected from the files the first part found them
# in (tests/conftest.py lists them; without the list, from the whole tree: collecting all 2800
# tests again took 8 of the serial part's 18 s). Both always run; tests/suite_report.py then
# prints the 15 slowest test phases and the counts over both; the exit status is the first
# failure's. The two Python environments and the shims are set up side by side (make -j3
# test-setup). mypy (~18 s of CPU from a clean clone, one core) runs beside the first part,
# which leaves a third of two cores idle while its tests wait on devices; its output and
# status come after that part's.
TEST_REPORT := build/test-report-$(PY_VERSION).jsonl
SERIAL_FILES := build/serial-files-$(PY_VERSION).txt
MYPY_LOG := build/mypy-$(PY_VERSION).log
TEST_WORKERS ?= 4
test:  ## Install test deps, build the shims, run the suite.
	@$(MAKE) --no-print-directory -j3 test-setup
	$(BIN)/ruff check .
	@$(MAKE) --no-print-directory docs
	@mkdir -p build && rm -f $(TEST_REPORT) $(SERIAL_FILES); status=0; \
	$(BIN)/mypy > $(MYPY_LOG) 2>&1 & mypy=$$!; \
	RIG_TEST_REPORT=$(TEST_REPORT) RIG_SERIAL_FILES=$(SERIAL_FILES) $(BIN)/python -m pytest -q \
		-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not serial" || status=$$?; \
	wait $$mypy; typed=$$?; echo "mypy (beside the tests):"; cat $(MYPY_LOG); \
	[ $$status != 0 ] || status=$$typed; \
	RIG_TEST_REPORT=$(TEST_REPORT) $(BIN)/python -m pytest -q -m serial \
		$$(cat $(SERIAL_FILES) 2>/dev/null); serial=$$?; \
	[ $$status != 0 ] || status=$$serial; \
	$(BIN)/python tests/suite_report.py $(TEST_REPORT); exit $$status

test-setup: $(STAMP) firmware-host lava-env system-deps firmware-avr

# The documentation site (mkdocs.yml, docs/) into build/site, offline, in a few seconds; --strict
# fails on any warning, a dead internal link or anchor among them. `$(BIN)/mkdocs serve` serves
# it while you edit; docs/generate.py writes its reference pages from the code.
docs: $(STAMP)  ## Build the documentation site into build/site (mkdocs --strict).
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir build/site

# mypy: strict for protocols/ and drivers/, default elsewhere ([tool.mypy] in pyproject.toml).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: $(STAMP)  ## Speed and memory figures (printed, never asserted).
	@for f in $(filter-out benchmarks/soak.py,$(wildcard benchmarks/*.py)); do \
		echo "== $$f"; $(BIN)/python $$f || exit 1; done

# A night of faults (benchmarks/soak.py, issue 39): sweeps on a Dask cluster and ASC runs through
# `rig serve` and directly, for HOURS hours, with broker, scheduler, worker, rig, DUT, monitor,
# disk and dashboard faults drawn from SEED; then the audit (lost, doubled, unexplained,
# leftovers, recovery times, resources), printed and written to build/soak-SEED.json. Run as
# root, the runs volume is a tmpfs of its own, so that it can be filled. `make test` runs a
# 72 s one (tests/e2e/test_soak_short.py).
HOURS ?= 1
SEED ?= 1
soak: $(STAMP) firmware-host  ## The overnight soak: HOURS=1 SEED=1 (the audit in build/).
	@mkdir -p build
	$(BIN)/python benchmarks/soak.py --hours $(HOURS) --seed $(SEED) --json build/soak-$(SEED).json

sim: $(STAMP)  ## Start a virtual bench in the foreground and print its ports.
	$(BIN)/rig sim

# Debian packages the tests need: poppler-utils reads the report PDF back (pdftotext, pdftoppm);
# WeasyPrint renders with pango and needs a font; xvfb and Qt's xcb plugin libraries run the GUI
# screenshot tests on a real X server (facts.md: without them Qt aborts). Installed with apt-get
# when missing (as root). mosquitto (a real MQTT broker) and openssl (its TLS certificates) for
# the telemetry tests; Debian puts mosquitto in /usr/sbin, hence the PATH below.
DEB_TOOLS := pdftotext:poppler-utils pdftoppm:poppler-utils fc-list:fontconfig xvfb-run:xvfb \
	mosquitto:mosquitto mosquitto_passwd:mosquitto openssl:openssl
DEB_LIBS  := libpangoft2-1.0.so.0:libpangoft2-1.0-0 libharfbuzz-subset.so.0:libharfbuzz-subset0 \
	libxcb-cursor.so.0:libxcb-cursor0 libxcb-icccm.so.4:libxcb-icccm4 \
	libxcb-keysyms.so.1:libxcb-keysyms1 libxcb-image.so.0:libxcb-image0 \
	libxcb-render-util.so.0:libxcb-render-util0 libxcb-xkb.so.1:libxcb-xkb1 \
	libxkbcommon-x11.so.0:libxkbcommon-x11-0 libxcb-randr.so.0:libxcb-randr0 \
	libxcb-shape.so.0:libxcb-shape0 libxcb-xinerama.so.0:libxcb-xinerama0 libEGL.so.1:libegl1
# The Cortex-M4 DUT build and its emulator (tests/firmware/test_host_shim.py, benches/qemu-m4.toml);
# newlib-nano is a file, not a command: checked by its specs file below.
DEB_TOOLS += qemu-system-arm:qemu-system-arm arm-none-eabi-gcc:gcc-arm-none-eabi
NEWLIB_NANO := /usr/lib/arm-none-eabi/newlib/nano.specs
# The IO manager sketch on a real AVR (firmware/io_manager): avr-gcc and avr-libc, the Arduino
# core with arduino-mk, and libsimavr for the harness that runs it (firmware/io_manager/simavr).
DEB_TOOLS += avr-gcc:gcc-avr avr-size:binutils-avr
# The dashboard's browser tests (tests/dashboard): Selenium drives Debian's chromium through its
# chromedriver, headless (Playwright's own browser download is not reachable; facts.md).
DEB_TOOLS += chromium:chromium chromedriver:chromium-driver
DEB_LIBS  += libsimavr.so.2:libsimavr2
DEB_FILES := /usr/lib/avr/include/avr/io.h:avr-libc /usr/include/simavr/sim_avr.h:libsimavr-dev \
	/usr/share/arduino/hardware/arduino/avr/boards.txt:arduino-core-avr \
	/usr/share/arduino/Arduino.mk:arduino-mk
system-deps:
	@missing=""; \
	for pair in $(DEB_TOOLS); do PATH="$$PATH:/usr/sbin" command -v $${pair%%:*} >/dev/null 2>&1 || missing="$$missing $${pair#*:}"; done; \
	for pair in $(DEB_LIBS); do ldconfig -p | grep -q "$${pair%%:*}" || missing="$$missing $${pair#*:}"; done; \
	[ -d /usr/share/fonts/truetype/dejavu ] || missing="$$missing fonts-dejavu-core"; \
	[ -f $(NEWLIB_NANO) ] || missing="$$missing libnewlib-arm-none-eabi"; \
	for pair in $(DEB_FILES); do [ -e $${pair%%:*} ] || missing="$$missing $${pair#*:}"; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing$$missing"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
		else echo "missing Debian packages:$$missing (install them to test the report)"; fi; \
	fi

firmware-host:  ## Build the C DUT shim for Linux (the virtual bench runs it when gcc is here).
	@if command -v $(CC) >/dev/null 2>&1; then \
		$(MAKE) -C firmware/dut/host OUT=$(CURDIR)/build/firmware; \
	else echo "no C compiler: the virtual bench will use its Python DUT"; fi

# The Cortex-M4 build for QEMU's mps2-an386 (benches/qemu-m4.toml): prints its flash and RAM use
# and fails above the RAM of the smallest board we name (README).
firmware-arm:  ## Build the C DUT shim for a Cortex-M4 (QEMU mps2-an386) with arm-none-eabi-gcc.
	$(MAKE) -C firmware/dut/mps2-an386 OUT=$(CURDIR)/build/firmware/arm

# The IO manager sketch for an Arduino UNO (arduino-mk; fails above the UNO's flash and SRAM)
# and the simavr harness that runs it (firmware/io_manager/simavr).
firmware-avr: system-deps  ## Build io_manager.ino for the UNO with avr-gcc and the simavr harness.
	@if [ -f /usr/share/arduino/Arduino.mk ] && command -v avr-gcc >/dev/null 2>&1; then \
		$(MAKE) -s -C firmware/io_manager OUT=$(CURDIR)/build/firmware/io_manager-uno uno-size && \
		$(MAKE) -s -C firmware/io_manager/simavr OUT=$(CURDIR)/build/firmware; \
	else echo "no avr-gcc or arduino-mk (make system-deps): the simavr IO manager is unavailable"; fi

# A venv with a current pip, made without ensurepip: ensurepip installs and compiles the Python's
# bundled pip (and, on 3.11, setuptools) only for it to be replaced, 7-9 s here on the longest
# path of the setup; the Python's own pip (22.3 or later: --python) puts the current one into
# the bare venv in 4-5 s. A Python without a pip of its own gets ensurepip, as before.
define make_venv
$(1) -m venv --without-pip $(2) && \
	{ $(1) -m pip --python $(2)/bin/python install -q --upgrade pip 2>/dev/null || \
	{ $(2)/bin/python -m ensurepip && $(2)/bin/python -m pip install -q --upgrade pip; }; }
endef

# The Loihi 2 shim runs Lava, which needs Python 3.10 (facts.md): its own environment.
PYTHON310 ?= $(firstword $(shell python3.10 -c 'import sys; print(sys.executable)' 2>/dev/null) \
	$(wildcard $(HOME)/.pyenv/versions/3.10*/bin/python3.10) $(wildcard /usr/bin/python3.10))
LAVA_VENV := .venv-lava
LAVA_STAMP := $(LAVA_VENV)/.installed-$(shell cksum firmware/loihi2/requirements.txt 2>/dev/null | cut -d' ' -f1)

lava-env: $(LAVA_STAMP)  ## Python 3.10 environment with lava-nc 0.9.0 + lava-optimization 0.4.0.

# Its pip is upgraded (3.10's bundled 23.0 took 48 s for this, 26.3 42 s) and installs without
# compiling; the shim's self-test then solves a 4-variable QUBO, which proves the environment
# and compiles just what a solve imports (2 s, where compiling every package took 20 s): the
# shim's first `qload` has a 5 s transfer deadline, which compiling Lava there can miss.
$(LAVA_STAMP):
	@if [ -z "$(PYTHON310)" ] || [ ! -f firmware/loihi2/requirements.txt ]; then \
		echo "no Python 3.10 (or no firmware/loihi2): the Loihi 2 shim is unavailable"; \
	else \
		$(call make_venv,$(PYTHON310),$(LAVA_VENV)) && \
		$(LAVA_VENV)/bin/python -m pip install -q --no-compile -r firmware/loihi2/requirements.txt && \
		$(LAVA_VENV)/bin/python firmware/loihi2/shim.py --self-test && \
		rm -f $(LAVA_VENV)/.installed-* && touch $@; \
	fi

# With a current pip: the one Python 3.11.7 comes with (23.2) took 45 s to install '.[test]'
# here, where the current one (26.3) takes 30 s.
$(BIN)/python:
	@[ -n "$(PYTHON_EXE)" ] || { echo "no $(PYTHON) on the PATH or under pyenv: install it \
	(pyenv install $(PY_VERSION), or apt-get install python$(PY_VERSION)-venv) or pass \
	PYTHON=/path/to/python$(PY_VERSION)"; exit 2; }
	$(call make_venv,$(PYTHON_EXE),$(VENV))

# --no-compile: pip would compile every module of every package (PySide6, JAX, SciPy, their
# tests) up front, 30 s here; with bytecode caches on (above) each module is compiled once, by
# the first process that imports it. (The Lava env: see lava-env.)
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q --no-compile -e '.[test]'
	rm -f $(VENV)/.installed-* && touch $@

clean:
	rm -rf .venv .venv-3.* $(LAVA_VENV) build *.egg-info .pytest_cache .ruff_cache
