"""``submitit.core``: its ``utils``, ``core`` and ``job_environment`` modules, as slurmkit's names."""

from slurmkit.compat.core import core, job_environment, utils

__all__ = ["core", "job_environment", "utils"]
