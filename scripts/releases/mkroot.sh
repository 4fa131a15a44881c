#!/usr/bin/env bash
# Make (or reuse) a Debian root file system with one Slurm release in it, for
# `make test-releases` and `make cluster-up RELEASES=mixed`.
#
#   scripts/releases/mkroot.sh SUITE DIR
#
# SUITE is a Debian suite (trixie: Slurm 24.11; sid: the newest, 26.05 when
# this was written); DIR the root (created; reused when its stamp matches).
# MKROOT_PROFILE=image makes a root without Slurm, for a container image.
# The Debian mirror is the one this machine's apt uses (read from its
# sources; MIRROR=URL overrides): nothing here names a host.  Packages: what
# devcluster and the test suite need (Slurm, slurmdbd, MariaDB, munge,
# OpenSSH, Python with venv, make, the container runtimes ch-run and runc,
# Apptainer where the suite has it) and, where a pyslurm source exists for the
# release, what building it needs (a C compiler, Python's and Slurm's headers).
#
# Inside the root, pip reaches what pip reaches here: this machine's extra CA
# certificates and pip's configuration files are copied in (the local wheel
# directories are bind-mounted by devcluster/in-root.sh --pip).
set -euo pipefail

suite=${1:?usage: $0 SUITE DIR}
dir=${2:?usage: $0 SUITE DIR}
here=$(cd "$(dirname "$0")/../.." && pwd)
in_root="$here/devcluster/in-root.sh"
say() { echo "mkroot[$suite]: $*"; }

packages=(slurm-wlm slurmdbd mariadb-server munge openssh-server openssh-client iproute2
          util-linux mawk procps python3 python3-venv make ca-certificates charliecloud-runtime runc squashfs-tools)
# Installed where the suite has them, skipped where it does not: Apptainer (in sid, not in
# trixie or bookworm), for the container tests' real Apptainer runs.
optional=(apptainer)
# pyslurm is built where a source for the release exists (24.11: trixie).
case "$suite" in
    trixie) packages+=(gcc libc6-dev python3-dev libslurm-dev) ;;
esac
# MKROOT_PROFILE=image: a root to run jobs in as a container image (scripts/images/mkimage.sh):
# no Slurm, only what a job's task needs (bash, coreutils, Python with venv).
profile=${MKROOT_PROFILE:-release}
[ "$profile" = image ] && packages=(python3 python3-venv ca-certificates procps) && optional=()
apt_opts=()
if [ "$suite" = sid ] || [ "$suite" = unstable ]; then
    # unstable's Release file on the mirror may be past its Valid-Until date:
    # accepted for this root only.
    apt_opts+=(-o Acquire::Check-Valid-Until=false)
fi
stamp_text="suite=$suite packages=${packages[*]} optional=${optional[*]} v=2"
[ "$profile" = release ] || stamp_text="$stamp_text profile=$profile"

if [ -f "$dir/.mkroot-done" ] && [ "$(cat "$dir/.mkroot-done")" = "$stamp_text" ]; then
    say "reusing $dir$([ -f "$dir/.slurm-version" ] && echo " (Slurm $(cat "$dir/.slurm-version"))")"
    exit 0
fi
[ "$(id -u)" = 0 ] || { say "must run as root (debootstrap, chroot)" >&2; exit 1; }

# --- the mirror this machine's apt uses -------------------------------------------
mirror=${MIRROR:-}
if [ -z "$mirror" ]; then
    # deb822 sources first (Types/URIs/Suites stanzas), then one-line ones; the
    # first "deb" source that is not a security or updates suite.
    mirror=$(python3 - <<'PY'
import glob, re
found = []
for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    for stanza in re.split(r"\n\s*\n", open(path).read()):
        f = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line:
                continue
            k, _, v = line.partition(":")
            f[k.strip().lower()] = v.split()
        if "deb" in f.get("types", []) and f.get("enabled", ["yes"])[0] != "no":
            suites = f.get("suites", [])
            if any(not s.endswith(("-security", "-updates", "-backports")) for s in suites):
                found += f.get("uris", [])
for path in ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list")):
    try:
        lines = open(path).read().splitlines()
    except OSError:
        continue
    for line in lines:
        parts = re.sub(r"\[[^]]*\]", "", line).split()
        if len(parts) >= 3 and parts[0] == "deb" and not parts[2].endswith(("-security", "-updates", "-backports")):
            found.append(parts[1])
debian = [u for u in found if "debian" in u and "security" not in u]
print((debian or found or [""])[0])
PY
)
fi
[ -n "$mirror" ] || { say "no Debian mirror found in /etc/apt/sources*; set MIRROR=URL" >&2; exit 1; }
command -v debootstrap >/dev/null || {
    say "installing debootstrap"
    apt-get update -qq || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
}

start=$(date +%s)
if [ ! -f "$dir/.debootstrap-done" ]; then
    rm -rf "$dir"
    mkdir -p "$(dirname "$dir")"
    say "debootstrap --variant=minbase $suite from $mirror"
    debootstrap --variant=minbase --components=main "$suite" "$dir.tmp" "$mirror" > "$dir.debootstrap.log" 2>&1 \
        || { tail -n 30 "$dir.debootstrap.log" >&2; say "debootstrap failed (log: $dir.debootstrap.log)" >&2; exit 1; }
    mv "$dir.tmp" "$dir"
    touch "$dir/.debootstrap-done"
    say "debootstrap done in $(( $(date +%s) - start )) s"
fi

# --- configuration copied from this machine ----------------------------------------
cat > "$dir/etc/apt/sources.list" <<SRC
deb $mirror $suite main
SRC
if [ ${#apt_opts[@]} -gt 0 ]; then
    echo 'Acquire::Check-Valid-Until "false";' > "$dir/etc/apt/apt.conf.d/99devcluster-valid-until"
fi
# Packages must not start their system-wide services (mariadb, munge, slurm*):
# devcluster runs private instances.
printf '#!/bin/sh\nexit 101\n' > "$dir/usr/sbin/policy-rc.d"
chmod 755 "$dir/usr/sbin/policy-rc.d"
cp -f /etc/hosts "$dir/etc/hosts"
mkdir -p "$dir/usr/local/share/ca-certificates"
if [ -d /usr/local/share/ca-certificates ]; then
    cp -rf /usr/local/share/ca-certificates/. "$dir/usr/local/share/ca-certificates/"
fi
[ -f /etc/pip.conf ] && cp -f /etc/pip.conf "$dir/etc/pip.conf"
if [ -d /etc/xdg/pip ]; then
    mkdir -p "$dir/etc/xdg/pip" && cp -rf /etc/xdg/pip/. "$dir/etc/xdg/pip/"
fi

# --- packages ------------------------------------------------------------------------
t=$(date +%s)
say "apt-get install ${packages[*]}"
"$in_root" "$dir" -- env DEBIAN_FRONTEND=noninteractive sh -c '
    apt-get "$@" update -qq && apt-get "$@" install -y -qq --no-install-recommends '"${packages[*]}"' >/tmp/apt-install.log 2>&1 \
        || { tail -n 30 /tmp/apt-install.log; exit 1; }
    for p in '"${optional[*]}"'; do
        if apt-cache policy "$p" 2>/dev/null | grep -q "Candidate: [^(]"; then
            apt-get "$@" install -y -qq --no-install-recommends "$p" >>/tmp/apt-install.log 2>&1 \
                || { tail -n 30 /tmp/apt-install.log; exit 1; }
        fi
    done
    update-ca-certificates >/dev/null
    apt-get clean' sh "${apt_opts[@]}"
say "packages installed in $(( $(date +%s) - t )) s"
if [ "$profile" = image ]; then
    echo "$stamp_text" > "$dir/.mkroot-done"
    say "image root ready: $dir, $(du -sm "$dir" | cut -f1) MB, $(( $(date +%s) - start )) s"
    exit 0
fi

# --- slurmdbd and the MariaDB client library --------------------------------------------
# MariaDB Connector/C 3.4.10 (libmariadb3 of MariaDB 11.8.9, in trixie and sid
# at the time of writing) refuses slurmdbd's first query ("select @var :=
# concat('')": "5027 Number of columns in result (=1) set execeeds maxmimum
# allowed number of columns (=0)"), and slurmdbd 24.11 and 26.05 exit at start.
# Where the root's library has that check, bookworm's libmariadb3 (3.3, same
# soname and ABI) is unpacked beside it and given to slurmdbd alone, through
# /etc/devcluster/slurmdbd.env, which devcluster reads; Slurm, MariaDB's server
# and every other program stay the release's own.
rm -f "$dir/etc/devcluster/slurmdbd.env"
lib=$(ls "$dir"/usr/lib/*/libmariadb.so.3 2>/dev/null | head -n 1 || true)
if [ -n "$lib" ] && grep -aq "maxmimum allowed number of columns" "$lib"; then
    compat=/opt/devcluster/libmariadb-bookworm
    if [ ! -f "$dir$compat/.done" ]; then
        say "the root's libmariadb refuses slurmdbd's queries: unpacking bookworm's libmariadb3 into $compat"
        "$in_root" "$dir" -- sh -c '
            set -e
            lists=/tmp/bookworm-lists; rm -rf "$lists" /tmp/bookworm-debs; mkdir -p "$lists/partial" /tmp/bookworm-debs
            echo "deb $1 bookworm main" > /tmp/bookworm.list
            o="-o Dir::Etc::SourceList=/tmp/bookworm.list -o Dir::Etc::SourceParts=/nonexistent -o Dir::State::Lists=$lists"
            apt-get $o update -qq
            cd /tmp/bookworm-debs && apt-get $o download libmariadb3/bookworm >/dev/null
            rm -rf "$2" && mkdir -p "$2" && dpkg-deb -x libmariadb3_*.deb "$2"
            rm -rf "$lists" /tmp/bookworm-debs /tmp/bookworm.list
            touch "$2/.done"' sh "$mirror" "$compat"
    fi
    libdir=$(dirname "$(ls "$dir$compat"/usr/lib/*/libmariadb.so.3 | head -n 1)")
    mkdir -p "$dir/etc/devcluster"
    printf '# written by scripts/releases/mkroot.sh: see there\nLD_LIBRARY_PATH=%s\n' "${libdir#$dir}" \
        > "$dir/etc/devcluster/slurmdbd.env"
fi
ver=$(chroot "$dir" dpkg-query -W -f='${Version}' slurm-client)
echo "$ver" > "$dir/.slurm-version"
echo "$stamp_text" > "$dir/.mkroot-done"
say "root ready: $dir, Slurm $ver, $(du -sm "$dir" | cut -f1) MB, $(( $(date +%s) - start )) s"
