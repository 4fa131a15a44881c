"""A sweep's state, asked of Slurm: every task of its unfinished arrays, once per cluster.

**Status** (:func:`refresh`) asks each cluster once for every task of the
sweep's unfinished arrays (``squeue --array``), and accounting (``sacct``)
only for tasks the controller has forgotten, clusters in parallel; what it
learns goes into the journal, so finished arrays are never asked about again.
"""

import os
from typing import Dict, FrozenSet, Iterable, List, NamedTuple, Optional, Sequence, Set, Tuple

from slurmkit.errors import SlurmkitError
from slurmkit.slurm.types import FINISHED_STATES, TaskInfo
from slurmkit.sweep.journal import ArrayRecord, Journal, PointRecord, StateUpdate, SweepBusy, SweepRecord

# Ended without completing: what `sweep status --failed` lists and `sweep rerun --failed` runs again.
FAILED_STATES = FINISHED_STATES - {"COMPLETED"}
# Not in Slurm (never submitted), or forgotten by Slurm before slurmkit saw its end.
UNSUBMITTED, UNKNOWN = "UNSUBMITTED", "UNKNOWN"
_ERROR_TAIL_BYTES = 2048


def is_live(state: str) -> bool:
    """Queued or running in Slurm (may still run): never submitted a second time."""
    return state not in FINISHED_STATES and state not in (UNSUBMITTED, UNKNOWN)


class SweepStatus(NamedTuple):
    sweep: SweepRecord
    points: List[PointRecord]
    arrays: List[ArrayRecord]
    unreachable: Dict[str, str]        # cluster -> why it could not be asked
    in_queue: Set[str]                 # points whose task the controller still has (requeue-able)
    queries: Dict[str, int]            # cluster -> Slurm commands this refresh ran there

    def counts(self) -> Dict[str, int]:
        out: Dict[str, int] = {}
        for p in self.points:
            out[p.state] = out.get(p.state, 0) + 1
        return dict(sorted(out.items()))

    def array_of(self, point: PointRecord) -> Optional[ArrayRecord]:
        return next((a for a in self.arrays if a.id == point.array_id), None)

    def task_name(self, point: PointRecord) -> str:
        array = self.array_of(point)
        if array is None or array.job_id is None:
            return ""
        return "%s:%s_%d" % (array.cluster, array.job_id, point.idx)


def point_task(journal: Journal, sweep: SweepRecord, point_ref: str) -> Tuple[str, str, int, str]:
    """(cluster, array job id, task index, point id) of a sweep's point: its id, a unique prefix of it, or
    its position (``#3``, the third point); the journal's own record, no Slurm query."""
    from slurmkit.errors import UsageError

    points = journal.points(sweep.id)
    if point_ref.startswith("#") and point_ref[1:].isdigit():
        found = [p for p in points if p.position == int(point_ref[1:]) - 1]
    else:
        found = [p for p in points if p.point_id == point_ref] or \
            [p for p in points if p.point_id.startswith(point_ref)]
    if len(found) != 1:
        raise UsageError("sweep %s has %s point %r; `slurmkit sweep status %s --json` lists them"
                         % (sweep.id, "no" if not found else "more than one", point_ref, sweep.id))
    point = found[0]
    array = next((a for a in journal.arrays(sweep.id) if a.id == point.array_id), None)
    if array is None or array.job_id is None or point.idx is None:
        raise UsageError("point %s of sweep %s has not been submitted yet" % (point.point_id, sweep.id))
    return array.cluster, array.job_id, point.idx, point.point_id


def point_log(sweep: SweepRecord, point_id: str, stream: str = "out") -> str:
    """Where a point's program writes (the sweep script appends every attempt's output there)."""
    import os

    return os.path.join(sweep.sweep_dir, "points", point_id, "output.log" if stream == "out" else "error.log")


def _reconcile_intents(session, journal: Journal, intents: Sequence[ArrayRecord]) -> None:
    """Arrays whose sbatch ran without the journal learning its id (a crash, a lost answer): found by token."""
    for array in intents:
        backend = session.backend(array.cluster)
        from slurmkit.jobs import account_on

        answer = backend.array_tasks(user=account_on(session.site.cluster(array.cluster)))
        # An array whose every task was cancelled before starting is only its own record's line.
        seen = answer.tasks + list(answer.unstarted.values())
        found = next((t for t in seen if t.comment == "slurmkit:" + array.token), None)
        if found is not None:
            journal.submitted(array.id, found.array_job_id)
        else:
            journal.refused(array.id, "not in Slurm after an interrupted submission")


class TaskAnswer(NamedTuple):
    """One cluster's answer about many arrays' tasks (:func:`query_tasks`), possibly shared by many sweeps."""

    found: Dict[Tuple[str, int], TaskInfo]            # (array id, index) -> task, from squeue or accounting
    queued: Set[Tuple[str, int]]                       # the tasks squeue listed (the controller still has them)
    count: int                                         # Slurm commands it took (1 or 2)
    unstarted: Dict[str, TaskInfo]                     # see slurmkit.slurm.parsers.parse_unstarted_arrays
    asked: FrozenSet[Tuple[str, int]]                  # the tasks it was asked about


def tasks_to_ask(journal: Journal, sweep: SweepRecord, also: Iterable[str] = ()):
    """({cluster: {(array id, index): point}}, {cluster: has accounting}): what :func:`refresh` asks Slurm."""
    arrays = journal.arrays(sweep.id)
    by_id = {a.id: a for a in arrays}
    extra = set(also)
    asked: Dict[str, Dict[Tuple[str, int], PointRecord]] = {}
    for p in journal.points(sweep.id):
        array = by_id.get(p.array_id) if p.array_id is not None else None
        if array is None or array.phase != "submitted":
            continue
        if is_live(p.state) or p.point_id in extra:
            asked.setdefault(array.cluster, {})[(array.job_id, p.idx)] = p
    return asked, {a.cluster: bool(a.accounting) for a in arrays}


def query_tasks(session, cluster: str, wanted: Iterable[Tuple[str, int]], accounting: bool) -> TaskAnswer:
    """These tasks (of one sweep, or of many: the requeue daemon asks once for all its sweeps), in one
    ``squeue --array`` of their arrays, plus one ``sacct`` for those it forgot where there is accounting."""
    backend = session.backend(cluster)
    wanted = frozenset(wanted)
    ids = sorted({key[0] for key in wanted}, key=int)
    tasks, unstarted = backend.array_tasks(ids)
    count = 1
    found = {t.key: t for t in tasks if t.key in wanted}
    queued = set(found)
    missing = [k for k in wanted if k not in found]
    if missing and accounting:
        count += 1
        forgotten = sorted({k[0] for k in missing}, key=int)
        for t in backend.array_tasks_accounting(forgotten):
            if t.key in wanted and t.key not in found:
                found[t.key] = t
    return TaskAnswer(found, queued, count, unstarted, wanted)


def refresh(session, journal: Journal, sweep: SweepRecord, reconcile: bool = False,
            also: Iterable[str] = (), answered: Optional[Dict[str, object]] = None) -> SweepStatus:
    """Ask each cluster once about the sweep's unfinished tasks (and those of ``also``), record the answers.

    ``reconcile`` settles arrays left as intents (only under the sweep's
    lock: a submission in progress has intents too).  ``answered`` is
    {cluster: :class:`TaskAnswer` or the SlurmkitError the query raised}
    already asked for many sweeps at once (the requeue daemon: one query per
    cluster per cycle, whatever the number of sweeps); a cluster it lacks, or
    whose answer does not cover every task this sweep asks about now (the
    journal changed in between), is asked here.
    """
    from slurmkit import results

    arrays = journal.arrays(sweep.id)
    intents = [a for a in arrays if a.phase == "intent"]
    if intents and reconcile:
        _reconcile_intents(session, journal, intents)
    asked, accounting = tasks_to_ask(journal, sweep, also)

    def ask(cluster):
        shared = (answered or {}).get(cluster)
        if isinstance(shared, SlurmkitError):
            raise shared
        if shared is not None and shared.asked.issuperset(asked[cluster]):
            return shared.found, shared.queued, 0, shared.unstarted
        answer = query_tasks(session, cluster, asked[cluster], accounting.get(cluster, False))
        return answer.found, answer.queued, answer.count, answer.unstarted

    answers = results.each(asked, ask)
    updates: List[StateUpdate] = []
    in_queue: Set[str] = set()
    unreachable = {c: str(e) for c, e in answers.failed.items()}
    queries = {}
    for cluster, outcome in answers.succeeded.items():
        found, queued, count, unstarted = outcome
        queries[cluster] = count
        lost = {p.point_id: key for key, p in asked[cluster].items() if key not in found and is_live(p.state)}
        # An ended task whose exit Slurm does not say (a release that prints it otherwise): the task's own record.
        # (A task that never ran has no record at its placement, so it keeps saying nothing.)
        silent = {p.point_id: key for key, p in asked[cluster].items() if key in found and
                  found[key].state in FINISHED_STATES and found[key].exit_code is None and found[key].signal is None}
        recorded = _recorded_ends(session, cluster, sweep, dict(lost, **silent)) if lost or silent else {}
        for pid, key in silent.items():
            if pid in recorded:
                found[key] = found[key]._replace(exit_code=recorded[pid].exit_code, signal=recorded[pid].signal)
        for key, p in asked[cluster].items():
            task = found.get(key) or (recorded.get(p.point_id) if p.point_id in lost else None)
            if task is None and p.state == "PENDING" and key[0] in unstarted:
                # Never seen to start, no line or record of its own, and its array's record (which holds
                # the tasks that never started) has ended: it ended with it, without running.  Without
                # this a cancelled pending task would wait for accounting (or, without, be UNKNOWN).
                task = TaskInfo(key[0], key[1], key[0], unstarted[key[0]].state,
                                "ended with its array's pending tasks, before it started")
            if key in queued:
                in_queue.add(p.point_id)
            if task is not None:
                updates.append(StateUpdate(p.point_id, task.state, task.exit_code, task.signal, task.reason,
                                           task.nodes or p.nodes, task.job_id or p.task_job_id, task.restarts))
            elif is_live(p.state):
                why = ("Slurm no longer knows task %s_%d and cluster %s keeps no accounting" % (key[0], key[1], cluster)
                       if not accounting.get(cluster) else "Slurm has no record of task %s_%d" % key)
                updates.append(StateUpdate(p.point_id, UNKNOWN, reason=why, nodes=p.nodes,
                                           task_job_id=p.task_job_id, restarts=p.restarts))
    journal.record_states(sweep.id, updates)
    return SweepStatus(sweep, journal.points(sweep.id), journal.arrays(sweep.id), unreachable, in_queue, queries)


def _recorded_ends(session, cluster: str, sweep: SweepRecord,
                   lost: Dict[str, Tuple[str, int]]) -> Dict[str, TaskInfo]:
    """How tasks Slurm forgot ended, from the ``exit.status`` their job script wrote into each point's
    directory (``STATUS A_I RESTARTS``); only a record of the task the journal places the point at counts."""
    paths = {os.path.join(sweep.sweep_dir, "points", pid, "exit.status"): pid for pid in lost}
    try:
        texts = session.files(cluster).tails(paths, 200)
    except SlurmkitError:
        return {}
    out = {}
    for path, text in texts.items():
        pid = paths.get(path)
        fields = text.split()
        if pid is None or len(fields) != 3 or not fields[0].isdigit():
            continue
        array_id, index = lost[pid]
        if fields[1] != "%s_%d" % (array_id, index):
            continue          # an older attempt's record, at another placement
        status_ = int(fields[0])
        reason = "" if fields[0] == "0" else "as the task recorded it (Slurm no longer knows the task)"
        if status_ > 128:
            out[pid] = TaskInfo(array_id, index, "", "FAILED", reason, None, status_ - 128,
                                restarts=int(fields[2]) if fields[2].isdigit() else 0)
        else:
            out[pid] = TaskInfo(array_id, index, "", "COMPLETED" if status_ == 0 else "FAILED", reason,
                                status_, None, restarts=int(fields[2]) if fields[2].isdigit() else 0)
    return out


def status(session, sweep_id: str, journal: Optional[Journal] = None) -> SweepStatus:
    """The sweep with every task's state, asked of Slurm now (one query per cluster)."""
    own = journal is None
    journal = journal or Journal()
    try:
        sweep = journal.find(sweep_id)
        try:
            with journal.locked(sweep.id, wait=0):
                return refresh(session, journal, sweep, reconcile=True)
        except SweepBusy:
            return refresh(session, journal, sweep)      # a submission is under way: leave its intents
    finally:
        if own:
            journal.close()


def error_tails(session, status: SweepStatus, point_ids: Iterable[str], lines: int = 5) -> Dict[str, str]:
    """The last lines of each point's error output (its error.log): read here, or one command per cluster."""
    wanted = set(point_ids)
    by_cluster: Dict[str, Dict[str, str]] = {}
    for p in status.points:
        array = status.array_of(p)
        if p.point_id in wanted and array is not None:
            path = os.path.join(status.sweep.sweep_dir, "points", p.point_id, "error.log")
            by_cluster.setdefault(array.cluster, {})[path] = p.point_id
    out: Dict[str, str] = {}
    for cluster, paths in by_cluster.items():
        try:
            texts = session.files(cluster).tails(paths, _ERROR_TAIL_BYTES)
        except SlurmkitError:
            continue       # a tail is a courtesy: a cluster that does not answer shows none
        for path, text in texts.items():
            if path in paths:
                out[paths[path]] = last_attempt_tail(text, lines)
    return out


def last_attempt_tail(text: str, lines: int = 5) -> str:
    """The last ``lines`` non-blank lines the latest attempt wrote (after its ``== slurmkit sweep`` line)."""
    kept = [ln for ln in text.splitlines() if ln.strip()]
    starts = [i for i, ln in enumerate(kept) if ln.startswith("== slurmkit sweep ")]
    if starts:
        kept = kept[starts[-1] + 1:]
    return "\n".join(kept[-lines:])


def canary_verdicts(session, status: SweepStatus) -> Dict[str, str]:
    """Why a canary held its array ("the first K tasks failed with exit status N ..."), by CLUSTER:ID,
    for canary arrays with held tasks (the verdict its task wrote next to the sweep)."""
    held = {p.array_id for p in status.points if p.state == "PENDING" and p.reason in ("JobHeldUser", "JobHeldAdmin")}
    out = {}
    for array in status.arrays:
        if array.canary and array.id in held:
            text = session.files(array.cluster).read(os.path.join(status.sweep.sweep_dir, "canary", array.token,
                                                                  "stopped"))
            if text:
                out["%s:%s" % (array.cluster, array.job_id)] = text.strip()
    return out
