#!/usr/bin/env bash
# A federation of three Slurm releases on this machine, beside the host's own clusters:
#
#   scripts/releases/mixed.sh up|down|status|env
#
# alpha runs this machine's Slurm (22.05 on Debian 12), beta Slurm 24.11 from the
# trixie root and gamma Slurm 26.05 from the sid root: each daemon, each Slurm
# command devcluster runs and each login node's sshd (so every command a
# client runs there over SSH) come from that cluster's own root, with the
# repository at the same path.  All of them share this machine's network, on
# their own address block (DEVCLUSTER_NET_OFFSET=20: 127.0.21.x, 127.0.22.x,
# 127.0.23.x, ports 191xx-193xx), and their own state directory
# (.devcluster/mixed), so the default clusters keep running.
#
# slurmkit reaches them with the site .devcluster/mixed/site.yaml (alpha
# locally, beta and gamma only through their login nodes):
#   .venv/bin/python -m slurmkit --site .devcluster/mixed/site.yaml clusters
set -euo pipefail
. "$(dirname "$0")/lib.sh"

MIXED_STATE=${MIXED_STATE:-$repo/.devcluster/mixed}
export DEVCLUSTER_STATE=$MIXED_STATE
action=${1:-up}
case "$action" in
    up)
        ensure_root 24.11
        ensure_root 26.05
        export DEVCLUSTER_NET_OFFSET=${DEVCLUSTER_NET_OFFSET:-20}
        export DEVCLUSTER_ROOTS="beta=$(release_root 24.11),gamma=$(release_root 26.05)"
        python3 "$repo/devcluster/devcluster.py" up
        echo "mixed: site $MIXED_STATE/site.yaml; DEVCLUSTER_STATE=$MIXED_STATE for devcluster.py and the tests"
        ;;
    down|status)
        # layout.json (written by up) says where each cluster runs.
        [ -f "$MIXED_STATE/layout.json" ] || { echo "mixed: nothing there ($MIXED_STATE)"; exit 0; }
        python3 "$repo/devcluster/devcluster.py" "$action"
        ;;
    env)
        echo "export DEVCLUSTER_STATE=$MIXED_STATE"
        ;;
    *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac
