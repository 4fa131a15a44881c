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
#SBATCH --output=slurmkit-%x-%j.out
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
export NCCL_IB_TIMEOUT=22
export NCCL_IB_RETRY_CNT=10
export NCCL_NET_GDR_LEVEL=PHB

# One launcher per node; torchrun starts 8 worker(s) on each.
head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_ADDR="$head_node"
export MASTER_PORT=29500
srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --kill-on-bad-exit=1 \
    torchrun --nnodes="$SLURM_JOB_NUM_NODES" --nproc-per-node=8 \
    --rdzv-backend=c10d --rdzv-endpoint="$head_node:$MASTER_PORT" --rdzv-id="$SLURM_JOB_ID" \
    train.py --lr 3e-4
# end of slurmkit job script
