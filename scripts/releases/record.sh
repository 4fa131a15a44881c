#!/usr/bin/env bash
# Record the unit-test data of one or more Slurm releases from their real daemons:
#
#   scripts/releases/record.sh [RELEASE...]      (default: 24.11 26.05)
#
# Each release's clusters run in its root's private network (see lib.sh), so
# the host's clusters, and whoever is using them, are not touched.  Recorders:
# tests/unit/data/slurm/record.py (CLUSTER-WHAT-RELEASE.json),
# tests/unit/data/exit_codes/record.py (exit_codes/RELEASE/) and
# tests/unit/data/releases/record.py (releases/RELEASE/).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
releases=("$@")
[ ${#releases[@]} -gt 0 ] || releases=(24.11 26.05)
for rel in "${releases[@]}"; do
    ensure_root "$rel"
    ensure_venv "$rel"
    echo "== recording Slurm $rel"
    # The host's release: its slurm/ and exit_codes/ recordings exist already,
    # and tests pin what those particular recordings show; only releases/ is added.
    all=1
    [ "$(release_root "$rel")" != / ] || all=0
    in_release "$rel" bash -c '
        set -e
        trap "python3 devcluster/devcluster.py down >/dev/null" EXIT
        python3 devcluster/devcluster.py up >/dev/null
        .venv/bin/python tests/unit/data/releases/record.py
        [ "$1" = 1 ] || exit 0
        .venv/bin/python tests/unit/data/slurm/record.py alpha beta
        SLURM_CONF=$PWD/.devcluster/alpha/etc/slurm.conf .venv/bin/python tests/unit/data/exit_codes/record.py \
            "tests/unit/data/exit_codes/$2"' sh "$all" "$rel"
done
