"""A submitted call: submitit's ``Job``, with a global id and no shared filesystem assumed.

A job's files (the call, each task's outcome, Slurm's log) live in its folder *on the
cluster*: this machine's folder for a cluster used from here, a folder on the login node
for one reached over SSH, read through the connection the cluster's Slurm commands use
(:meth:`slurmkit.session.Session.files`).  This machine keeps one small record per job in
the executor's folder, so :meth:`Job.from_id` finds it again in another process.

Slurm is asked about all the unfinished jobs of a process on one cluster at once, at most
once per poll interval (:class:`StateWatcher`): a process waiting on a thousand jobs costs
slurmctld one squeue per poll, as the requeue daemon does.

A job submitted with ``auto_requeue=True`` is the requeue daemon's: each restart is a new Slurm
job, so the Job reads the daemon's journal and follows the latest attempt (``job_id`` becomes
its id); a call that ended without a result is over only once the daemon will not restart it.
"""

import json
import os
import threading
import time
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional

from slurmkit.errors import FailedJobError, SlurmkitError, UncompletedJobError, UsageError
from slurmkit.helpers import JobPaths  # noqa: F401  (submitit's name, here as in submitit.core.utils)

RECORD_SUFFIX = ".job.json"
LOG_TAIL_BYTES = 4000
# A job under the requeue daemon whose attempt ended without a result, and whose end the daemon has not
# recorded in this long, is taken as ended: no daemon watches the journal (its slowest poll is 60 s).
DAEMON_WAIT_S = 180.0
# How long Job.wait asks Slurm for the end of a job whose call has left its outcome (its task exits right after).
SETTLE_S = 5.0


def cluster_paths(cluster_folder: str, token: str, array: bool = False) -> Dict[str, str]:
    """The job's files in its cluster folder, named by its token (known before sbatch gives an id);
    an array's calls are one file, its outcomes, logs and checkpoints one per task (``%a``: the task's
    index).  The checkpoint is the call a checkpointed task left for its restart."""
    base = "%s/%s" % (cluster_folder.rstrip("/") or "/", token)
    each = base + ("_%a" if array else "")
    return {"call": base + "_call.txt", "result": each + "_%t_result.txt", "log": each + "_log.out",
            "checkpoint": each + "_checkpoint.txt"}


class Seen(NamedTuple):
    """What Slurm says of a job or an array task: its state, and whether it has ended."""

    state: str
    finished: bool


def _seen(info) -> Seen:
    from slurmkit.slurm.types import FINISHED_STATES

    return Seen(info.state, info.state in FINISHED_STATES)


class StateWatcher:
    """Slurm's view of a process's jobs: per cluster one ``jobs_by_id`` for all of them and one
    ``array_tasks`` for all of their arrays, at most once per ``interval`` seconds; a job that has
    ended (an array whose tasks all have) is remembered and never asked about again."""

    def __init__(self, session, interval: float = 1.0, clock=time):
        self.session = session
        self.interval = interval
        self.clock = clock
        self._lock = threading.Lock()
        self._pending: Dict[str, set] = {}          # cluster -> plain job ids
        self._arrays: Dict[str, Dict[str, set]] = {}  # cluster -> array id -> task indices asked about
        self._seen: Dict[tuple, Seen] = {}          # (cluster, "ID" or "ARRAY_INDEX") -> Seen
        self._asked: Dict[str, float] = {}

    def register(self, cluster: str, job_id: str) -> None:
        with self._lock:
            self._add(cluster, job_id)

    def _add(self, cluster: str, job_id: str) -> None:
        array, sep, index = job_id.partition("_")
        if sep:
            self._arrays.setdefault(cluster, {}).setdefault(array, set()).add(int(index))
        else:
            self._pending.setdefault(cluster, set()).add(job_id)

    def info(self, cluster: str, job_id: str, force: bool = False) -> Optional[Seen]:
        """The job's :class:`Seen` (None while Slurm does not know it)."""
        with self._lock:
            known = self._seen.get((cluster, job_id))
            if known is not None and known.finished:
                return known
            self._add(cluster, job_id)
            now = self.clock.monotonic()
            if force or now - self._asked.get(cluster, -1e9) >= self.interval:
                self._refresh(cluster)
                self._asked[cluster] = now
            return self._seen.get((cluster, job_id))

    def _refresh(self, cluster: str) -> None:
        backend = self.session.backend(cluster)
        ids = sorted(self._pending.get(cluster, ()))
        if ids:
            for jid, info in backend.jobs_by_id(ids).items():
                self._seen[(cluster, jid)] = _seen(info)
                if self._seen[(cluster, jid)].finished:
                    self._pending[cluster].discard(jid)
        arrays = self._arrays.get(cluster, {})
        if not arrays:
            return
        answer = backend.array_tasks(sorted(arrays))
        listed = set()
        for task in answer.tasks:
            if task.array_job_id in arrays:
                listed.add(task.array_job_id)
                self._seen[(cluster, "%s_%d" % (task.array_job_id, task.index))] = _seen(task)
        for array, ended in answer.unstarted.items():     # tasks that ended inside the array's record
            for index in arrays.get(array, ()):
                self._seen.setdefault((cluster, "%s_%d" % (array, index)), _seen(ended))
        forgotten = [a for a in arrays if a not in listed and a not in answer.unstarted]
        if forgotten and backend.has_accounting():
            for task in backend.array_tasks_accounting(forgotten):
                self._seen[(cluster, "%s_%d" % (task.array_job_id, task.index))] = _seen(task)
        for array in list(arrays):
            if all(self._seen.get((cluster, "%s_%d" % (array, i)), Seen("", False)).finished
                   for i in arrays[array]):
                del arrays[array]


class Job:
    """One submitted call (submitit's ``Job``): ``job_id`` is global (``beta:48213``)."""

    def __init__(self, record: dict, session, watcher: StateWatcher, task_id: Optional[int] = None):
        self._record = record
        self._session = session
        self._watcher = watcher
        self._task = task_id
        self._outcomes: Dict[int, object] = {}
        self._journal = None              # the requeue daemon's, for a job under it (auto_requeue=True)
        self._unseen_since: Optional[float] = None   # when its attempt was first seen ended, the daemon unaware
        watcher.register(record["cluster"], record["slurm_id"])

    # -- identity ---------------------------------------------------------------------------

    @property
    def job_id(self) -> str:
        """``CLUSTER:ID``; under the requeue daemon, its latest attempt's."""
        self._follow()
        return self._global_id()

    def _global_id(self) -> str:
        return "%s:%s" % (self._record["cluster"], self._record["slurm_id"])

    @property
    def cluster(self) -> str:
        return self._record["cluster"]

    @property
    def num_tasks(self) -> int:
        return int(self._record["tasks"])

    @property
    def paths(self) -> JobPaths:
        files = self._record["files"]
        return JobPaths(Path(self._record["folder"]), self._record["cluster_folder"], files["call"],
                        self._result_path(0), files["log"], files["log"])

    def _result_path(self, task: int) -> str:
        """Where task ``task`` leaves its outcome on the cluster."""
        return self._record["files"]["result"].replace("%t", str(task))

    def task(self, task_id: int) -> "Job":
        """The job as seen from one of its tasks: its ``result()`` is that task's."""
        if not 0 <= task_id < self.num_tasks:
            raise UsageError("job %s has tasks 0 to %d, not %r" % (self.job_id, self.num_tasks - 1, task_id))
        self._follow()
        return Job(self._record, self._session, self._watcher, task_id)

    # -- under the requeue daemon (auto_requeue=True) --------------------------------------------

    @property
    def tracked_id(self) -> Optional[int]:
        """The requeue daemon's id of the job (``slurmkit daemon jobs``), None for a job it does not restart."""
        requeue = self._record.get("requeue")
        return int(requeue["tracked"]) if requeue else None

    def _tracked(self):
        """The journal's record of the job (None when the daemon does not track it)."""
        requeue = self._record.get("requeue")
        if not requeue:
            return None
        if self._journal is None:
            from slurmkit.requeue.journal import Journal

            self._journal = Journal(requeue["journal"])
        return self._journal.job(int(requeue["tracked"]))

    def _follow(self):
        """For a job under the requeue daemon, move to its latest attempt (a restart is a new Slurm job, and
        ``job_id`` becomes its id; the record is saved under that id too, so ``from_id`` takes either); returns
        (the journal's record, the attempt this job now is), or None for a job the daemon does not track."""
        tracked = self._tracked()
        if tracked is None:
            return None
        latest = next((a for a in reversed(tracked.attempts) if a.job_id), None)
        if latest is not None and (latest.cluster, latest.job_id) != (self.cluster, self._record["slurm_id"]):
            self._record.update(cluster=latest.cluster, slurm_id=latest.job_id)
            self._watcher.register(latest.cluster, latest.job_id)
            self._unseen_since = None
            self.save()
        return tracked, latest

    def _daemon_done(self, tracked, attempt) -> bool:
        """Whether a tracked job whose attempt ended without a result is over: the daemon stopped tracking it,
        or has not noticed the end in :data:`DAEMON_WAIT_S` (none runs); otherwise it restarts it."""
        clock = self._watcher.clock
        if tracked.state != "active":
            return True
        if attempt is None or attempt.phase != "submitted":
            return False                   # the daemon saw the end: it is deciding, or the restart is due
        if self._unseen_since is None:
            self._unseen_since = clock.monotonic()
        return clock.monotonic() - self._unseen_since >= DAEMON_WAIT_S

    def __repr__(self):
        return "Job<%s%s>" % (self.job_id, "" if self._task is None else " task %d" % self._task)

    # -- state ------------------------------------------------------------------------------

    def _info(self, force: bool = False):
        self._follow()
        return self._watcher.info(self.cluster, self._record["slurm_id"], force=force)

    @property
    def state(self) -> str:
        """Slurm's state of the job (``UNKNOWN`` while Slurm does not list it)."""
        info = self._info()
        return info.state if info is not None else "UNKNOWN"

    def done(self, force_check: bool = False) -> bool:
        """Whether the job has ended: Slurm's word while it knows the job; once it has forgotten it (past
        MinJobAge, on a cluster without accounting), whether every task left its outcome.  A job under the
        requeue daemon (``auto_requeue=True``) that ended without a result has not ended while the daemon
        is to restart it: it then follows the new attempt."""
        followed = self._follow()
        info = self._watcher.info(self.cluster, self._record["slurm_id"], force=force_check)
        if info is not None and not info.finished:
            return False
        if info is not None and followed is None:
            return True
        tasks = [self._task] if self._task is not None else range(self.num_tasks)
        if all(self._outcome(task) is not None for task in tasks):
            return True
        if followed is None:
            return False              # forgotten by Slurm (past MinJobAge), no outcome yet
        # Under the requeue daemon: ended without a result is over only once the daemon will not restart it.
        return self._daemon_done(*followed)

    def wait(self, timeout: Optional[float] = None, clock=time) -> None:
        """Until the job ends: Slurm is asked on a schedule backing off from 0.5 s to 5 s
        (:class:`StateWatcher` keeps it one query per cluster for all of the process's jobs), and in
        between the call's outcome is looked for, every 0.2 s at first and at most every 1 s later (a
        file read, on the login node for a cluster reached over SSH, costs slurmctld nothing); once it
        is there, Slurm is asked every 0.25 s until it says the job ended (for at most
        :data:`SETTLE_S`), so a short call's end is seen within a fraction of a second of Slurm's, not
        a whole backed-off poll later.  A job under the requeue daemon waits
        for Slurm and the daemon alone (an outcome may precede a restart's).
        :class:`~slurmkit.errors.WaitTimeoutError` after ``timeout`` seconds."""
        from slurmkit.errors import WaitTimeoutError

        began = clock.monotonic()
        deadline = None if timeout is None else began + timeout
        slurm_due, slurm_delay = began, 0.5
        peek = self._record.get("requeue") is None
        tasks = [self._task] if self._task is not None else range(self.num_tasks)
        while True:
            now = clock.monotonic()
            if peek and all(self._outcome(task) is not None for task in tasks):
                # The task exits right after writing it: Slurm says so within moments.  Asked until it does
                # (a few seconds at most), so that done() and state agree with the result when it returns.
                settle = now + SETTLE_S
                while not self.done(force_check=True) and clock.monotonic() < settle:
                    clock.sleep(0.25)
                return
            if now >= slurm_due:
                if self.done():
                    return
                slurm_due, slurm_delay = now + slurm_delay, min(slurm_delay * 1.5, 5.0)
            delay = min(max(0.2, 0.1 * (now - began)), 1.0, max(0.0, slurm_due - now)) if peek else slurm_due - now
            delay = max(delay, 0.05)
            if deadline is not None and now + delay > deadline:
                raise WaitTimeoutError("job %s is still %s after %ss" % (self.job_id, self.state, timeout),
                                       job=self._info())
            clock.sleep(delay)

    def cancel(self, check: bool = True) -> None:
        """scancel the job; ``check``: a refusal raises (a job that already ended is no refusal).  A job under the
        requeue daemon is no longer tracked either: a cancel is never undone."""
        from slurmkit import jobs

        followed = self._follow()
        if followed is not None and followed[0].state == "active":
            from slurmkit.requeue import tracking

            tracking.stop_tracking(self._journal, lambda site: self._session, followed[0].id, cancel=True)
            self._follow()
            return
        try:
            jobs.cancel(self._session, [jobs.JobRef(self.cluster, self._record["slurm_id"])])
        except SlurmkitError:
            if check and not self.done(force_check=True):
                raise

    def _interrupt(self, timeout: bool = False) -> None:
        """submitit's test hook: send the job the signal that Slurm sends a checkpointable call before its time
        limit, or a preemption (``timeout``: which one is meant; slurmkit sends USR1 for both, to the batch
        shell of a one-task job and to every task of the others).  The call tells the two apart by the time
        left, as it does for Slurm's own signal."""
        from slurmkit.errors import SlurmCommandError

        self._follow()
        argv = ["scancel", "--signal=USR1"] + (["--batch"] if self.num_tasks == 1 else []) + [self._record["slurm_id"]]
        done = self._session.backend(self.cluster).runner.run(argv)
        if done.returncode != 0:
            raise SlurmCommandError("%s: %s" % (" ".join(argv), done.stderr.strip() or "exit %d" % done.returncode),
                                    argv=argv, returncode=done.returncode, stderr=done.stderr)

    # -- outcome ----------------------------------------------------------------------------

    def _outcome(self, task: int):
        """The task's outcome (None when it left none), read once from the cluster."""
        if task not in self._outcomes:        # an outcome is final once there: read it once
            from slurmkit.api import payload

            text = self._session.files(self.cluster).read(self._result_path(task))
            try:
                outcome = payload.load_outcome(text) if text else None
            except ValueError:
                outcome = None
            if outcome is None:
                return None
            self._outcomes[task] = outcome
        return self._outcomes[task]

    def results(self) -> List[object]:
        """Every task's return value, in rank order, once the job has ended; raises
        :class:`FailedJobError` (the remote traceback) or :class:`UncompletedJobError` (no result:
        the job's state and the end of its log)."""
        self.wait()
        tasks = [self._task] if self._task is not None else range(self.num_tasks)
        values = []
        for task in tasks:
            outcome = self._outcome(task)
            if outcome is None:
                info = self._info()
                raise UncompletedJobError(
                    "job %s (task %d) ended %s without a result%s; the end of its log (%s):\n%s"
                    % (self.job_id, task, info.state if info else "UNKNOWN", self._daemon_said(), self.paths.stdout,
                       self._log_tail() or "(empty)"))
            if not outcome.ok and outcome.type == "UncompletedJobError":     # not restarted (max_num_timeout)
                raise UncompletedJobError("job %s (task %d): %s; the end of its log (%s):\n%s"
                                          % (self.job_id, task, outcome.message, self.paths.stdout,
                                             self._log_tail() or "(empty)"))
            if not outcome.ok:
                raise FailedJobError("job %s (task %d) raised %s: %s\n\nThe traceback on the node:\n%s"
                                     % (self.job_id, task, outcome.type, outcome.message, outcome.traceback.rstrip()),
                                     exception=outcome.exception, remote_traceback=outcome.traceback)
            values.append(outcome.value)
        return values

    def _daemon_said(self) -> str:
        """What the requeue daemon made of the end, for a job it tracks."""
        followed = self._follow()
        if followed is None:
            return ""
        tracked, attempt = followed
        if tracked.state != "active":
            return " (attempt %d; the requeue daemon does not restart it: %s)" % (attempt.number, tracked.reason)
        return (" (attempt %d), and the requeue daemon did not record its end in %.0f s: is one running on this "
                "journal (%s)? Start it with `slurmkit daemon run`" % (attempt.number, DAEMON_WAIT_S,
                                                                      self._record["requeue"]["journal"]))

    def result(self) -> object:
        """The call's return value (task 0's, or this task's for a :meth:`task` view)."""
        return self.results()[0]

    def exception(self) -> Optional[BaseException]:
        """None when the call returned, else the error :meth:`result` would raise (waits for the end)."""
        try:
            self.results()
        except (FailedJobError, UncompletedJobError) as exc:
            return exc
        return None

    def _log_tail(self) -> str:
        log = self.paths.stdout
        return self._session.files(self.cluster).tails([log], LOG_TAIL_BYTES).get(log, "")

    def stdout(self) -> Optional[str]:
        """Slurm's log of the job (None before it exists); Slurm writes stdout and stderr there together."""
        return self._session.files(self.cluster).read(self.paths.stdout)

    def stderr(self) -> Optional[str]:
        """The same log as :meth:`stdout`: the job script writes both streams to one file."""
        return self.stdout()

    # -- records ------------------------------------------------------------------------------

    @staticmethod
    def record_path(folder, job_id: str) -> Path:
        return Path(folder) / (job_id.replace(":", "_") + RECORD_SUFFIX)

    def save(self) -> None:
        from slurmkit.textfile import write_atomic

        write_atomic(str(self.record_path(self._record["folder"], self._global_id())), json.dumps(self._record) + "\n")

    @classmethod
    def from_id(cls, job_id: str, folder, site=None) -> "Job":
        """The job ``job_id`` (``CLUSTER:ID``) that an executor with ``folder`` submitted, in this process."""
        from slurmkit.api.executor import open_session

        from slurmkit.api.executor import id_independent

        path = cls.record_path(id_independent(folder), job_id)
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            raise UsageError("no job %s was submitted with folder %s (no readable %s)" % (job_id, folder, path)) \
                from None
        session = open_session(site if site is not None else record.get("site"))
        return cls(record, session, StateWatcher(session))
