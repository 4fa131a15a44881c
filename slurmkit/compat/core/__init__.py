"""``submitit.core``: its ``utils`` and ``core`` modules, as slurmkit's names."""

from slurmkit.compat.core import core, utils

__all__ = ["core", "utils"]
