"""Replay a week of submissions through the real planner against SIMULATED clusters, in simulated time.

``make bench-green`` (bench/bench_green.py) and its unit test use this to
compare ``--prefer green --deadline`` against submitting every job at once
to the soonest cluster.  What is real and what is simulated:

- **Real**: the planner (:func:`slurmkit.federation.planner.submit_best`
  with ``dry_run=True``, exactly what ``submit --prefer ... --explain``
  runs): rendering each job for each cluster, the candidates, the start
  windows up to the deadline and the choice among them
  (:mod:`slurmkit.federation.windows`), and the kWh, cost and gCO2e of
  what each job really did (:func:`slurmkit.energy.model.expected` at the
  hour it really started).
- **Simulated**: Slurm.  :class:`SimulatedCluster` stands in for a cluster's
  backend (the session's injected ``backend_factory``): it answers
  ``sbatch --test-only`` (``estimate_start``) from its calendar of the jobs
  that have started (blind, as real Slurm is, to jobs held for later),
  ``squeue`` (``jobs``) and ``scontrol show partition``, and :meth:`SimulatedCluster.run` books a chosen job as
  Slurm would hold and start it: at its ``--begin`` or when enough nodes
  are free, whichever is later (so a window the planner thought free can
  still be late, and the replay says so as a missed deadline).  The clock
  is :class:`SimulatedClock`: nothing sleeps, a week replays in seconds.

Each node runs one job at a time (the jobs ask for whole nodes), and a job
runs exactly its time limit: the planner's own assumption, so the replay
measures the choice and not the forecast of run times.
"""

import tempfile
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from slurmkit.energy.model import Expected, expected
from slurmkit.site.model import Site
from slurmkit.slurm.types import JobInfo, StartEstimate


class ReplayJob(NamedTuple):
    """One submission of the workload (naive local times, as Slurm's)."""

    name: str
    kind: str                            # the workload's class of job, for the report ("urgent", "next-workday", ...)
    submit: datetime
    nodes: int
    seconds: int                         # its time limit, which it runs to
    deadline: Optional[datetime]         # None: none given
    prefer: str = "soon"                 # what its user asks for (the baseline asks "soon" for every job)


class Outcome(NamedTuple):
    """Where and when a replayed job ran, and what it used."""

    job: ReplayJob
    cluster: str
    partition: str
    start: datetime
    use: Expected

    @property
    def end(self) -> datetime:
        return self.start + timedelta(seconds=self.job.seconds)

    @property
    def delay(self) -> timedelta:
        return self.start - self.job.submit

    @property
    def met(self) -> bool:
        return self.job.deadline is None or self.end <= self.job.deadline


class SimulatedClock:
    """Simulated wall time for the planner (``time()``); ``sleep`` only moves it on."""

    def __init__(self, now: datetime):
        self.now = now

    def time(self) -> float:
        return self.now.timestamp()

    def sleep(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class SimulatedCluster:
    """A simulated Slurm cluster of ``nodes`` whole nodes: the one backend call the planner makes
    (``estimate_start``), answered from a calendar of the jobs booked with :meth:`run`."""

    def __init__(self, name: str, nodes: int, clock: SimulatedClock, sees_held: bool = False):
        self.name = name
        self.clock = clock
        # Real Slurm's --test-only does not count jobs held for later (measured on alpha, Slurm 22.05: four
        # jobs held for 16:00 on its four nodes, and a fifth is still estimated to start at 16:00 there).
        # So the estimate counts only the jobs that have started by now; sees_held=True lets it see every
        # booking, held and queued ones included (a kinder Slurm than the real one).
        self.sees_held = sees_held
        self.booked: List[List[Tuple[datetime, datetime]]] = [[] for _ in range(nodes)]
        # (partition, begin, start, nodes, seconds) of each job booked: what squeue lists (jobs()).
        self.queue: List[Tuple[str, datetime, datetime, int, int]] = []

    def earliest(self, after: datetime, count: int, seconds: int, started_by: Optional[datetime] = None) -> datetime:
        """The first time from ``after`` at which ``count`` nodes are free for ``seconds`` (``started_by``:
        counting only the bookings that started by then)."""
        if count > len(self.booked):
            raise ValueError("simulated cluster %s has %d nodes, not %d" % (self.name, len(self.booked), count))
        booked = self.booked if started_by is None else [[(a, b) for a, b in node if a <= started_by]
                                                         for node in self.booked]
        length = timedelta(seconds=seconds)
        starts = sorted({after} | {end for node in booked for _, end in node if end > after})
        for start in starts:
            if len(self._free(start, start + length, booked)) >= count:
                return start
        raise AssertionError("unreachable: the last booking's end leaves every node free")

    def run(self, begin: datetime, count: int, seconds: int, partition: str = "") -> datetime:
        """Book a job held until ``begin``: it starts then, or when ``count`` nodes are free after it."""
        start = self.earliest(begin, count, seconds)
        self.queue.append((partition, begin, start, count, seconds))
        end = start + timedelta(seconds=seconds)
        for node in self._free(start, end)[:count]:
            self.booked[node].append((start, end))
        return start

    def _free(self, start: datetime, end: datetime, booked=None) -> List[int]:
        return [i for i, node in enumerate(self.booked if booked is None else booked)
                if all(b <= start or a >= end for a, b in node)]

    # The backend interface (slurmkit.slurm.backend.SlurmBackend) as far as the planner uses it.
    def estimate_start(self, script: str) -> StartEstimate:
        header = _sbatch_header(script)
        count = int(header.get("nodes", "1"))
        from slurmkit.times import slurm_time_seconds

        seconds = slurm_time_seconds(header["time"])
        now = datetime.fromtimestamp(self.clock.time())
        after = now
        if "begin" in header:                                  # a later window, confirmed by the planner
            after = max(after, datetime.strptime(header["begin"], "%Y-%m-%dT%H:%M:%S"))
        start = self.earliest(after, count, seconds, None if self.sees_held else now)
        return StartEstimate(start=start, nodes="%s-sim[%d]" % (self.name, count), partition=header.get("partition"))

    def jobs(self, job_ids=None, user=None) -> List[JobInfo]:
        """The jobs not ended yet, as squeue lists them: running, or pending (reason BeginTime while held for
        later, Resources after) with the start Slurm expects."""
        now = datetime.fromtimestamp(self.clock.time())
        return [JobInfo(job_id=str(i), name="sim", state="RUNNING" if start <= now else "PENDING",
                        partition=partition, node_count=count, start_time=start, time_limit=_slurm_time(seconds),
                        reason="None" if start <= now else "BeginTime" if begin > now else "Resources")
                for i, (partition, begin, start, count, seconds) in enumerate(self.queue)
                if start + timedelta(seconds=seconds) > now]

    def partitions(self) -> Dict[str, Dict[str, str]]:
        """Every partition of the simulated cluster spans all of its nodes."""
        return defaultdict(lambda: {"TotalNodes": str(len(self.booked))})

    def close(self) -> None:
        pass


def _sbatch_header(script: str) -> Dict[str, str]:
    """The ``#SBATCH --key=value`` lines of a rendered script."""
    out = {}
    for line in script.splitlines():
        if line.startswith("#SBATCH --") and "=" in line:
            key, value = line[len("#SBATCH --"):].split("=", 1)
            out[key] = value.strip()
    return out


# Busy watts per accelerator model: the board power of NVIDIA's datasheets (H100 SXM up to 700 W, A100 SXM
# 400 W); the Ascend 910B is taken as an A100 (no datasheet figure here).  And 1 kW per node for its CPUs,
# memory, fans and NICs.  The same for every strategy, so the comparison does not hang on them.
GPU_BUSY_WATTS = {"h100": 700.0, "a100": 400.0, "ascend910b": 400.0}
NODE_BUSY_WATTS = 1000.0
REPLAY_PUE = 1.2


def with_published_grids(site: Site, regions: Dict[str, str]) -> Site:
    """``site`` with each named cluster on a published grid (cluster -> "GB", "FR" or "DE",
    :mod:`slurmkit.energy.published`): its time zone, hourly carbon profile, day-ahead energy price, a PUE
    of 1.2 and a power model per partition (:data:`GPU_BUSY_WATTS`).  The site's GPU-hour prices stay."""
    from slurmkit.energy import published
    from slurmkit.site.model import EnergySettings, HourWindow, PowerModel

    clusters = dict(site.clusters)
    for name, region in regions.items():
        cluster = site.cluster(name)
        parts = {p.name: p._replace(power=PowerModel(gpu_busy_watts=GPU_BUSY_WATTS.get(p.gpu_model or "", 0.0),
                                                     node_busy_watts=NODE_BUSY_WATTS))
                 for p in cluster.partitions.values()}
        energy = EnergySettings(pue=REPLAY_PUE,
                                price_per_kwh=(HourWindow(0, 24, published.DAY_AHEAD_PRICE_2020[region]),),
                                carbon_intensity=published.hourly_windows(published.CARBON_2020_HOURLY[region]))
        clusters[name] = cluster._replace(partitions=parts, energy=energy, timezone=published.TIMEZONES[region])
    return site._replace(clusters=clusters)


def _slurm_time(seconds: int) -> str:
    return "%02d:%02d:%02d" % (seconds // 3600, seconds % 3600 // 60, seconds % 60)


def replay(site: Site, jobs: Sequence[ReplayJob], nodes: Dict[str, int], clusters: Optional[Sequence[str]] = None,
           baseline: bool = False, sees_held: bool = False) -> List[Outcome]:
    """Plan each job at its submission time with its own ``--prefer`` and ``--deadline`` (``baseline``:
    ``--prefer soon`` without a deadline, every job at once to the soonest cluster), book it on its
    simulated cluster, and say what it used.

    ``nodes``: cluster -> its simulated node count; ``clusters``: the clusters the planner may use (all);
    ``sees_held``: True lets the estimates see jobs held for later, which real Slurm's do not (:class:`SimulatedCluster`).
    A deadline the planner cannot meet raises its DeadlineError: the workload is then wrong, not the replay.
    """
    from slurmkit.federation.cooldown import Cooldown
    from slurmkit.federation.planner import submit_best
    from slurmkit.script.render import JobSpec
    from slurmkit.session import Session

    ordered = sorted(jobs, key=lambda j: (j.submit, j.name))
    clock = SimulatedClock(ordered[0].submit if ordered else datetime(2020, 1, 1))
    simulated = {name: SimulatedCluster(name, count, clock, sees_held) for name, count in nodes.items()}
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="slurmkit-replay-") as state, \
            Session(site, backend_factory=lambda cluster: simulated[cluster.name]) as session:
        cooldown = Cooldown(path="%s/cooldown.json" % state, clock=clock)
        for number, job in enumerate(ordered):
            clock.now = job.submit
            spec = JobSpec(command=("train.py",), nodes=job.nodes, time=_slurm_time(job.seconds),
                           name=job.name, token="replay-%d" % number)
            placement = submit_best(session, spec, clusters=clusters, cooldown=cooldown, dry_run=True, clock=clock,
                                    prefer="soon" if baseline else job.prefer,
                                    deadline=None if baseline else job.deadline)
            if placement.chosen is not None:
                cluster, partition, begin = placement.chosen.cluster, placement.chosen.candidate.partition, \
                    placement.chosen.start
            else:
                first = next(c for c in placement.candidates if c.viable)
                cluster, partition, begin = first.cluster, first.partition, first.estimate
            start = simulated[cluster].run(begin, job.nodes, job.seconds, partition)
            place = site.clusters[cluster]
            part = place.partitions[partition]
            use = expected(place, part, job.nodes, part.gpus_per_node, start, job.seconds)
            outcomes.append(Outcome(job, cluster, partition, start, use))
    return outcomes


def week_workload(monday: datetime, days: int = 7, seed: int = 2021) -> List[ReplayJob]:
    """The documented mix (docs/benchmarks.md, "Green placement"), drawn with a fixed seed from ``monday`` 00:00 on:

    - **urgent** (every day, 6): 1-2 h on 1 node, submitted 08:00-20:00, ``--prefer soon``, no deadline;
    - **next-workday** (workdays, 10): 1-4 h on 1 node, submitted 09:00-17:00, ``--prefer green`` due at
      09:00 of the next workday: the "Let's Wait Awhile" study's ML-training scenario;
    - **overnight** (workdays, 1): a 10 h run on 2 nodes submitted 17:00-18:00, ``--prefer green`` due 36 h later;
    - **long urgent** (Monday and Thursday): a 20 h run on 2 nodes at 10:00, ``--prefer soon``, no deadline.
    """
    import random

    draw = random.Random(seed)
    jobs: List[ReplayJob] = []

    def at(day: int, first_hour: int, last_hour: int) -> datetime:
        minutes = draw.randrange(first_hour * 60, last_hour * 60)
        return monday + timedelta(days=day, minutes=minutes)

    def next_workday_9(when: datetime) -> datetime:
        day = when.replace(hour=9, minute=0, second=0, microsecond=0) + timedelta(days=1)
        while day.weekday() >= 5:
            day += timedelta(days=1)
        return day

    for day in range(days):
        workday = (monday + timedelta(days=day)).weekday() < 5
        for i in range(6):
            jobs.append(ReplayJob("urgent-%d-%d" % (day, i), "urgent", at(day, 8, 20), 1,
                                  draw.choice((3600, 5400, 7200)), None))
        if not workday:
            continue
        for i in range(10):
            when = at(day, 9, 17)
            jobs.append(ReplayJob("nextday-%d-%d" % (day, i), "next-workday", when, 1,
                                  draw.choice((3600, 7200, 10800, 14400)), next_workday_9(when), "green"))
        when = at(day, 17, 18)
        jobs.append(ReplayJob("overnight-%d" % day, "overnight", when, 2, 10 * 3600, when + timedelta(hours=36),
                              "green"))
        if (monday + timedelta(days=day)).weekday() in (0, 3):
            jobs.append(ReplayJob("long-%d" % day, "long urgent", monday + timedelta(days=day, hours=10), 2,
                                  20 * 3600, None))
    return sorted(jobs, key=lambda j: (j.submit, j.name))


class Totals(NamedTuple):
    """A replay summed up: what a sustainability report and a GPU-hour budget both read."""

    jobs: int
    gco2: float
    cost: float
    kwh: float
    gpu_hours: float
    deadlines: int                       # jobs with a deadline
    deadlines_met: int
    mean_delay_hours: float
    by_cluster: Dict[str, int]

    def to_dict(self):
        return self._asdict()


def totals(outcomes: Sequence[Outcome]) -> Totals:
    """Sums over a replay; a job whose carbon or cost is unknown makes the sum fail loudly, not shrink."""
    unknown = [o.job.name for o in outcomes if o.use.gco2 is None or o.use.cost is None or o.use.kwh is None]
    if unknown:
        raise ValueError("replay: unknown energy, cost or carbon for %s (a site without profiles?)"
                         % ", ".join(unknown[:5]))
    by_cluster: Dict[str, int] = {}
    for o in outcomes:
        by_cluster[o.cluster] = by_cluster.get(o.cluster, 0) + 1
    with_deadline = [o for o in outcomes if o.job.deadline is not None]
    return Totals(
        jobs=len(outcomes), gco2=sum(o.use.gco2 for o in outcomes), cost=sum(o.use.cost for o in outcomes),
        kwh=sum(o.use.kwh for o in outcomes), gpu_hours=sum(o.use.gpu_hours for o in outcomes),
        deadlines=len(with_deadline), deadlines_met=sum(o.met for o in with_deadline),
        mean_delay_hours=(sum(o.delay.total_seconds() for o in outcomes) / 3600.0 / len(outcomes)) if outcomes
        else 0.0,
        by_cluster=by_cluster)
