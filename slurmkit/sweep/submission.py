"""Submitting a sweep: plan its points, place them on clusters, submit their arrays.

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
"""

import datetime
import hashlib
import json
import os
import re
from typing import Dict, List, NamedTuple, Optional, Sequence, Set, Tuple

from slurmkit.errors import JobDoesNotFitError, SlurmCommandError, SlurmkitError, UsageError
from slurmkit.script.render import JobSpec
from slurmkit.slurm.types import TaskInfo
from slurmkit.sweep import arrays as arr
from slurmkit.sweep import points as pts
from slurmkit.sweep.journal import Journal, PointRecord, StateUpdate, SweepRecord
from slurmkit.sweep.script import Canary, Row
from slurmkit.sweep.state import FAILED_STATES, UNKNOWN, is_live, refresh

_SAFE_NAME_RE = re.compile(r"[^A-Za-z0-9._-]+", re.ASCII)
# Variables a task gets from the sweep: --env may not set them.
_OWN_ENV_PREFIX = "SLURMKIT_SWEEP_"


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
    prefer: Optional[str] = None          # --prefer soon|cheap|green: where and when the new points run
    deadline: Optional[datetime.datetime] = None   # --deadline (naive local): the sweep must end by then


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


def sweep_id_for(name: str, command: Sequence[str], env: Dict[str, str], image: Optional[str] = None,
                 mounts: Sequence[str] = ()) -> str:
    """``NAME-HASH8``: the same experiment (name, command, --env, and the image it runs in) is the same sweep,
    whatever its grid.  A sweep without an image keeps the id it had before images existed."""
    identity = [name, list(command), sorted(env.items())]
    if image is not None:
        identity += [image, list(mounts)]
    text = json.dumps(identity, separators=(",", ":"), ensure_ascii=False)
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
    return _Plan(names, points, warnings, used,
                 sweep_id_for(name, spec.command, dict(spec.env), spec.image, spec.mounts), name)


def _spec_plain(spec: JobSpec) -> dict:
    from slurmkit.requeue.tracking import spec_to_plain

    return spec_to_plain(spec)


def _stored_spec(spec: JobSpec, auto_requeue: Optional[dict]) -> dict:
    """The job as the sweep journal keeps it (JSON), with the requeue budget when the daemon restarts its tasks."""
    data = _spec_plain(spec)
    if auto_requeue is not None:
        data["auto_requeue"] = dict(auto_requeue)
    return json.loads(json.dumps(data, sort_keys=True))


def auto_requeue_of(sweep: SweepRecord) -> Optional[dict]:
    """The requeue budget of the sweep's latest submission; None when its tasks are not tracked."""
    return sweep.spec.get("auto_requeue")


def spec_from(data: dict) -> JobSpec:
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


def check_job_records(submitter: "Submitter", placements: Sequence["Placement"], warnings: List[str]) -> None:
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

class Submitter:
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
               token: Optional[str] = None, begin: Optional[str] = None) -> Tuple[int, ArraySubmission]:
        """One array on ``cluster`` of ``rows`` (its own table, or a sparse rerun of ``table_of``'s);
        ``token``: the job's (default a new one); ``begin``: sbatch --begin, a later start window."""
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
            rendered = jobs.prepare(self.session, self.spec._replace(token=token, begin=begin), cluster, part.name)
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
                checkpoint_sentinel=self.checkpoint_sentinel, site=self.session.site)
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

class Placement(NamedTuple):
    cluster: str
    partition: Optional[str]
    count: int
    throttle: Optional[int]
    begin: Optional[str] = None           # sbatch --begin: a later window of --prefer/--deadline


def _duration_s(session, spec: JobSpec) -> float:
    from slurmkit import times

    seconds = times.slurm_time_seconds(spec.time or session.site.defaults.time)
    return float(seconds) if seconds else 3600.0


def place(session, spec: JobSpec, count: int, cluster: Optional[str], partition: Optional[str],
          max_running: Optional[int], now: Optional[datetime.datetime] = None, prefer: Optional[str] = None,
          deadline: Optional[datetime.datetime] = None) -> Tuple[List[Placement], List[str]]:
    """Where ``count`` new points run: [(cluster, partition, how many, throttle)], warnings.

    One named (or the default) cluster takes them all.  ``auto`` or a comma
    list asks the federation planner for every eligible cluster's start
    estimate (rendering the job there, with its own fabric and topology)
    and splits the points so the sweep ends soonest; ``--max-running`` is
    split between the clusters used, in proportion to what each runs at once.
    ``prefer`` cheap or green, or a ``deadline``: the whole sweep on the one
    (cluster, partition) and start window that is cheapest, greenest or
    soonest among those ending by the deadline (:func:`_place_in_time`).
    """
    from slurmkit.federation import is_federated

    timed = prefer not in (None, "soon") or deadline is not None
    if not is_federated(cluster) and not timed:
        target = session.site.cluster(cluster)
        return [Placement(target.name, partition, count, max_running)], []
    from slurmkit import jobs
    from slurmkit.federation import planner
    from slurmkit.slurm import directives

    if is_federated(cluster):
        names = None if cluster.strip() == "auto" else [c.strip() for c in cluster.split(",") if c.strip()]
    else:
        names = [session.site.cluster(cluster).name]
    candidates = planner.plan(session, spec._replace(token=jobs.new_token()), names, partition)
    best, warnings = _viable(candidates)
    if timed:
        return _place_in_time(session, spec, count, candidates, max_running, prefer or "soon", deadline, warnings)
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
    out = [Placement(c.cluster, c.partition, counts[c.cluster], shares[c.cluster]) for c in chosen
           if counts[c.cluster]]
    return out, warnings


def _viable(candidates) -> Tuple[Dict[str, object], List[str]]:
    """Each cluster's best viable candidate (in the planner's order) and a line per cluster not used; an error
    when none can take the sweep."""
    from slurmkit.results import GroupError, GroupResult

    best: Dict[str, object] = {}
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
    return best, warnings


def _place_in_time(session, spec: JobSpec, count: int, candidates, max_running: Optional[int], prefer: str,
                   deadline: Optional[datetime.datetime], warnings: List[str]) -> Tuple[List[Placement], List[str]]:
    """The whole sweep in the best window of --prefer under --deadline: its points run ``max_running`` at a time
    (all at once without it), so it lasts ceil(points / that) time limits from the window's start and draws
    that many jobs' power; a later window holds its arrays with --begin."""
    from slurmkit.federation import planner, windows as win

    at_once = min(count, max_running or count)
    waves = -(-count // at_once)
    now = datetime.datetime.now()
    site = session.site
    carbon = win.carbon_by_cluster(site, candidates, now)
    warnings = warnings + [source.warning for source in carbon.values() if source.warning]
    considered = win.windows(site, spec, candidates, deadline, now, carbon, at_once=at_once, waves=waves)
    try:
        order = win.choose(considered, prefer, deadline)
        # A later window only where Slurm would really start the sweep then (as for one job: held jobs and
        # the queue move it on), its first round of points on the partition's free nodes.
        considered, order = planner.confirmed_windows(session, spec, considered, order, prefer, deadline, carbon,
                                                      at_once)
        best = order[0]
    except win.DeadlineError as exc:
        raise win.DeadlineError("the sweep (%d point(s), %d at a time: %d round(s) of its time limit): %s"
                                % (count, at_once, waves, exc)) from None
    use = best.use
    warnings.append("sweep placed by --prefer %s%s: %s, partition %s, %s, ending about %s; expected %s kWh, cost %s, "
                    "%s gCO2e (%d round(s) of %d point(s))" % (
                        prefer, " --deadline %s" % win.begin_text(deadline) if deadline else "", best.cluster,
                        best.candidate.partition, "held by --begin until %s" % win.begin_text(best.start)
                        if best.later else "from %s" % win.begin_text(best.start), win.begin_text(best.end),
                        _figure(use.kwh), _figure(use.cost), _figure(use.gco2), waves, at_once))
    return [Placement(best.cluster, best.candidate.partition, count, max_running,
                      begin=win.begin_text(best.start) if best.later else None)], warnings


def _figure(value: Optional[float]) -> str:
    return "unknown" if value is None else "%.3g" % value


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
    if spec.begin is not None or spec.dependency is not None:
        # The arrays' start and order are slurmkit's (throttled arrays chain with dependencies of their own;
        # reruns start later), and a relative --begin kept for them would hold every rerun again.
        raise UsageError("--%s applies to a single job, not a sweep: place a sweep in time with --deadline and "
                         "--prefer, or submit it once the job it waits for has ended"
                         % ("begin" if spec.begin is not None else "dependency"))
    if request.prefer in ("cheap", "green"):
        # The site's GPU frequency for it (energy.gpu_freq), kept in the stored spec so reruns render it too.
        spec = spec._replace(prefer=request.prefer)
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
    submitter = Submitter(session, journal, sweep, spec, plan_.used, sweep.params, track=request.auto_requeue)
    placements = []
    if new:
        # Planned before anything is submitted: a sweep that fits no cluster submits nothing at all.
        placements, more = place(session, spec._replace(command=submitter.spec.command), len(new), request.cluster,
                                 request.partition, request.max_running, prefer=request.prefer,
                                 deadline=request.deadline)
        warnings += more
        check_job_records(submitter, placements, warnings)
    # Points that ran before keep their index: Slurm's own requeue of the same task while the controller
    # has it and the job is unchanged (a requeue runs the script as first submitted), else a sparse array
    # of the same table on the same cluster, rendered with this submission's options.  Tasks under the
    # requeue daemon (submitted --no-requeue) always take a sparse array: a new attempt, tracked anew.
    if again:
        in_queue = status.in_queue if status is not None and same_job and request.auto_requeue is None else set()
        requeued = requeue_tasks(session, journal, sweep, [records[p.id] for p in again if p.id in in_queue], warnings)
        submitter.done.extend(requeued.submissions)
        rest = [records[p.id] for p in again if p.id not in requeued.point_ids]
        resubmit_sparse(journal, sweep, submitter, rest, by_id, request.max_running)
    at = 0
    for placement in placements:
        share = new[at:at + placement.count]
        at += placement.count
        submit_new(submitter, placement, share, request.canary)
    journal.event(sweep.id, "submitted: %d new, %d again, %d completed, %d queued; arrays %s" % (
        len(new), len(again), len(completed), len(queued), ", ".join(a.ref for a in submitter.done) or "none"))
    return SubmitReport(sweep.id, sweep.sweep_dir, len(plan_.points), submitter.done, len(completed), len(queued),
                        warnings)


def _norm(path: str, local: bool) -> str:
    """A sweep directory as given: absolute here; over SSH as written (the login node resolves it)."""
    return os.path.abspath(os.path.expanduser(path)) if local else path


def submit_new(submitter: Submitter, placement: Placement, share: Sequence[pts.Point],
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
                                          canary=canary if first else None, begin=placement.begin)
        previous = done.job_id
        if canary and first:
            canary_token = next(a.token for a in submitter.journal.arrays(submitter.sweep.id) if a.id == array_id)
        elif canary:
            held.append(done.job_id)
    if canary and held:
        _hand_held_to_canary(submitter, placement.cluster, canary_token, held)


def _hand_held_to_canary(submitter: Submitter, cluster: str, token: str, held: List[str]) -> None:
    """Tell the canary task which arrays to release when it passes; release them now if it already did."""
    directory = os.path.join(submitter.sweep.sweep_dir, "canary", token)
    submitter.session.files(cluster).write(os.path.join(directory, "held"), ",".join(held))
    # Written before looking: a canary passing in between reads the file itself.
    if submitter.session.files(cluster).read(os.path.join(directory, "passed")) is not None:
        submitter.session.backend(cluster).release(held)


class Requeued(NamedTuple):
    point_ids: Set[str]
    submissions: List[ArraySubmission]


def requeue_tasks(session, journal: Journal, sweep: SweepRecord, records: Sequence[PointRecord],
                  warnings: List[str]) -> Requeued:
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
    return Requeued(done_ids, subs)


def resubmit_sparse(journal: Journal, sweep: SweepRecord, submitter: Submitter, records: Sequence[PointRecord],
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
