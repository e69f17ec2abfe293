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
# Object-storage targets run a real S3 gateway, versitygw (Apache-2.0), built from the Go module proxy into
# TOOLS (outside git). The object sweep's client (s3worker: Go with minio-go v7.4.1, whose go.mod needs Go 1.26)
# is built there too. Their go.mod files need Go >= GO_MIN; without such a Go on PATH, `make s3` installs Go
# GO_VERSION into TOOLS/go from the Go module proxy (golang.org/toolchain, checked against sum.golang.org).
TOOLS := .tools
VERSITYGW_VERSION := v1.8.0
GO_MIN := 1.26
GO_VERSION := 1.26.8
S3WORKER_SRC := lib/storagebrief/studies/object_sweep/s3worker

NOTEBOOKS := $(patsubst %.py,%.ipynb,$(wildcard notebooks/[0-9]*_*.py notebooks/brief.py))

.PHONY: study study-deps test test-fast env system-deps kafka s3 s3worker doctor gpu brief notebooks notebook-files lab s3ref clean-data \
	clean hosts test-hosts-deps dvc-lock-local mlpstorage mlpstorage-try

# What a study needs, built side by side: the Python environment, Kafka's jars and the gateway's Go build took
# 44, 5 and 76 s one after another on a clean clone here. apt (system-deps) runs first and alone: two apt-gets
# at once would fight over its lock. MLPerf's tools (their own Python 3.12 environment, no apt) build beside them
# too (13 s of a clean clone's make study after them); the object client's Go build waits for the gateway's, which
# may install Go first.
study-deps:
	@$(MAKE) --no-print-directory -j3 --output-sync=target env kafka s3 mlpstorage-try
	@$(MAKE) --no-print-directory s3worker

study: study-deps
	@if [ "$(SCALE)" = "paper" ]; then dvc exp run -S scale=paper; else dvc repro; fi
	@$(MAKE) --no-print-directory dvc-lock-local
	@ls -l reports/brief.html reports/brief.pdf

# Three workers (pytest-xdist), each test file a unit of work handed out longest first, `serial` tests alone, a
# per-test budget checked at the end (tests/suite.py, tests/budget.py; docs/testing.md). On these 2 cores most
# whole-run tests wait on subprocesses, I/O and sleeps: two workers left the CPUs 24 % idle, three 13 %
# (docs/testing.md).
PYTEST_WORKERS := -n 3 --dist loadfile --no-loadscope-reorder

test: env kafka s3 s3worker s3ref test-hosts-deps mlpstorage-try
	pytest -q -ra $(PYTEST_WORKERS) --durations=25 tests

# The tier to run while developing: unit and small integration tests, no whole study, no browser, no
# DVC chain (markers: not slow and not e2e). Minutes, not half an hour; CI still runs `make test`.
test-fast: env
	pytest -q -ra $(PYTEST_WORKERS) -m "not slow and not e2e" tests

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

# MLPerf Storage's own tools (issue 60): mlpstorage_py, MLPerf's DLIO workload files and its KV-cache tool at a
# pinned commit of its v3.0 code line, vendored unmodified as a gzip'd `git archive` (third_party/mlperf-storage/,
# its README says where from and how to refresh it), checked against its SHA256SUMS and extracted into MLPSTORAGE
# (outside git), with a Python 3.12 virtual environment of its own holding what its report generator imports
# (pinned, from PyPI). Studies and benchmarks/mlperf_reportgen.py run it on their MLPerf results trees
# (docs/mlperf-tools.md). MLPSTORAGE_GIT may name a clone or mirror to take the commit from instead; PYTHON312 a
# Python 3.12.
MLPSTORAGE := .mlpstorage
MLPSTORAGE_COMMIT := 64165f7f3ca583c30efb6839a8d1cfe334343c7b
MLPSTORAGE_DIR := third_party/mlperf-storage
MLPSTORAGE_ARCHIVE := $(MLPSTORAGE_DIR)/mlc-storage-$(MLPSTORAGE_COMMIT).tar.gz
MLPSTORAGE_PATHS := mlpstorage_py configs/dlio/workload kv_cache_benchmark LICENSE.md
MLPSTORAGE_GIT ?=
PYTHON312 ?= $(shell for p in python3.12 $$HOME/.pyenv/versions/3.12.*/bin/python /root/.pyenv/versions/3.12.*/bin/python; do \
  q=$$(command -v $$p 2>/dev/null) && $$q -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null && \
  { echo $$q; break; }; done)
MLPSTORAGE_PIP := psutil==7.2.2 pyarrow==26.0.1 PyYAML==6.0.4 packaging==26.4 rich==15.0.0 python-dotenv==1.2.4

mlpstorage: $(MLPSTORAGE)/.installed

# What `make study` and `make test` use: MLPerf's tools where they can be installed, else one line and on without
# them (the studies' verdicts.json and the brief then say MLPerf's report generator was not run; its tests skip).
mlpstorage-try:
	@$(MAKE) --no-print-directory mlpstorage >$(MLPSTORAGE).log 2>&1 || \
	  echo "make mlpstorage failed, going on without MLPerf's report generator (all of it in $(MLPSTORAGE).log): $$(grep -v '^make.*: \*\*\*' $(MLPSTORAGE).log | tail -n 1)"

$(MLPSTORAGE)/.installed: $(if $(MLPSTORAGE_GIT),,$(MLPSTORAGE_ARCHIVE) $(MLPSTORAGE_DIR)/SHA256SUMS)
	@[ -n "$(MLPSTORAGE_GIT)" ] || { \
	  want=$$(awk '$$2 == "$(notdir $(MLPSTORAGE_ARCHIVE))" {print $$1}' $(MLPSTORAGE_DIR)/SHA256SUMS 2>/dev/null); \
	  got=$$(sha256sum < $(MLPSTORAGE_ARCHIVE) | cut -d' ' -f1); \
	  [ -n "$$want" ] && [ "$$got" = "$$want" ] || \
	    { echo "make mlpstorage: $(MLPSTORAGE_ARCHIVE) has sha256 $$got, $(MLPSTORAGE_DIR)/SHA256SUMS says $${want:-nothing}: not extracted (refresh it as $(MLPSTORAGE_DIR)/README.md says)" >&2; exit 1; }; }
	@test -n "$(PYTHON312)" && "$(PYTHON312)" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' || \
	  { echo "make mlpstorage: needs Python 3.12 (PYTHON312=$(PYTHON312)); set PYTHON312=/path/to/python3.12" >&2; exit 1; }
	rm -rf $(MLPSTORAGE) && mkdir -p $(MLPSTORAGE)
	@if [ -n "$(MLPSTORAGE_GIT)" ]; then \
	  echo "taking $(MLPSTORAGE_COMMIT) from MLPSTORAGE_GIT=$(MLPSTORAGE_GIT)"; \
	  mkdir -p $(MLPSTORAGE)/git && git -C $(MLPSTORAGE)/git init -q && \
	  git -C $(MLPSTORAGE)/git fetch -q --depth 1 "$(MLPSTORAGE_GIT)" $(MLPSTORAGE_COMMIT) && \
	  git -C $(MLPSTORAGE)/git archive --format=tar $(MLPSTORAGE_COMMIT) $(MLPSTORAGE_PATHS) | tar -x -C $(MLPSTORAGE) && \
	  rm -rf $(MLPSTORAGE)/git; \
	else \
	  echo "extracting $(MLPSTORAGE_ARCHIVE) (sha256 checked)"; tar -xzf $(MLPSTORAGE_ARCHIVE) -C $(MLPSTORAGE); \
	fi
	"$(PYTHON312)" -m venv $(MLPSTORAGE)/venv && $(MLPSTORAGE)/venv/bin/pip install -q --disable-pip-version-check $(MLPSTORAGE_PIP)
	echo $(MLPSTORAGE_COMMIT) > $(MLPSTORAGE)/COMMIT && touch $@

env: system-deps $(VENV)/.installed notebook-files dvc-lock-local

# dvc.lock records what `dvc repro` measured on this machine (its outputs' hashes), so every study rewrites
# it; DVC refuses a git-ignored dvc.lock, so git is told to leave this clone's copy alone instead
# (skip-worktree): after `make study` a fresh clone's `git status` stays clean. To commit your own lock:
# git update-index --no-skip-worktree dvc.lock (docs/notebooks.md).
dvc-lock-local:
	@if git rev-parse --is-inside-work-tree >/dev/null 2>&1 && git ls-files --error-unmatch dvc.lock >/dev/null 2>&1; then \
	  git update-index --skip-worktree dvc.lock; fi

# Client hosts on this machine for trying the multi-host recipe by hand (root): HOSTS network namespaces,
# each with its own hostname, address and sshd; prints the hostfile and mpirun environment; Ctrl-C removes them.
HOSTS ?= 2
hosts: env test-hosts-deps
	$(BIN)/python -m storagebrief.core.nethosts up $(HOSTS) data/hosts

# The notebooks are tracked as Jupytext percent scripts; the .ipynb a user opens in JupyterLab is made
# from each once (git ignores it, and it is not paired with the script: knob edits stay in it). It records
# the script cells it was made from: the base `make notebooks` merges against.
notebook-files: $(VENV)/.installed
	@for nb in $(NOTEBOOKS); do test -e $$nb || { $(BIN)/storagebrief notebooks --make-missing >/dev/null; break; }; done

# After a `git pull` (or an edit of a .py): every .ipynb brought up to its script's code, merged cell by
# cell: your parameters cell, edits and unchanged outputs stay, a cell changed on both sides is kept twice
# (yours marked); the earlier .ipynb goes to notebooks/before-refresh/<time>/. Refused while JupyterLab has
# the notebook open. The way back from any .ipynb/.py drift; nothing tracked is deleted (docs/notebooks.md).
notebooks: $(VENV)/.installed
	$(BIN)/storagebrief notebooks --refresh

# rfc3987-syntax (jsonschema's optional "iri" format check, pulled in by jupyter-events' jsonschema[format-nongpl])
# builds a lark grammar on import: 1.0-1.3 s in every process that imports nbformat, so twice per study stage
# (jupytext, papermill; measured). Without it jsonschema skips that one format check; nothing here uses it.
DROP_SLOW_IMPORT = $(BIN)/python -m uv pip uninstall -q --python $(BIN)/python rfc3987-syntax

$(VENV)/.installed: pyproject.toml | system-deps
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
# uv (from PyPI) installs the same requirements as pip, in about 20 s instead of about 2 minutes here.
# --compile-bytecode (pip's default, not uv's): where PYTHONDONTWRITEBYTECODE is set (this CI machine)
# nothing writes .pyc later, and every process compiled its imports again: importing TensorFlow took
# 16-19 s instead of 7 s, in every training job, consumer and notebook kernel of the study (measured).
	$(BIN)/python -m pip install -q uv
	$(BIN)/python -m uv pip install -q --compile-bytecode --python $(BIN)/python -e '.[mpi]'
	$(DROP_SLOW_IMPORT)
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

$(KAFKA_LIB)/.installed: $(KAFKA_POM) | system-deps
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

# The local S3 gateway (versitygw) for object-storage targets; Go installed into $(TOOLS)/go when missing.
s3: $(TOOLS)/.versitygw-$(VERSITYGW_VERSION)

# The compiled reference S3 client (benchmarks/s3ref, minio-go) for benchmarks/object_clients.py and the object
# sweep's reference_client knob (off by default): make study does not build it (about a minute, and its Go
# modules); make test does, for its test.
s3ref: $(TOOLS)/bin/s3ref

# The object sweep's client (every GET and PUT of its batches, on directories and S3 targets alike), and the data
# path of emulate's accelerators on S3 (its "serve" mode, core/s3mover.py): Go with minio-go, built from
# $(S3WORKER_SRC) (its go.sum pins every module) into $(TOOLS)/bin/s3worker.
s3worker: $(TOOLS)/bin/s3worker

$(TOOLS)/bin/s3worker: $(wildcard $(S3WORKER_SRC)/*.go) $(S3WORKER_SRC)/go.mod $(S3WORKER_SRC)/go.sum
	@$(FIND_GO); \
	echo "building the object sweep's client ($(S3WORKER_SRC)) with $$($$go env GOVERSION) into $(TOOLS)/bin"; \
	cd $(S3WORKER_SRC) && GOFLAGS="-modcacherw -mod=readonly" GOTOOLCHAIN=local CGO_ENABLED=0 \
	  $$go build -trimpath -o $(CURDIR)/$@ .

# The three Go builds (versitygw, s3worker, s3ref) use Go's own module and build caches (`go env GOMODCACHE
# GOCACHE`: ~/go/pkg/mod and ~/.cache/go-build unless set), as any Go build does: about 740 MB once per user,
# shared by every clone, so a second clone builds in seconds instead of ~2 minutes (`go clean -cache -modcache`
# empties them; -modcacherw keeps the module cache removable).
# sets $$go to a Go >= GO_MIN: the one on PATH, else $(TOOLS)/go, installed there when missing
FIND_GO = go=$$(command -v go || true); \
	if [ -z "$$go" ] || ! python3 lib/storagebrief/core/gotool.py ok "$$go" $(GO_MIN); then \
	  go=$(CURDIR)/$(TOOLS)/go/bin/go; \
	  if ! python3 lib/storagebrief/core/gotool.py ok "$$go" $(GO_MIN); then \
	    echo "installing Go $(GO_VERSION) into $(TOOLS)/go (no Go >= $(GO_MIN) on PATH)"; \
	    python3 lib/storagebrief/core/gotool.py install $(TOOLS)/go $(GO_VERSION) >/dev/null || exit 1; \
	  fi; \
	fi

# go.sum pins every module the reference client uses (checked by the go command on download)
$(TOOLS)/bin/s3ref: benchmarks/s3ref/main.go benchmarks/s3ref/go.mod benchmarks/s3ref/go.sum
	@$(FIND_GO); \
	echo "building the reference S3 client (benchmarks/s3ref) with $$($$go env GOVERSION) into $(TOOLS)/bin"; \
	cd benchmarks/s3ref && GOFLAGS="-modcacherw -mod=readonly" GOTOOLCHAIN=local CGO_ENABLED=0 \
	  $$go build -trimpath -o $(CURDIR)/$@ .

$(TOOLS)/.versitygw-$(VERSITYGW_VERSION):
	@$(FIND_GO); \
	echo "building versitygw $(VERSITYGW_VERSION) with $$($$go env GOVERSION) into $(TOOLS)/bin"; \
	GOBIN=$(CURDIR)/$(TOOLS)/bin GOFLAGS=-modcacherw GOTOOLCHAIN=local CGO_ENABLED=0 \
	  $$go install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)
	@touch $@

doctor: env
	storagebrief doctor

# The transfer sweep's GPU path (optional; skipped with the reason where there is no GPU): the gpu extra for the
# driver's CUDA major (gpu-cu12 or gpu-cu13: kvikio + cupy wheels), then, where CUDA's headers and libcufile are
# present, fio built with --enable-libcufile from Debian's fio source package into $(TOOLS)/bin/fio (fio's libcufile
# engine: the reference tool the GPU path is compared with). `apt-get source` needs a deb-src entry in apt's sources.
TOOLS := .tools
gpu: env
	@extra=$$($(BIN)/python -m storagebrief.studies.transfer_sweep.gpu_setup extra); rc=$$?; \
	if [ $$rc = 3 ]; then echo "make gpu: skipped"; exit 0; elif [ $$rc != 0 ]; then exit $$rc; fi; \
	echo "installing storagebrief[$$extra]"; \
	$(BIN)/python -m uv pip install -q --compile-bytecode --python $(BIN)/python -e ".[mpi,$$extra]" && \
	$(DROP_SLOW_IMPORT) && \
	$(MAKE) --no-print-directory $(TOOLS)/bin/fio

$(TOOLS)/bin/fio:
	@cuda=$$($(BIN)/python -m storagebrief.studies.transfer_sweep.gpu_setup cuda-root) || { echo "make gpu: fio with libcufile not built"; exit 0; }; \
	lib=$$cuda/lib; [ -d $$cuda/lib64 ] && lib=$$cuda/lib64; \
	command -v dpkg-source >/dev/null || { echo "make gpu: apt-get source needs dpkg-dev (sudo apt-get install -y dpkg-dev)"; exit 1; }; \
	mkdir -p $(TOOLS)/src && cd $(TOOLS)/src && \
	if ! ls -d fio-*/ >/dev/null 2>&1 && ! apt-get source -qq fio; then \
	  echo "make gpu: 'apt-get source fio' failed: no deb-src entry is configured. Add one (Debian 12: 'Types: deb deb-src' in"; \
	  echo "  /etc/apt/sources.list.d/debian.sources, or a 'deb-src http://deb.debian.org/debian bookworm main' line), run"; \
	  echo "  'sudo apt-get update' and 'make gpu' again; or unpack fio's release source (github.com/axboe/fio) into $(TOOLS)/src/fio-<version>/"; \
	  exit 1; \
	fi; \
	src=$$(ls -d fio-*/ | head -1) && cd $$src && \
	LDFLAGS="-L$$lib -Wl,-rpath,$$lib" ./configure --enable-libcufile --extra-cflags="-I$$cuda/include" >/dev/null && \
	$(MAKE) -s -j$$(nproc) fio >/dev/null && \
	mkdir -p $(CURDIR)/$(TOOLS)/bin && cp fio $(CURDIR)/$(TOOLS)/bin/fio && \
	$(CURDIR)/$(TOOLS)/bin/fio --enghelp | grep -qx '[[:space:]]*libcufile' && echo "built $(TOOLS)/bin/fio with libcufile"

# JupyterLab on this project with what every notebook's defaults need: the S3 gateway (local-s3 in 02, 06, 08)
# and Kafka's jars (05), as `make study` has them. `storagebrief lab` gives its terminals and kernels this
# environment on PATH (a terminal's login profile used to drop it) and adds --allow-root as root.
lab: env kafka s3
	storagebrief lab

brief: env
	storagebrief brief

# Only the target folders storagebrief used (they hold its .storagebrief.lock): data/targets/README.md, which
# git tracks, and anything else a user put there stay.
clean-data:
	@for d in data/targets/*/; do \
	  if [ -e "$${d}.storagebrief.lock" ]; then rm -rf "$$d" && echo "removed $$d"; else echo "kept $$d (not a storagebrief target)"; fi; \
	done

clean: clean-data
	@# the pipeline's outputs only: interactive runs (reports/runs/) and your notebooks' outputs stay
	rm -rf $(VENV) .kafka $(TOOLS) reports/brief.* $(filter-out reports/runs/ reports/test-artifacts/,$(wildcard reports/*/))
