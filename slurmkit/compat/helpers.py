"""``submitit.helpers``: :class:`Checkpointable`, :class:`DelayedSubmission`, :class:`FunctionSequence`,
:class:`CommandFunction`, :func:`as_completed` and ``JobEnvironment``, slurmkit's own (:mod:`slurmkit.helpers`)."""

from slurmkit.helpers import (Checkpointable, CommandFunction, DelayedSubmission, FunctionSequence, JobEnvironment,
                              as_completed)

__all__ = ["Checkpointable", "DelayedSubmission", "FunctionSequence", "CommandFunction", "as_completed",
           "JobEnvironment"]
