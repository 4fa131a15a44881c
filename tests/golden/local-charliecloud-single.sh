#!/bin/bash
# Rendered by slurmkit for site local, cluster alpha, partition cpu (template single).
#SBATCH --job-name=python
#SBATCH --partition=cpu
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:10:00
#SBATCH --output=slurmkit-python-%j.out
#SBATCH --comment=slurmkit:0123456789abcdef

set -euo pipefail

# Collective library settings for the ethernet fabric of partition cpu.
export GLOO_SOCKET_IFNAME=lo

# The job's steps run in image debian-12 (charliecloud, REPO/.devcluster/images/debian-12/rootfs); this
# script stays on the host.  Each task first checks that it really is in the image, in the host's
# network, and sees the job's directories at their paths.
export USER="${USER:-$(id -un)}"
[[ -e REPO/.devcluster/images/debian-12/rootfs ]] || { echo "slurmkit: error: image debian-12 is not on node $SLURMD_NODENAME at REPO/.devcluster/images/debian-12/rootfs: copy it there or fix the site's containers.images" >&2; exit 1; }
for slurmkit_t in "$PWD"; do [[ ! -d REPO/.devcluster/images/debian-12/rootfs || -d REPO/.devcluster/images/debian-12/rootfs$slurmkit_t || $slurmkit_t == /tmp/* ]] || { echo "slurmkit: error: image debian-12 on node $SLURMD_NODENAME has no directory $slurmkit_t to mount onto, and its runtime cannot make one in the image: mount at a directory the image has (--mount SOURCE:/mnt) or add $slurmkit_t to the image" >&2; exit 1; }; done
command -v ch-run >/dev/null || { echo "slurmkit: error: runtime charliecloud needs ch-run, which is not on node $SLURMD_NODENAME (PATH=$PATH)" >&2; exit 1; }
# What the in-image check compares with: the host's root mount and network namespace.
slurmkit_host_root=
while read -r slurmkit_a _ _ _ slurmkit_m _; do [[ $slurmkit_m == / ]] && slurmkit_host_root=$slurmkit_a; done </proc/self/mountinfo
slurmkit_host_net=$(readlink /proc/self/ns/net 2>/dev/null || true)
slurmkit_in_image='i=$1 h=$2 n=$3 w=$4; shift 3
where=${SLURMD_NODENAME:-${HOSTNAME:-this node}}
r=
if [[ -r /proc/self/mountinfo ]]; then
    while read -r a b c d m e; do [[ $m == / ]] && r=$a; done </proc/self/mountinfo
fi
if [[ -n $h && $r == "$h" ]]; then
    echo "slurmkit: error: the task on $where runs on the host, not in image $i: the runtime did not start it" \
        "(runtime oci: the node needs an oci.conf beside its slurm.conf)" >&2
    exit 1
fi
if [[ -n $n && -e /proc/self/ns/net ]] && command -v readlink >/dev/null && [[ $(readlink /proc/self/ns/net) != "$n" ]]; then
    echo "slurmkit: error: image $i runs in a network namespace of its own on $where, where the other nodes of the job" \
        "cannot reach it: run it in the network of the host (an OCI bundle: remove the network namespace from its" \
        "config.json)" >&2
    exit 1
fi
if [[ ${SLURM_STEP_NUM_TASKS:-1} != 1 && -z ${SLURM_PROCID:-} ]]; then
    echo "slurmkit: error: the runtime started the task in image $i without its own Slurm variables (SLURM_PROCID," \
        "SLURM_NODEID, SLURMD_NODENAME), so the $SLURM_STEP_NUM_TASKS tasks of the step cannot tell each other apart" \
        "(Slurm 22.05'"'"'s --container passes only those of srun): run one task, or a runtime that wraps the task" \
        "(charliecloud, pyxis, apptainer)" >&2
    exit 1
fi
while (($#)) && [[ $1 != -- ]]; do
    [[ -d $1 ]] || { echo "slurmkit: error: $1 is not in image $i on $where: mount it (--mount $1) or add it to the image" >&2; exit 1; }
    shift
done
shift
cd -- "$w" || exit 1
exec "$@"
'

# One task, in the image: started by srun, which the runtime needs.
exec srun --nodes=1 --ntasks=1 --kill-on-bad-exit=1 -- ch-run --bind="$PWD":"$PWD" --cd="$PWD" REPO/.devcluster/images/debian-12/rootfs -- bash -c "$slurmkit_in_image" slurmkit-in-image debian-12 "$slurmkit_host_root" "$slurmkit_host_net" "$PWD" -- /opt/slurmkit-image/venv/bin/python -c 'print(1)'
# end of slurmkit job script
