"""``submitit.core.utils``: the errors a job's ``result()`` raises, ``DelayedSubmission``, ``JobPaths``."""

from slurmkit.api.job import JobPaths
from slurmkit.errors import FailedJobError, UncompletedJobError
from slurmkit.helpers import DelayedSubmission

__all__ = ["FailedJobError", "UncompletedJobError", "DelayedSubmission", "JobPaths"]
