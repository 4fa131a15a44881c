# Throwaway local Slurm clusters (alpha, beta, gamma) on loopback.
# Included by the main Makefile (`include devcluster/cluster.mk`); also usable
# alone: make -f devcluster/cluster.mk cluster-up
#
#   make cluster-up                     install packages if missing, start all
#   make cluster-down                   stop everything devcluster started
#   eval "$(make -s cluster-env)"       SLURM_CONF for alpha
#   eval "$(make -s cluster-env CLUSTER=beta)"
#   make cluster-status

# Directory of this file, whatever the including Makefile's location.
DEVCLUSTER_DIR := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
DEVCLUSTER := $(DEVCLUSTER_DIR)/devcluster.py
PYTHON ?= python3
CLUSTER ?= alpha

DEVCLUSTER_PACKAGES := slurm-wlm munge openssh-server openssh-client iproute2 util-linux mawk
# Programs that must exist; install-system does nothing when all are present.
DEVCLUSTER_PROGRAMS := slurmctld slurmd munged mungekey sinfo scontrol sbatch srun ssh ssh-keygen unshare nsenter ss flock awk

.PHONY: install-system cluster-up cluster-down cluster-env cluster-status

install-system:
	@missing=""; \
	for p in $(DEVCLUSTER_PROGRAMS); do command -v $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	test -x /usr/sbin/sshd || missing="$$missing sshd"; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	echo "install-system: missing:$$missing -> installing $(DEVCLUSTER_PACKAGES)"; \
	if [ "$$(id -u)" -ne 0 ]; then echo "install-system: must run as root" >&2; exit 1; fi; \
	apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $(DEVCLUSTER_PACKAGES)

cluster-up: install-system
	$(PYTHON) $(DEVCLUSTER) up

cluster-down:
	$(PYTHON) $(DEVCLUSTER) down

cluster-env:
	@$(PYTHON) $(DEVCLUSTER) env $(CLUSTER)

cluster-status:
	$(PYTHON) $(DEVCLUSTER) status
