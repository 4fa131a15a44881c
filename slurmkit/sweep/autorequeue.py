"""The requeue daemon with sweeps: tasks of ``submit --sweep ... --auto-requeue`` restarted one by one.

:class:`SweepDaemon` is the requeue daemon (:class:`slurmkit.requeue.daemon.Daemon`:
the same journal, policy, budgets, backoff, excluded nodes and intents with
tokens) with two differences for the tracked jobs that are a sweep's points
(:mod:`slurmkit.sweep.tracked`):

- **poll**: one ``squeue --array`` per cluster for the unfinished tasks of
  every sweep together (plus one ``sacct`` for tasks it forgot, where there
  is accounting), whatever the number of sweeps (``sweep status`` asks per
  sweep); each sweep's refresh then reads its own tasks from that answer
  (and the tasks' own ``exit.status`` records for tasks Slurm forgot), under
  the sweep's lock; a sweep a user's command is working on is polled next
  cycle.  Each task's start and end come from that answer (squeue's
  StartTime/EndTime), so the policy's crash-loop rule (failing soon after
  starting) applies to tasks as to plain jobs.  Plain tracked jobs keep
  the daemon's own batched query (``jobs_by_id``), so a cluster with both
  costs that query too;
- **submit**: a restart is a one-task sparse array of the point's table
  (:func:`slurmkit.sweep.actions.restart_point`): the point keeps its index,
  output and checkpoint directory, resumes from the checkpoint the policy
  chose, and the sweep's journal records it as the point's latest attempt.

Other tracked jobs go through the daemon unchanged.  ``slurmkit daemon
run|once`` use :func:`open_daemon`.
"""

from typing import List, Optional, Tuple

from slurmkit.errors import SlurmkitError
from slurmkit.requeue.daemon import CycleReport, Daemon
from slurmkit.requeue.journal import Tracked
from slurmkit.sweep.tracked import point_of


class SweepDaemon(Daemon):
    """The requeue daemon, polling and restarting sweep points through their sweep (module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._submit_plain = self.submit_attempt
        self.submit_attempt = self._submit_attempt

    def _poll(self, active: List[Tracked], report: CycleReport) -> None:
        super()._poll([t for t in active if point_of(t) is None], report)
        points = [t for t in active if point_of(t) is not None and t.current is not None
                  and t.current.phase == "submitted"]
        if points:
            self._poll_points(points, report)

    def _poll_points(self, items: List[Tracked], report: CycleReport) -> None:
        from slurmkit.slurm.types import FINISHED_STATES
        from slurmkit.sweep import state
        from slurmkit.sweep.journal import Journal, SweepBusy

        groups = {}
        for t in items:
            groups.setdefault((t.site, point_of(t)[0]), []).append(t)
        journal = Journal()
        progressed = []          # (attempt id, progress marker, seen at): see Daemon._watch_progress
        try:
            sweeps = {}
            for (site, sweep_id), group in groups.items():
                sweep = journal.sweep(sweep_id)
                if sweep is None:
                    report.errors.append("sweep %s of %d tracked point(s) is not in %s" % (
                        sweep_id, len(group), journal.path))
                    continue
                sweeps[(site, sweep_id)] = sweep
            answered = self._ask_clusters(journal, sweeps, report)
            for (site, sweep_id), sweep in sweeps.items():
                group = groups[(site, sweep_id)]
                try:
                    session = self.sessions(site)
                    with journal.locked(sweep.id, wait=0):
                        status = state.refresh(session, journal, sweep, reconcile=True,
                                               answered=answered.get(site, {}))
                except SweepBusy:
                    continue       # a user's command is working on the sweep: next cycle
                except SlurmkitError as exc:
                    report.errors.append("sweep %s: %s" % (sweep.id, exc))
                    continue
                for cluster, why in status.unreachable.items():
                    report.errors.append("sweep %s: cluster %s: %s" % (sweep.id, cluster, why))
                points = {p.point_id: p for p in status.points}
                arrays = {a.id: a for a in status.arrays}
                now = self.clock.time()
                for t in group:
                    p = points.get(point_of(t)[1])
                    array = arrays.get(p.array_id) if p is not None else None
                    if array is None or array.cluster in status.unreachable:
                        continue
                    attempt = t.current
                    if not _is_placement(attempt, array, p):
                        # Placed again without this tracking being stopped (an interrupted command):
                        # the new placement is the user's; never restart the old one.
                        self.journal.stop(t.id, "point %s was placed again (%s:%s_%d)" % (
                            p.point_id, array.cluster, array.job_id, p.idx))
                        report.changed = True
                        continue
                    report.polled[array.cluster] = report.polled.get(array.cluster, 0) + 1
                    # When the task started and ended, from the shared answer (squeue's StartTime/EndTime):
                    # the policy's crash-loop rule counts tasks that fail soon after starting.
                    shared = answered.get(site, {}).get(array.cluster)
                    task = shared.found.get((array.job_id, p.idx)) if isinstance(shared, state.TaskAnswer) else None
                    started = task.start_time if task is not None else None
                    if p.state in FINISHED_STATES:
                        ended = task.end_time if task is not None and task.state == p.state else None
                        self.journal.finished(attempt.id, state=p.state, exit_code=p.exit_code, signal=p.signal,
                                              nodes=p.nodes, reason=p.reason, started_at=started,
                                              ended_at=ended or now)
                        report.finished.append((t.id, p.state))
                        report.changed = True
                    else:
                        if state.is_live(p.state) and (p.state != attempt.state or p.nodes != attempt.nodes
                                                       or (started is not None and attempt.started_at is None)):
                            self.journal.observed(attempt.id, state=p.state, nodes=p.nodes, started_at=started)
                            report.changed = True
                        if p.state == "RUNNING":
                            self._watch_progress(t, attempt, session.backend(array.cluster), report, progressed)
            self.journal.progressed(progressed)
        finally:
            journal.close()

    def _ask_clusters(self, journal, sweeps, report: CycleReport):
        """{site: {cluster: TaskAnswer or the error}}: one query per cluster for the tasks of every sweep.

        ``sweep status`` asks per sweep; the daemon, polling many sweeps every
        cycle, asks each cluster once about the union of their unfinished
        tasks (one ``squeue --array``, plus one ``sacct`` for tasks it forgot
        where there is accounting), and each sweep's refresh reads its own
        tasks from that answer.
        """
        from slurmkit.sweep import state

        wanted, accounting = {}, {}
        for (site, _), sweep in sweeps.items():
            asked, has_accounting = state.tasks_to_ask(journal, sweep)
            for cluster, keys in asked.items():
                wanted.setdefault((site, cluster), set()).update(keys)
                accounting[(site, cluster)] = accounting.get((site, cluster), False) or has_accounting.get(cluster,
                                                                                                           False)
        answered = {}
        for (site, cluster), keys in wanted.items():
            try:
                answer = state.query_tasks(self.sessions(site), cluster, keys, accounting[(site, cluster)])
            except SlurmkitError as exc:
                answer = exc       # each sweep reports the cluster unreachable; none asks again
            answered.setdefault(site, {})[cluster] = answer
        return answered

    def _submit_attempt(self, tracked, attempt, cluster: str) -> Tuple[str, str]:
        where = point_of(tracked)
        if where is None:
            return self._submit_plain(tracked, attempt, cluster)
        from slurmkit.sweep import actions
        from slurmkit.sweep.journal import Journal

        journal = Journal()
        try:
            return actions.restart_point(self.sessions(tracked.site), journal, where[0], where[1], tracked, attempt,
                                         still_tracked=lambda: self.journal.job(tracked.id).state == "active")
        finally:
            journal.close()


def _is_placement(attempt, array, point) -> bool:
    """Whether the point's placement in the sweep is this attempt's task (by token, else by id)."""
    if attempt.token == array.token or attempt.token.startswith(array.token + "-"):
        return True
    return attempt.job_id in ("%s_%d" % (array.job_id, point.idx), point.task_job_id, array.job_id)


def open_daemon(journal_path: Optional[str] = None, min_interval: float = 5.0,
                max_interval: float = 60.0):
    """:func:`slurmkit.requeue.daemon.open_daemon`, as a :class:`SweepDaemon`; the caller closes the sessions."""
    from slurmkit.requeue import daemon

    return daemon.open_daemon(journal_path, min_interval=min_interval, max_interval=max_interval,
                              daemon_class=SweepDaemon)
