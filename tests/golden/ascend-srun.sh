#!/bin/bash
# Rendered by slurmkit for site example-ascend, cluster ascend, partition npu (template srun).
#SBATCH --job-name=train
#SBATCH --partition=npu
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gres=npu:ascend910b:8
#SBATCH --time=04:00:00
#SBATCH --switches=1@00:10:00
#SBATCH --output=slurmkit-train-%j.out
#SBATCH --comment=slurmkit:0123456789abcdef

set -euo pipefail

# Environment modules named by the site.
module load cann/8.0.RC2

# Site setup lines.
source /usr/local/Ascend/ascend-toolkit/set_env.sh
source /opt/venvs/torch-npu/bin/activate

# Collective library settings for the roce fabric of partition npu.
export HCCL_SOCKET_IFNAME=enp189s0f0
export HCCL_RDMA_TC=132
export HCCL_RDMA_SL=4
export GLOO_SOCKET_IFNAME=enp189s0f0
export HCCL_CONNECT_TIMEOUT=1200
export HCCL_EXEC_TIMEOUT=1800
export HCCL_BUFFSIZE=200

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

# 8 task(s) per node; a PyTorch program reads its rank from SLURM_PROCID.
srun --kill-on-bad-exit=1 -- python train.py --lr 3e-4
# end of slurmkit job script
