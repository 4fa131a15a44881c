#!/bin/bash
# Rendered by slurmkit for site local, cluster alpha, partition cpu (template srun).
#SBATCH --job-name=python
#SBATCH --partition=cpu
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:10:00
#SBATCH --output=slurmkit-python-%j.out
#SBATCH --comment=slurmkit:0123456789abcdef

set -euo pipefail

# Collective library settings for the ethernet fabric of partition cpu.
export GLOO_SOCKET_IFNAME=lo

# The job's steps run in image bundle (oci, /srv/oci/debian); this
# script stays on the host.  Each task first checks that it really is in the image, in the host's
# network, and sees the job's directories at their paths.
[[ -e /srv/oci/debian ]] || { echo "slurmkit: error: image bundle is not on node $SLURMD_NODENAME at /srv/oci/debian: copy it there or fix the site's containers.images" >&2; exit 1; }
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

# The address Slurm reaches each node of the job by (NodeAddr; one scontrol call for them all):
# every node can reach those, while node names need not resolve.  A node without one: its name.
export SLURMKIT_NODE_ADDRS=
while read -r slurmkit_line; do
    if [[ $slurmkit_line =~ ^NodeName=([^[:space:]]+).*[[:space:]]NodeAddr=([^[:space:]]+) ]]; then
        SLURMKIT_NODE_ADDRS+="${BASH_REMATCH[1]}=${BASH_REMATCH[2]} "
    fi
done < <(scontrol show node -o "$SLURM_JOB_NODELIST" 2>/dev/null)
slurmkit_node_addr() {
    local pair
    for pair in $SLURMKIT_NODE_ADDRS; do
        if [[ ${pair%%=*} == "$1" ]]; then echo "${pair#*=}"; return; fi
    done
    echo "slurmkit: warning: no NodeAddr of node $1 from scontrol; using its name" >&2
    echo "$1"
}
export -f slurmkit_node_addr
# Rendezvous on the first node, where this script runs.
MASTER_ADDR=$(slurmkit_node_addr "$SLURMD_NODENAME")
export MASTER_ADDR

# A port of the job's own, from its id within the site's range 20000-29999: two jobs whose
# first node is the same machine get different ports.  Skipped while some program listens there.
slurmkit_ports=10000
for ((slurmkit_try = 0; slurmkit_try < slurmkit_ports; slurmkit_try++)); do
    MASTER_PORT=$((20000 + (SLURM_JOB_ID + slurmkit_try) % slurmkit_ports))
    (exec 3<>"/dev/tcp/$MASTER_ADDR/$MASTER_PORT") 2>/dev/null || break
done
export MASTER_PORT

# 1 task(s) per node; a PyTorch program reads its rank from SLURM_PROCID.
srun --kill-on-bad-exit=1 --container=/srv/oci/debian -- bash -c "$slurmkit_in_image" slurmkit-in-image bundle "$slurmkit_host_root" "$slurmkit_host_net" "$PWD" -- /opt/slurmkit-image/venv/bin/python -c 'print(1)'
# end of slurmkit job script
