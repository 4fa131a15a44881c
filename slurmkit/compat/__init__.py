"""slurmkit as ``submitit``, for scripts that cannot be edited.

``import slurmkit.compat as submitit`` gives submitit's names laid out as submitit lays them
out: ``AutoExecutor``, ``SlurmExecutor``, ``Executor``, ``Job`` (and ``SlurmJob``),
``JobEnvironment``, ``helpers`` (``Checkpointable``, ``DelayedSubmission``), ``core.utils``
(``FailedJobError``, ``UncompletedJobError``, ``DelayedSubmission``, ``JobPaths``), ``core.core``
(``Job``, ``Executor``) and ``core.job_environment`` (``JobEnvironment``).  A script that says
``import submitit`` and cannot be changed runs as::

    python -m slurmkit.compat script.py ARGS...      # or: python -m slurmkit.compat -m pkg.module ARGS...

which makes ``submitit`` (and its submodules) resolve to this package, then runs the script
as ``__main__`` (see :mod:`slurmkit.compat.__main__`); :func:`install` does the same from
inside a process (a notebook's first cell, a ``sitecustomize``).

Thin on purpose: every name is slurmkit.api's own (or :mod:`slurmkit.helpers`'s), so there
is one implementation, and nothing here but the names and the aliasing.  The site comes from
``$SLURMKIT_SITE`` as for any executor without ``site=``.
"""

import sys

from slurmkit.api import AutoExecutor, Job, SlurmExecutor
from slurmkit.api.executor import Executor
from slurmkit.compat import core, helpers
from slurmkit.errors import FailedJobError, UncompletedJobError
from slurmkit.helpers import JobEnvironment

# submitit's name for the Job a SlurmExecutor returns: slurmkit has one Job for every cluster.
SlurmJob = Job

__all__ = ["AutoExecutor", "SlurmExecutor", "Executor", "Job", "SlurmJob", "JobEnvironment", "helpers", "core",
           "FailedJobError", "UncompletedJobError", "install"]

# The modules a submitit script may import by name, and ours that answer for them.
MODULES = ("", ".helpers", ".core", ".core.utils", ".core.core", ".core.job_environment")


def install(name: str = "submitit") -> None:
    """Make ``import submitit`` (and ``submitit.helpers``, ``submitit.core.utils``, ...) give this
    package in this process.  A real submitit already imported is refused rather than mixed
    with this one: its jobs and these would be two kinds of object under one name."""
    from slurmkit.errors import UsageError

    here = sys.modules[__name__]
    present = sys.modules.get(name)
    if present is not None and present is not here:
        raise UsageError("%s is already imported here (%s): install slurmkit.compat before anything imports it "
                         "(python -m slurmkit.compat script.py runs the script so)"
                         % (name, getattr(present, "__file__", present)))
    for suffix in MODULES:
        sys.modules[name + suffix] = sys.modules[__name__ + suffix]
