"""The Python API: submitit's executors and jobs on slurmkit's clusters.

``AutoExecutor``/``SlurmExecutor`` (:mod:`slurmkit.api.executor`) and ``Job``
(:mod:`slurmkit.api.job`) with submitit's names and semantics, plus ``cluster=`` (a name,
``"auto"``), ``comm=``, ``image=`` and global job ids; the call and its outcome carried with
cloudpickle as text over the connection a cluster already has (:mod:`slurmkit.api.payload`:
no shared filesystem assumed); the parameters translated by :mod:`slurmkit.api.params`.

The rule: the API and the CLI are two faces of one library.  The API calls the same
functions the commands call (``jobs``, ``federation``, the session's files); it never
imports click or ``slurmkit.cli``, and nothing in slurmkit imports it except the
package's own top-level names (tests/unit/test_architecture.py).  Imported only when used:
``import slurmkit`` stays cheap for every command.
"""

__all__ = ["AutoExecutor", "SlurmExecutor", "Job", "JobEnvironment", "FailedJobError", "UncompletedJobError"]


def __getattr__(name):
    if name in ("AutoExecutor", "SlurmExecutor"):
        from slurmkit.api import executor

        return getattr(executor, name)
    if name == "Job":
        from slurmkit.api.job import Job

        return Job
    if name == "JobEnvironment":
        from slurmkit.helpers import JobEnvironment

        return JobEnvironment
    if name in ("FailedJobError", "UncompletedJobError"):
        from slurmkit import errors

        return getattr(errors, name)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
