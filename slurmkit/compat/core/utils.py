"""``submitit.core.utils``: the errors a job's ``result()`` raises, ``DelayedSubmission``, ``CommandFunction``,
``JobPaths``."""

from slurmkit.api.job import JobPaths
from slurmkit.errors import FailedJobError, UncompletedJobError
from slurmkit.helpers import CommandFunction, DelayedSubmission

__all__ = ["FailedJobError", "UncompletedJobError", "DelayedSubmission", "CommandFunction", "JobPaths"]
