"""What a sweep used, summed over its points and every attempt of each (``slurmkit sweep eff``).

A researcher with a GPU-hour budget and a site's sustainability report read
the same sums: GPU-hours, energy in kWh (with where it came from: Slurm's
ConsumedEnergy where the cluster measures it, the site's power model
otherwise, :func:`slurmkit.observe.eff.energy_of`), cost and gCO2e from the
hours each attempt really ran.  Every array the journal holds for the sweep
counts (its first submission, reruns, moves and the requeue daemon's
restarts), each cluster asked once (``sacct``) for all of its arrays' tasks.

Unknown stays unknown: one attempt whose energy cannot be said makes the
sum unknown (with why), never a smaller number; a cluster without
accounting is named, its points not counted as free.
"""

from typing import Dict, List, NamedTuple, Optional


class Used(NamedTuple):
    """What some attempts used in all; None: unknown (one attempt's was)."""

    attempts: int
    elapsed_s: int
    gpu_hours: Optional[float]
    kwh: Optional[float]
    cost: Optional[float]
    gco2: Optional[float]


class PointUsage(NamedTuple):
    point_id: str
    values: Dict[str, str]
    used: Used

    def to_dict(self):
        return dict({"point_id": self.point_id, "values": self.values}, **self.used._asdict())


class SweepUsage(NamedTuple):
    sweep: str
    name: str
    points: int
    points_run: int                      # points with at least one attempt in accounting
    used: Used                           # over every point and attempt
    source: Optional[str]                # "slurm", "model", "model+slurm" or None (unknown)
    unknown: List[str]                   # why a sum is unknown, one phrase each
    no_accounting: List[str]             # clusters that keep none: their tasks are not counted
    by_point: List[PointUsage]

    def to_dict(self):
        data = {k: v for k, v in self._asdict().items() if k not in ("used", "by_point")}
        data.update(self.used._asdict())
        data["by_point"] = [p.to_dict() for p in self.by_point]
        return data

    def lines(self) -> List[str]:
        how = {"slurm": "measured by Slurm (ConsumedEnergy) x the site's PUE",
               "model": "from the site's power model, busy the whole time (an upper bound)",
               "slurm+model": "measured by Slurm where it did, the power model elsewhere"}
        u = self.used
        out = ["sweep %s (%s): %d of %d point(s) ran, %d attempt(s), %.2f hours elapsed in all"
               % (self.sweep, self.name, self.points_run, self.points, u.attempts, u.elapsed_s / 3600.0),
               "GPU-hours: %s" % ("%.2f" % u.gpu_hours if u.gpu_hours is not None else "not recorded"),
               "energy: %s" % ("%.3f kWh, %s" % (u.kwh, how.get(self.source, self.source))
                               if u.kwh is not None else "unknown"),
               "cost: %s" % ("%.2f" % u.cost if u.cost is not None else "unknown"),
               "carbon: %s" % ("%.3f kgCO2e" % (u.gco2 / 1000.0) if u.gco2 is not None else "unknown")]
        out.extend("  unknown: %s" % why for why in self.unknown[:5])
        if len(self.unknown) > 5:
            out.append("  ... and %d more (--json lists all)" % (len(self.unknown) - 5))
        out.extend("  cluster %s keeps no accounting: its tasks are not counted" % c for c in self.no_accounting)
        return out


def sweep_usage(session, journal, sweep_id: str) -> SweepUsage:
    """Sum what the sweep's points used over every attempt, from each cluster's accounting."""
    from slurmkit.observe.eff import attempts_from_rows, energy_of

    sweep = journal.find(sweep_id)
    points = journal.points(sweep.id)
    arrays = [a for a in journal.arrays(sweep.id) if a.job_id]
    # (cluster, array job id) -> its points table: task index -> point id.
    tables = {}
    rows_of = {}
    for array in arrays:
        if array.table_id not in rows_of:
            rows_of[array.table_id] = journal.rows(array.table_id)
        tables[(array.cluster, array.job_id)] = rows_of[array.table_id]
    by_point: Dict[str, list] = {p.point_id: [] for p in points}
    no_accounting = []
    for cluster in dict.fromkeys(a.cluster for a in arrays):
        ids = [a.job_id for a in arrays if a.cluster == cluster]
        rows = session.backend(cluster).usage_records(ids)
        if rows is None:
            no_accounting.append(cluster)
            continue
        for attempt in attempts_from_rows(cluster, rows):
            job, _, index = attempt.job_id.partition("_")
            point = tables.get((cluster, job), {}).get(int(index)) if index.isdigit() else None
            if point in by_point:
                by_point[point].append(attempt)
    gpus_per_node = _gpus_per_node(session.site, sweep, arrays)
    out_points: List[PointUsage] = []
    unknown: List[str] = []
    sources = set()
    for p in points:
        attempts = by_point[p.point_id]
        if not attempts:
            out_points.append(PointUsage(p.point_id, p.values, Used(0, 0, 0.0, 0.0, 0.0, 0.0)))
            continue
        hint = gpus_per_node.get(attempts[-1].cluster)
        hint = hint * attempts[-1].nodes if hint is not None else None
        energy = energy_of(session.site, attempts, hint)
        unknown.extend("point %s: %s" % (p.point_id, why) for why in energy["unknown"])
        if energy["source"]:
            sources.update(energy["source"].split("+"))
        gpus = [a.gpus if a.gpus is not None else hint for a in attempts]
        gpu_hours = (sum(g * a.elapsed_s for g, a in zip(gpus, attempts)) / 3600.0
                     if all(g is not None for g in gpus) else None)
        out_points.append(PointUsage(p.point_id, p.values, Used(
            len(attempts), sum(a.elapsed_s for a in attempts), gpu_hours, energy["kwh"], energy["cost"],
            energy["gco2"])))

    def total(key):
        values = [getattr(u.used, key) for u in out_points]
        return None if any(v is None for v in values) else sum(values)

    return SweepUsage(
        sweep=sweep.id, name=sweep.name, points=len(points), points_run=sum(1 for u in out_points if u.used.attempts),
        used=Used(*(total(key) for key in Used._fields)), source="+".join(sorted(sources)) or None, unknown=unknown,
        no_accounting=no_accounting, by_point=out_points)


def _gpus_per_node(site, sweep, arrays) -> Dict[str, Optional[int]]:
    """cluster -> the GPUs per node the sweep's tasks had there (the sweep's own ask, else the partition's):
    what an attempt had where accounting does not count gres/gpu."""
    asked = sweep.spec.get("gpus_per_node")
    out: Dict[str, Optional[int]] = {}
    for array in arrays:
        cluster = site.clusters.get(array.cluster)
        part = cluster.partitions.get(array.partition) if cluster else None
        if asked is not None:
            out[array.cluster] = int(asked)
        elif part is not None:
            out[array.cluster] = part.gpus_per_node
        else:
            out.setdefault(array.cluster, None)
    return out

