#!/usr/bin/env bash
# Run a command inside a Debian root file system (made by scripts/releases/mkroot.sh),
# with this repository at the same path as on the host, so that every path the
# local clusters write (pid files, SLURM_CONF, sockets) means the same thing
# inside and outside.
#
#   devcluster/in-root.sh ROOT [OPTIONS] -- COMMAND [ARG...]
#
# ROOT may be / (this machine's own Slurm, in the same namespaces: with --net
# and --state, a second set of clusters of the host's release beside the first).
#
#   --net         a private network namespace with only its own loopback up: the
#                 root's clusters use the usual 127.0.k.x addresses and ports
#                 without meeting the host's clusters (and nothing else is reachable)
#   --state DIR   DIR is seen as REPO/.devcluster inside (the root's own clusters)
#   --venv DIR    DIR is seen as REPO/.venv inside (a venv of the root's Python)
#   --shared      also bind REPO/../shared, read-only (pyslurm sources)
#   --pip         also bind /opt/wheels and /opt/pypi* read-only where they exist
#                 (pip's local indexes on this machine, named by its configuration)
#
# Everything happens in a private mount namespace: nothing stays mounted on the
# host, so deleting a root can never follow a bind mount into the repository.
# The namespace lives as long as a process started in it (a daemon) does.
# With --net, processes still running in that network namespace when COMMAND
# ends were started by it (nothing else can enter it): they are stopped, so no
# daemon outlives a run unseen.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)

if [ "${1:-}" = "" ] || [ "${1:0:1}" = "-" ]; then
    echo "usage: $0 ROOT [--net] [--state DIR] [--venv DIR] [--shared] [--pip] -- COMMAND..." >&2
    exit 2
fi
root=$(cd "$1" && pwd)
shift
net=0 state="" venv="" shared=0 pip=0
while [ $# -gt 0 ]; do
    case "$1" in
        --net) net=1 ;;
        --state) state=$(mkdir -p "$2" && cd "$2" && pwd); shift ;;
        --venv) venv=$(mkdir -p "$2" && cd "$2" && pwd); shift ;;
        --shared) shared=1 ;;
        --pip) pip=1 ;;
        --) shift; break ;;
        *) echo "in-root: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
[ $# -gt 0 ] || { echo "in-root: no command" >&2; exit 2; }
[ -x "$root/bin/sh" ] || { echo "in-root: $root is not a root file system" >&2; exit 2; }

if [ -z "${IN_ROOT_NS:-}" ]; then
    # Stage 1 (host): a private mount namespace (and network namespace), then
    # this same script again inside it.
    ns=(--mount --propagation private)
    [ "$net" = 1 ] && ns+=(--net)
    opts=()
    [ "$net" = 1 ] && opts+=(--net)
    [ -n "$state" ] && opts+=(--state "$state")
    [ -n "$venv" ] && opts+=(--venv "$venv")
    [ "$shared" = 1 ] && opts+=(--shared)
    [ "$pip" = 1 ] && opts+=(--pip)
    IN_ROOT_NS=1 exec unshare "${ns[@]}" -- "$0" "$root" "${opts[@]}" -- "$@"
fi
unset IN_ROOT_NS

# Stage 2: inside the namespaces.
bind() {  # bind SRC DST [ro]
    mkdir -p "$2"
    mount --rbind "$1" "$2"
    if [ "${3:-}" = ro ]; then mount -o remount,bind,ro "$2"; fi
}
if [ "$root" != / ]; then
    # The root a mount point of its own: the mount table seen inside (paths
    # relative to the chroot) then has "/", as on a machine of that release.
    mount --bind "$root" "$root"
    bind /dev "$root/dev"
    bind /proc "$root/proc"
    bind /sys "$root/sys"
    bind "$repo" "$root$repo"
fi
[ -n "$state" ] && bind "$state" "$root$repo/.devcluster"
[ -n "$venv" ] && bind "$venv" "$root$repo/.venv"
if [ "$shared" = 1 ] && [ "$root" != / ] && [ -d "$repo/../shared" ]; then
    sh=$(cd "$repo/../shared" && pwd)
    bind "$sh" "$root$sh" ro
fi
if [ "$pip" = 1 ] && [ "$root" != / ]; then
    for d in /opt/wheels /opt/pypi*; do
        [ -d "$d" ] && bind "$d" "$root$d" ro
    done
fi
# Name resolution as on the host (pip, apt); the hosts file keeps this
# machine's hostname resolvable as it is here.
if [ "$root" != / ]; then
    cp -f /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
fi
mkdir -p "$root/run/sshd"
if [ "$net" = 1 ]; then
    ip link set lo up
    # glibc's AI_ADDRCONFIG (Slurm 24.11 asks for it) finds no IPv4 configured
    # where 127.0.0.1 is the only address: one more loopback address.
    ip addr add 127.0.0.2/32 dev lo
fi

cwd=/
case "$PWD/" in "$repo"/*) cwd=$PWD ;; esac
if [ "$root" != / ]; then
    # The root becomes this mount namespace's root (pivot_root), not a chroot: the kernel
    # refuses a user namespace to a chrooted process, and container runtimes (ch-run,
    # apptainer) make one, so a job in an image could not start under a chroot.  The host's
    # file systems are then detached from the namespace: only the binds above are seen.
    old=".in-root-old.$$"
    mkdir "$root/$old"
    cd "$root"
    pivot_root . "$old"
    cd /
    umount -l "/$old"
    rmdir "/$old"
    root=/
fi
# The host's cache locations mean nothing inside: a root keeps its own (pyslurm
# wheels built for its Slurm in its ~/.cache/slurmkit).
run=(env -u VIRTUAL_ENV -u PYTHONPATH -u PYTHONHOME -u SLURMKIT_CACHE_DIR -u PYSLURM_CACHE -u XDG_CACHE_HOME HOME=/root
     PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
     /bin/sh -c 'cd "$0" && exec "$@"' "$cwd" "$@")
if [ "$net" = 0 ]; then
    # Nothing to clean up afterwards: become the command (a daemon started
    # this way is then the process its caller waits for or watches).
    exec "${run[@]}"
fi
status=0
"${run[@]}" || status=$?
if [ "$net" = 1 ]; then
    # Stragglers of this run: every process in this network namespace but us.
    me=$(readlink /proc/$$/ns/net)
    for sig in TERM KILL; do
        left=()
        for p in /proc/[0-9]*; do
            pid=${p#/proc/}
            [ "$pid" = "$$" ] && continue
            [ "$(readlink "$p/ns/net" 2>/dev/null)" = "$me" ] && left+=("$pid")
        done
        [ ${#left[@]} -eq 0 ] && break
        echo "in-root: stopping ${#left[@]} process(es) left in the private network (SIG$sig): ${left[*]}" >&2
        kill -s "$sig" "${left[@]}" 2>/dev/null || true
        sleep 2
    done
fi
exit $status
