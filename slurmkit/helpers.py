"""submitit's checkpointing helpers: :class:`DelayedSubmission` and :class:`Checkpointable`.

A callable whose class has a ``checkpoint(self, *args, **kwargs)`` method (or
``__submitit_checkpoint__``) is asked, on Slurm's USR1 before its time limit or on
preemption, for the call to run instead when the job restarts: a :class:`DelayedSubmission`.
:class:`Checkpointable`'s own ``checkpoint`` returns the same callable with the same
arguments, so a callable that keeps its progress in its attributes resumes from it
(docs/researcher/python-api.md, "Checkpointing").

Standard library only, and no slurmkit import: these classes run *on the nodes*, where
slurmkit need not be installed.  :func:`slurmkit.api.payload.dump_calls` has cloudpickle
carry this module by value, so a subclass of :class:`Checkpointable` unpickles where only
cloudpickle is, and the task's bootstrap knows a submission by its three attributes
(``function``, ``args``, ``kwargs``), not by its class.

:class:`JobEnvironment` is submitit's, read inside a running call: the job's ids, the task's
ranks, its nodes, and the call's files (:class:`JobPaths`, which the bootstrap hands over in
``$SLURMKIT_JOB``).
"""

import json
import os
import socket
from pathlib import Path
from typing import List, NamedTuple, Optional

# The bootstrap's account of the call a task runs (JSON: the site's cluster, the job's folder on the
# cluster, the call, this task's outcome, Slurm's log, the checkpoint), for JobEnvironment.paths.
JOB_ENV = "SLURMKIT_JOB"


class DelayedSubmission:
    """A call not made yet: ``function(*args, **kwargs)``, as submitit names it.  What a
    ``checkpoint`` method returns; ``result()`` makes the call once (submitit's
    ``FunctionSequence`` style of keeping finished calls' values across a restart)."""

    def __init__(self, function, *args, **kwargs):
        if not callable(function):
            raise TypeError("DelayedSubmission: %r is not callable" % (function,))
        self.function = function
        self.args = args
        self.kwargs = kwargs
        self._done = False
        self._result = None

    def result(self):
        """The call's value, made now unless it was made before (then kept, pickles and all)."""
        if not self._done:
            self._result = self.function(*self.args, **self.kwargs)
            self._done = True
        return self._result

    def done(self) -> bool:
        return self._done

    def __repr__(self):
        return "DelayedSubmission(%s, %d args, %d kwargs)" % (
            getattr(self.function, "__name__", type(self.function).__name__), len(self.args), len(self.kwargs))


class Checkpointable:
    """A callable class whose state is its progress: on USR1 (before the time limit, or on
    preemption) its ``checkpoint`` resubmits itself, as it is at that moment, with the
    arguments of the call; the restarted job calls it again.  ``__call__`` is the caller's
    to write, and reads its attributes to know where it stopped.  Override ``checkpoint``
    to keep less (save a model to a file and drop it from the state, change arguments);
    return None from it to not be restarted."""

    def __new__(cls, *args, **kwargs):
        instance = super().__new__(cls)
        if not callable(instance):
            raise TypeError("%s is Checkpointable but has no __call__ method: give it one (the call the job "
                            "runs)" % cls.__name__)
        return instance

    def checkpoint(self, *args, **kwargs) -> DelayedSubmission:
        """The same callable (with its state now) and the same arguments."""
        return DelayedSubmission(self, *args, **kwargs)


class FunctionSequence(Checkpointable):
    """submitit's: several calls gathered into one checkpointable call, which returns their values in
    order.  Each call is a :class:`DelayedSubmission` that keeps its value once made, so a restart
    after a checkpoint makes only the calls not made yet."""

    def __init__(self, verbose: bool = False) -> None:
        self.verbose = verbose
        self.delayed_functions: List[DelayedSubmission] = []

    def add(self, func, *args, **kwargs) -> None:
        self.delayed_functions.append(DelayedSubmission(func, *args, **kwargs))

    def __len__(self) -> int:
        return len(self.delayed_functions)

    def __iter__(self):
        return iter(self.delayed_functions)

    def __call__(self) -> list:
        if self.verbose:
            done = sum(f.done() for f in self)
            print("Starting from %d/%d" % (done, len(self.delayed_functions)), flush=True)
        return [f.result() for f in self.delayed_functions]


class CommandFunction:
    """submitit's: a command as a function, whose value is what the command wrote on stdout (stripped).
    Arguments of the call are appended, keyword arguments as ``--key=value``; ``command`` is a list (no
    shell).  A failing command raises RuntimeError with its stderr, from the ``subprocess.CalledProcessError``
    (submitit raises its FailedJobError, which is slurmkit's and not importable here: this runs on nodes
    without slurmkit); submitted, the job's result() raises FailedJobError as for any call that raised."""

    def __init__(self, command, verbose: bool = True, cwd=None, env=None) -> None:
        if not isinstance(command, list):
            raise TypeError("The command must be provided as a list")
        self.command = command
        self.verbose = verbose
        self.cwd = None if cwd is None else str(cwd)
        self.env = env

    def __call__(self, *args, **kwargs) -> str:
        import subprocess
        import sys

        full = self.command + [str(x) for x in args] + ["--%s=%s" % (k, v) for k, v in kwargs.items()]
        if self.verbose:
            print('The following command is sent: "%s"' % " ".join(full), flush=True)
        done = subprocess.run(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=self.cwd, env=self.env,
                              universal_newlines=True)
        stdout, stderr = done.stdout.strip(), done.stderr.strip()
        if self.verbose:
            if stdout:
                print(stdout, flush=True)
            if stderr:
                print(stderr, file=sys.stderr, flush=True)
        if done.returncode:
            if stderr and not self.verbose:
                print(stderr, file=sys.stderr, flush=True)
            raise RuntimeError(stderr) from subprocess.CalledProcessError(done.returncode, full, stdout, stderr)
        return stdout


def as_completed(jobs, timeout: Optional[float] = None, poll_frequency: float = 10):
    """submitit's: the jobs as they end (done(): finished, failed or cancelled), asking each unfinished one
    every ``poll_frequency`` seconds (slurmkit asks Slurm once per cluster for all of them); TimeoutError
    after ``timeout`` seconds."""
    import time

    start = time.time()
    ended = set()
    while True:
        if timeout is not None and time.time() - start > timeout:
            raise TimeoutError
        for i, job in enumerate(jobs):
            if i not in ended and job.done():
                ended.add(i)
                yield job
        if len(ended) == len(jobs):
            break
        time.sleep(poll_frequency)


class JobPaths(NamedTuple):
    """Where a job's files are: ``folder`` here (its record), the rest on the cluster.  Inside the
    call (:attr:`JobEnvironment.paths`) ``folder`` is the job's folder on the cluster, and
    ``result_pickle`` the outcome of the task that asks."""

    folder: Path
    cluster_folder: str
    submitted_pickle: str        # the call
    result_pickle: str           # task 0's outcome (the asking task's, inside the call)
    stdout: str                  # Slurm's log of the job (stdout and stderr together)
    stderr: str


class JobEnvironment:
    """submitit's ``JobEnvironment``: what a call asks of the job it runs in.  Built inside a Slurm
    job (``JobEnvironment()`` elsewhere raises RuntimeError, as submitit's does); every value is
    read from Slurm's environment when asked, with submitit's names and defaults:

    ``job_id`` (``ARRAY_TASK`` for an array task, as submitit writes it; ``global_job_id`` is
    slurmkit's ``CLUSTER:ID``), ``raw_job_id``, ``array_job_id`` and ``array_task_id`` (None
    outside an array), ``global_rank``, ``local_rank``, ``node``, ``num_tasks``, ``num_nodes``,
    ``hostname``, ``hostnames`` (the job's nodes, expanded), ``paths`` (:class:`JobPaths`: the
    call's files on the cluster), ``cluster`` (``"slurm"``, submitit's name of the environment;
    ``cluster_name`` is the site's name of the cluster)."""

    _env = {"job_id": "SLURM_JOB_ID", "num_tasks": "SLURM_NTASKS", "num_nodes": "SLURM_JOB_NUM_NODES",
            "node": "SLURM_NODEID", "nodes": "SLURM_JOB_NODELIST", "global_rank": "SLURM_PROCID",
            "local_rank": "SLURM_LOCALID", "array_job_id": "SLURM_ARRAY_JOB_ID",
            "array_task_id": "SLURM_ARRAY_TASK_ID"}
    # The signal a checkpointable call is sent before its time limit or on preemption (submitit: USR2).
    USR_SIG = "USR1"

    def __init__(self) -> None:
        if not self.activated():
            raise RuntimeError("JobEnvironment() describes the Slurm job it is built in, and this process runs in "
                               "none (no SLURM_JOB_ID): build it inside the submitted call")
        self.cluster = self.name()

    @classmethod
    def name(cls) -> str:
        return "slurm"

    def activated(self) -> bool:
        return self._env["job_id"] in os.environ

    @property
    def _call(self) -> dict:
        try:
            found = json.loads(os.environ.get(JOB_ENV, ""))
        except ValueError:
            return {}
        return found if isinstance(found, dict) else {}

    @property
    def hostname(self) -> str:
        return os.environ.get("SLURMD_NODENAME") or socket.gethostname()

    @property
    def hostnames(self) -> List[str]:
        nodes = os.environ.get(self._env["nodes"], "")
        return expand_nodelist(nodes) if nodes else [self.hostname]

    @property
    def raw_job_id(self) -> str:
        return os.environ[self._env["job_id"]]

    @property
    def array_job_id(self) -> Optional[str]:
        return os.environ.get(self._env["array_job_id"])

    @property
    def array_task_id(self) -> Optional[str]:
        return os.environ.get(self._env["array_task_id"])

    @property
    def job_id(self) -> str:
        if self.array_job_id:
            return "%s_%s" % (self.array_job_id, self.array_task_id)
        return self.raw_job_id

    @property
    def cluster_name(self) -> str:
        """The site's name of the cluster (the executor's), else Slurm's ClusterName."""
        return self._call.get("cluster") or os.environ.get("SLURM_CLUSTER_NAME", "")

    @property
    def global_job_id(self) -> str:
        """slurmkit's id of the job, as ``Job.job_id`` has it: ``CLUSTER:ID`` (``CLUSTER:ARRAY_TASK``)."""
        return "%s:%s" % (self.cluster_name, self.job_id)

    def _int(self, key: str, default: int) -> int:
        return int(os.environ.get(self._env[key], default))

    @property
    def num_tasks(self) -> int:
        """The job's tasks (all nodes)."""
        return self._int("num_tasks", 1)

    @property
    def num_nodes(self) -> int:
        return self._int("num_nodes", 1)

    @property
    def node(self) -> int:
        """This node's index among the job's nodes."""
        return self._int("node", 0)

    @property
    def global_rank(self) -> int:
        return self._int("global_rank", 0)

    @property
    def local_rank(self) -> int:
        """The task's rank on its node."""
        return self._int("local_rank", 0)

    @property
    def paths(self) -> JobPaths:
        """The call's files on the cluster (RuntimeError in a job that runs no call of the API)."""
        call = self._call
        if "call" not in call:
            raise RuntimeError("JobEnvironment.paths: this job runs no call of slurmkit's Python API (no $%s)"
                               % JOB_ENV)
        result = call["result"].replace("%t", str(self.global_rank))
        return JobPaths(Path(call["folder"]), call["folder"], call["call"], result, call["log"], call["log"])

    def __repr__(self) -> str:
        totals = (self.num_tasks // max(1, self.num_nodes), self.num_nodes, self.num_tasks)
        info = ["job_id=%s" % self.job_id, "hostname=%s" % self.hostname]
        info += ["%s=%s(%s)" % (n, getattr(self, n), t) for n, t in zip(("local_rank", "node", "global_rank"), totals)]
        return "JobEnvironment(%s)" % ", ".join(info)


def expand_nodelist(nodes: str) -> List[str]:
    """A Slurm hostlist (``an[1-3,07],gpu-b[1-2]x``) as its names, in order; standard library only, so that
    it runs on the nodes (slurmkit's own expansion, :mod:`slurmkit.slurm.hostlist`, needs ClusterShell)."""
    names: List[str] = []
    pos = 0
    while pos < len(nodes):
        prefixes = [""]
        while pos < len(nodes) and nodes[pos] != ",":
            if nodes[pos] == "[":
                end = nodes.index("]", pos)
                suffixes = []
                for part in nodes[pos + 1:end].split(","):
                    low, dash, high = part.partition("-")
                    suffixes += (["%0*d" % (len(low), n) for n in range(int(low), int(high) + 1)] if dash else [low])
                prefixes = [p + s for p in prefixes for s in suffixes]
                pos = end + 1
            else:
                prefixes = [p + nodes[pos] for p in prefixes]
                pos += 1
        names += prefixes
        pos += 1
    return names
