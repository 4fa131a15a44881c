"""``submitit.core.core``: ``Job`` and ``Executor``, slurmkit.api's."""

from slurmkit.api.executor import Executor
from slurmkit.api.job import Job

__all__ = ["Job", "Executor"]
