"""The requeue daemon: watch tracked jobs, restart failed ones from their latest complete checkpoint.

One cycle (:meth:`Daemon.cycle`) does, for every cluster with tracked jobs:

1. **poll**: one batched query for every submitted attempt on that cluster
   (``SlurmBackend.jobs_by_id``: squeue, plus sacct for jobs squeue forgot),
   whatever the number of jobs; live states are recorded, finished ones too;
2. **decide**: for each finished attempt, the latest complete checkpoint is
   found (partial or corrupt newer ones are skipped and the skip is logged in
   the journal), nodes down or drained are read (one query, only when a
   failure needs it), and :func:`slurmkit.requeue.policy.decide` says restart
   or stop; the decision and the next attempt's intent are written in one
   transaction;
3. **submit**: every intent whose backoff has passed is first looked up by
   its token (one squeue per cluster: after a crash the sbatch may already
   have happened; for intents from before the crash, where the cluster has
   accounting, also one sacct of the user's jobs since the oldest intent, for
   a job that ran and ended and that squeue forgot while no daemon was up)
   and submitted only if Slurm has no job with it.  A failure
   whose answer was lost is retried on the same cluster only; a cluster that
   cannot be reached sends the restart to another cluster that shares the
   checkpoint directory, if the job declared one.

Slurm's own requeue is switched off for tracked jobs (``--no-requeue``): the
daemon restarts each failure as a new job with its own token, so the restart
can resume from a checkpoint (``SLURMKIT_RESUME_FROM``), avoid bad nodes
(``--exclude``), or move to another cluster, and the two mechanisms can never
both restart one failure.

A job that stops making progress is ended too, then restarted like a failure:
with a hang timeout (the job's ``--hang-timeout``, else the site's
``requeue.hang_timeout``), a running attempt whose heartbeat directory
(where :func:`slurmkit.checkpoint.heartbeat` renames ``$SLURMKIT_HEARTBEAT``
into place) and checkpoint directory have not changed for that long, by the daemon's own
clock (file times come from the file server's), is marked in the journal and
cancelled; the policy restarts it as ``hung`` under its own budget.  A hung
rank or a stuck collective otherwise holds its nodes until the time limit.
An attempt that has not written its own first heartbeat yet is starting
(imports, the rendezvous, loading a checkpoint): the job's ``--hang-startup``
(else the site's ``requeue.hang_startup``) from its start holds for it, so the
hang timeout can be a few checkpoint intervals without ending slow starts.

The daemon never exits on a transient error: a cluster that does not answer
is logged and retried with backoff, and a slow answer is never taken for a
failed job (only a final Slurm state ends an attempt).
"""

import logging
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from slurmkit.errors import SlurmkitError
from slurmkit.requeue import policy
from slurmkit.requeue.journal import Attempt, Journal, Tracked

log = logging.getLogger("slurmkit.requeue")

# Exit status of a program that saved a checkpoint on SIGUSR1 and asks to be resumed
# (slurmkit.checkpoint.EXIT_SAVED; EX_TEMPFAIL).  Like TIMEOUT: restarted when the
# checkpoint moved.
EXIT_SAVED = 75

# How much further back than the oldest intent the accounting lookup of tokens reaches: the
# intent's time is the daemon's clock, the sacct window the cluster's.
ACCOUNTING_MARGIN_S = 3600.0


@dataclass
class CycleReport:
    """What one cycle did (for logs, ``daemon once`` and tests)."""

    polled: Dict[str, int] = field(default_factory=dict)       # cluster -> attempts polled
    finished: List[Tuple[int, str]] = field(default_factory=list)  # (tracked id, state)
    restarted: List[Tuple[int, str]] = field(default_factory=list)  # (tracked id, "cluster:job")
    stopped: List[Tuple[int, str]] = field(default_factory=list)    # (tracked id, reason)
    errors: List[str] = field(default_factory=list)
    changed: bool = False
    next_end: Optional[float] = None    # the soonest time limit of a running attempt (epoch)
    next_due: Optional[float] = None    # the soonest restart still waiting for its backoff (epoch)
    next_hang: Optional[float] = None   # the soonest a running attempt may be found hung (epoch)


def new_token() -> str:
    return os.urandom(8).hex()


def _epoch(value) -> Optional[float]:
    return value.timestamp() if value is not None else None


class Daemon:
    """The requeue daemon over one journal.

    ``sessions(site_name)`` returns a :class:`slurmkit.session.Session` for a
    site (cached by the caller; dropped on SIGHUP); ``submit_attempt`` submits
    one attempt and returns (cluster, job id) — both injected so the policy
    loop is tested with a fake Slurm and a fake clock.
    """

    def __init__(self, journal: Journal, sessions: Callable[[str], object],
                 submit_attempt: Callable[..., Tuple[str, str]],
                 latest_checkpoint: Optional[Callable[[str], object]] = None,
                 clock=time,
                 min_interval: float = 5.0, max_interval: float = 60.0,
                 progress: Optional[Callable[[str], str]] = None):
        self.journal = journal
        self.sessions = sessions
        self.submit_attempt = submit_attempt
        self.latest_checkpoint = latest_checkpoint or _latest_checkpoint
        # What tells a running attempt's progress: checkpoint dir -> text that changes with it.
        # The journal keeps the last one seen and since when (the daemon's clock): `daemon once` from
        # cron is a new process every time.
        self.progress = progress or progress_marker
        self.clock = clock
        # Waiting on the stop event lets SIGTERM end the wait at once; a fake clock's sleep in tests.
        self.sleep = self._wait if clock is time else clock.sleep
        self.min_interval = min_interval
        self.max_interval = max_interval
        self.interval = min_interval
        self.stop_requested = threading.Event()
        self.reload_requested = threading.Event()
        self._wake = threading.Event()      # ends the wait between cycles: SIGTERM, or SIGHUP's reload
        self._cluster_backoff: Dict[Tuple[str, str], Tuple[float, int]] = {}   # (site, cluster) -> (until, fails)
        # Intents this process wrote and has not yet tried to submit with an unknown outcome: no
        # sbatch can have run for them, so squeue alone answers their token lookup (the others,
        # from before a crash, may have run and ended since: accounting is asked too).
        self._planned: set = set()

    # -- the loop ---------------------------------------------------------------

    def run(self, on_reload: Optional[Callable[[], None]] = None) -> None:
        """Cycle until SIGTERM/SIGINT (finishing the current step); SIGHUP reloads the site configs."""
        self.install_signal_handlers()
        log.info("slurmkit daemon started on %s (pid %d)", self.journal.path, os.getpid())
        while not self.stop_requested.is_set():
            if self.reload_requested.is_set():
                self.reload_requested.clear()
                if on_reload:
                    on_reload()
                log.info("site configs reloaded (SIGHUP)")
            report = self.cycle()
            self.interval = self.next_interval(report)
            self.sleep(self.interval)
        log.info("slurmkit daemon stopped")

    def _wait(self, seconds: float) -> None:
        self._wake.wait(seconds)
        self._wake.clear()

    def request_stop(self, *_) -> None:
        """SIGTERM/SIGINT: stop after the current cycle (at once when waiting between cycles)."""
        self.stop_requested.set()
        self._wake.set()

    def request_reload(self, *_) -> None:
        """SIGHUP: read the site configs again before the next cycle, which starts now: an
        admin who reloads expects the new settings to apply, not to wait out the interval."""
        self.reload_requested.set()
        self._wake.set()

    def install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        signal.signal(signal.SIGHUP, self.request_reload)

    def next_interval(self, report: CycleReport) -> float:
        """Fast right after a change or near a job's time limit, slower while nothing happens; never
        past the time a restart's backoff ends (that restart is due then, not a whole interval later)."""
        if report.changed or report.restarted or report.errors:
            interval = self.min_interval
        else:
            interval = min(self.interval * 2, self.max_interval)
            for soon in (report.next_end, report.next_hang):
                if soon is not None:
                    interval = min(interval, max(self.min_interval, soon - self.clock.time()))
            interval = max(self.min_interval, interval)
        if report.next_due is not None:
            interval = min(interval, max(0.0, report.next_due - self.clock.time()))
        return interval

    # -- one cycle ---------------------------------------------------------------

    def cycle(self) -> CycleReport:
        report = CycleReport()
        active = self.journal.jobs(state="active")
        self._poll(active, report)
        active = self.journal.jobs(state="active")
        self._decide(active, report)
        active = self.journal.jobs(state="active")
        self._submit(active, report)
        for line in report.errors:
            log.warning("%s", line)
        return report

    def _groups(self, attempts: List[Tuple[Tracked, Attempt]]):
        groups: Dict[Tuple[str, str], List[Tuple[Tracked, Attempt]]] = {}
        for tracked, attempt in attempts:
            groups.setdefault((tracked.site, attempt.cluster), []).append((tracked, attempt))
        return groups

    def _cluster_ready(self, site: str, cluster: str) -> bool:
        until, _ = self._cluster_backoff.get((site, cluster), (0.0, 0))
        return self.clock.time() >= until

    def _cluster_failed(self, site: str, cluster: str, exc: Exception, report: CycleReport) -> None:
        _, fails = self._cluster_backoff.get((site, cluster), (0.0, 0))
        delay = min(self.min_interval * 2 ** fails, 300.0)
        self._cluster_backoff[(site, cluster)] = (self.clock.time() + delay, fails + 1)
        report.errors.append("cluster %s of site %s: %s (retrying in %.0fs)" % (cluster, site, exc, delay))

    def _cluster_ok(self, site: str, cluster: str) -> None:
        self._cluster_backoff.pop((site, cluster), None)

    def _poll(self, active: List[Tracked], report: CycleReport) -> None:
        live = [(t, t.current) for t in active if t.current is not None and t.current.phase == "submitted"]
        for (site, cluster), items in self._groups(live).items():
            if not self._cluster_ready(site, cluster):
                continue
            try:
                backend = self.sessions(site).backend(cluster)
                found = backend.jobs_by_id([a.job_id for _, a in items])
            except SlurmkitError as exc:
                self._cluster_failed(site, cluster, exc, report)
                continue
            self._cluster_ok(site, cluster)
            report.polled[cluster] = len(items)
            now = self.clock.time()
            progressed: List[Tuple[int, str, float]] = []
            for tracked, attempt in items:
                job = found.get(attempt.job_id)
                if job is None:
                    continue     # not visible yet (or purged): never taken for a failure
                if job.finished:
                    # Slurm's own end time where the source gives it (squeue --json, pyslurm), else
                    # now: a job that ended while the daemon was down did not run until now.
                    self.journal.finished(attempt.id, state=job.state, exit_code=job.exit_code, signal=job.signal,
                                          nodes=job.nodelist, reason=job.reason, started_at=_epoch(job.start_time),
                                          ended_at=_epoch(job.end_time) or now)
                    report.finished.append((tracked.id, job.state))
                    report.changed = True
                else:
                    if job.state != attempt.state or job.nodelist != attempt.nodes:
                        self.journal.observed(attempt.id, state=job.state, nodes=job.nodelist,
                                              started_at=_epoch(job.start_time))
                        report.changed = True
                    end = _end_of(job)
                    if end is not None and (report.next_end is None or end < report.next_end):
                        report.next_end = end
                    if job.state == "RUNNING":
                        self._watch_progress(tracked, attempt, backend, report, progressed)
            self.journal.progressed(progressed)

    # -- jobs that stopped making progress ----------------------------------------

    def hang_timeout(self, tracked: Tracked) -> float:
        """Seconds without progress after which a running attempt is ended (0: never)."""
        own = tracked.budget.get("hang_timeout_s")
        if own is not None:
            return float(own)
        try:
            return float(self.sessions(tracked.site).site.requeue.hang_timeout or 0)
        except SlurmkitError:
            return 0.0

    def hang_startup(self, tracked: Tracked, timeout: float) -> float:
        """Seconds an attempt may take from its start to its first heartbeat (its imports, the rendezvous, a
        checkpoint's load) before the hang timeout counts; never less than ``timeout``, the job's hang timeout."""
        own = tracked.budget.get("hang_startup_s")
        if own is None:
            try:
                own = self.sessions(tracked.site).site.requeue.hang_startup or 0
            except SlurmkitError:
                own = 0
        return max(float(own), timeout)

    def _watch_progress(self, tracked: Tracked, attempt: Attempt, backend, report: CycleReport,
                        progressed: List[Tuple[int, str, float]]) -> None:
        if attempt.ended_by:
            self._cancel_hung(tracked, attempt, backend, report)    # marked before a crash, or scancel failed
            return
        timeout = self.hang_timeout(tracked)
        if timeout <= 0:
            return
        from slurmkit import checkpoint

        now = self.clock.time()
        marker = self.progress(tracked.checkpoint_dir)
        since = attempt.progress_since
        if since is None or marker != attempt.progress:
            since = now
            progressed.append((attempt.id, marker, now))
        due = since + timeout
        # Until its own first heartbeat an attempt is starting: a short hang timeout (a few checkpoint
        # intervals) must not end a start that is slow (imports, the rendezvous), nor must a long one be
        # every hang's cost.  Checkpoints alone (no heartbeat): the allowance holds from the start.
        startup = self.hang_startup(tracked, timeout) if attempt.started_at else None
        if startup is not None and (startup <= timeout or _has_beaten(tracked.checkpoint_dir, attempt.job_id)):
            startup = None
        if startup is not None:
            due = max(due, attempt.started_at + startup)
        if now < due:
            if report.next_hang is None or due < report.next_hang:
                report.next_hang = due
            return
        where = checkpoint.heartbeat_dir(tracked.checkpoint_dir)
        allowance = "" if startup is None else ", after a start-up allowance of %.0f s without a heartbeat" % startup
        attempt.ended_by = "%s: no progress for %.0f s (the hang timeout is %.0f s%s): neither its heartbeat " \
                           "(in %s) nor its checkpoint directory changed" % (policy.HUNG_MARK, now - since,
                                                                              timeout, allowance, where)
        self.journal.end_as_hung(attempt.id, attempt.ended_by)
        self.journal.event(tracked.id, "attempt %d (%s:%s) %s; cancelling it" % (
            attempt.number, attempt.cluster, attempt.job_id, attempt.ended_by))
        log.warning("job %d attempt %d (%s:%s) %s", tracked.id, attempt.number, attempt.cluster, attempt.job_id,
                    attempt.ended_by)
        self._cancel_hung(tracked, attempt, backend, report)

    def _cancel_hung(self, tracked: Tracked, attempt: Attempt, backend, report: CycleReport) -> None:
        try:
            backend.cancel([attempt.job_id])
        except SlurmkitError as exc:
            report.errors.append("job %d attempt %d: could not cancel it after it stopped making progress (%s); "
                                 "trying again next cycle" % (tracked.id, attempt.number, exc))
            return
        report.changed = True

    def _decide(self, active: List[Tracked], report: CycleReport) -> None:
        done = [(t, t.current) for t in active if t.current is not None and t.current.phase == "finished"]
        unusable_by_cluster: Dict[Tuple[str, str], set] = {}
        for tracked, attempt in done:
            try:
                found = self.latest_checkpoint(tracked.checkpoint_dir, self._conventions(tracked))
            except OSError as exc:
                # An unreadable checkpoint directory (permissions, a stale NFS handle) must not
                # stop the daemon, and every other job with it: this one is decided next cycle.
                report.errors.append("job %d attempt %d: cannot read its checkpoint directory %s (%s); deciding "
                                     "next cycle" % (tracked.id, attempt.number, tracked.checkpoint_dir, exc))
                continue
            for path, why in found.skipped:
                self.journal.event(tracked.id, "attempt %d: skipped checkpoint %s: %s" % (attempt.number, path, why))
            latest_step = found.step
            key = (tracked.site, attempt.cluster)
            needs_nodes = attempt.state not in ("COMPLETED", "CANCELLED") and attempt.nodes
            if needs_nodes and key not in unusable_by_cluster:
                unusable_by_cluster[key] = self._unusable_nodes(tracked.site, attempt.cluster)
            view = _view(attempt)
            history = [_view(a) for a in tracked.attempts[:-1]]
            budget = _budget(tracked.budget)
            transient = self._transient_codes(tracked)
            if attempt.exit_code == EXIT_SAVED and attempt.state == "FAILED":
                # Saved on SIGUSR1 and asked to be resumed: a time limit met gracefully.
                view = policy.AttemptView(**dict(view.__dict__, state="TIMEOUT"))
            decision = policy.decide(view, history, latest_step, budget, transient,
                                     _expand_nodes(unusable_by_cluster.get(key, set())))
            if decision.restart:
                token = new_token()
                resume = found.path
                planned = self.journal.decide_and_plan(
                    attempt.id, cause=decision.cause, decision=decision.reason, exclude=decision.exclude,
                    next_number=attempt.number + 1, token=token, cluster=attempt.cluster, resume_from=resume,
                    resume_step=latest_step, not_before=self.clock.time() + decision.delay_s)
                self._planned.add(planned)
                report.changed = True
            else:
                final = "completed" if decision.cause == policy.COMPLETED else "stopped"
                self.journal.decided(attempt.id, cause=decision.cause, decision=decision.reason, stop_state=final)
                report.stopped.append((tracked.id, decision.reason))
                report.changed = True
            log.info("job %d attempt %d (%s:%s) %s: %s", tracked.id, attempt.number, attempt.cluster,
                     attempt.job_id, "restart" if decision.restart else "final", decision.reason)

    def account(self, site: str, cluster: str) -> str:
        from slurmkit.jobs import account_on

        return account_on(self.sessions(site).site.clusters[cluster])

    def _unusable_nodes(self, site: str, cluster: str) -> set:
        try:
            return {n.name for n in self.sessions(site).backend(cluster).nodes() if not n.usable}
        except SlurmkitError as exc:
            log.warning("cannot read node states of cluster %s: %s", cluster, exc)
            return set()

    def _conventions(self, tracked: Tracked):
        """How this job's checkpoints are recognised: the job's own choice, else the site's, else all."""
        chosen = tracked.budget.get("checkpoint_conventions")
        if chosen:
            return tuple(chosen)
        try:
            return self.sessions(tracked.site).site.requeue.checkpoint_conventions or None
        except SlurmkitError:
            return None

    def _transient_codes(self, tracked: Tracked):
        """The site's transient exit codes, plus the job's own (``--transient-exit``)."""
        codes = set(tracked.budget.get("transient_exit_codes", ()))
        try:
            codes.update(self.sessions(tracked.site).site.requeue.transient_exit_codes)
        except SlurmkitError:
            pass
        return codes

    def _submit(self, active: List[Tracked], report: CycleReport) -> None:
        now = self.clock.time()
        waiting = [t.current.not_before for t in active
                   if t.current is not None and t.current.phase == "intent" and t.current.not_before > now]
        report.next_due = min(waiting) if waiting else None
        intents = [(t, t.current) for t in active
                   if t.current is not None and t.current.phase == "intent" and t.current.not_before <= now]
        for (site, cluster), items in self._groups(intents).items():
            if not self._cluster_ready(site, cluster):
                continue
            try:
                backend = self.sessions(site).backend(cluster)
                # After a crash, sbatch may have run for an intent: its token is in a job's comment.
                tokens = {"slurmkit:" + a.token: a for _, a in items}
                user = self.account(site, cluster)
                existing = {j.comment: j for j in backend.jobs(user=user) if j.comment in tokens}
                unseen = [a for _, a in items if "slurmkit:" + a.token not in existing and a.id not in self._planned]
                if unseen and backend.has_accounting():
                    # squeue forgets a job MinJobAge after it ended: a job that a crashed daemon's
                    # sbatch made, and that ran and ended while no daemon was up, is only in
                    # accounting.  One sacct for all of them, back to the oldest intent.
                    back = now - min(a.created for a in unseen) + ACCOUNTING_MARGIN_S
                    for job in backend.accounting_since(back, user):
                        if job.comment in tokens and job.comment not in existing:
                            existing[job.comment] = job
            except SlurmkitError as exc:
                if not self._fail_over(items, exc, report):
                    self._cluster_failed(site, cluster, exc, report)
                continue
            for tracked, attempt in items:
                job = existing.get("slurmkit:" + attempt.token)
                if job is not None:
                    self.journal.submitted(attempt.id, job.job_id)
                    report.restarted.append((tracked.id, "%s:%s" % (cluster, job.job_id)))
                    continue
                self._submit_one(tracked, attempt, cluster, report)

    def _submit_one(self, tracked: Tracked, attempt: Attempt, cluster: str, report: CycleReport) -> bool:
        try:
            where, job_id = self.submit_attempt(tracked, attempt, cluster)
        except SlurmkitError as exc:
            if exc.may_have_run:
                # The answer was lost: the next cycle finds the job by its token on this
                # same cluster; never fail over (that could make two).
                self._planned.discard(attempt.id)
                report.errors.append("job %d attempt %d: outcome of the submission unknown (%s); checking its token "
                                     "next cycle" % (tracked.id, attempt.number, exc))
            elif _unreachable(exc) and self._fail_over([(tracked, attempt)], exc, report):
                pass
            else:
                self._cluster_failed(tracked.site, cluster, exc, report)
            return False
        self.journal.submitted(attempt.id, job_id, cluster=where)
        report.restarted.append((tracked.id, "%s:%s" % (where, job_id)))
        report.changed = True
        return True

    def _fail_over(self, items, exc, report: CycleReport) -> bool:
        """Submit to another cluster sharing the checkpoint directory; True when every item went somewhere."""
        moved = True
        for tracked, attempt in items:
            others = [c for c in tracked.shared_clusters if c != attempt.cluster]
            for other in others:
                if not self._cluster_ready(tracked.site, other):
                    continue
                self.journal.event(tracked.id, "attempt %d: cluster %s unreachable (%s); submitting to %s, which "
                                               "shares the checkpoint directory" % (attempt.number, attempt.cluster,
                                                                                     exc, other))
                if self._submit_one(tracked, attempt, other, report):
                    break
            else:
                moved = False
        return moved and bool(items)


def _unreachable(exc: SlurmkitError) -> bool:
    from slurmkit.errors import RemoteError, SlurmUnavailableError

    return isinstance(exc, (RemoteError, SlurmUnavailableError))


def _end_of(job) -> Optional[float]:
    from slurmkit.times import slurm_time_seconds

    if job.start_time is None or not job.time_limit:
        return None
    try:
        limit = slurm_time_seconds(job.time_limit)
    except ValueError:
        return None
    return None if limit is None else job.start_time.timestamp() + limit


def _view(a: Attempt) -> policy.AttemptView:
    return policy.AttemptView(number=a.number, state=a.state, exit_code=a.exit_code, signal=a.signal,
                              reason=a.reason, nodes=tuple(_expand_nodes({a.nodes} if a.nodes else set())),
                              started_at=a.started_at, ended_at=a.ended_at, resume_step=a.resume_step,
                              cause=a.cause or None, ended_by=a.ended_by or "")


def progress_marker(checkpoint_dir: str) -> str:
    """What changes while an attempt makes progress: the time of its heartbeat directory (each beat is
    renamed into place there, whatever the job id: an array task's SLURM_JOB_ID is not A_I) and of its
    checkpoint directory (a checkpoint renamed into place, or a file saved there, changes it).  One
    attempt runs per checkpoint directory at a time.  Two stat calls per running attempt and cycle."""
    def stamp(path):
        try:
            return str(os.stat(path).st_mtime_ns)
        except OSError:
            return "-"
    from slurmkit.checkpoint import heartbeat_dir

    return "heartbeat %s checkpoints %s" % (stamp(heartbeat_dir(checkpoint_dir)), stamp(checkpoint_dir))


def _has_beaten(checkpoint_dir: str, job_id: str) -> bool:
    """Whether job ``job_id`` wrote its own heartbeat yet (one stat; an array task beats under its raw
    SLURM_JOB_ID, not ``A_I``, so it counts as not yet: the start-up allowance then holds from its start)."""
    from slurmkit.checkpoint import heartbeat_path

    return os.path.exists(heartbeat_path(checkpoint_dir, job_id))


def _expand_nodes(expressions) -> set:
    from slurmkit.slurm import hostlist

    names = set()
    for expr in expressions:
        names.update(hostlist.expand(expr) if "[" in expr or "," in expr else [expr])
    return names


def _budget(overrides: dict) -> policy.Budget:
    base = policy.Budget()
    values = dict(base.__dict__)
    per_cause = dict(base.per_cause)
    per_cause.update(overrides.get("per_cause", {}))
    values.update({k: v for k, v in overrides.items() if k != "per_cause" and k in values})
    values["per_cause"] = per_cause
    return policy.Budget(**values)


def _latest_checkpoint(directory: str, conventions=None):
    from slurmkit import checkpoint

    return checkpoint.latest(directory, conventions or checkpoint.CONVENTIONS)



class SiteSessions:
    """One Session per site file, opened on first use; SIGHUP closes them all so configs are read again."""

    def __init__(self):
        self._sessions: Dict[str, object] = {}
        self._lock = threading.Lock()

    def __call__(self, site_path: str):
        from slurmkit.session import Session
        from slurmkit.site import find_site

        with self._lock:
            if site_path not in self._sessions:
                self._sessions[site_path] = Session(find_site(site_path))
            return self._sessions[site_path]

    def close(self) -> None:
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            session.close()


def open_daemon(journal_path: Optional[str] = None, min_interval: float = 5.0,
                max_interval: float = 60.0, daemon_class: type = Daemon) -> Tuple[Daemon, SiteSessions]:
    """The daemon over the user's journal, with real sessions; the caller closes the sessions.

    ``daemon_class`` is :class:`Daemon` or a subclass (the sweeps' daemon, a layer above, passes its own)."""
    from functools import partial

    from slurmkit.requeue import tracking

    journal = Journal(journal_path)
    sessions = SiteSessions()
    daemon = daemon_class(journal, sessions=sessions, submit_attempt=partial(tracking.submit_attempt, sessions),
                          min_interval=min_interval, max_interval=max_interval)
    return daemon, sessions
