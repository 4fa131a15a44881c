# Throwaway local Slurm clusters (alpha, beta, gamma) on loopback.
# Included by the main Makefile (`include devcluster/cluster.mk`); also usable
# alone: make -f devcluster/cluster.mk cluster-up
#
#   make cluster-up                     install packages if missing, start all
#   make cluster-down                   stop everything devcluster started
#   eval "$(make -s cluster-env)"       SLURM_CONF for alpha
#   eval "$(make -s cluster-env CLUSTER=beta)"
#   make cluster-status
#   make cluster-up RELEASES=mixed      the mixed-release federation (22.05, 24.11, 26.05)
#   make cluster-up SCALE=1024          the opt-in scale cluster of N nodes (scale.py), alone
#   eval "$(make -s cluster-env SCALE=1)" SLURM_CONF for the scale cluster

# Directory of this file, whatever the including Makefile's location.
DEVCLUSTER_DIR := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
DEVCLUSTER := $(DEVCLUSTER_DIR)/devcluster.py
PYTHON ?= python3
CLUSTER ?= alpha

# slurmdbd + mariadb-server: real accounting (sacct) on alpha.
DEVCLUSTER_PACKAGES := slurm-wlm slurmdbd mariadb-server munge openssh-server openssh-client iproute2 util-linux mawk \
	charliecloud-runtime runc squashfs-tools
# Programs that must exist; install-system does nothing when all are present.
DEVCLUSTER_PROGRAMS := slurmctld slurmd slurmdbd munged mungekey sinfo scontrol sbatch srun sacct sacctmgr \
	mariadbd mariadb-install-db mariadb ssh ssh-keygen unshare nsenter ss flock awk ch-run runc mksquashfs

.PHONY: install-system cluster-up cluster-down cluster-env cluster-status

# `apt-get update` exits non-zero when any one source fails (an expired Release
# file, say) although the others refreshed: go on when apt's lists still offer
# every package.  During the install a policy-rc.d (unless the machine has one)
# keeps the packages' scripts from starting the system-wide mariadb, slurmdbd,
# slurmctld or munge services: devcluster runs its own private instances.
install-system:
	@missing=""; \
	for p in $(DEVCLUSTER_PROGRAMS); do command -v $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	test -x /usr/sbin/sshd || missing="$$missing sshd"; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	echo "install-system: missing:$$missing -> installing $(DEVCLUSTER_PACKAGES)"; \
	if [ "$$(id -u)" -ne 0 ]; then echo "install-system: must run as root" >&2; exit 1; fi; \
	if ! apt-get update; then \
	  echo "install-system: warning: apt-get update failed (a source may be unreachable or expired); trying the package lists apt already has" >&2; \
	  for p in $(DEVCLUSTER_PACKAGES); do \
	    apt-cache policy $$p 2>/dev/null | grep -q 'Candidate: [^(]' \
	      || { echo "install-system: no installable $$p in apt's package lists; fix the apt sources and retry" >&2; exit 1; }; \
	  done; \
	fi; \
	policy=/usr/sbin/policy-rc.d; \
	if [ ! -e $$policy ]; then \
	  printf '#!/bin/sh\nexit 101\n' > $$policy && chmod 755 $$policy; \
	  trap 'rm -f $$policy' EXIT; \
	fi; \
	DEBIAN_FRONTEND=noninteractive apt-get install -y $(DEVCLUSTER_PACKAGES)

# RELEASES=mixed: the mixed-release federation instead (alpha on this machine's
# Slurm, beta on 24.11, gamma on 26.05, each from its own Debian root, on
# 127.0.21-23.x with state in .devcluster/mixed; see scripts/releases/mixed.sh),
# beside the default clusters.
RELEASES ?=
MIXED := $(DEVCLUSTER_DIR)/../scripts/releases/mixed.sh

# SCALE=N: the opt-in scale cluster of N nodes (16 to 2,250; devcluster/scale.py,
# issue 13) instead of the three small ones; cluster-env and cluster-status with
# SCALE set (any value) or CLUSTER=scale speak of it.  cluster-down stops it too.
SCALE ?=
SCALE_PY := $(DEVCLUSTER_DIR)/scale.py

cluster-up: install-system
ifeq ($(RELEASES),mixed)
	bash $(MIXED) up
else ifneq ($(SCALE),)
	$(PYTHON) $(SCALE_PY) up $(SCALE)
else
	$(PYTHON) $(DEVCLUSTER) up
endif

cluster-down:
ifeq ($(RELEASES),mixed)
	bash $(MIXED) down
else
	$(PYTHON) $(DEVCLUSTER) down
endif

cluster-env:
ifeq ($(RELEASES),mixed)
	@bash $(MIXED) env
else ifneq ($(SCALE)$(filter scale,$(CLUSTER)),)
	@$(PYTHON) $(SCALE_PY) env
else
	@$(PYTHON) $(DEVCLUSTER) env $(CLUSTER)
endif

cluster-status:
ifeq ($(RELEASES),mixed)
	bash $(MIXED) status
else ifneq ($(SCALE)$(filter scale,$(CLUSTER)),)
	$(PYTHON) $(SCALE_PY) status
else
	$(PYTHON) $(DEVCLUSTER) status
endif
