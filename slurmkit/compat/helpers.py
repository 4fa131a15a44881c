"""``submitit.helpers``: :class:`Checkpointable` and :class:`DelayedSubmission`, slurmkit's own
(:mod:`slurmkit.helpers`)."""

from slurmkit.helpers import Checkpointable, DelayedSubmission

__all__ = ["Checkpointable", "DelayedSubmission"]
