#!/bin/bash
# Rendered by slurmkit for site example-ascend, cluster ascend, partition npu (template srun).
#SBATCH --job-name=train
#SBATCH --partition=npu
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gres=npu:ascend910b:8
#SBATCH --time=04:00:00
#SBATCH --switches=1@00:10:00
#SBATCH --output=slurmkit-%x-%j.out
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
export HCCL_CONNECT_TIMEOUT=1200
export HCCL_EXEC_TIMEOUT=1800
export HCCL_BUFFSIZE=200

srun --kill-on-bad-exit=1 python train.py --lr 3e-4
# end of slurmkit job script
