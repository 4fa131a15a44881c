#!/usr/bin/env bash
# Make (or reuse) the container image the container tests run jobs in, without a registry:
# a Debian 12 root (scripts/releases/mkroot.sh, MKROOT_PROFILE=image) with a Python
# environment at /opt/slurmkit-image/venv, a path that exists only in the image, so a job
# can prove it ran there, holding what IMAGE_PIP names (`make image` passes the Makefile's
# TORCH_SPEC, PyTorch's CPU build: pip takes it from this machine's wheels, bound in by
# devcluster/in-root.sh --pip).  Kept for the whole machine, like the release roots:
#
#   scripts/images/mkimage.sh [DIR]     default $SLURMKIT_CACHE_DIR/images/debian-12
#
# DIR is an OCI bundle (Slurm's --container): DIR/rootfs the image (also a Charliecloud image
# directory), DIR/config.json from `runc spec` in the host's network, UTS and user namespaces
# (a private network cuts a multi-node rendezvous), the root read-only, with the host's /tmp
# bound in (where the tests' jobs work); DIR/image.sqfs the root as a SquashFS file, without the venv's
# packages (where mksquashfs is).  A root made from other packages, or left half-made, is made again (the
# stamps).  Prints DIR.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cache=${SLURMKIT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/slurmkit}
dir=${1:-$cache/images/debian-12}
root="$dir/rootfs"
venv=/opt/slurmkit-image/venv
pip_spec=${IMAGE_PIP:-}
stamp="venv=$venv pip=$pip_spec v=2"
bundle_stamp="$stamp bundle=2"
mkdir -p "$dir"
(
    # One maker at a time (two clones may test at once).
    flock 9
    MKROOT_PROFILE=image bash "$here/scripts/releases/mkroot.sh" bookworm "$root" >&2
    if [ "$(cat "$root/.image-done" 2>/dev/null)" != "$stamp" ]; then
        rm -rf "$root$venv" "$root/.image-done"
        chroot "$root" python3 -m venv "$venv"
        if [ -n "$pip_spec" ]; then
            # shellcheck disable=SC2086  # the spec is a list of requirements
            "$here/devcluster/in-root.sh" "$root" --pip -- "$venv/bin/pip" install -q --disable-pip-version-check \
                --no-cache-dir $pip_spec 2>&1 | { grep -v '^WARNING: Location' >&2 || true; }
        fi
        case " $pip_spec " in
            *" torch"*) chroot "$root" "$venv/bin/python" -W ignore -c \
                'import torch, torch.distributed as d; assert d.is_gloo_available(), "torch without gloo"' ;;
        esac
        echo "$stamp" > "$root/.image-done"
    fi
    # The mount points in-root.sh made for its binds (the clone's path, pip's local indexes) are
    # no part of the image: a job that found the clone's path there passed only where the image
    # was made from a clone at that path (CI's clone is elsewhere).  Empty directories only, up to
    # the image's root; also run on a reused image made before this step existed.
    for made in "$here" /opt/wheels /opt/pypi*; do
        d=$made
        while [ "$d" != / ] && [ -d "$root$d" ] && rmdir "$root$d" 2>/dev/null; do d=$(dirname "$d"); done
    done
    if [ ! -f "$dir/config.json" ] || [ "$(cat "$dir/.bundle-done" 2>/dev/null)" != "$bundle_stamp" ]; then
        rm -f "$dir/config.json" "$dir/.bundle-done"
        (cd "$dir" && runc spec)
        python3 - "$dir/config.json" <<'PY'
import json, sys
path = sys.argv[1]
config = json.load(open(path))
config["process"]["terminal"] = False
config["root"] = {"path": "rootfs", "readonly": True}
config.pop("hostname", None)
keep = [ns for ns in config["linux"]["namespaces"] if ns["type"] not in ("network", "uts", "user")]
config["linux"]["namespaces"] = keep
config["mounts"].append({"destination": "/tmp", "type": "bind", "source": "/tmp", "options": ["rbind", "rw"]})
json.dump(config, open(path, "w"), indent=1)
PY
        echo "$bundle_stamp" > "$dir/.bundle-done"
    fi
    # The same root as a SquashFS file (Charliecloud's other image form), without the venv's packages
    # (PyTorch: 20 times the size; the SquashFS tests print the image's Python and release only).
    sqfs_stamp="$stamp sqfs=1"
    if [ "$(cat "$dir/.sqfs-done" 2>/dev/null)" != "$sqfs_stamp" ] && command -v mksquashfs >/dev/null; then
        rm -f "$dir/image.sqfs" "$dir/.sqfs-done"
        mksquashfs "$root" "$dir/image.sqfs.tmp" -e "${venv#/}/lib" -comp gzip -noappend -quiet -no-progress >&2
        mv "$dir/image.sqfs.tmp" "$dir/image.sqfs"
        echo "$sqfs_stamp" > "$dir/.sqfs-done"
    fi
) 9>"$dir.lock"
echo "$dir"
