"""Node health: sources (psutil, NVML, sysfs), pure checks, and the Slurm
side (drain, resume, sweep) with ownership of what slurmkit drained."""
