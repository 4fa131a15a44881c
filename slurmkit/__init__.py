"""slurmkit: topology-aware Slurm job submission, federation, requeue and health for GPU sites.

The folder listing is the architecture (docs/architecture.md): ``site/``
(site configs), ``slurm/`` (talking to Slurm), ``remote/`` (SSH),
``script/`` (the job script), ``session.py``, ``jobs.py``, ``federation/``,
``requeue/``, ``health/``, ``sweep/`` and ``cli/`` (the only user of
click); ``containers/``, ``energy/``, ``observe/`` and ``api/`` are the
rooms of the features being built next (each docstring says what goes
there).

One rule for imports, stated here once: every command is a fresh process, so
heavy or optional third-party modules (jinja2, yaml, paramiko, pyslurm,
psutil, pynvml, ClusterShell) are imported inside the functions that need
them, never at module level of a module on a command's common path.
"""

__version__ = "0.3.0"

# The Python API's names at the top (``from slurmkit import AutoExecutor``), imported when asked for.
_API = ("AutoExecutor", "SlurmExecutor", "Job", "JobEnvironment", "FailedJobError", "UncompletedJobError")


def __getattr__(name):
    if name in _API:
        from slurmkit import api

        return getattr(api, name)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
