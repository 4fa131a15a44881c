"""What is done to a submitted sweep: rerun, move, cancel, throttle, and the daemon's restart of one point.

**Rerun** (:func:`rerun`) puts failed tasks back with Slurm's own
``scontrol requeue A_I`` while the controller still has their records (same
job, same index), and otherwise resubmits them as a sparse array
(``--array=3,17,42``) of the same points table; never renumbered.

**Auto-requeue** (``SweepRequest.auto_requeue``): every task is tracked by
the requeue daemon (:mod:`slurmkit.sweep.tracked`), which restarts single
tasks through :func:`restart_point` (:mod:`slurmkit.sweep.autorequeue`);
such tasks are never put back with ``scontrol requeue`` (submitted
``--no-requeue``): a rerun by hand is a sparse array, tracked anew.
"""

import json
import os
from typing import Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

from slurmkit.errors import SlurmkitError, UsageError
from slurmkit.slurm.types import FINISHED_STATES
from slurmkit.sweep import arrays as arr
from slurmkit.sweep import points as pts
from slurmkit.sweep.journal import Journal, PointRecord, SweepRecord
from slurmkit.sweep.state import FAILED_STATES, UNKNOWN, SweepStatus, is_live, refresh
from slurmkit.sweep.submission import (ArraySubmission, Submitter, auto_requeue_of, check_job_records, place,
                                       requeue_tasks, resubmit_sparse, spec_from, submit_new)


class RerunReport(NamedTuple):
    sweep_id: str
    arrays: List[ArraySubmission]
    points: List[str]                  # rerun
    skipped_live: List[str]            # asked for, but queued or running: not rerun
    released: List[str]                # held arrays released (a canary's hold)
    warnings: List[str]

    def to_dict(self):
        return {"sweep": self.sweep_id, "submitted": [a.to_dict() for a in self.arrays], "points": self.points,
                "skipped_live": self.skipped_live, "released": self.released, "warnings": self.warnings}


def select_points(status: SweepStatus, failed: bool = False, point_ids: Sequence[str] = ()) -> List[PointRecord]:
    """The points ``--failed`` (ended without completing) or ``--points`` (ids or unique prefixes) name."""
    if point_ids:
        chosen = []
        for text in point_ids:
            matches = [p for p in status.points if p.point_id.startswith(text)]
            if len(matches) != 1:
                raise UsageError("--points %s: %s" % (text, "no point of sweep %s has that id" % status.sweep.id
                                                      if not matches else "several points start with it"))
            chosen.append(matches[0])
        return chosen
    if failed:
        return [p for p in status.points if p.state in FAILED_STATES]
    return list(status.points)


def rerun(session, sweep_id: str, failed: bool = True, point_ids: Sequence[str] = (),
          journal: Optional[Journal] = None) -> RerunReport:
    """Run again the failed points (or the given ones) of a sweep: requeued where Slurm still has their
    tasks, else a sparse array of the same table; arrays a canary held are released."""
    own = journal is None
    journal = journal or Journal()
    try:
        sweep = journal.find(sweep_id)
        with journal.locked(sweep.id):
            return _rerun_locked(session, journal, sweep, failed, point_ids)
    finally:
        if own:
            journal.close()


def _rerun_locked(session, journal, sweep, failed, point_ids) -> RerunReport:
    before = journal.points(sweep.id)
    candidates = {p.point_id for p in before if p.state in FAILED_STATES or p.state == UNKNOWN}
    status = refresh(session, journal, sweep, reconcile=True,
                     also=candidates | {p.point_id for p in before if any(p.point_id.startswith(t) for t in point_ids)})
    warnings = ["cluster %s not reachable: %s" % kv for kv in status.unreachable.items()]
    chosen = select_points(status, failed=failed, point_ids=point_ids)
    live = [p.point_id for p in chosen if is_live(p.state)]
    never = [p.point_id for p in chosen if p.array_id is None]
    lost = [p for p in status.points if p.state == UNKNOWN]
    if failed and not point_ids and lost:
        warnings.append("%d point(s) are UNKNOWN (Slurm forgot them before their end was seen, and they left no "
                        "exit.status): name them with --points to run them again" % len(lost))
    if never:
        warnings.append("%d point(s) were never submitted; submit the sweep's command again to place them"
                        % len(never))
    todo = [p for p in chosen if not is_live(p.state) and p.array_id is not None]
    spec = spec_from(sweep.spec)
    used = pts.check_command(spec.command, sweep.params)
    track = auto_requeue_of(sweep)
    submitter = Submitter(session, journal, sweep, spec, used, sweep.params, track=track)
    in_queue = [p for p in todo if p.point_id in status.in_queue and track is None]
    requeued = requeue_tasks(session, journal, sweep, in_queue, warnings)
    rest = [p for p in todo if p.point_id not in requeued.point_ids]
    resubmit_sparse(journal, sweep, submitter, rest, {}, sweep.max_running)
    released = _release_held(session, journal, sweep, status)
    journal.event(sweep.id, "rerun: %d point(s); arrays %s" % (len(todo), ", ".join(
        a.ref for a in requeued.submissions + submitter.done) or "none"))
    return RerunReport(sweep.id, requeued.submissions + submitter.done, [p.point_id for p in todo], live, released,
                       warnings)


def _release_held(session, journal: Journal, sweep: SweepRecord, status: SweepStatus) -> List[str]:
    """Release arrays whose pending tasks a canary held, and clear its verdict so it can pass this time."""
    held: Dict[str, Set[str]] = {}
    for p in status.points:
        array = status.array_of(p)
        # A user's own hold reads JobHeldUser; root's (the local test clusters) JobHeldAdmin.
        if array is not None and p.state == "PENDING" and p.reason in ("JobHeldUser", "JobHeldAdmin"):
            held.setdefault(array.cluster, set()).add(array.job_id)
    released = []
    for cluster, ids in held.items():
        for array in status.arrays:
            if array.cluster == cluster and array.job_id in ids and array.canary:
                stopped = os.path.join(sweep.sweep_dir, "canary", array.token, "stopped")
                failures = os.path.join(sweep.sweep_dir, "canary", array.token, "failures")
                session.files(cluster).remove([stopped, failures])
        session.backend(cluster).release(sorted(ids, key=int))
        released.extend("%s:%s" % (cluster, i) for i in sorted(ids, key=int))
    return released


class MoveReport(NamedTuple):
    sweep_id: str
    moved: List[str]                   # points cancelled while pending on the blocked cluster, submitted elsewhere
    not_moved: List[str]               # asked to cancel but still queued or running there (they stay)
    arrays: List[ArraySubmission]
    warnings: List[str]

    def to_dict(self):
        return {"sweep": self.sweep_id, "moved": self.moved, "not_moved": self.not_moved,
                "submitted": [a.to_dict() for a in self.arrays], "warnings": self.warnings}


def move(session, sweep_id: str, source: str, target: Optional[str] = None, partition: Optional[str] = None,
         journal: Optional[Journal] = None) -> MoveReport:
    """Move a sweep's pending tasks off a cluster that stays blocked: cancel them there (one scancel),
    ask Slurm which really ended without running, and submit only those elsewhere (``target``: a
    cluster, a comma list or ``auto``, default every other cluster of the site), split as a new
    submission is.  A point is never queued on two clusters at once: one that started meanwhile stays."""
    own = journal is None
    journal = journal or Journal()
    try:
        sweep = journal.find(sweep_id)
        source = session.site.cluster(source).name
        with journal.locked(sweep.id):
            return _move_locked(session, journal, sweep, source, target, partition)
    finally:
        if own:
            journal.close()


def _move_locked(session, journal, sweep, source, target, partition) -> MoveReport:
    status = refresh(session, journal, sweep, reconcile=True)
    if source in status.unreachable:
        raise SlurmkitError("cluster %s cannot be asked which tasks are pending (%s); nothing was moved"
                            % (source, status.unreachable[source]))
    pending = [p for p in status.points if p.state == "PENDING" and status.array_of(p) is not None
               and status.array_of(p).cluster == source]
    if not pending:
        raise UsageError("sweep %s has no pending tasks on cluster %s" % (sweep.id, source))
    others = [c for c in session.site.clusters if c != source]
    target = target or ",".join(others)
    if not target:
        raise UsageError("the site has no other cluster to move the tasks to")
    names = ["%s_%d" % (status.array_of(p).job_id, p.idx) for p in pending]
    session.backend(source).cancel(names)
    after = {p.point_id: p for p in refresh(session, journal, sweep, also=[p.point_id for p in pending]).points}
    # Only what Slurm now says has ended may run elsewhere: never two copies of a point at once.
    gone = [after[p.point_id] for p in pending if after[p.point_id].state in FINISHED_STATES]
    stayed = [p.point_id for p in pending if p not in gone and after[p.point_id].state not in FINISHED_STATES]
    warnings = []
    if stayed:
        warnings.append("%d task(s) on cluster %s started or did not take the cancel; they stay there"
                        % (len(stayed), source))
    spec = spec_from(sweep.spec)
    used = pts.check_command(spec.command, sweep.params)
    submitter = Submitter(session, journal, sweep, spec, used, sweep.params, track=auto_requeue_of(sweep))
    moved_points = [pts.make_point(p.vals) for p in gone]
    if moved_points:
        placements, more = place(session, submitter.spec, len(moved_points), target, partition, sweep.max_running)
        warnings += more
        check_job_records(submitter, placements, warnings)
        at = 0
        for placement in placements:
            submit_new(submitter, placement, moved_points[at:at + placement.count], None)
            at += placement.count
    journal.event(sweep.id, "moved %d pending point(s) from %s to %s; %d stayed" % (
        len(gone), source, ", ".join(a.ref for a in submitter.done) or "nowhere", len(stayed)))
    return MoveReport(sweep.id, [p.point_id for p in gone], stayed, submitter.done, warnings)


def restart_point(session, journal: Journal, sweep_id: str, point_id: str, tracked_job, attempt,
                  still_tracked=lambda: True) -> Tuple[str, str]:
    """Submit the requeue daemon's next attempt of an auto-requeue sweep's point; (cluster, ``A_I``).

    A one-task sparse array of the point's table on its cluster: the same
    index, output files and checkpoint directory, rendered with what the
    daemon decided (``SLURMKIT_RESUME_FROM``, ``SLURMKIT_ATTEMPT``, the nodes to
    keep off) and the attempt's token, recorded in the sweep's journal so
    ``sweep status`` shows the point's latest attempt.  Under the sweep's lock
    the point is looked at first: one that is queued or running, placed again
    since this attempt's predecessor (a rerun, a move), or no longer tracked
    (a cancel) is not submitted; its current placement is returned instead,
    so a point never runs twice at once.
    """
    from slurmkit.requeue.tracking import attempt_spec

    sweep = journal.find(sweep_id)
    with journal.locked(sweep.id):
        point = next((p for p in journal.points(sweep.id) if p.point_id == point_id), None)
        arrays = {a.id: a for a in journal.arrays(sweep.id)}
        array = arrays.get(point.array_id) if point is not None and point.array_id is not None else None
        if array is None or array.job_id is None:
            raise SlurmkitError("sweep %s has no placed point %s to restart" % (sweep.id, point_id))
        current = "%s_%d" % (array.job_id, point.idx)
        previous = tracked_job.attempts[-2] if len(tracked_job.attempts) > 1 else None
        same = previous is not None and (previous.job_id in (current, point.task_job_id) or
                                         previous.token == array.token or
                                         previous.token.startswith(array.token + "-"))
        if is_live(point.state) or not same or not still_tracked():
            journal.event(sweep.id, "requeue daemon: point %s not restarted: it is %s as %s:%s" % (
                point_id, point.state, array.cluster, current))
            return array.cluster, current
        part = session.site.partition(session.site.cluster(array.cluster), array.partition)
        spec = attempt_spec(tracked_job, attempt, part.max_nodes)
        used = pts.check_command(spec.command, sweep.params)
        submitter = Submitter(session, journal, sweep, spec, used, sweep.params, supersede=False)
        row = submitter.row(point.idx, pts.make_point(point.vals))
        _, done = submitter.submit(array.cluster, array.partition, [row], None, table_of=array.table_id,
                                   kind="rerun", token=attempt.token)
        journal.event(sweep.id, "requeue daemon: point %s attempt %d (%s) as %s:%s_%d%s" % (
            point_id, attempt.number, "from " + attempt.resume_from if attempt.resume_from else "from the start",
            array.cluster, done.job_id, point.idx, ", keeping off " + ",".join(spec.exclude) if spec.exclude else ""))
        return array.cluster, "%s_%d" % (done.job_id, point.idx)


class CancelReport(NamedTuple):
    sweep_id: str
    cancelled: List[str]               # arrays asked to cancel (CLUSTER:ID)
    tasks: int                         # live tasks among them
    warnings: List[str]


def cancel(session, sweep_id: str, journal: Optional[Journal] = None) -> CancelReport:
    """Cancel every live task of the sweep: one ``scancel`` of its arrays per cluster."""
    own = journal is None
    journal = journal or Journal()
    try:
        sweep = journal.find(sweep_id)
        with journal.locked(sweep.id):
            from slurmkit.sweep import tracked

            # First: the requeue daemon must not restart what is cancelled now (nor a failure waiting to be).
            tracked.supersede(sweep.id, None, "the sweep was cancelled")
            status = refresh(session, journal, sweep, reconcile=True)
            live: Dict[str, Set[str]] = {}
            count = 0
            for p in status.points:
                array = status.array_of(p)
                if array is not None and is_live(p.state):
                    live.setdefault(array.cluster, set()).add(array.job_id)
                    count += 1
            for cluster, ids in live.items():
                session.backend(cluster).cancel(sorted(ids, key=int))
            refresh(session, journal, sweep)
            cancelled = ["%s:%s" % (c, i) for c, ids in live.items() for i in sorted(ids, key=int)]
            journal.event(sweep.id, "cancelled: %s" % (", ".join(cancelled) or "nothing live"))
            return CancelReport(sweep.id, cancelled, count,
                                ["cluster %s not reachable: %s" % kv for kv in status.unreachable.items()])
    finally:
        if own:
            journal.close()


def throttle(session, sweep_id: str, max_running: int, journal: Optional[Journal] = None) -> Dict[str, int]:
    """Set how many tasks of the sweep run at once: split between its live arrays (each at least 1),
    in proportion to their unfinished tasks; ``scontrol update ArrayTaskThrottle`` per array."""
    if max_running < 1:
        raise UsageError("the number of tasks at once must be at least 1")
    own = journal is None
    journal = journal or Journal()
    try:
        sweep = journal.find(sweep_id)
        with journal.locked(sweep.id):
            status = refresh(session, journal, sweep, reconcile=True)
            live: Dict[int, int] = {}
            for p in status.points:
                if p.array_id is not None and is_live(p.state):
                    live[p.array_id] = live.get(p.array_id, 0) + 1
            if not live:
                raise UsageError("sweep %s has no queued or running tasks" % sweep.id)
            ids = sorted(live)[:max_running]
            shares = arr.split_total(max_running, [live[i] for i in ids])
            by_id = {a.id: a for a in status.arrays}
            out = {}
            for array_id, share in zip(ids, shares):
                array = by_id[array_id]
                session.backend(array.cluster).update_jobs([array.job_id], ArrayTaskThrottle=share)
                journal.set_throttle(array_id, share)
                out["%s:%s" % (array.cluster, array.job_id)] = share
            return out
    finally:
        if own:
            journal.close()


def write_points_file(path: str, records: Sequence[PointRecord]) -> int:
    """The points as a ``--sweep-file`` (JSON lines of their values); returns how many."""
    text = "".join(json.dumps(dict(r.vals), ensure_ascii=False) + "\n" for r in records)
    if path == "-":
        import sys

        sys.stdout.write(text)
    else:
        from slurmkit.textfile import write_atomic

        write_atomic(path, text)
    return len(records)
