# meshfeed: every entry point a fresh machine needs. See README.md.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
GO ?= go
PY ?= python3
VENV := .venv
BIN := bin/meshfeed
BENCH_COUNT ?= 5
BENCHTIME ?= 3x
# The version is written once, in pyclient/meshfeed/_version.py; the binary gets it here.
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' pyclient/meshfeed/_version.py)
# The binary is built as the wheel ships it (pyclient/setup.py): static (no cgo), -trimpath,
# so that bin/meshfeed is what the tests run and the wheel build reuses Go's cache.
GO_BUILD := CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false -ldflags "-X main.version=$(VERSION)"
DIST ?= dist
WHEEL_ARCHES ?= x86_64 aarch64

.PHONY: all setup go-setup py-setup build test go-test py-test wheel wheel-test ray-setup ray-test demo bench fuzz vet fmt clean

all: build

setup: go-setup py-setup build

go-setup:
	$(GO) mod download

# The virtual environment is rebuilt when requirements change.
py-setup: $(VENV)/.stamp
$(VENV)/.stamp: requirements-dev.txt $(wildcard pyclient/pyproject.toml pyclient/setup.py)
	test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	if [ -f pyclient/pyproject.toml ]; then $(VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e pyclient; fi
	touch $@

build:
	$(GO_BUILD) -o $(BIN) ./cmd/meshfeed

vet:
	@unformatted="$$(gofmt -l $$(git ls-files '*.go'))"; \
	if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...

test: setup vet go-test py-test ray-test wheel-test

go-test:
	$(GO) test -count=1 -timeout 30m ./...

# Azurite (npm), the Azure Blob Storage emulator the Go tests start on loopback
# (objstoretest.Azurite), installed pinned into .azurite/ (git-ignored); the stamp
# names the version, so changing the pin reinstalls. Needs node and npm.
# The whole dependency tree is pinned by the lock file beside the harness (npm ci installs
# exactly it, integrity-checked; no download addresses are recorded, npm's registry serves).
AZURITE_VERSION := 3.37.0
AZURITE_DIR := .azurite
AZURITE_LOCK := objstore/objstoretest/azurite
azurite-setup: $(AZURITE_DIR)/.stamp-$(AZURITE_VERSION)
$(AZURITE_DIR)/.stamp-$(AZURITE_VERSION): $(AZURITE_LOCK)/package.json $(AZURITE_LOCK)/package-lock.json
	grep -q '"azurite": "$(AZURITE_VERSION)"' $(AZURITE_LOCK)/package.json
	rm -rf $(AZURITE_DIR)
	mkdir -p $(AZURITE_DIR)
	cp $(AZURITE_LOCK)/package.json $(AZURITE_LOCK)/package-lock.json $(AZURITE_DIR)/
	npm ci --prefix $(AZURITE_DIR) --no-audit --no-fund --ignore-scripts
	touch $@
go-test: azurite-setup
.PHONY: azurite-setup

# Python tests: test-data generators agree with what is checked in, and the client.
# A test that runs longer than TEST_TIMEOUT seconds fails with every thread's stack.
TEST_TIMEOUT ?= 600
# PATH gets bin/ so tests can find the server; bin/fakegcs serves bench's --gcs-emulator.
py-test: build
	$(GO) build -o bin/fakegcs ./benchmarks/fakegcs
	PATH="$(CURDIR)/bin:$$PATH" MESHFEED_BIN="$(CURDIR)/$(BIN)" $(VENV)/bin/python -m pytest -q --timeout $(TEST_TIMEOUT) testdata \
		$(if $(wildcard pyclient/tests),pyclient/tests --ignore=pyclient/tests/test_wheel.py)

# The sdist, then from it one platform wheel per Linux arch with the Go binary inside
# (pyclient/setup.py), into $(DIST)/. Offline: build deps come from .venv.
wheel: py-setup
	rm -rf $(DIST)
	$(VENV)/bin/python -m build --quiet --sdist --no-isolation --outdir $(abspath $(DIST)) pyclient
	for arch in $(WHEEL_ARCHES); do \
		MESHFEED_WHEEL_ARCH=$$arch $(VENV)/bin/pip wheel --quiet --disable-pip-version-check --no-deps \
			--no-build-isolation --no-index --no-cache-dir --wheel-dir $(abspath $(DIST)) \
			$(abspath $(DIST))/meshfeed-$(VERSION).tar.gz; \
	done
	ls -l $(DIST)

# The wheels checked, then installed into a fresh venv outside the repository and run
# there (pyclient/tests/test_wheel.py): no repository, no MESHFEED_BIN, no Go on PATH.
wheel-test: wheel
	MESHFEED_DIST="$(abspath $(DIST))" $(VENV)/bin/python -m pytest -q pyclient/tests/test_wheel.py

# Ray tests (pyclient/tests_ray: JaxTrainer for real, meshfeed servers as Ray
# actors on a local multi-node cluster) run in their own environment, .venv-ray,
# so that .venv stays lean: Ray Train is a large install.
VENV_RAY := .venv-ray
ray-setup: $(VENV_RAY)/.stamp
$(VENV_RAY)/.stamp: requirements-ray.txt $(wildcard pyclient/pyproject.toml)
	test -x $(VENV_RAY)/bin/python || $(PY) -m venv $(VENV_RAY)
	$(VENV_RAY)/bin/pip install --quiet --disable-pip-version-check -r requirements-ray.txt
	$(VENV_RAY)/bin/pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e pyclient
	touch $@

# A hung Ray run (it should take ~2 minutes) fails after 20 minutes instead of holding CI.
ray-test: build ray-setup
	PATH="$(CURDIR)/bin:$$PATH" MESHFEED_BIN="$(CURDIR)/$(BIN)" timeout -k 30 1200 \
		$(VENV_RAY)/bin/python -m pytest -q pyclient/tests_ray

# Main job: generate a dataset, show its files, plan and raw read speed, then
# train a small MLP on an 8-device CPU mesh fed by meshfeed (examples/demo_train.py):
# live progress on stderr, then a report (rows/s, time waiting for data, loss).
DEMO_STEPS ?= 300
demo: setup
	./$(BIN) gen --out .cache/demo --rows 2000000 --files 4 --row-group-rows 65536 --features 64 --compression snappy --if-absent
	./$(BIN) inspect .cache/demo
	./$(BIN) plan --data .cache/demo --global-batch-size 1024 --mesh data=4,model=2 --batch-axes data --processes 2 --last-batch pad --seed 0 --shuffle-window 65536
	./$(BIN) read .cache/demo
	XLA_FLAGS=--xla_force_host_platform_device_count=8 MESHFEED_BIN="$(CURDIR)/$(BIN)" $(VENV)/bin/python examples/demo_train.py --data .cache/demo --steps $(DEMO_STEPS)

# Benchmarks: each BENCH_COUNT times into bench.txt; BENCHMARKS.md quotes
# medians from such a run. MESHFEED_BENCH_ROWS sets the loader's dataset size.
bench: setup
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -count $(BENCH_COUNT) -timeout 60m ./objstore ./format ./loader ./batching ./shape ./shard ./transport ./feed | tee bench.txt

# The server's peak RSS (anonymous and file-backed apart) against its budget,
# for row groups of 16 MiB to 1 GiB (benchmarks/pieces_rss.sh; settings there,
# e.g. BEFORE=/path/to/older/meshfeed to measure one side by side).
bench-rss: build
	MESHFEED="$(CURDIR)/$(BIN)" benchmarks/pieces_rss.sh
.PHONY: bench-rss

# Delivered GB/s of jax.Arrays against a memcpy measured in the same run:
# one client, 8 CPU devices, uncompressed page-cache-warm Parquet
# (benchmarks/memcpy_ratio.py).
bench-memcpy: build
	PYTHONPATH="$(CURDIR)/pyclient" MESHFEED_BIN="$(CURDIR)/$(BIN)" $(VENV)/bin/python benchmarks/memcpy_ratio.py
.PHONY: bench-memcpy

# A three-source mixture against one dataset of the same files, end to end
# (python -m meshfeed bench, alternated): rows/s and peak RSS against issue
# 26's targets (benchmarks/mixture.py; BENCH_ARGS, e.g. --repeats 9).
bench-mixture: build
	PYTHONPATH="$(CURDIR)/pyclient" $(VENV)/bin/python benchmarks/mixture.py --binary "$(CURDIR)/$(BIN)" $(BENCH_ARGS)
.PHONY: bench-mixture

# Fuzz each target for FUZZTIME (not part of make test; seeds run in make test).
FUZZTIME ?= 60s
fuzz:
	$(GO) test ./format -run '^$$' -fuzz '^FuzzParquetFooter$$' -fuzztime $(FUZZTIME)
	$(GO) test ./format -run '^$$' -fuzz '^FuzzArrowIPCFooter$$' -fuzztime $(FUZZTIME)
	$(GO) test ./transport -run '^$$' -fuzz '^FuzzDecodeRequest$$' -fuzztime $(FUZZTIME)
	$(GO) test ./shard -run '^$$' -fuzz '^FuzzParseTopology$$' -fuzztime $(FUZZTIME)
	$(GO) test ./batching -run '^$$' -fuzz '^FuzzPlan$$' -fuzztime $(FUZZTIME)

clean:
	rm -rf bin .cache $(DIST) pyclient/build pyclient/meshfeed.egg-info

# Optional benchmark dependencies (Ray Data, Grain, tokenizers, matplotlib) live in their own
# environment, .venv-bench, so that `make test` and .venv stay lean.
VENV_BENCH := .venv-bench
bench-setup: $(VENV_BENCH)/.stamp
$(VENV_BENCH)/.stamp: requirements-bench.txt
	test -x $(VENV_BENCH)/bin/python || $(PY) -m venv $(VENV_BENCH)
	$(VENV_BENCH)/bin/pip install --quiet --disable-pip-version-check -r requirements-bench.txt
	touch $@

# meshfeed beside a plain pyarrow loop, Ray Data and Grain on four workloads
# (tabular, tokens, images, text), each in a loop consuming steps freely and one waiting
# for every step, on one 8-device CPU mesh: tables written into BENCHMARKS.md
# (about 30-50 min on a 2-core machine; COMPARE_ARGS adds flags, e.g.
# COMPARE_ARGS="--workloads tokens --repeats 5"; see compare.py --help).
COMPARE_ARGS ?=
bench-compare: build bench-setup
	$(GO) build -o bin/fakegcs ./benchmarks/fakegcs
	PYTHONPATH="$(CURDIR)/pyclient" MESHFEED_BIN="$(CURDIR)/$(BIN)" $(VENV_BENCH)/bin/python benchmarks/compare.py \
		--write BENCHMARKS.md --json benchmarks/out/compare.json $(COMPARE_ARGS)
.PHONY: bench-setup bench-compare
bench: bench-compare
