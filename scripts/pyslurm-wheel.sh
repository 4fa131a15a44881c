#!/usr/bin/env bash
# Install pyslurm into a virtual environment, built for the Slurm release installed here.
#
#   scripts/pyslurm-wheel.sh VENV_PYTHON [VENDOR_DIR [CACHE_DIR]]
#
# PyPI only carries pyslurm for Slurm 25.11, and pyslurm must match the Slurm
# MAJOR.MINOR it is built against (libslurm's RPC protocol changes with each
# release), so it is built from the upstream sources kept in VENDOR_DIR
# (default ../shared/vendor/pyslurm beside the repository): 22.05 ->
# pyslurm-22.5.*.tar.gz, 24.11 -> pyslurm-24.11.*.tar.gz.  A build takes
# minutes on two cores, so the wheel is cached in CACHE_DIR (default
# $PYSLURM_CACHE, else ~/.cache/slurmkit/pyslurm as `make pyslurm` passes it:
# kept for the whole machine, so a fresh clone reuses it), keyed by the
# exact Slurm version, the Python version and the source archive's checksum:
# with the wheel cached, a run only installs it (seconds), and with it already
# installed, a run only compares a stamp.
#
# Where no source matches the Slurm release (or no Slurm is installed), it says
# so and installs nothing: slurmkit then uses the Slurm commands.
set -euo pipefail

py=${1:?usage: $0 VENV_PYTHON [VENDOR_DIR [CACHE_DIR]]}
here=$(cd "$(dirname "$0")/.." && pwd)
vendor=${2:-$here/../shared/vendor/pyslurm}
cache=${3:-${PYSLURM_CACHE:-${SLURMKIT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/slurmkit}/pyslurm}}

say() { echo "pyslurm: $*"; }

# --- which Slurm is installed ---------------------------------------------------
# Debian's package database first: `scontrol --version` of Slurm 22.05 reads
# slurm.conf before printing anything and fails where there is none (as on a
# machine whose only clusters are the throwaway local ones).
slurm_version=""
if command -v dpkg-query >/dev/null 2>&1; then
    for pkg in slurm-client slurmctld slurmd slurm-wlm; do
        status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
        if [ "$status" = installed ]; then
            slurm_version=$(dpkg-query -W -f='${Version}' "$pkg")
            slurm_pkg=$pkg
            break
        fi
    done
fi
if [ -z "$slurm_version" ] && command -v scontrol >/dev/null 2>&1; then
    slurm_version=$(scontrol --version 2>/dev/null | awk '{print $2}' || true)
fi
if [ -z "$slurm_version" ]; then
    say "no Slurm installed here; nothing to build (slurmkit uses the Slurm commands)"
    exit 0
fi
# 22.05.8-4+deb12u3 -> 22 05 -> the archive prefix pyslurm-22.5.
read -r major minor < <(echo "$slurm_version" | sed -E 's/^([0-9]+)\.([0-9]+).*/\1 \2/')
prefix="pyslurm-$major.$((10#$minor))."
source=$(ls -1 "$vendor"/"$prefix"*.tar.gz 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$source" ]; then
    say "no pyslurm source for Slurm $major.$minor in $vendor (${prefix}*.tar.gz); nothing installed (slurmkit uses the Slurm commands)"
    exit 0
fi

# --- the cached wheel, or a build ------------------------------------------------
pyver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
sum=$(sha256sum "$source" | cut -c1-12)
key="slurm-${slurm_version}_py${pyver}_$(basename "$source" .tar.gz)-$sum"
dir="$cache/$key"
stamp="$("$py" -c 'import sys; print(sys.prefix)')/.pyslurm-wheel"

# Installed already: the stamp names the wheel installed, from whichever cache
# (a caller with another HOME, as the tests are, sees the same answer).
installed=$(cat "$stamp" 2>/dev/null || true)
if [ -n "$installed" ] && [ -f "$installed" ] && [ "$(basename "$(dirname "$installed")")" = "$key" ] \
        && "$py" -c 'import importlib.metadata as m; m.version("pyslurm")' 2>/dev/null; then
    say "$(basename "$installed") already installed (Slurm $slurm_version)"
    exit 0
fi
wheel=$(ls -1 "$dir"/pyslurm-*.whl 2>/dev/null | head -n 1 || true)

if [ -z "$wheel" ]; then
    mkdir -p "$cache"
    # Build dependencies: Slurm's headers and libslurm.so of the *same* release,
    # a C compiler, Python's headers.
    missing=()
    if [ -n "${slurm_pkg:-}" ]; then
        dev_status=$(dpkg-query -W -f='${db:Status-Status}' libslurm-dev 2>/dev/null || true)
        [ "$dev_status" = installed ] || missing+=("libslurm-dev")
    elif [ ! -f /usr/include/slurm/slurm.h ]; then
        say "Slurm's headers (slurm/slurm.h) are missing and this is not Debian: install them, then rerun" >&2
        exit 1
    fi
    command -v cc >/dev/null 2>&1 || missing+=("gcc")
    if ! "$py" -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
        missing+=("python3-dev")
    fi
    if [ ${#missing[@]} -gt 0 ]; then
        if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
            say "building needs ${missing[*]}; install them (as root), then rerun" >&2
            exit 1
        fi
        # libslurm-dev pinned to the installed Slurm's exact version, so the
        # headers are those of the libslurm the wheel will load.
        pinned=()
        for p in "${missing[@]}"; do
            if [ "$p" = libslurm-dev ]; then pinned+=("libslurm-dev=$slurm_version"); else pinned+=("$p"); fi
        done
        say "installing ${pinned[*]}"
        apt-get update -qq || true  # a stale extra source must not stop the install
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pinned[@]}" >/dev/null
    fi
    if [ -n "${slurm_pkg:-}" ]; then
        lib=$(dpkg -L libslurm-dev | grep -E '/libslurm\.so$' | head -n 1)
        libdir=$(dirname "$lib")
    else
        libdir=$(dirname "$(ls -1 /usr/lib*/libslurm.so /usr/lib/*/libslurm.so 2>/dev/null | head -n 1)")
    fi

    # Its own build environment, beside the cache: pyslurm 22.5 needs
    # Cython < 3, which slurmkit's own venv has no business carrying.
    buildenv="$cache/build-py$pyver-$major.$((10#$minor))"
    if [ "$major" -lt 23 ]; then
        build_reqs=("cython<3" wheel setuptools)
    else
        build_reqs=("cython>=0.29.37" wheel setuptools packaging)
    fi
    if [ ! -x "$buildenv/bin/python" ]; then
        "$py" -m venv "$buildenv.tmp" && mv "$buildenv.tmp" "$buildenv"
    fi
    "$buildenv/bin/python" -m pip install -q --disable-pip-version-check "${build_reqs[@]}"

    say "building $(basename "$source") for Slurm $slurm_version (a few minutes on two cores)"
    start=$(date +%s)
    tmp=$(mktemp -d "$cache/.build.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    # DIST_EXTRA_CONFIG: setuptools reads it as one more setup.cfg, here to
    # compile the extension modules on every core.
    printf '[build_ext]\nparallel = %s\n' "$(nproc)" > "$tmp/extra.cfg"
    SLURM_INCLUDE_DIR=/usr/include SLURM_LIB_DIR="$libdir" DIST_EXTRA_CONFIG="$tmp/extra.cfg" \
        "$buildenv/bin/python" -m pip wheel -q --disable-pip-version-check --no-build-isolation \
        --no-deps -w "$tmp/wheel" "$source"
    built=$(ls -1 "$tmp"/wheel/pyslurm-*.whl | head -n 1)
    mkdir -p "$dir"
    mv "$built" "$dir/"  # same file system: the wheel appears whole or not at all
    wheel="$dir/$(basename "$built")"
    say "built $(basename "$wheel") in $(( $(date +%s) - start )) s, cached in $dir"
fi

"$py" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall "$wheel"
echo "$wheel" > "$stamp"
say "installed $(basename "$wheel") (Slurm $slurm_version)"
