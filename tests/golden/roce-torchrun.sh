#!/bin/bash
# Rendered by slurmkit for site example-roce, cluster ampere, partition a100 (template torchrun).
#SBATCH --job-name=train
#SBATCH --partition=a100
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=a100:8
#SBATCH --time=02:00:00
#SBATCH --switches=2@00:15:00
#SBATCH --output=slurmkit-%x-%j.out
#SBATCH --comment=slurmkit:0123456789abcdef

set -euo pipefail

# Environment modules named by the site.
module load cuda/12.2
module load nccl/2.19.3

# Collective library settings for the roce fabric of partition a100.
export NCCL_IB_HCA==mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1
export NCCL_SOCKET_IFNAME='^docker0,lo'
export NCCL_IB_GID_INDEX=3
export NCCL_IB_TC=106
export NCCL_IB_SL=0
export NCCL_IB_QPS_PER_CONNECTION=4

# Variables given with --env.
export WANDB_PROJECT='llm run #7'

# One launcher per node; torchrun starts 8 worker(s) on each.
head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_ADDR="$head_node"
export MASTER_PORT=29500
srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --kill-on-bad-exit=1 \
    torchrun --nnodes="$SLURM_JOB_NUM_NODES" --nproc-per-node=8 \
    --rdzv-backend=c10d --rdzv-endpoint="$head_node:$MASTER_PORT" --rdzv-id="$SLURM_JOB_ID" \
    train.py --lr 3e-4
# end of slurmkit job script
