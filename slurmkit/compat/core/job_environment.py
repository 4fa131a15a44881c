"""``submitit.core.job_environment``: ``JobEnvironment``, :mod:`slurmkit.helpers`'s."""

from slurmkit.helpers import JobEnvironment

__all__ = ["JobEnvironment"]
