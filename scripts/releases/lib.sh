# Shared by scripts/releases/*.sh (sourced): which Debian root holds which Slurm release.
#
# A release is MAJOR.MINOR.  host: this machine's own Slurm (root /).  The
# others live in Debian roots, one per suite, kept for the whole machine in
# $RELEASES_ROOTS (default $SLURMKIT_CACHE_DIR/releases, SLURMKIT_CACHE_DIR default
# ${XDG_CACHE_HOME:-~/.cache}/slurmkit): a fresh clone reuses them (making one
# costs 80-90 s and 0.8-1 GB), and one made from other packages is made again
# (mkroot.sh's stamp).  Each clone keeps its own per-root state under
# $RELEASES_DIR (default .cache/releases, ignored by git, kept by `make clean`):
#   RELEASES_ROOTS/<suite>/root/   the file system (scripts/releases/mkroot.sh), with the
#                                  pyslurm wheels built for it in its own ~/.cache/slurmkit
#                                  (devcluster/in-root.sh: HOME=/root, the host's cache
#                                  variables unset; the wheel's key holds the root's exact
#                                  Slurm and Python versions)
#   RELEASES_DIR/<suite>/venv/        the repository's .venv inside that root (Python of the root)
#   RELEASES_DIR/<suite>/devcluster/  the repository's .devcluster inside that root (its clusters' state)

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
RELEASES_DIR=${RELEASES_DIR:-$repo/.cache/releases}
SLURMKIT_CACHE_DIR=${SLURMKIT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/slurmkit}
RELEASES_ROOTS=${RELEASES_ROOTS:-$SLURMKIT_CACHE_DIR/releases}
in_root="$repo/devcluster/in-root.sh"

# The host's Slurm release, MAJOR.MINOR (Debian's package database: Slurm 22.05's
# commands read slurm.conf before --version).
host_release() {
    local v
    v=$(dpkg-query -W -f='${Version}' slurm-client 2>/dev/null || true)
    [ -n "$v" ] || v=$(sinfo --version 2>/dev/null | awk '{print $2}' || true)
    echo "$v" | sed -E 's/^([0-9]+\.[0-9]+).*/\1/'
}

# release -> Debian suite of its root ("" for the host's own release).
release_suite() {
    case "$1" in
        "$(host_release)") echo "" ;;
        24.11) echo trixie ;;
        26.05) echo sid ;;
        *) echo "releases: no Debian suite known for Slurm $1 (known: 24.11 trixie, 26.05 sid, $(host_release) host)" >&2
           return 1 ;;
    esac
}

release_dir() {  # the directory of a release's root, venv and state
    local suite
    suite=$(release_suite "$1") || return 1
    if [ -z "$suite" ]; then echo "$RELEASES_DIR/host"; else echo "$RELEASES_DIR/$suite"; fi
}

release_root() {
    local suite
    suite=$(release_suite "$1") || return 1
    if [ -z "$suite" ]; then echo /; else echo "$RELEASES_ROOTS/$suite/root"; fi
}

# Make the release's root if needed and check that it holds the release asked for
# (Debian unstable moves on: a root of another release must not pass under this name).
ensure_root() {
    local rel=$1 suite root got
    suite=$(release_suite "$rel") || return 1
    [ -n "$suite" ] || return 0
    root=$(release_root "$rel")
    mkdir -p "$(dirname "$root")"
    # One maker at a time per root (two clones of the repository may test at once).
    flock "$root.lock" bash "$repo/scripts/releases/mkroot.sh" "$suite" "$root" || return 1
    got=$(sed -E 's/^([0-9]+\.[0-9]+).*/\1/' "$root/.slurm-version")
    if [ "$got" != "$rel" ]; then
        echo "releases: the $suite root has Slurm $(cat "$root/.slurm-version"), not $rel" >&2
        return 1
    fi
}

# The venv inside the release's root: the repository installed as `make venv` does,
# pyslurm where a source matches (`make pyslurm`).  Runs with this machine's network
# (pip), before the clusters' private network exists.
ensure_venv() {
    local rel=$1 dir root
    dir=$(release_dir "$rel"); root=$(release_root "$rel")
    [ "$root" != / ] || return 0       # the host's own .venv
    mkdir -p "$dir/venv"
    "$in_root" "$root" --venv "$dir/venv" --pip --shared -- \
        make --no-print-directory -s venv compile pyslurm
}

# COMMAND inside the release's root, with its clusters' own state, venv and a
# private network (the usual 127.0.k.x addresses, unseen by the host's clusters).
in_release() {
    local rel=$1 dir root
    shift
    dir=$(release_dir "$rel"); root=$(release_root "$rel")
    mkdir -p "$dir/devcluster"
    if [ "$root" = / ]; then
        "$in_root" / --net --state "$dir/devcluster" -- "$@"
    else
        "$in_root" "$root" --net --state "$dir/devcluster" --venv "$dir/venv" --shared -- "$@"
    fi
}
