"""Test doubles for code that talks to Slurm: :class:`FakeSlurm`, :class:`FakeArraySlurm` and :class:`FakeClock`.

Importable from any test suite, slurmkit's own and its users': nothing here
imports pytest, runs a real Slurm command, opens a connection or sleeps.

:class:`FakeSlurm` is a real :class:`~slurmkit.slurm.backend.CommandBackend`
whose :class:`~slurmkit.slurm.runner.Runner` is fake.  Every command the
backend builds is answered with text in the shapes Slurm 22.05 prints
(``squeue --json``, ``sacct --parsable2``, ``scontrol show node``/``config``,
``sbatch --parsable``, the error lines), so the real parsers run on every
answer.  The shapes are copied from recordings made on the dev clusters
(``tests/unit/data/slurm``); slurmkit's own tests check that the two agree.
Behind the answers is a small job and node table that the test drives::

    slurm = FakeSlurm("alpha", nodes=["an1", "an2"], accounting=True)
    job = slurm.submit(script)                  # "1000", then "1001", ...
    slurm.set_state(job, "RUNNING")             # on an1, started now
    slurm.finish(job, "FAILED", exit_code=3)
    slurm.forget(job)                           # squeue no longer knows it; sacct does
    slurm.fail_next("submit", ConnectTimeoutError("lost").outcome_unknown())
    slurm.calls                                 # [Call("submit", (script,)), ...]
    slurm.commands                              # every argv run: the RPC count (.timeouts: their timeouts)

``fail_next(method, error)`` makes the next call of that method raise
``error``; an error marked ``outcome_unknown()`` is raised *after* the call
took effect (the job exists, its answer was lost), which is exactly the case
retries must survive.  ``answer(argv_prefix, ...)`` overrides what a command
prints, e.g. to replay a recording verbatim (:func:`load_recording`).

:class:`FakeClock` has ``monotonic()``, ``time()`` and ``sleep()``; sleeping
only advances virtual time (and runs what was scheduled with ``call_at``).

:class:`FakeArraySlurm` adds what Slurm does with ``sbatch --array`` and the
commands sweeps use (:mod:`slurmkit.testing.arrays`).

:func:`fake_site` and :func:`fake_session` build a small site of clusters
served by FakeSlurm backends.

The rooms: ``clock.py`` (FakeClock), ``fakeslurm.py`` (FakeSlurm, its job and
node tables, the recorded shapes), ``arrays.py`` (FakeArraySlurm), ``sites.py``
(fake_site, fake_session).  Import from this package: its names are the API.
"""

from slurmkit.testing.clock import FakeClock
from slurmkit.testing.fakeslurm import (SQUEUE_JOB_2205, Call, FakeJob, FakeNode, FakeSlurm, load_recording,
                                        option_value, slurm_timestamp)
from slurmkit.testing.arrays import FakeArray, FakeArraySlurm, FakeTask, tasks_by_index
from slurmkit.testing.sites import fake_session, fake_site

__all__ = ["Call", "FakeArray", "FakeArraySlurm", "FakeClock", "FakeJob", "FakeNode", "FakeSlurm", "FakeTask",
           "SQUEUE_JOB_2205", "fake_session", "fake_site", "load_recording", "option_value", "slurm_timestamp",
           "tasks_by_index"]
