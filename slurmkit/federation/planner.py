"""Federation: place a job on the best of several independent clusters.

Sites rarely share one slurmdbd or munge key across data centres, so Slurm's
own federation does not reach across them.  Here every cluster is reached on
its own (locally or over SSH to its login node) and:

1. **Eligibility** (pure): a partition fits when its accelerator vendor/model
   is acceptable (``--accel h100,a100``), and GPUs per node, node count, CPUs
   and time fit its limits (the same check ``render`` applies).
2. **Estimates**: the job is rendered for each eligible cluster with that
   cluster's own fabric, topology and partition, and ``sbatch --test-only``
   asks each cluster, in parallel, when it would start.
3. **Ranking**: earliest estimated start, then the price per GPU-hour at that
   time, then the site's cluster order.
4. **Submission with failover**: the best cluster gets the job.  A cluster
   that cannot be reached is skipped (and cooled down when it keeps failing)
   and the next one is tried.  When an answer is lost after the job may have
   been created, slurmkit never moves on to another cluster: it retries the
   same one with the same token, which the cluster-side submit-once wrapper
   turns into "report the existing job".

The estimates are collected as a :class:`~slurmkit.results.GroupResult`
(cluster -> candidates, or the error that made it unreachable), and when no
cluster takes the job the error is a :class:`~slurmkit.results.GroupError`
naming why each one did not.  ``Candidate.skip`` is the label the
``--explain`` table and the JSON show for each of them.
"""

import dataclasses
import math
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from slurmkit.federation.cooldown import Cooldown
from slurmkit.errors import (ConnectTimeoutError, JobDoesNotFitError, RemoteError, SlurmkitError,
                             SlurmUnavailableError)
from slurmkit.jobs import (JobRef, Submission, account_on, check_output_place, job_with_token, new_token, prepare,
                           submit_once, token_lock)
from slurmkit.results import GroupError, GroupResult, each
from slurmkit.script.render import JobSpec, RenderedJob
from slurmkit.script.sbatch_header import check_fit, gres_name
from slurmkit.session import Session
from slurmkit.site.model import Cluster, Partition, Site

SUBMIT_ATTEMPTS = 3


@dataclass(frozen=True)
class Candidate:
    cluster: str
    partition: Optional[str]
    order: int
    reason: Optional[str] = None          # why it was skipped; None when it got an estimate
    skip: Optional[str] = None            # "ineligible", "cooling", "unreachable" or "refused"
    estimate: Optional[datetime] = None
    price: Optional[float] = None
    rendered: Optional[RenderedJob] = None

    @property
    def viable(self) -> bool:
        return self.reason is None and self.estimate is not None

    def rank_key(self):
        # Estimates are compared to the minute: clusters asked a second apart
        # for "now" are equally fast, and the price should decide.
        minute = self.estimate.replace(second=0, microsecond=0) if self.estimate else None
        # A price that is not a finite number (the loader refuses those) ranks as unknown: last.
        price = self.price if self.price is not None and math.isfinite(self.price) else float("inf")
        return (minute, price, self.order)

    def to_dict(self):
        return {"cluster": self.cluster, "partition": self.partition, "viable": self.viable, "skip": self.skip,
                "estimate": self.estimate.isoformat() if self.estimate else None, "price_per_gpu_hour": self.price,
                "reason": self.reason, "switches": self.rendered.switches if self.rendered else None}


@dataclass(frozen=True)
class Placement:
    submission: Optional[Submission]       # None for a dry run
    candidates: Tuple[Candidate, ...]      # ranked: viable first, best first
    failovers: Tuple[Tuple[str, str], ...] = ()  # (cluster, why submitting there failed)
    # With --prefer cheap|green or --deadline (federation.windows): every window considered, the chosen one,
    # the preference, and warnings the user should see (a refused carbon forecast).
    windows: Tuple[object, ...] = ()
    chosen: Optional[object] = None
    prefer: str = "soon"
    warnings: Tuple[str, ...] = ()

    def to_dict(self):
        data = self.submission.to_dict() if self.submission else {"id": None}
        data["candidates"] = [c.to_dict() for c in self.candidates]
        data["failovers"] = [{"cluster": c, "reason": r} for c, r in self.failovers]
        if self.windows:
            data["prefer"] = self.prefer
            data["windows"] = [w.to_dict() for w in self.windows]
            data["chosen"] = self.chosen.to_dict() if self.chosen is not None else None
        return data


def parse_accel(text: Optional[str]) -> Tuple[str, ...]:
    return tuple(t.strip().lower() for t in (text or "").split(",") if t.strip())


def accel_matches(partition: Partition, accel: Sequence[str]) -> bool:
    """Whether the partition's accelerators are among the acceptable ones.

    A token names a model (``h100``, ``ascend910b``), a vendor (``nvidia``,
    ``ascend``), a gres name (``gpu``, ``npu``) or ``none``/``cpu``.
    """
    if not accel:
        return True
    names = {partition.accelerator.lower()}
    if partition.accelerator == "none":
        names |= {"cpu"}
    else:
        names |= {(partition.gpu_model or "").lower(), gres_name(partition)}
    return bool(names & set(accel))


def partition_choices(site: Site, cluster: Cluster, spec: JobSpec, partition: Optional[str],
                      accel: Sequence[str]) -> Tuple[List[Partition], Optional[str]]:
    """(eligible partitions of ``cluster``, why none is eligible)."""
    if partition:
        if partition not in cluster.partitions:
            return [], "no partition %r (has: %s)" % (partition, ", ".join(sorted(cluster.partitions)))
        pool = [cluster.partitions[partition]]
    elif accel:
        pool = list(cluster.partitions.values())
    else:
        default = cluster.default_partition or site.defaults.partition
        pool = [cluster.partitions[default]] if default in cluster.partitions else list(cluster.partitions.values())
    reasons = []
    eligible = []
    for part in pool:
        if not accel_matches(part, accel):
            reasons.append("partition %s has %s, not %s" % (part.name, part.gpu_model or part.accelerator,
                                                             "/".join(accel)))
            continue
        if spec.image is not None:
            from slurmkit.containers.catalog import ImageRefusal, resolve

            try:
                resolve(part.containers, spec.image, cluster.name, part.name)
            except ImageRefusal as exc:
                reasons.append(str(exc))
                continue
        gpus = part.gpus_per_node if spec.gpus_per_node is None else spec.gpus_per_node
        try:
            check_fit(spec, part, cluster, gpus, spec.time or site.defaults.time)
        except JobDoesNotFitError as exc:
            reasons.append(str(exc))
            continue
        eligible.append(part)
    return eligible, (None if eligible else "; ".join(reasons) or "no partition")


def price_at(cluster: Cluster, when: datetime) -> Optional[float]:
    """The cluster's price per GPU-hour at ``when`` (in the cluster's time zone), if the site set one."""
    from slurmkit.energy.model import gpu_price_windows, window_value

    return window_value(gpu_price_windows(cluster), when, cluster.timezone)


def _is_unreachable(exc: SlurmkitError) -> bool:
    return isinstance(exc, (RemoteError, SlurmUnavailableError, ConnectTimeoutError))


def _estimate_cluster(session: Session, spec: JobSpec, cluster: Cluster, order: int, parts: List[Partition],
                      cooldown: Cooldown) -> List[Candidate]:
    """Render and ``sbatch --test-only`` each eligible partition of one cluster.

    A partition the cluster refuses is a candidate skipped as "refused"; a
    cluster that cannot be reached raises (after noting the failure for the
    cool-down): its other partitions would fail the same way.
    """
    out = []
    for part in parts:
        try:
            if spec.comm == "heavy" and spec.switches is None:
                session.layout(cluster)  # surfaces an unreachable cluster as such; prepare() reuses it
            rendered = prepare(session, spec, cluster.name, part.name)
            estimate = session.backend(cluster.name).estimate_start(rendered.script)
        except SlurmkitError as exc:
            if _is_unreachable(exc):
                cooldown.failure(cluster.name, str(exc))
                raise
            out.append(Candidate(cluster.name, part.name, order, reason=str(exc), skip="refused"))
            continue
        cooldown.success(cluster.name)
        out.append(Candidate(cluster.name, part.name, order, estimate=estimate.start,
                             price=price_at(cluster, estimate.start), rendered=rendered))
    return out


def estimates(session: Session, spec: JobSpec, work: Sequence[Tuple[Cluster, int, List[Partition]]],
              cooldown: Cooldown, max_workers: int = 8) -> GroupResult:
    """cluster -> its candidates, or the error that made it unreachable; clusters asked in parallel."""
    by_name = {cluster.name: (cluster, order, parts) for cluster, order, parts in work}
    return each(by_name, lambda name: _estimate_cluster(session, spec, *by_name[name], cooldown),
                max_workers=max_workers)


def plan(session: Session, spec: JobSpec, clusters: Optional[Sequence[str]] = None, partition: Optional[str] = None,
         accel: Sequence[str] = (), cooldown: Optional[Cooldown] = None, max_workers: int = 8) -> List[Candidate]:
    """Every candidate (cluster, partition), ranked: viable ones first, best first.

    ``spec`` must carry its token: every cluster renders the same job.
    """
    site = session.site
    cooldown = cooldown or Cooldown()
    names = list(clusters) if clusters else list(site.clusters)
    for name in names:
        site.cluster(name)  # unknown names: a UsageError listing the clusters
    skipped: List[Candidate] = []
    work = []
    for order, name in enumerate(names):
        cluster = site.clusters[name]
        parts, why = partition_choices(site, cluster, spec, partition, accel)
        if not parts:
            skipped.append(Candidate(name, partition, order, reason=why, skip="ineligible"))
            continue
        cooling = cooldown.check(name)
        if cooling:
            skipped.append(Candidate(name, parts[0].name, order, reason=cooling, skip="cooling"))
            continue
        work.append((cluster, order, parts))
    results: List[Candidate] = []
    asked = estimates(session, spec, work, cooldown, max_workers)
    for cluster, order, parts in work:
        outcome = asked[cluster.name]
        if isinstance(outcome, SlurmkitError):
            results.extend(Candidate(cluster.name, p.name, order, reason=str(outcome), skip="unreachable")
                           for p in parts)
        else:
            results.extend(outcome)
    viable = sorted((c for c in results if c.viable), key=Candidate.rank_key)
    rest = sorted((c for c in results + skipped if not c.viable), key=lambda c: c.order)
    return viable + rest


def _submit_to(session: Session, candidate: Candidate, token: str, clock,
               caller_token: bool = False) -> Submission:
    """Submit on one cluster; retry *there* while the outcome is unknown (the token makes it safe).

    With the caller's own token, or on a retry without the cluster-side
    wrapper (which looks itself, under its lock), the look for an existing
    job with the token and the sbatch are one critical section
    (jobs.submit_once).
    """
    backend = session.backend(candidate.cluster)
    check_output_place(session, candidate.rendered)
    for attempt in range(1, SUBMIT_ATTEMPTS + 1):
        try:
            job_id, existed = submit_once(backend, candidate.cluster, candidate.rendered.script, token,
                                          look_first=caller_token or (attempt > 1 and not backend.submit_once),
                                          user=account_on(session.site.cluster(candidate.cluster)))
            return Submission(JobRef(candidate.cluster, job_id), candidate.rendered, token, existed=existed)
        except SlurmkitError as exc:
            if not exc.may_have_run:
                raise
            if attempt == SUBMIT_ATTEMPTS:
                raise SlurmkitError(
                    "the job may have been created on cluster %s but its answer was lost %d times (%s); not trying "
                    "another cluster, which could create a duplicate: rerun the same command with --token %s "
                    "--cluster %s to finish safely" % (candidate.cluster, attempt, exc, token, candidate.cluster)
                ).outcome_unknown() from None
            clock.sleep(min(2.0 * attempt, 5.0))
    raise AssertionError("unreachable")


def submit_best(session: Session, spec: JobSpec, clusters: Optional[Sequence[str]] = None,
                partition: Optional[str] = None, accel: Sequence[str] = (), cooldown: Optional[Cooldown] = None,
                dry_run: bool = False, clock=time, prefer: str = "soon",
                deadline: Optional[datetime] = None) -> Placement:
    """Plan, then submit to the best cluster, failing over to the next ones (``clock``: its ``sleep()``
    between retries and its ``time()`` for now; the time module, a FakeClock in tests).

    ``prefer`` ``cheap`` or ``green`` and a ``deadline`` (naive local time)
    choose among clusters x start windows (:mod:`slurmkit.federation.windows`).
    """
    from slurmkit.federation.windows import rank_key

    rank_key(prefer)   # an unknown preference is refused before anything is asked
    cooldown = cooldown or Cooldown()
    timing = (prefer, deadline)
    caller_token = spec.token is not None
    token = spec.token or new_token()
    # cheap and green jobs run at the GPU frequency the site sets for them (energy.gpu_freq), wherever placed.
    spec = spec._replace(token=token, prefer=prefer if prefer in ("cheap", "green") else spec.prefer)
    if caller_token and not dry_run:
        # The caller's token may already have a job on *any* of the clusters (a rerun after a lost answer,
        # when today's best cluster is another one; a twin command started at the same moment): look on
        # every one first, under a lock that keeps this machine's submissions of the token apart.
        with token_lock(FEDERATION_LOCK, token):
            existing = _existing_anywhere(session, token, clusters)
            if existing is not None:
                return existing
            return _plan_and_submit(session, spec, clusters, partition, accel, cooldown, clock, caller_token,
                                    timing=timing)
    return _plan_and_submit(session, spec, clusters, partition, accel, cooldown, clock, caller_token, dry_run,
                            timing)


# The key of the lock around a federated submission's look-everywhere-then-submit: not a
# cluster name (those start with a letter or digit), so it never meets a per-cluster lock.
FEDERATION_LOCK = "_federation"


def _existing_anywhere(session: Session, token: str, clusters: Optional[Sequence[str]]) -> Optional[Placement]:
    """A placement reporting the job that carries ``token`` on any reachable cluster, or None.

    A cluster that cannot be asked is passed over: it cannot be told apart
    from one without the job, and refusing to submit anywhere while one
    cluster is down would defeat failing over.
    """
    names = list(clusters) if clusters else list(session.site.clusters)
    found = each(names, lambda name: job_with_token(session.backend(name), token,
                                                    account_on(session.site.cluster(name))))
    for name in names:
        job = found[name]
        if job is not None and not isinstance(job, SlurmkitError):
            rendered = RenderedJob(script="", warnings=("a job with token %s exists already: %s:%s; nothing was "
                                                        "submitted" % (token, name, job.job_id),),
                                   template="", cluster=name, partition=job.partition, switches=None)
            return Placement(Submission(JobRef(name, job.job_id), rendered, token, existed=True), ())
    return None


def _plan_and_submit(session, spec, clusters, partition, accel, cooldown, clock, caller_token,
                     dry_run=False, timing=("soon", None)) -> Placement:
    token = spec.token
    candidates = plan(session, spec, clusters, partition, accel, cooldown)
    prefer, deadline = timing
    if prefer == "soon" and deadline is None:
        # Today's behaviour, unchanged: the earliest start, then price, then the site's order.
        if dry_run:
            return Placement(None, tuple(candidates))
        return _submit_in_order(session, candidates, [c for c in candidates if c.viable], token, clock,
                                caller_token, cooldown, Placement(None, tuple(candidates)))
    from slurmkit.federation import windows as win

    now = datetime.fromtimestamp(clock.time())
    site = session.site
    carbon = win.carbon_by_cluster(site, candidates, now)
    warnings = tuple(source.warning for source in carbon.values() if source.warning)
    considered = win.windows(site, spec, candidates, deadline, now, carbon)
    order = win.choose(considered, prefer, deadline)
    # In a dry run too: --explain shows the window the job would really get.
    considered, order = confirmed_windows(session, spec, considered, order, prefer, deadline, carbon)
    base = Placement(None, tuple(candidates), windows=tuple(considered), chosen=order[0] if order else None,
                     prefer=prefer, warnings=warnings)
    if dry_run:
        return base
    # A later window is the same job held by --begin: rendered again with it (the same token), when its
    # turn comes (a generator: the failover windows are rendered only if the first ones fail).
    to_try = (w.candidate if not w.later else
              dataclasses.replace(w.candidate, rendered=prepare(session, spec._replace(begin=win.begin_text(w.start)),
                                                                w.cluster, w.candidate.partition))
              for w in order)
    return _submit_in_order(session, candidates, to_try, token, clock, caller_token, cooldown, base)


# How many times a later window that Slurm says starts later still is moved and the choice made again:
# each try is one sbatch --test-only; past it the last choice stands (Slurm holds the job until it can run).
CONFIRM_TRIES = 8


def confirmed_windows(session, spec, considered, order, prefer, deadline, carbon, at_once: int = 1):
    """(windows, choice) once the chosen window, if it is a later one, is where Slurm would really start
    the job held until then (``sbatch --test-only`` with ``--begin``); see :mod:`slurmkit.federation.windows`.
    A sweep's windows (``at_once`` copies of ``spec`` at a time) are checked with one copy's estimate and
    all of them against the partition's queue."""
    from datetime import timedelta

    from slurmkit.federation import windows as win

    considered = list(considered)
    held: Dict[Tuple[str, str], Optional[Tuple[int, list]]] = {}
    for _ in range(CONFIRM_TRIES):
        if not order or not order[0].later:
            break
        best = order[0]
        rendered = prepare(session, spec._replace(begin=win.begin_text(best.start)), best.cluster,
                           best.candidate.partition)
        start = session.backend(best.cluster).estimate_start(rendered.script).start
        if start <= best.start + timedelta(minutes=1):
            # Slurm's estimate does not count jobs held for later (--begin) nor queued: this planner's own,
            # placed in the same clean hours, would make this job queue behind them.
            place = (best.cluster, best.candidate.partition)
            if place not in held:
                held[place] = _queued_jobs(session.backend(best.cluster), best.candidate.partition)
            start = _after_queued(held[place], spec.nodes * at_once, best.start, best.end)
            if start is None:
                break
        # Held until any time between the window and that start, the job would start then too: those
        # windows of the place go, and one at that start stands for them.
        place = (best.cluster, best.candidate.partition)
        considered = [w for w in considered
                      if (w.cluster, w.candidate.partition) != place or not best.start <= w.start < start]
        considered.append(win.moved(session.site, spec, best, start, deadline, carbon, at_once))
        order = win.choose(considered, prefer, deadline)
    return considered, order


def _queued_jobs(backend, partition: str) -> Optional[Tuple[int, list]]:
    """(the partition's nodes, [(start, end, nodes)] of its jobs with a start: running, or pending with the
    start Slurm expects, held ones at their --begin), or None where either cannot be read (the check is then
    skipped, not the submission)."""
    from datetime import timedelta

    from slurmkit.times import slurm_time_seconds

    try:
        total = int(backend.partitions()[partition]["TotalNodes"])
        jobs = backend.jobs()
    except (SlurmkitError, KeyError, ValueError):
        return None
    out = []
    for job in jobs:
        if job.state not in ("PENDING", "RUNNING") or job.partition != partition or not job.start_time:
            continue
        seconds = slurm_time_seconds(job.time_limit)
        if seconds is None:
            continue       # no end (UNLIMITED): nothing to wait for; Slurm's own order decides
        out.append((job.start_time, job.start_time + timedelta(seconds=seconds), job.node_count or 1))
    return total, out


def _after_queued(held: Optional[Tuple[int, list]], nodes: int, start: datetime, end: datetime) -> Optional[datetime]:
    """None when those jobs leave ``nodes`` free all through [start, end); else the first later start at
    which they do for as long (one of their ends: where the window is tried next)."""
    if held is None:
        return None
    total, jobs = held
    length = end - start

    def fits(begin):
        finish = begin + length
        overlapping = [(a, b, n) for a, b, n in jobs if a < finish and b > begin]
        moments = {begin} | {a for a, _, _ in overlapping if a > begin}
        return max(sum(n for a, b, n in overlapping if a <= t < b) for t in moments) + nodes <= total

    if fits(start):
        return None
    return next((t for t in sorted({b for _, b, _ in jobs if b > start}) if fits(t)), None)


def _submit_in_order(session, candidates, to_try: Iterable[Candidate], token, clock, caller_token, cooldown,
                     base: Placement):
    """Submit to the first of ``to_try`` that takes the job, failing over; the placement says what happened."""
    failed: List[Tuple[str, SlurmkitError]] = []    # (cluster, why submitting there failed), in order
    for candidate in to_try:
        try:
            submission = _submit_to(session, candidate, token, clock, caller_token)
        except SlurmkitError as exc:
            if exc.may_have_run:
                raise
            if _is_unreachable(exc):
                cooldown.failure(candidate.cluster, str(exc))
            failed.append((candidate.cluster, exc))
            continue
        cooldown.success(candidate.cluster)
        return dataclasses.replace(base, submission=submission, failovers=tuple((c, str(e)) for c, e in failed))
    if not failed and all(c.skip == "ineligible" for c in candidates):
        raise JobDoesNotFitError("the job fits no cluster: " + "; ".join(
            "%s: %s" % (key, reason) for key, reason in _skips(candidates)))
    outcomes = failed + [(key, SlurmkitError(reason)) for key, reason in _skips(candidates)]
    raise GroupError(GroupResult(_unique(outcomes)), "no cluster took the job")


def _skips(candidates: Sequence[Candidate]) -> List[Tuple[str, str]]:
    """("cluster/partition", why) for every candidate that was not tried."""
    return [("%s%s" % (c.cluster, "/" + c.partition if c.partition else ""), c.reason or "")
            for c in candidates if not c.viable]


def _unique(pairs: List[Tuple[str, SlurmkitError]]) -> List[Tuple[str, SlurmkitError]]:
    # Two partitions of one cluster may both fail at submission: keep both, told apart.
    seen: Dict[str, int] = {}
    out = []
    for key, error in pairs:
        seen[key] = seen.get(key, 0) + 1
        out.append((key if seen[key] == 1 else "%s (%d)" % (key, seen[key]), error))
    return out
