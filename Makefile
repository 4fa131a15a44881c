# slurmkit: `make test` and `make demo` work on a fresh Debian 12 machine as root.
# Everything Python goes into .venv; all cluster state into .devcluster/ (ignored).

SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

include devcluster/cluster.mk

.PHONY: help venv compile pyslurm test unit integration demo bench docs clean

help:
	@echo "make test      install everything, start the local clusters, run all tests, stop the clusters"
	@echo "make unit      unit tests only (no cluster needed)"
	@echo "make test-fast everything but the tests marked slow (over 3 s each), on the local clusters (left up)"
	@echo "make demo      start the local clusters and run a 2-node --comm heavy job end to end"
	@echo "make pyslurm   build pyslurm for the installed Slurm (wheel cached in .cache/pyslurm) into .venv"
	@echo "make bench     submission overhead against plain sbatch and simple-slurm, ..., what a container costs"
	@echo "make cluster-up / cluster-down / cluster-status;  eval \"\$$(make -s cluster-env)\""
	@echo "make cluster-up SCALE=1024   the opt-in 1,024-node scale cluster instead (devcluster/scale.py); make bench-scale"
	@echo "make test-releases   the suite on Slurm 24.11 and 26.05 (Debian roots) and the mixed-release federation"
	@echo "make bench-green     a week of submissions replayed in simulated time: --prefer green --deadline against the soonest cluster"
	@echo "make bench-goodput   goodput of a real DDP job under a failure mix: slurmkit, Slurm's --requeue, an afterany chain"
	@echo "make docs      the documentation site (mkdocs.yml, docs/), built strict into build/docs"
	@echo "make image     the container image of the container tests (Debian 12 + PyTorch, no registry), cached"

# Debian's python3 needs python3-venv for `python3 -m venv`; the image may already have it.
install-python:
	@python3 -c 'import ensurepip, venv' 2>/dev/null || { \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv python3-pip; }

venv: $(VENV)/.installed

$(VENV)/.installed: setup.cfg pyproject.toml | install-python
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test,bench,docs]' --config-settings editable_mode=compat
	touch $@

# Byte-compile the package as `pip install` does for a regular install, even where
# PYTHONDONTWRITEBYTECODE is set: every slurmkit process would otherwise recompile it.
compile: venv
	@$(PY) -m compileall -q slurmkit

unit: venv
	$(PY) -m pytest -q tests/unit $(PYTEST_ARGS)

# pyslurm for the installed Slurm release, from the upstream sources in shared/
# beside the repository (PyPI only has 25.11); the wheel is cached for the
# whole machine in $(SLURMKIT_CACHE_DIR)/pyslurm (a build takes 2-3 minutes on two
# cores; a fresh clone reuses it), so only the first run builds.  Where no
# source matches the Slurm release it says so and installs nothing (slurmkit
# uses the commands).  After install-system: the Slurm release decides which
# source to build.  SLURMKIT_CACHE_DIR also keeps the Debian roots of
# `make test-releases` (scripts/releases/lib.sh).
SLURMKIT_CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/slurmkit
export SLURMKIT_CACHE_DIR
PYSLURM_VENDOR ?= $(CURDIR)/../shared/vendor/pyslurm
PYSLURM_CACHE ?= $(SLURMKIT_CACHE_DIR)/pyslurm

pyslurm: venv install-system
	@bash scripts/pyslurm-wheel.sh $(PY) $(PYSLURM_VENDOR) $(PYSLURM_CACHE)

# The pyslurm backend is tested for real (tests/integration/test_pyslurm_backend.py,
# test_backend_parity.py), and with pyslurm installed the CLI uses it locally.
test: pyslurm

# The clusters are stopped whatever the tests did; the exit status is the tests'.
test: venv compile cluster-up
	@status=0; $(PY) -m pytest -q --durations=15 tests $(PYTEST_ARGS) || status=$$?; \
	  $(MAKE) --no-print-directory cluster-down; exit $$status

# The edit-test loop: the suite without the tests marked slow (each over 3 s on the CI machine),
# on the dev clusters; `make test` runs everything.
.PHONY: test-fast
test-fast: venv compile cluster-up
	$(PY) -m pytest -q -m "not slow" tests $(PYTEST_ARGS)

demo: venv compile cluster-up
	$(PY) -m slurmkit submit --site site_configs/local.yaml --cluster alpha --partition gpu \
	    --nodes 2 --gpus-per-node 2 --comm heavy --template srun --time 5 \
	    --output "$(CURDIR)/.devcluster/demo-%j.out" --json \
	    -- bash -c 'echo "$$SLURMD_NODENAME NCCL_SOCKET_IFNAME=$$NCCL_SOCKET_IFNAME"' \
	  | tee .devcluster/demo-submit.json
	$(PY) -m slurmkit wait --site site_configs/local.yaml \
	    "$$($(PY) -c 'import json; print(json.load(open(".devcluster/demo-submit.json"))["id"])')"

bench: venv compile cluster-up image
	$(PY) bench/bench_submit.py
	$(PY) bench/bench_federation.py
	$(PY) bench/bench_health.py
	$(PY) bench/bench_requeue.py
	$(PY) bench/bench_sweep.py
	$(PY) bench/bench_containers.py
	$(PY) bench/bench_observe.py
	$(PY) bench/bench_api.py

# Green placement: a week of submissions through the real planner (submit --prefer green --deadline)
# against simulated clusters in simulated time (about a second; no cluster needed), compared with
# every job at once to the soonest cluster.  .bench/green.json; docs/benchmarks.md has the figures.
.PHONY: bench-green
bench-green: venv
	$(PY) bench/bench_green.py

# Goodput of a real training job under a mix of injected failures, for slurmkit's daemon,
# Slurm's own --requeue and a blind afterany chain, one after the other (about 25 minutes;
# BENCH_GOODPUT_WALL, BENCH_GOODPUT_SPACING, BENCH_GOODPUT_CONTENDERS).  .bench/goodput.json.
.PHONY: bench-goodput
bench-goodput: venv-train compile cluster-up
	$(PY) bench/bench_goodput.py

# The documentation site: mkdocs.yml and docs/ (the command reference is generated
# from the click commands).  --strict: a broken link, anchor or nav entry fails the build.
# (NO_MKDOCS_2_WARNING: mkdocs-material's banner about its successor, not a warning of the build.)
docs: export NO_MKDOCS_2_WARNING = 1
docs: venv
	$(PY) -m mkdocs build --strict --site-dir build/docs

clean:
	rm -rf $(VENV) build dist *.egg-info

# PyTorch (the CPU build, from the local wheel on the test machines) for the example
# training program and the tests that run it. A step of its own so that `make unit`
# never needs it; the stamp makes a second run free, and pip only checks again when
# the venv or this file changed. TORCH_SPEC pins the release the tests were written
# against; NumPy because torch's object collectives (torch.distributed.checkpoint's
# among them) need it.
TORCH_SPEC ?= torch==2.13.0 numpy
.PHONY: venv-train
venv-train: $(VENV)/.installed-train

$(VENV)/.installed-train: $(VENV)/.installed Makefile
	$(PY) -m pip install -q --disable-pip-version-check $(foreach r,$(TORCH_SPEC),'$(r)')
	$(PY) -W ignore -c 'import torch, torch.distributed as d; assert d.is_gloo_available(), "torch without gloo"'
	touch $@

test: venv-train

# The container image of the container tests (tests/integration/test_container_jobs.py): a Debian
# 12 root with PyTorch at a path of its own, made without a registry by scripts/images/mkimage.sh
# once for the machine (about 2 minutes; $(SLURMKIT_CACHE_DIR)/images).  Prints the image's path.
.PHONY: image
image: install-system
	@IMAGE_PIP='$(TORCH_SPEC)' bash scripts/images/mkimage.sh

test: image

# The suite against the other Slurm releases, each inside its own Debian root
# (debootstrap; made once into $(SLURMKIT_CACHE_DIR)/releases and reused) with its own clusters
# in a private network, then the mixed-release federation's tests.  Prints each
# release's pytest summary line.  See scripts/releases/test-releases.sh.
TEST_RELEASES ?= 24.11 26.05 mixed
.PHONY: test-releases
test-releases: venv compile install-system image
	bash scripts/releases/test-releases.sh $(TEST_RELEASES)

# The large opt-in cluster of devcluster/scale.py (issue 13): N real slurmds
# on 127.0.64-73.x in a three-level tree; nothing of it starts unless asked.
# cluster-down stops it too.  bench-scale starts it at 64, 256 and 1,024 nodes
# in turn (SCALE_SIZES, SCALE_QUEUE held jobs) and stops it.
N ?= 256
.PHONY: scale-up scale-down scale-status bench-scale
scale-up: install-system
	$(PYTHON) devcluster/scale.py up $(N)
scale-down:
	$(PYTHON) devcluster/scale.py down
scale-status:
	$(PYTHON) devcluster/scale.py status
cluster-down: scale-down
bench-scale: venv compile install-system
	$(PY) bench/bench_scale.py
