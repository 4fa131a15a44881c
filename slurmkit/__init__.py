"""slurmkit: topology-aware Slurm job submission for GPU sites.

Folder map: ``site/`` (site config schema, loading, model), ``render.py`` and
``fabric.py`` (sbatch scripts and collective-library settings),
``topology.py`` (leaf switches), ``slurm/`` (the Slurm interface: argv
builders, parsers, runners, backends), ``remote/`` (SSH, the only paramiko
user), ``jobs.py`` (submit/status/cancel), ``cli/`` (click, the only click
user).  Imports here stay light: ``slurmkit render`` must not pay for SSH.
"""

__version__ = "0.2.0"
