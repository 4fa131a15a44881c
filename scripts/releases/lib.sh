# Shared by scripts/releases/*.sh (sourced): which Debian root holds which Slurm release.
#
# A release is MAJOR.MINOR.  host: this machine's own Slurm (root /).  The
# others live in Debian roots under $RELEASES_DIR (default .cache/releases,
# ignored by git and kept by `make clean`), one directory per suite:
#   root/        the file system (scripts/releases/mkroot.sh)
#   venv/        the repository's .venv inside that root (Python of the root)
#   devcluster/  the repository's .devcluster inside that root (its clusters' state)

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
RELEASES_DIR=${RELEASES_DIR:-$repo/.cache/releases}
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
    if [ -z "$suite" ]; then echo /; else echo "$RELEASES_DIR/$suite/root"; fi
}

# Make the release's root if needed and check that it holds the release asked for
# (Debian unstable moves on: a root of another release must not pass under this name).
ensure_root() {
    local rel=$1 suite root got
    suite=$(release_suite "$rel") || return 1
    [ -n "$suite" ] || return 0
    root=$(release_root "$rel")
    bash "$repo/scripts/releases/mkroot.sh" "$suite" "$root" || return 1
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
