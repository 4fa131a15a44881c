#!/bin/bash
# Rendered by slurmkit for site example-infiniband, cluster hopper, partition gpu (template torchrun).
#SBATCH --job-name=train
#SBATCH --partition=gpu
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=h100:8
#SBATCH --time=04:00:00
#SBATCH --switches=2@00:30:00
#SBATCH --account=ml-research
#SBATCH --qos=normal
#SBATCH --output=slurmkit-train-%j.out
#SBATCH --comment=slurmkit:0123456789abcdef

set -euo pipefail

# Environment modules named by the site.
module load cuda/12.4
module load nccl/2.21.5
module load hpcx/2.19

# Site setup lines.
source /opt/venvs/torch-2.4/bin/activate
export HF_HOME=/scratch/$USER/hf

# Collective library settings for the infiniband fabric of partition gpu.
export NCCL_IB_HCA==mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1
export NCCL_SOCKET_IFNAME==ib0
export GLOO_SOCKET_IFNAME=ib0
export NCCL_IB_TIMEOUT=22
export NCCL_IB_RETRY_CNT=10
export NCCL_NET_GDR_LEVEL=PHB

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

# A port of the job's own, from its id within the site's range 29500-29999: two jobs whose
# first node is the same machine get different ports.  Skipped while some program listens there.
slurmkit_ports=500
for ((slurmkit_try = 0; slurmkit_try < slurmkit_ports; slurmkit_try++)); do
    MASTER_PORT=$((29500 + (SLURM_JOB_ID + slurmkit_try) % slurmkit_ports))
    (exec 3<>"/dev/tcp/$MASTER_ADDR/$MASTER_PORT") 2>/dev/null || break
done
export MASTER_PORT

# torchrun as a module of the Python the command names, so the launcher and its workers run in
# that environment, not in whatever torchrun is first on PATH.  Checked here first: a Python
# without PyTorch is one line in the output, not a traceback from every node.  The check finds
# torch's files without importing it: an import of torch costs seconds (2.5 s on a busy two-core
# node, far more from a cold network filesystem), on every attempt's way to its first step, and
# the launcher imports it right after anyway.
slurmkit_python=python
if ! slurmkit_error=$("$slurmkit_python" -c 'import os, re
from importlib.util import find_spec
spec = find_spec("torch")
top = list(spec.submodule_search_locations or [""])[0] if spec else ""
if not os.path.isfile(os.path.join(top, "distributed", "run.py")):
    raise ModuleNotFoundError("No module named %r" % ("torch.distributed.run" if spec else "torch"))
' 2>&1); then
    printf 'slurmkit: error: %s cannot run torch.distributed.run (%s); install PyTorch into that environment\n' \
        "$slurmkit_python" "${slurmkit_error##*$'\n'}" >&2
    exit 1
fi
slurmkit_launcher=("$slurmkit_python" -m torch.distributed.run)
slurmkit_endpoint="$MASTER_ADDR:$MASTER_PORT"
[[ $MASTER_ADDR != *:* ]] || slurmkit_endpoint="[$MASTER_ADDR]:$MASTER_PORT"  # an IPv6 address

# On every node (under srun): torchrun with the node's NodeAddr as its own address, which is where
# the workers find rank 0, and with the first node, and only that one, hosting the rendezvous
# store.  Said explicitly rather than guessed from addresses: if another program holds the port,
# this job fails at once instead of joining a stranger's store.
slurmkit_node_launcher() {
    PET_LOCAL_ADDR=$(slurmkit_node_addr "$SLURMD_NODENAME")
    export PET_LOCAL_ADDR PET_RDZV_CONF="is_host=$((SLURM_NODEID == 0))${PET_RDZV_CONF:+,$PET_RDZV_CONF}"
    exec "$@"
}
export -f slurmkit_node_launcher
# One launcher per node; each starts 8 worker(s).
srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --kill-on-bad-exit=1 \
    bash -c 'slurmkit_node_launcher "$@"' torchrun \
    "${slurmkit_launcher[@]}" --nnodes="$SLURM_JOB_NUM_NODES" --nproc-per-node=8 \
    --rdzv-backend=c10d --rdzv-endpoint="$slurmkit_endpoint" --rdzv-id="$SLURM_JOB_ID" \
    train.py --lr 3e-4
# end of slurmkit job script
