"""Placement in place and time: clusters x start windows, ranked by cost or carbon under a deadline.

``slurmkit submit --prefer soon|cheap|green [--deadline WHEN]``.  The
planner (:mod:`slurmkit.federation.planner`) gives each cluster's start
estimate (``sbatch --test-only``); here, pure:

- **Windows**: each viable candidate at its estimate, and, when a deadline
  leaves room, at each whole hour after it (at most :data:`MAX_WINDOWS`),
  ending at start + the job's time limit.  A later window is submitted with
  ``--begin``: Slurm holds the job (reason BeginTime) until then.  Without
  a deadline there is nothing to wait for, so only the estimates compete:
  ``cheap``/``green`` then choose the place alone.
- **Each window's** expected kWh, cost and gCO2e (:mod:`slurmkit.energy`).
- **Choice**: ``soon`` is the planner's own order (earliest start, then
  price, then site order); ``cheap`` the lowest cost, ``green`` the lowest
  carbon, among windows that end by the deadline, unknown values last,
  ties to the other measure, then the earlier start, then the site order.
- **A later window is confirmed** before it is taken: Slurm is asked
  (``sbatch --test-only --begin``) when the job would start held until
  then; where that is later (nodes busy then: a job running through it, a
  reservation), the window moves to that start and the choice is made again
  (:func:`moved`; the planner's ``confirmed_windows``).  Slurm's estimate does not
  count jobs held or queued for later, so the partition's queue (squeue, by
  whole nodes) is read too: jobs this planner held for the same clean hour
  would otherwise queue behind each other (``make bench-green``).
- A deadline no window meets is refused (:class:`DeadlineError`, exit 2)
  with the earliest possible end.
"""

from datetime import datetime, timedelta
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from slurmkit.energy.model import CarbonSource, Expected, expected
from slurmkit.errors import UsageError
from slurmkit.site.model import Site
from slurmkit.times import slurm_time_seconds

PREFERENCES = ("soon", "cheap", "green")
# A week of hourly windows per candidate: a deadline further out adds nothing a grid's daily cycle
# does not already offer, and keeps --explain readable.
MAX_WINDOWS = 7 * 24


class DeadlineError(UsageError):
    """No cluster can end the job by the deadline (the message names the earliest possible end)."""


class Window(NamedTuple):
    """One candidate (cluster, partition) starting at one time."""

    candidate: object                    # a planner.Candidate (viable)
    start: datetime                      # naive local, as Slurm's estimates
    end: datetime
    later: bool                          # after the estimate: submitted with --begin=start
    use: Expected
    meets: bool                          # ends by the deadline (True without one)

    @property
    def cluster(self) -> str:
        return self.candidate.cluster

    def to_dict(self):
        return dict({"cluster": self.candidate.cluster, "partition": self.candidate.partition,
                     "start": self.start.isoformat(), "end": self.end.isoformat(),
                     "begin": self.start.isoformat() if self.later else None, "meets_deadline": self.meets},
                    **self.use.to_dict())


def parse_deadline(text: str, now: datetime) -> datetime:
    """``--deadline``'s text (``2026-12-05T08:00``, ``08:00``, ``+8h``) as a naive local datetime after ``now``;
    UsageError otherwise (for a job and a sweep alike)."""
    from slurmkit.times import parse_when

    try:
        when = parse_when(text, now)
    except ValueError as exc:
        raise UsageError("--deadline: %s" % exc) from None
    if when <= now:
        raise UsageError("--deadline %s is not in the future (now: %s); give a later one"
                         % (when.replace(microsecond=0).isoformat(sep=" "), now.replace(microsecond=0).isoformat(sep=" ")))
    return when


def carbon_by_cluster(site: Site, candidates: Sequence, now: datetime) -> Dict[str, CarbonSource]:
    """Each viable candidate's cluster's carbon intensity, its forecast read once however many of its
    partitions are candidates (for a job and a sweep alike)."""
    from slurmkit.energy.model import carbon_source

    return {name: carbon_source(site.clusters[name], now)
            for name in dict.fromkeys(c.cluster for c in candidates if c.viable)}


def job_seconds(site: Site, spec) -> int:
    """The job's time limit in seconds: what a window must fit (--time, else the site's default)."""
    text = spec.time or site.defaults.time
    seconds = slurm_time_seconds(text)
    if seconds is None:
        raise UsageError("--deadline and --prefer cheap|green need a time limit: give --time (the job's %r has "
                         "no end)" % text)
    return seconds


def windows(site: Site, spec, candidates: Sequence, deadline: Optional[datetime], now: datetime,
            carbon: Dict[str, CarbonSource], at_once: int = 1, waves: int = 1) -> List[Window]:
    """Every window of every viable candidate, in candidate order then time (``carbon``: cluster -> source).

    A sweep is ``waves`` rounds of ``at_once`` copies of the job (its points over ``--max-running``): a window
    then lasts ``waves`` time limits and draws ``at_once`` jobs' power."""
    seconds = job_seconds(site, spec) * waves
    length = timedelta(seconds=seconds)
    out = []
    for cand in candidates:
        if not cand.viable:
            continue
        cluster = site.clusters[cand.cluster]
        part = cluster.partitions[cand.partition]
        gpus = part.gpus_per_node if spec.gpus_per_node is None else spec.gpus_per_node
        first = max(cand.estimate, now)
        starts = [(first, False)]
        if deadline is not None:
            hour = first.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
            while hour + length <= deadline and len(starts) < MAX_WINDOWS:
                starts.append((hour, True))
                hour += timedelta(hours=1)
        for start, later in starts:
            use = expected(cluster, part, spec.nodes * at_once, gpus, start, seconds, carbon.get(cand.cluster))
            out.append(Window(cand, start, start + length, later, use,
                              deadline is None or start + length <= deadline))
    return out


def moved(site: Site, spec, window: Window, start: datetime, deadline: Optional[datetime],
          carbon: Dict[str, CarbonSource], at_once: int = 1) -> Window:
    """``window`` starting at ``start`` instead (where Slurm says the job would really start), its use
    and whether it meets the deadline worked out again (a sweep's: ``at_once`` copies of the job, for as
    many rounds as the window already lasts)."""
    cluster = site.clusters[window.cluster]
    part = cluster.partitions[window.candidate.partition]
    gpus = part.gpus_per_node if spec.gpus_per_node is None else spec.gpus_per_node
    seconds = (window.end - window.start).total_seconds()
    use = expected(cluster, part, spec.nodes * at_once, gpus, start, seconds, carbon.get(window.cluster))
    end = start + timedelta(seconds=seconds)
    return window._replace(start=start, end=end, use=use, meets=deadline is None or end <= deadline)


def _unknown_last(value: Optional[float]) -> Tuple[int, float]:
    # Rounded so that sums of the same hours in another order do not decide between equal windows.
    return (1, 0.0) if value is None else (0, round(value, 6))


def rank_key(prefer: str):
    """The sort key of windows for a preference (``soon`` keeps the planner's order of candidates)."""
    if prefer == "cheap":
        return lambda w: (_unknown_last(w.use.cost), _unknown_last(w.use.gco2), w.start, w.candidate.order)
    if prefer == "green":
        return lambda w: (_unknown_last(w.use.gco2), _unknown_last(w.use.cost), w.start, w.candidate.order)
    if prefer == "soon":
        return lambda w: (w.later,) + tuple(w.candidate.rank_key())
    raise UsageError("--prefer %r: choose one of %s" % (prefer, ", ".join(PREFERENCES)))


def choose(all_windows: Sequence[Window], prefer: str, deadline: Optional[datetime]) -> List[Window]:
    """The windows that meet the deadline, best first, one per (cluster, partition): the first is the choice,
    the rest the failover order.  DeadlineError when none meets it."""
    key = rank_key(prefer)
    meeting = sorted((w for w in all_windows if w.meets), key=key)
    if not meeting:
        if not all_windows:
            return []
        first = min(all_windows, key=lambda w: (w.end, w.candidate.order))
        raise DeadlineError(
            "no cluster can end the job by the deadline %s: the earliest possible end is %s (cluster %s, partition "
            "%s, starting %s with a time limit of %s); give a later --deadline or a shorter --time"
            % (_text(deadline), _text(first.end), first.cluster, first.candidate.partition, _text(first.start),
               str(first.end - first.start)))
    seen = set()
    out = []
    for window in meeting:
        place = (window.candidate.cluster, window.candidate.partition)
        if place not in seen:
            seen.add(place)
            out.append(window)
    return out


def begin_text(when: datetime) -> str:
    """sbatch's --begin for a naive local datetime."""
    return when.replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%S")


def _text(when: Optional[datetime]) -> str:
    return when.replace(microsecond=0).isoformat(sep=" ") if when else "-"
