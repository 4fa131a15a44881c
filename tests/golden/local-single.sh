#!/bin/bash
# Rendered by slurmkit for site local, cluster alpha, partition cpu (template single).
#SBATCH --job-name=train
#SBATCH --partition=cpu
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:05:00
#SBATCH --output=slurmkit-train-%j.out
#SBATCH --comment=slurmkit:0123456789abcdef

set -euo pipefail

# Collective library settings for the ethernet fabric of partition cpu.
export GLOO_SOCKET_IFNAME=lo

exec -- /home/me/venvs/torch/bin/python train.py
# end of slurmkit job script
