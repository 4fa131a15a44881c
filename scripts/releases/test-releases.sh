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
# RELEASES_PARALLEL=1: the releases' suites run at the same time (each root's
# clusters live in a network namespace of their own), then the mixed federation.
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

# The suite of one release inside its root: prints its summary line, writes it
# to $dir/summary and exits non-zero if it failed.  T_ROOT and T_VENV: the
# seconds its root and venv took, for the line.
run_suite() {
    local rel=$1 dir log status=0 t2 t3 line
    dir=$(release_dir "$rel"); log="$dir/test.log"
    t2=$(now)
    # Unit and integration tests as two pytest runs: the two folders share
    # module basenames (test_backend.py ...), which one run cannot import both of.
    # The container tests' image, handed in: the root's private network cannot make it, so the
    # host's (`make image`, kept for the machine) is linked where the root's clusters keep images
    # (its state directory is the repository's .devcluster inside).  SLURMKIT_TEST_RELEASE_ROOT: the
    # suite runs in a release's root, where tests/integration/conftest.py takes this copy as it is.
    hand_in_image "$dir/devcluster/images"
    in_release "$rel" env SLURMKIT_TEST_RELEASE_ROOT="$rel" bash -c '
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
    [ "$status" = 0 ] || grep -E '^(FAILED|ERROR) ' "$log" | head -n 30 | sed "s/^/$rel: /"
    echo "$rel ($(cat "$(release_root "$rel")/.slurm-version" 2>/dev/null || echo host)): ${line:-no pytest summary (see $log)}  [root ${T_ROOT:-?} s, venv ${T_VENV:-?} s, suite $(( t3 - t2 )) s]" \
        | tee "$dir/summary"
    return "$status"
}

# The host's container image (scripts/images/mkimage.sh's default place) as hard links in DIR, made
# anew each time (a second, no space): no job of a root can change the machine's copy, whose root is
# mounted read-only.  Where the host has none, nothing: the container tests skip, saying so.
RELEASES_IMAGE=${RELEASES_IMAGE:-$SLURMKIT_CACHE_DIR/images/debian-12}
hand_in_image() {
    local to=$1/$(basename "$RELEASES_IMAGE")
    rm -rf "$to"
    [ -f "$RELEASES_IMAGE/.bundle-done" ] || return 0
    mkdir -p "$1"
    cp -al "$RELEASES_IMAGE" "$to" 2>/dev/null || { rm -rf "$to"; cp -a "$RELEASES_IMAGE" "$to"; }
}

# 1. Roots and venvs, one release after the other (pip and apt use this machine's network).
suites=()
for rel in "${releases[@]}"; do
    [ "$rel" != mixed ] || continue
    t0=$(now)
    dir=$(release_dir "$rel") || { failed=1; summary+=("$rel: unknown release"); continue; }
    mkdir -p "$dir"
    rm -f "$dir/summary"
    echo "== Slurm $rel"
    if ! ensure_root "$rel"; then
        failed=1; summary+=("$rel: root could not be made"); continue
    fi
    t1=$(now)
    if ! ensure_venv "$rel"; then
        failed=1; summary+=("$rel: venv/pyslurm could not be installed"); continue
    fi
    echo "$(( t1 - t0 )) $(( $(now) - t1 ))" > "$dir/prepared"
    suites+=("$rel")
done

# 2. The suites.  RELEASES_PARALLEL=1: all at once, each root's clusters in
# their own network namespace (nothing of one is seen by another); most of a
# suite's time is waiting on Slurm, not CPU.  Otherwise one after the other.
pids=()
for rel in "${suites[@]}"; do
    dir=$(release_dir "$rel")
    read -r T_ROOT T_VENV < "$dir/prepared"
    export T_ROOT T_VENV
    if [ "${RELEASES_PARALLEL:-0}" = 1 ]; then
        echo "== Slurm $rel: suite started"
        run_suite "$rel" & pids+=($!)
    else
        echo "== Slurm $rel: suite"
        run_suite "$rel" || failed=1
    fi
done
for pid in "${pids[@]}"; do
    wait "$pid" || failed=1
done
for rel in "${suites[@]}"; do
    dir=$(release_dir "$rel")
    summary+=("$(cat "$dir/summary" 2>/dev/null || echo "$rel: no summary (see $dir/test.log)")")
done

# 3. The mixed-release federation, once the releases' own clusters are down.
for rel in "${releases[@]}"; do
    [ "$rel" = mixed ] || continue
    t0=$(now)
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
done
echo "== Slurm releases"
printf '%s\n' "${summary[@]}"
exit $failed
