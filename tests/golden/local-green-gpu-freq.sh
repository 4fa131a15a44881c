#!/bin/bash
# Rendered by slurmkit for site local, cluster alpha, partition gpu (template single).
#SBATCH --job-name=eval
#SBATCH --partition=gpu
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=h100:2
#SBATCH --time=00:30:00
#SBATCH --gpu-freq=medium,memory=high
#SBATCH --output=slurmkit-eval-%j.out
#SBATCH --comment=slurmkit:0123456789abcdef

set -euo pipefail

# Collective library settings for the ethernet fabric of partition gpu.
export NCCL_IB_DISABLE=1
export NCCL_SOCKET_IFNAME=lo
export GLOO_SOCKET_IFNAME=lo

exec -- /home/me/venvs/torch/bin/python eval.py
# end of slurmkit job script
