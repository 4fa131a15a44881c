#!/usr/bin/env bash
# The test suite against other Slurm releases, each in its own Debian root:
#
#   scripts/releases/test-releases.sh [RELEASE...|mixed]   (default: 24.11 26.05 mixed)
#
# For each release: the root is made or reused (scripts/releases/mkroot.sh; kept
# for the whole machine in $RELEASES_ROOTS, see lib.sh, so a fresh clone reuses
# it and the pyslurm wheel built in it), the repository installed into a venv of
# the root's Python (`make venv compile pyslurm`: pyslurm where a source
# matches), then, inside the root and a private
# network of its own, what `make test` does: the local clusters of that release,
# the whole suite (unit and integration), the clusters stopped.  The host's
# clusters are not touched.  PyTorch is not installed in the roots (this
# machine's local wheel is for its own Python only): the training tests skip.
#
# "mixed": the mixed-release federation (scripts/releases/mixed.sh) and
# tests/integration/test_mixed_releases.py, run from this machine.
#
# Each release's pytest summary line is printed, with the time each step took;
# logs in $RELEASES_DIR/<suite>/test.log.  Exit status: non-zero if any failed.
# RELEASES_PYTEST_ARGS: extra pytest arguments for the releases' runs.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
releases=("$@")
[ ${#releases[@]} -gt 0 ] || releases=(24.11 26.05 mixed)
summary=()
failed=0
now() { date +%s; }

last_summary() {  # the pytest summary line of a log
    grep -E '^(=+ )?[0-9]+ (passed|failed|error)|^(=+ )?no tests ran' "$1" | tail -n 1 | sed -E 's/^=+ //; s/ =+$//'
}

for rel in "${releases[@]}"; do
    t0=$(now)
    if [ "$rel" = mixed ]; then
        log="$RELEASES_DIR/mixed-test.log"
        mkdir -p "$RELEASES_DIR"
        echo "== mixed-release federation (alpha $(host_release), beta 24.11, gamma 26.05)"
        status=0
        {
            bash "$repo/scripts/releases/mixed.sh" up \
                && DEVCLUSTER_STATE="$repo/.devcluster/mixed" "$repo/.venv/bin/python" -m pytest -q \
                    -p no:cacheprovider "$repo/tests/integration/test_mixed_releases.py" ${RELEASES_PYTEST_ARGS:-}
        } > "$log" 2>&1 || status=$?
        bash "$repo/scripts/releases/mixed.sh" down >> "$log" 2>&1 || true
        line=$(last_summary "$log")
        [ "$status" = 0 ] || { failed=1; tail -n 40 "$log"; }
        summary+=("mixed: ${line:-no pytest summary (see $log)}  [$(( $(now) - t0 )) s]")
        echo "${summary[-1]}"
        continue
    fi
    dir=$(release_dir "$rel") || { failed=1; summary+=("$rel: unknown release"); continue; }
    mkdir -p "$dir"
    log="$dir/test.log"
    echo "== Slurm $rel"
    if ! ensure_root "$rel"; then
        failed=1; summary+=("$rel: root could not be made"); continue
    fi
    t1=$(now)
    if ! ensure_venv "$rel"; then
        failed=1; summary+=("$rel: venv/pyslurm could not be installed"); continue
    fi
    t2=$(now)
    status=0
    # Unit and integration tests as two pytest runs: the two folders share
    # module basenames (test_backend.py ...), which one run cannot import both of.
    in_release "$rel" bash -c '
        make --no-print-directory cluster-up || exit 1
        status=0
        for part in unit integration; do
            # --durations: where the time goes, in the log
            .venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 tests/$part '"${RELEASES_PYTEST_ARGS:-}"' || status=1
            echo "== end of tests/$part"
        done
        make --no-print-directory cluster-down >/dev/null || true
        exit $status' > "$log" 2>&1 || status=$?
    t3=$(now)
    line="unit: $(sed -n '1,/^== end of tests\/unit/p' "$log" > "$log.unit"; last_summary "$log.unit"); integration: $(sed -n '/^== end of tests\/unit/,$p' "$log" > "$log.int"; last_summary "$log.int")"
    rm -f "$log.unit" "$log.int"
    [ "$status" = 0 ] || { failed=1; grep -E '^(FAILED|ERROR) ' "$log" | head -n 30; }
    summary+=("$rel ($(cat "$(release_root "$rel")/.slurm-version" 2>/dev/null || echo host)): ${line:-no pytest summary (see $log)}  [root $(( t1 - t0 )) s, venv $(( t2 - t1 )) s, suite $(( t3 - t2 )) s]")
    echo "${summary[-1]}"
done
echo "== Slurm releases"
printf '%s\n' "${summary[@]}"
exit $failed
