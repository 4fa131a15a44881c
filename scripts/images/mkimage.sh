#!/usr/bin/env bash
# Make (or reuse) the container image the container tests run jobs in, without a registry:
# a Debian 12 root (scripts/releases/mkroot.sh, MKROOT_PROFILE=image) with a Python
# environment at /opt/slurmkit-image/venv, a path that exists only in the image, so a job
# can prove it ran there.  Kept for the whole machine, like the release roots:
#
#   scripts/images/mkimage.sh [DIR]     default $SLURMKIT_CACHE_DIR/images/debian-12
#
# DIR/root is the image (a Charliecloud image directory; an OCI bundle's rootfs).  A root
# made from other packages, or left half-made, is made again (the stamps).  Prints DIR/root.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cache=${SLURMKIT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/slurmkit}
dir=${1:-$cache/images/debian-12}
root="$dir/root"
venv=/opt/slurmkit-image/venv
stamp="venv=$venv v=1"
mkdir -p "$dir"
(
    # One maker at a time (two clones may test at once).
    flock 9
    MKROOT_PROFILE=image bash "$here/scripts/releases/mkroot.sh" bookworm "$root" >&2
    if [ "$(cat "$root/.image-done" 2>/dev/null)" != "$stamp" ]; then
        rm -rf "$root$venv"
        chroot "$root" python3 -m venv "$venv"
        echo "$stamp" > "$root/.image-done"
    fi
) 9>"$dir.lock"
echo "$root"
