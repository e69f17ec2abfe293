# storagebrief: `make study` runs the whole default study and renders the brief;
# `make test` runs the test suite. Both create the environment first.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
export PATH := $(BIN):$(PATH)
export TF_CPP_MIN_LOG_LEVEL ?= 2
SCALE ?= quick
# Debian packages: fio (benchmarks), stress-ng (busy-system runs), poppler-utils
# (pdftoppm, to look at the PDF), pango (WeasyPrint's PDF engine), DejaVu fonts,
# Open MPI (emulated accelerators as MPI ranks: emulate.launcher = mpi), stressapptest (the transfer
# sweep's busy system with busy.tool = stressapptest), Chromium + its WebDriver (the test that opens the
# notebooks in JupyterLab in a real browser, as a user does).
APT_PACKAGES := fio stress-ng stressapptest poppler-utils libpango-1.0-0 libpangoft2-1.0-0 libharfbuzz-subset0 fonts-dejavu-core \
	openmpi-bin libopenmpi-dev chromium chromium-driver
# The streaming study runs a real Apache Kafka cluster: Java from apt, the jars from Maven Central
# (the pinned version is in KAFKA_POM), resolved by Maven into KAFKA_LIB (outside git);
# `make kafka` installs default-jre-headless and maven with apt when java or mvn is missing.
KAFKA_POM := lib/storagebrief/studies/stream_inference/kafka-pom.xml
KAFKA_LIB := .kafka/lib

NOTEBOOKS := $(patsubst %.py,%.ipynb,$(wildcard notebooks/[0-9]*_*.py notebooks/brief.py))

.PHONY: study test test-fast env system-deps kafka doctor brief notebooks lab clean-data clean hosts test-hosts-deps

study: env kafka
	@if [ "$(SCALE)" = "paper" ]; then dvc exp run -S scale=paper; else dvc repro; fi
	@ls -l reports/brief.html reports/brief.pdf

test: env kafka test-hosts-deps
	pytest -q -ra tests

# The tier to run while developing: unit and small integration tests, no whole study, no browser, no
# DVC chain (markers: not slow and not e2e). Minutes, not half an hour; CI still runs `make test`.
test-fast: env
	pytest -q -ra -m "not slow and not e2e" tests

# The multi-host tests' client hosts (network namespaces with an sshd each) need the sshd binary from
# openssh-server. Installed as root for the tests only, with its service kept from starting (a
# policy-rc.d for the install, removed after): nothing listens on this machine's own addresses.
test-hosts-deps:
	@if ! dpkg -s openssh-server >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing openssh-server (its service not started) for the multi-host tests"; \
	  guard=""; if [ ! -e /usr/sbin/policy-rc.d ]; then printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; \
	    chmod +x /usr/sbin/policy-rc.d; guard=1; fi; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq openssh-server >/dev/null; \
	  rc=$$?; [ -n "$$guard" ] && rm -f /usr/sbin/policy-rc.d; exit $$rc; \
	fi

env: system-deps $(VENV)/.installed notebooks

# Client hosts on this machine for trying the multi-host recipe by hand (root): HOSTS network namespaces,
# each with its own hostname, address and sshd; prints the hostfile and mpirun environment; Ctrl-C removes them.
HOSTS ?= 2
hosts: env test-hosts-deps
	$(BIN)/python -m storagebrief.core.nethosts up $(HOSTS) data/hosts

# The notebooks are tracked as Jupytext percent scripts; the .ipynb a user opens in JupyterLab is made
# here once (git ignores it; JupyterLab's jupytext extension keeps the pair in step from then on).
notebooks: $(VENV)/.installed
	@for nb in $(NOTEBOOKS); do test -e $$nb || $(BIN)/jupytext --quiet --to ipynb $${nb%.ipynb}.py; done

$(VENV)/.installed: pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
# uv (from PyPI) installs the same requirements as pip, in about 20 s instead of about 2 minutes here.
# --compile-bytecode (pip's default, not uv's): where PYTHONDONTWRITEBYTECODE is set (this CI machine)
# nothing writes .pyc later, and every process compiled its imports again: importing TensorFlow took
# 16-19 s instead of 7 s, in every training job, consumer and notebook kernel of the study (measured).
	$(BIN)/python -m pip install -q uv
	$(BIN)/python -m uv pip install -q --compile-bytecode --python $(BIN)/python -e '.[mpi]'
	$(BIN)/python -m compileall -q lib >/dev/null
	$(BIN)/python -m ipykernel install --prefix $(CURDIR)/$(VENV) --name python3 >/dev/null
	@touch $@

system-deps:
	@missing=""; \
	for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if ! command -v apt-get >/dev/null; then \
	    echo "storagebrief: missing system packages:$$missing (no apt-get here: install them with your package manager)"; \
	  elif [ "$$(id -u)" = 0 ]; then \
	    echo "installing system packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq $$missing >/dev/null; \
	  else \
	    echo "storagebrief: missing system packages:$$missing"; \
	    echo "  run: sudo apt-get install -y$$missing   (without them: no PDF brief / no fio benchmarks)"; \
	  fi; \
	fi

# Java 17+ and Maven via apt when missing (as root; otherwise the exact command), then the Kafka jars.
kafka: $(KAFKA_LIB)/.installed

$(KAFKA_LIB)/.installed: $(KAFKA_POM)
	@missing=""; \
	command -v java >/dev/null || missing="$$missing default-jre-headless"; \
	command -v mvn >/dev/null || missing="$$missing maven"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing for Kafka:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq $$missing >/dev/null; \
	  else \
	    echo "storagebrief: Kafka needs:$$missing; run: sudo apt-get install -y$$missing"; exit 1; \
	  fi; \
	fi
	rm -rf $(KAFKA_LIB)
	mvn -q -B -f $(KAFKA_POM) -Dkafka.lib=$(CURDIR)/$(KAFKA_LIB) dependency:copy-dependencies
	@touch $@

doctor: env
	storagebrief doctor

# JupyterLab on this project (as root Jupyter wants --allow-root; a user needs nothing extra).
lab: env
	jupyter lab $$([ "$$(id -u)" = 0 ] && echo --allow-root)

brief: env
	storagebrief brief

clean-data:
	rm -rf data/targets

clean: clean-data
	@# the pipeline's outputs only: interactive runs (reports/runs/) and your notebooks' outputs stay
	rm -rf $(VENV) .kafka reports/brief.* $(filter-out reports/runs/ reports/test-artifacts/,$(wildcard reports/*/))
