"""Sweeps end to end: submit, status, rerun, cancel, throttle (the library's entry points).

**Submit** (:func:`submit`): the points are built and checked, the sweep's
id is derived from its name, command and ``--env`` (so submitting the same
experiment again, with an edited grid or other resources, is the *same*
sweep), and under a per-sweep lock:

- points that completed are skipped, points still queued or running are
  skipped (a point never runs twice at once), points that ended otherwise
  run again as sparse arrays of their old points table (same index), and
  new points are placed: on one cluster, or split between several in
  proportion to what each can run soonest (:func:`slurmkit.sweep.arrays.split_points`
  over the federation planner's start estimates);
- each cluster's points are cut into arrays within its ``MaxArraySize`` and
  ``max_array_tasks`` (one ``scontrol show config`` per cluster), each array
  is written to the journal (intent, with its token), submitted (one sbatch),
  and recorded; the command returns once all are submitted.

``--max-running N`` is split between clusters (each at least 1) and becomes
each array's ``%`` throttle; arrays of one cluster then run one after the
other (``--dependency=afterany``), so the cluster never runs more than its
share.  ``--canary K`` starts the first array of each cluster at throttle 1
and the others held; the first task to pass widens the throttle and releases
them, and K failures with one exit status (and no pass) hold the rest.  Both
happen inside the job (see :mod:`slurmkit.sweep.script`): nothing needs to
keep running on the login node.

**Status** (:func:`refresh`) asks each cluster once for every task of the
sweep's unfinished arrays (``squeue --array``), and accounting (``sacct``)
only for tasks the controller has forgotten, clusters in parallel; what it
learns goes into the journal, so finished arrays are never asked about again.

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

import datetime
import hashlib
import json
import os
import re
from typing import Dict, FrozenSet, Iterable, List, NamedTuple, Optional, Sequence, Set, Tuple

from slurmkit.errors import JobDoesNotFitError, SlurmCommandError, SlurmkitError, UsageError
from slurmkit.script.render import JobSpec
from slurmkit.slurm.types import FINISHED_STATES, TaskInfo
from slurmkit.sweep import arrays as arr
from slurmkit.sweep import points as pts
from slurmkit.sweep.journal import ArrayRecord, Journal, PointRecord, StateUpdate, SweepBusy, SweepRecord
from slurmkit.sweep.script import Canary, Row

# Ended without completing: what `sweep status --failed` lists and `sweep rerun --failed` runs again.
FAILED_STATES = FINISHED_STATES - {"COMPLETED"}
# Not in Slurm (never submitted), or forgotten by Slurm before slurmkit saw its end.
UNSUBMITTED, UNKNOWN = "UNSUBMITTED", "UNKNOWN"
_SAFE_NAME_RE = re.compile(r"[^A-Za-z0-9._-]+", re.ASCII)
# Variables a task gets from the sweep: --env may not set them.
_OWN_ENV_PREFIX = "SLURMKIT_SWEEP_"
_ERROR_TAIL_BYTES = 2048


def is_live(state: str) -> bool:
    """Queued or running in Slurm (may still run): never submitted a second time."""
    return state not in FINISHED_STATES and state not in (UNSUBMITTED, UNKNOWN)


class SweepRequest(NamedTuple):
    spec: JobSpec                         # the job; its command holds the placeholders
    grid: Sequence[str] = ()              # --sweep NAME=VALUES
    points_file: Optional[str] = None     # --sweep-file
    name: Optional[str] = None            # --sweep-name (default: the job name)
    cluster: Optional[str] = None         # a name, 'auto' or a comma list
    partition: Optional[str] = None
    sweep_dir: Optional[str] = None
    max_running: Optional[int] = None
    canary: Optional[int] = None
    auto_requeue: Optional[dict] = None   # the requeue budget (requeue.tracking.budget_overrides); None: off


class ArraySubmission(NamedTuple):
    cluster: str
    job_id: str
    indices: str            # the --array value, throttle included
    tasks: int
    kind: str               # "new", "rerun" (sparse array of an old table) or "requeue"

    @property
    def ref(self) -> str:
        return "%s:%s" % (self.cluster, self.job_id)

    def to_dict(self):
        return {"id": self.ref, "cluster": self.cluster, "job_id": self.job_id, "array": self.indices,
                "tasks": self.tasks, "kind": self.kind}


class SubmitReport(NamedTuple):
    sweep_id: str
    sweep_dir: str
    points: int                       # in this submission's grid
    arrays: List[ArraySubmission]
    completed: int                    # skipped: completed earlier
    queued: int                       # skipped: still queued or running
    warnings: List[str]

    def to_dict(self):
        return {"sweep": self.sweep_id, "sweep_dir": self.sweep_dir, "points": self.points,
                "submitted": [a.to_dict() for a in self.arrays],
                "tasks_submitted": sum(a.tasks for a in self.arrays),
                "skipped": {"completed": self.completed, "queued": self.queued}, "warnings": list(self.warnings)}


# ---------------------------------------------------------------------------
# Building the sweep
# ---------------------------------------------------------------------------

class _Plan(NamedTuple):
    names: List[str]
    points: List[pts.Point]
    warnings: List[str]
    used: Dict[int, List[str]]        # command word index -> the parameters it names
    sweep_id: str
    name: str


def sweep_id_for(name: str, command: Sequence[str], env: Dict[str, str]) -> str:
    """``NAME-HASH8``: the same experiment (name, command, --env) is the same sweep, whatever its grid."""
    text = json.dumps([name, list(command), sorted(env.items())], separators=(",", ":"), ensure_ascii=False)
    safe = _SAFE_NAME_RE.sub("_", name).strip("_.-")[:40] or "sweep"
    return "%s-%s" % (safe, hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8])


def plan(request: SweepRequest) -> _Plan:
    """The points, placeholders and id of a sweep request; every usage error before anything runs."""
    from slurmkit.script.render import launcher_command

    if not request.grid and not request.points_file:
        raise UsageError("a sweep needs --sweep NAME=VALUES (repeatable) or --sweep-file FILE")
    grid = pts.parse_grid(request.grid)
    rows = pts.read_points_file(request.points_file) if request.points_file else None
    names, points, warnings = pts.build_points(grid, rows)
    spec = request.spec
    used = pts.check_command(spec.command, names)
    for key in spec.env:
        if key.startswith(_OWN_ENV_PREFIX) or key == "SLURMKIT_CHECKPOINT_DIR":
            raise UsageError("--env %s: a sweep sets it for every task (each point's values are "
                             "SLURMKIT_SWEEP_<NAME>, its checkpoint directory SLURMKIT_CHECKPOINT_DIR)" % key)
    if spec.checkpoint_dir is not None:
        raise UsageError("--checkpoint-dir does not apply to a sweep: each point checkpoints into its own "
                         "directory, SLURMKIT_CHECKPOINT_DIR (<sweep dir>/points/<id>/checkpoint)")
    if request.max_running is not None and request.max_running < 1:
        raise UsageError("--max-running must be at least 1")
    if request.canary is not None and request.canary < 1:
        raise UsageError("--canary must be at least 1")
    name = request.name or spec.name or launcher_command(pts.literal_command(spec.command)).name or "sweep"
    if request.name is not None and not pts.NAME_RE.fullmatch(request.name.replace("-", "_").replace(".", "_")):
        raise UsageError("--sweep-name %r: letters, digits, '.', '_' and '-' only" % request.name)
    return _Plan(names, points, warnings, used, sweep_id_for(name, spec.command, dict(spec.env)), name)


def _spec_plain(spec: JobSpec) -> dict:
    from slurmkit.requeue.tracking import spec_to_plain

    return spec_to_plain(spec)


def _stored_spec(spec: JobSpec, auto_requeue: Optional[dict]) -> dict:
    """The job as the sweep journal keeps it (JSON), with the requeue budget when the daemon restarts its tasks."""
    data = _spec_plain(spec)
    if auto_requeue is not None:
        data["auto_requeue"] = dict(auto_requeue)
    return json.loads(json.dumps(data, sort_keys=True))


def _auto_requeue(sweep: SweepRecord) -> Optional[dict]:
    """The requeue budget of the sweep's latest submission; None when its tasks are not tracked."""
    return sweep.spec.get("auto_requeue")


def _spec_from(data: dict) -> JobSpec:
    from slurmkit.requeue.tracking import spec_from_plain

    return spec_from_plain(data)


# ---------------------------------------------------------------------------
# Talking to one cluster
# ---------------------------------------------------------------------------

class _ClusterFacts(NamedTuple):
    limits: arr.ArrayLimits
    accounting: bool
    max_jobs: Optional[int] = None    # MaxJobCount: every array task is one job record in slurmctld


def _facts(session, cluster: str, cache: Dict[str, _ClusterFacts]) -> _ClusterFacts:
    """The cluster's array limits and whether it keeps accounting: one ``scontrol show config``."""
    if cluster not in cache:
        from slurmkit.slurm.parsers import accounting_enabled

        config = session.backend(cluster).config()
        jobs = re.match(r"\s*([0-9]+)", config.get("MaxJobCount", ""))
        cache[cluster] = _ClusterFacts(arr.limits_from_config(config, cluster), accounting_enabled(config),
                                       int(jobs.group(1)) if jobs else None)
    return cache[cluster]


def _check_job_records(submitter: "_Submitter", placements: Sequence["_Placement"], warnings: List[str]) -> None:
    """Refuse a cluster's share that its controller can never hold, warn about one that fills half of it.

    Every pending or finished array task is a job record until MinJobAge
    after its end; at ``MaxJobCount`` sbatch keeps retrying ("Slurm
    temporarily unable to accept job") instead of failing, for this sweep's
    later arrays and for everyone else's jobs.
    """
    for placement in placements:
        most = _facts(submitter.session, placement.cluster, submitter.facts).max_jobs
        if most is None:
            continue
        if placement.count > most:
            raise UsageError("cluster %s holds at most %d jobs (MaxJobCount) and each of the sweep's %d tasks there "
                             "is one: split the sweep, or give the points to several clusters (--cluster auto)"
                             % (placement.cluster, most, placement.count))
        if placement.count > most // 2:
            warnings.append("cluster %s holds at most %d jobs (MaxJobCount) and this sweep puts %d tasks there; "
                            "with other users' jobs, sbatch may wait for room" % (placement.cluster, most,
                                                                                  placement.count))


def _make_dirs(session, cluster: str, paths: Sequence[str], done: Set[Tuple[str, str]]) -> None:
    """Create directories Slurm writes into before the job starts (it never creates them itself)."""
    todo = [p for p in paths if (cluster, p) not in done]
    if not todo:
        return
    try:
        session.files(cluster).make_dirs(todo)
    except OSError as exc:
        raise UsageError("cannot create the sweep directory %s: %s (give another with --sweep-dir)"
                         % (exc.filename or todo[0], exc.strerror or exc)) from None
    done.update((cluster, p) for p in todo)


# ---------------------------------------------------------------------------
# Submitting arrays
# ---------------------------------------------------------------------------

class _Submitter:
    """Renders and submits the arrays of one command, recording each in the journal first.

    ``track`` (a requeue budget) puts every task it submits under the requeue
    daemon (:mod:`slurmkit.sweep.tracked`); a spec with a checkpoint directory
    (``track``, or one attempt the daemon restarts) is rendered for the daemon,
    with each point's own directory.  Points placed again stop the tracking of
    their earlier placement unless ``supersede`` is False (the daemon's own
    restarts, which continue it).
    """

    def __init__(self, session, journal: Journal, sweep: SweepRecord, spec: JobSpec, used: Dict[int, List[str]],
                 names: Sequence[str], track: Optional[dict] = None, supersede: bool = True):
        from slurmkit.sweep.script import sentinel_command, tag_of

        self.session, self.journal, self.sweep = session, journal, sweep
        self.names = list(names)
        self.command = tuple(spec.command)
        self.used = used
        self.track, self.supersede = track, supersede
        self.plain = _spec_plain(spec)
        sentinelled, self.sentinels = sentinel_command(pts.literal_command(spec.command), sorted(used))
        self.checkpoint_sentinel = None
        if track is not None or spec.checkpoint_dir is not None:
            # Rendered with a word the array script replaces by the point's own checkpoint directory.
            self.checkpoint_sentinel = "SLURMKIT_SWEEP_CHECKPOINT_DIR_%s" % tag_of(self.command)
            spec = spec._replace(checkpoint_dir=self.checkpoint_sentinel)
        self.spec = spec._replace(command=sentinelled, name=spec.name or sweep.name,
                                  output=os.path.join(sweep.sweep_dir, "slurm", "%A_%a.out"))
        self.facts: Dict[str, _ClusterFacts] = {}
        self.dirs: Set[Tuple[str, str]] = set()
        self.done: List[ArraySubmission] = []

    def row(self, index: int, point: pts.Point) -> Row:
        return Row(index, point, tuple(pts.point_words(self.command, self.used, point)))

    def submit(self, cluster: str, partition: Optional[str], rows: Sequence[Row], throttle: Optional[int],
               table_of: Optional[int] = None, after: Optional[str] = None, hold: bool = False,
               canary: Optional[int] = None, kind: str = "new",
               token: Optional[str] = None) -> Tuple[int, ArraySubmission]:
        """One array on ``cluster`` of ``rows`` (its own table, or a sparse rerun of ``table_of``'s);
        ``token``: the job's (default a new one)."""
        from slurmkit import jobs
        from slurmkit.sweep import script as sweep_script
        from slurmkit.sweep import tracked

        facts = _facts(self.session, cluster, self.facts)
        indices = [r.index for r in rows]
        spec_text = arr.array_spec(indices, throttle, facts.limits)
        token = token or "sw-" + jobs.new_token()
        part = self.session.site.partition(self.session.site.cluster(cluster), partition)
        array_id = self.journal.begin_array(
            sweep_id=self.sweep.id, cluster=cluster, partition=part.name, token=token,
            indices=arr.array_spec(indices), throttle=throttle, accounting=facts.accounting, table_of=table_of,
            rows=[] if table_of is not None else [(r.index, r.point.id) for r in rows], canary=canary or 0)
        try:
            rendered = jobs.prepare(self.session, self.spec._replace(token=token), cluster, part.name)
            sweep_dir = self.sweep.sweep_dir
            _make_dirs(self.session, cluster, [os.path.join(sweep_dir, "slurm")], self.dirs)
            table = sweep_script.points_table(rows, self.names)
            table_file = None
            if len(table.encode("utf-8")) > sweep_script.INLINE_TABLE_LIMIT:
                path = os.path.join(sweep_dir, "tables", token + ".txt")
                self.session.files(cluster).write(path, table)
                table_file = (path, sweep_script.table_digest(table))
            extra = []
            if after:
                extra.append("--dependency=afterany:%s" % after)
            if hold:
                extra.append("--hold")
            canary_plan = None
            if canary:
                # ArrayTaskThrottle=0 is Slurm's "no limit".
                canary_plan = Canary(canary, throttle or 0, token)
            script = sweep_script.array_script(
                rendered.script, sweep_id=self.sweep.id, sweep_dir=sweep_dir, table=table,
                sentinels=self.sentinels, array=arr.array_spec(indices, 1 if canary else throttle, facts.limits),
                extra_directives=extra, table_file=table_file, canary=canary_plan, template=rendered.template,
                checkpoint_sentinel=self.checkpoint_sentinel)
            jobs.check_output_place(self.session, rendered)
            job_id, _ = jobs.submit_once(self.session.backend(cluster), cluster, script, token, look_first=False)
        except SlurmkitError as exc:
            if not exc.may_have_run:
                self.journal.refused(array_id, str(exc))
            raise self._partial(exc) from None
        self.journal.submitted(array_id, job_id)
        placed = [(r.index, r.point.id) for r in rows]
        if self.supersede:
            tracked.supersede(self.sweep.id, [pid for _, pid in placed], "the point was placed again (%s %s:%s)"
                              % (kind, cluster, job_id))
        if self.track is not None:
            tracked.register(self.sweep, cluster=cluster, partition=part.name, array_token=token, job_id=job_id,
                             rows=placed, spec=self.plain, requeue_budget=self.track)
        done = ArraySubmission(cluster, job_id, spec_text if not canary else arr.array_spec(indices, 1), len(rows),
                               kind)
        self.done.append(done)
        return array_id, done

    def _partial(self, exc: SlurmkitError) -> SlurmkitError:
        """The error, saying what was submitted before it (those arrays exist and are in the journal)."""
        if not self.done:
            return exc
        made = ", ".join("%s (%s)" % (a.ref, a.indices) for a in self.done)
        message = ("%s; already submitted: %s (sweep %s: 'slurmkit sweep status %s'; submitting the same command "
                   "again submits only what is missing)" % (exc, made, self.sweep.id, self.sweep.id))
        try:
            error = type(exc)(message)      # the same class: the same exit code
        except TypeError:                   # a class whose constructor takes more than a message
            error = SlurmkitError(message)
            error.exit_code = exc.exit_code
        error.may_have_run = exc.may_have_run
        return error


# ---------------------------------------------------------------------------
# Placing new points
# ---------------------------------------------------------------------------

class _Placement(NamedTuple):
    cluster: str
    partition: Optional[str]
    count: int
    throttle: Optional[int]


def _duration_s(session, spec: JobSpec) -> float:
    from slurmkit import times

    seconds = times.slurm_time_seconds(spec.time or session.site.defaults.time)
    return float(seconds) if seconds else 3600.0


def place(session, spec: JobSpec, count: int, cluster: Optional[str], partition: Optional[str],
          max_running: Optional[int], now: Optional[datetime.datetime] = None) -> Tuple[List[_Placement], List[str]]:
    """Where ``count`` new points run: [(cluster, partition, how many, throttle)], warnings.

    One named (or the default) cluster takes them all.  ``auto`` or a comma
    list asks the federation planner for every eligible cluster's start
    estimate (rendering the job there, with its own fabric and topology)
    and splits the points so the sweep ends soonest; ``--max-running`` is
    split between the clusters used, in proportion to what each runs at once.
    """
    from slurmkit.federation import is_federated

    if not is_federated(cluster):
        target = session.site.cluster(cluster)
        return [_Placement(target.name, partition, count, max_running)], []
    from slurmkit import jobs
    from slurmkit.federation import planner
    from slurmkit.results import GroupError, GroupResult
    from slurmkit.slurm import directives

    names = None if cluster.strip() == "auto" else [c.strip() for c in cluster.split(",") if c.strip()]
    candidates = planner.plan(session, spec._replace(token=jobs.new_token()), names, partition)
    best: Dict[str, planner.Candidate] = {}
    for c in candidates:
        if c.viable and c.cluster not in best:
            best[c.cluster] = c
    warnings = ["cluster %s not used: %s" % (c.cluster, c.reason) for c in candidates
                if not c.viable and c.cluster not in best and c.reason]
    if not best:
        if all(c.skip == "ineligible" for c in candidates):
            raise JobDoesNotFitError("the sweep's job fits no cluster: " + "; ".join(
                "%s: %s" % (c.cluster, c.reason) for c in candidates))
        raise GroupError(GroupResult((c.cluster, SlurmkitError(c.reason or "no estimate")) for c in candidates),
                         "no cluster can take the sweep")
    chosen = list(best.values())          # ranked: soonest start first
    if max_running is not None:
        chosen = chosen[:max_running]     # every cluster used runs at least one task at a time
    now = now or datetime.datetime.now()
    site = session.site
    capacities = []
    for c in chosen:
        part = site.partition(site.cluster(c.cluster), c.partition)
        slots = arr.slots_for(directives.sbatch_directives(c.rendered.script), part.max_nodes, part.cpus_per_node,
                              part.gpus_per_node)
        wait = max(0.0, (c.estimate - now).total_seconds())
        price = c.price if c.price is not None else float("inf")
        capacities.append(arr.ClusterCapacity(c.cluster, wait, slots, price, c.order))
    shares: Dict[str, Optional[int]] = {c.name: None for c in capacities}
    if max_running is not None:
        split = arr.split_total(max_running, [c.slots for c in capacities])
        shares = {c.name: s for c, s in zip(capacities, split)}
        capacities = [c._replace(slots=shares[c.name]) for c in capacities]
    counts = arr.split_points(count, capacities, _duration_s(session, spec))
    out = [_Placement(c.cluster, c.partition, counts[c.cluster], shares[c.cluster]) for c in chosen
           if counts[c.cluster]]
    return out, warnings


# ---------------------------------------------------------------------------
# Submit
# ---------------------------------------------------------------------------

def default_sweep_dir(sweep_id: str, local: bool) -> str:
    """``./slurmkit-sweeps/ID`` (absolute when every cluster is used from here; over SSH it is
    relative to the job's working directory, the login node's home)."""
    path = os.path.join("slurmkit-sweeps", sweep_id)
    return os.path.abspath(path) if local else path


def _targets_local(session, cluster: Optional[str]) -> bool:
    from slurmkit.federation import is_federated
    from slurmkit.session import reach

    if is_federated(cluster):
        names = list(session.site.clusters) if cluster.strip() == "auto" else \
            [c.strip() for c in cluster.split(",") if c.strip()]
    else:
        names = [session.site.cluster(cluster).name]
    return all(reach(session.site.cluster(n)) == "local" for n in names)


def submit(session, request: SweepRequest, journal: Optional[Journal] = None) -> SubmitReport:
    """Submit the sweep (see the module docstring); returns as soon as its arrays are submitted."""
    plan_ = plan(request)
    own = journal is None
    journal = journal or Journal()
    try:
        with journal.locked(plan_.sweep_id):
            return _submit_locked(session, request, journal, plan_)
    finally:
        if own:
            journal.close()


def _submit_locked(session, request: SweepRequest, journal: Journal, plan_: _Plan) -> SubmitReport:
    spec = request.spec
    existing = journal.sweep(plan_.sweep_id)
    local = _targets_local(session, request.cluster)
    if existing is not None:
        sweep_dir = existing.sweep_dir
        if request.sweep_dir and _norm(request.sweep_dir, local) != sweep_dir:
            raise UsageError("sweep %s already keeps its points in %s; leave --sweep-dir out (or give "
                             "--sweep-name for a new sweep)" % (plan_.sweep_id, sweep_dir))
    else:
        sweep_dir = _norm(request.sweep_dir, local) if request.sweep_dir else default_sweep_dir(plan_.sweep_id, local)
    if request.auto_requeue is not None and not os.path.isabs(sweep_dir):
        raise UsageError("--auto-requeue: the requeue daemon reads each point's checkpoints on this machine; give "
                         "--sweep-dir as an absolute path on a filesystem this machine shares with the cluster")
    # The job as stored (JSON) against this one: a requeue is only right for an unchanged job.
    stored = _stored_spec(spec, request.auto_requeue)
    same_job = existing is not None and existing.spec == stored
    journal.save_sweep(sweep_id=plan_.sweep_id, name=plan_.name, site=session.site.path, sweep_dir=sweep_dir,
                       params=plan_.names, command=spec.command, spec=stored,
                       max_running=request.max_running, canary=request.canary)
    journal.add_points(plan_.sweep_id, plan_.points)
    sweep = journal.sweep(plan_.sweep_id)
    warnings = list(plan_.warnings)
    wanted = {p.id for p in plan_.points}
    status = refresh(session, journal, sweep, reconcile=True, also=wanted) if journal.arrays(sweep.id) else None
    if status is not None:
        warnings += ["cluster %s not reachable: %s (its points are left as they were)" % kv
                     for kv in status.unreachable.items()]
    records = {p.point_id: p for p in journal.points(sweep.id)}
    by_id = {p.id: p for p in plan_.points}
    placed = {a.id for a in journal.arrays(sweep.id) if a.phase == "submitted"}
    completed = [p for p in plan_.points if records[p.id].state == "COMPLETED"]
    queued = [p for p in plan_.points if is_live(records[p.id].state)]
    # Ended without completing, or lost by Slurm before its end was seen (it cannot be known to have completed).
    again = [p for p in plan_.points if records[p.id].array_id in placed and
             (records[p.id].state in FAILED_STATES or records[p.id].state == UNKNOWN)]
    taken = {p.id for p in completed} | {p.id for p in queued} | {p.id for p in again}
    new = [p for p in plan_.points if p.id not in taken]
    submitter = _Submitter(session, journal, sweep, spec, plan_.used, sweep.params, track=request.auto_requeue)
    placements = []
    if new:
        # Planned before anything is submitted: a sweep that fits no cluster submits nothing at all.
        placements, more = place(session, spec._replace(command=submitter.spec.command), len(new), request.cluster,
                                 request.partition, request.max_running)
        warnings += more
        _check_job_records(submitter, placements, warnings)
    # Points that ran before keep their index: Slurm's own requeue of the same task while the controller
    # has it and the job is unchanged (a requeue runs the script as first submitted), else a sparse array
    # of the same table on the same cluster, rendered with this submission's options.  Tasks under the
    # requeue daemon (submitted --no-requeue) always take a sparse array: a new attempt, tracked anew.
    if again:
        in_queue = status.in_queue if status is not None and same_job and request.auto_requeue is None else set()
        requeued = _requeue(session, journal, sweep, [records[p.id] for p in again if p.id in in_queue], warnings)
        submitter.done.extend(requeued.submissions)
        rest = [records[p.id] for p in again if p.id not in requeued.point_ids]
        _resubmit_sparse(journal, sweep, submitter, rest, by_id, request.max_running)
    at = 0
    for placement in placements:
        share = new[at:at + placement.count]
        at += placement.count
        _submit_new(submitter, placement, share, request.canary)
    journal.event(sweep.id, "submitted: %d new, %d again, %d completed, %d queued; arrays %s" % (
        len(new), len(again), len(completed), len(queued), ", ".join(a.ref for a in submitter.done) or "none"))
    return SubmitReport(sweep.id, sweep.sweep_dir, len(plan_.points), submitter.done, len(completed), len(queued),
                        warnings)


def _norm(path: str, local: bool) -> str:
    """A sweep directory as given: absolute here; over SSH as written (the login node resolves it)."""
    return os.path.abspath(os.path.expanduser(path)) if local else path


def _submit_new(submitter: _Submitter, placement: _Placement, share: Sequence[pts.Point],
                canary: Optional[int]) -> None:
    """The new points of one cluster: arrays within its limits, indices from 0 in each."""
    facts = _facts(submitter.session, placement.cluster, submitter.facts)
    sizes = arr.chunks(len(share), facts.limits)
    at = 0
    previous = None
    held: List[str] = []
    canary_token = None
    for number, size in enumerate(sizes):
        rows = [submitter.row(i, p) for i, p in enumerate(share[at:at + size])]
        at += size
        first = number == 0
        # Throttled arrays of one cluster run one after the other: the cluster keeps to its share.
        after = previous if placement.throttle and previous else None
        array_id, done = submitter.submit(placement.cluster, placement.partition, rows, placement.throttle,
                                          after=after, hold=bool(canary) and not first,
                                          canary=canary if first else None)
        previous = done.job_id
        if canary and first:
            canary_token = next(a.token for a in submitter.journal.arrays(submitter.sweep.id) if a.id == array_id)
        elif canary:
            held.append(done.job_id)
    if canary and held:
        _hand_held_to_canary(submitter, placement.cluster, canary_token, held)


def _hand_held_to_canary(submitter: _Submitter, cluster: str, token: str, held: List[str]) -> None:
    """Tell the canary task which arrays to release when it passes; release them now if it already did."""
    directory = os.path.join(submitter.sweep.sweep_dir, "canary", token)
    submitter.session.files(cluster).write(os.path.join(directory, "held"), ",".join(held))
    # Written before looking: a canary passing in between reads the file itself.
    if submitter.session.files(cluster).read(os.path.join(directory, "passed")) is not None:
        submitter.session.backend(cluster).release(held)


class _Requeued(NamedTuple):
    point_ids: Set[str]
    submissions: List[ArraySubmission]


def _requeue(session, journal: Journal, sweep: SweepRecord, records: Sequence[PointRecord],
             warnings: List[str]) -> _Requeued:
    """``scontrol requeue A_I,...`` for ended tasks the controller still knows (one per cluster), then
    ``StartTime=now`` (Slurm would otherwise hold a requeued batch job back for two minutes)."""
    arrays = {a.id: a for a in journal.arrays(sweep.id)}
    by_cluster: Dict[str, List[PointRecord]] = {}
    for r in records:
        by_cluster.setdefault(arrays[r.array_id].cluster, []).append(r)
    done_ids: Set[str] = set()
    subs: List[ArraySubmission] = []
    for cluster, group in by_cluster.items():
        backend = session.backend(cluster)
        names = ["%s_%d" % (arrays[r.array_id].job_id, r.idx) for r in group]
        try:
            backend.requeue(names)
            ok = group
        except SlurmCommandError as exc:
            # Some may have been put back before the refusal: ask which are pending now.
            tasks = {t.key: t for t in backend.array_tasks(sorted({arrays[r.array_id].job_id for r in group})).tasks}
            ok = [r for r in group if is_live(tasks.get((arrays[r.array_id].job_id, r.idx),
                                                        TaskInfo("", 0, "", "COMPLETED")).state)]
            warnings.append("scontrol requeue on cluster %s refused %d task(s) (%s); they run as a new array"
                            % (cluster, len(group) - len(ok), exc))
        if not ok:
            continue
        ok_names = ["%s_%d" % (arrays[r.array_id].job_id, r.idx) for r in ok]
        try:
            backend.update_jobs(ok_names, StartTime="now")
        except SlurmkitError as exc:
            warnings.append("requeued tasks on cluster %s start after Slurm's requeue delay (%s)" % (cluster, exc))
        journal.record_states(sweep.id, [StateUpdate(r.point_id, "PENDING", reason="requeued",
                                                     task_job_id=r.task_job_id, restarts=r.restarts + 1)
                                         for r in ok])
        done_ids.update(r.point_id for r in ok)
        by_array: Dict[str, List[int]] = {}
        for r in ok:
            by_array.setdefault(arrays[r.array_id].job_id, []).append(r.idx)
        subs.extend(ArraySubmission(cluster, job, arr.array_spec(idx), len(idx), "requeue")
                    for job, idx in by_array.items())
    return _Requeued(done_ids, subs)


def _resubmit_sparse(journal: Journal, sweep: SweepRecord, submitter: _Submitter, records: Sequence[PointRecord],
                     by_id: Dict[str, pts.Point], max_running: Optional[int]) -> None:
    """Points whose task records are gone: a sparse array of their old table, same indices, same cluster."""
    arrays = {a.id: a for a in journal.arrays(sweep.id)}
    groups: Dict[int, List[PointRecord]] = {}
    for r in records:
        groups.setdefault(arrays[r.array_id].table_id, []).append(r)
    for table_id, group in groups.items():
        table = arrays[table_id]
        cluster = arrays[group[0].array_id].cluster
        limits = _facts(submitter.session, cluster, submitter.facts).limits
        fits = [r for r in group if r.idx <= limits.max_index]
        rows = [submitter.row(r.idx, by_id.get(r.point_id) or pts.make_point(r.vals))
                for r in sorted(fits, key=lambda r: r.idx)]
        for start in range(0, len(rows), limits.max_tasks):
            submitter.submit(cluster, table.partition, rows[start:start + limits.max_tasks], max_running,
                             table_of=table_id, kind="rerun")
        if len(fits) < len(group):
            # The cluster's MaxArraySize shrank below their old index: a new table is the only way.
            moved = [by_id.get(r.point_id) or pts.make_point(r.vals) for r in group if r not in fits]
            for size_at in range(0, len(moved), limits.chunk):
                chunk = moved[size_at:size_at + limits.chunk]
                submitter.submit(cluster, table.partition, [submitter.row(i, p) for i, p in enumerate(chunk)],
                                 max_running)


# ---------------------------------------------------------------------------
# Status
# ---------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------
# Rerun, cancel, throttle
# ---------------------------------------------------------------------------

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
    spec = _spec_from(sweep.spec)
    used = pts.check_command(spec.command, sweep.params)
    track = _auto_requeue(sweep)
    submitter = _Submitter(session, journal, sweep, spec, used, sweep.params, track=track)
    requeued = _requeue(session, journal, sweep, [p for p in todo if p.point_id in status.in_queue and track is None],
                        warnings)
    rest = [p for p in todo if p.point_id not in requeued.point_ids]
    _resubmit_sparse(journal, sweep, submitter, rest, {}, sweep.max_running)
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
    spec = _spec_from(sweep.spec)
    used = pts.check_command(spec.command, sweep.params)
    submitter = _Submitter(session, journal, sweep, spec, used, sweep.params, track=_auto_requeue(sweep))
    moved_points = [pts.make_point(p.vals) for p in gone]
    if moved_points:
        placements, more = place(session, submitter.spec, len(moved_points), target, partition, sweep.max_running)
        warnings += more
        _check_job_records(submitter, placements, warnings)
        at = 0
        for placement in placements:
            _submit_new(submitter, placement, moved_points[at:at + placement.count], None)
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
        submitter = _Submitter(session, journal, sweep, spec, used, sweep.params, supersede=False)
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
