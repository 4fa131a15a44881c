"""What a job used against what it asked for (``slurmkit eff``): seff's questions, for GPUs and
energy too, over every attempt of a restarted job, with a plain verdict.

One ``sacct --duplicates`` per cluster gives each attempt's row and its steps' rows (a job
Slurm requeued has a row per run under one id; a job the requeue daemon restarted is a chain
of ids, which the journal knows).  From them:

- time: elapsed against the time limit;
- CPU: the CPU time of all its steps (TotalCPU) against elapsed times CPUs allocated;
- memory: the largest task's peak (MaxRSS over the steps) against the memory per node;
- GPUs: GPU-hours from AllocTRES's ``gres/gpu`` where the cluster's AccountingStorageTRES
  counts it (else from the controller's ``TresPerNode`` while it still knows the job), and
  utilisation and GPU memory (``gres/gpuutil``, ``gres/gpumem``) where the cluster collects
  them; otherwise "not recorded", with what the admin would add;
- energy: ConsumedEnergyRaw where an AcctGatherEnergy plugin measures it, else the site's power
  model for the job's partition (busy the whole time: an upper bound), saying which; then its cost
  and gCO2e from the hours it really ran, with the site's prices, PUE and hourly carbon profile
  (:func:`slurmkit.energy.model.used`; a forecast is about the future and is not read here).

What the cluster does not record stays unknown (None), never zero.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Dict, List, NamedTuple, Optional

from slurmkit.errors import SlurmkitError

if TYPE_CHECKING:
    from slurmkit.observe.logs import LogRef
    from slurmkit.session import Session

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}


def size_bytes(text: str) -> Optional[int]:
    """``320572K``, ``2G``, ``1000M``, a plain number of bytes -> bytes; None when empty or unreadable."""
    m = re.fullmatch(r"([0-9.]+)([KMGTP]?)[nc]?", (text or "").strip())
    if not m:
        return None
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def cpu_seconds(text: str) -> Optional[float]:
    """sacct's TotalCPU: ``MM:SS.mmm``, ``HH:MM:SS``, ``D-HH:MM:SS`` (fractions kept) -> seconds."""
    text = (text or "").strip()
    if not text:
        return None
    days = 0
    if "-" in text:
        d, _, text = text.partition("-")
        days = int(d)
    parts = text.split(":")
    try:
        seconds = float(parts[-1])
        minutes = int(parts[-2]) if len(parts) > 1 else 0
        hours = int(parts[-3]) if len(parts) > 2 else 0
    except ValueError:
        return None
    return days * 86400 + hours * 3600 + minutes * 60 + seconds


def tres(text: str) -> Dict[str, str]:
    """``billing=2,cpu=2,gres/gpu=4,mem=2G`` -> {key: value}."""
    out = {}
    for item in (text or "").split(","):
        key, sep, value = item.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def _gpus(alloc: Dict[str, str]) -> Optional[int]:
    """GPUs from AllocTRES: ``gres/gpu=4`` (typed ones ``gres/gpu:h100=4`` count too, once)."""
    if "gres/gpu" in alloc:
        return int(alloc["gres/gpu"])
    typed = [int(v) for k, v in alloc.items() if k.startswith("gres/gpu:") and v.isdigit()]
    return sum(typed) if typed else None


class Attempt(NamedTuple):
    """One run of a job, as accounting saw it."""

    cluster: str
    job_id: str
    state: str
    elapsed_s: int
    limit_s: Optional[int]
    cpus: int
    nodes: int
    cpu_s: Optional[float]
    mem_bytes: Optional[int]          # allocated, all nodes
    peak_rss_bytes: Optional[int]     # the largest task's peak
    gpus: Optional[int]               # None: not recorded
    gpu_util: Optional[float]         # percent, where collected
    gpu_mem_bytes: Optional[int]
    energy_j: Optional[int]
    partition: Optional[str] = None   # as accounting recorded it (the first of a list)
    start: Optional[str] = None       # Slurm's local time, 2026-12-04T22:00:00; None before it started
    nodelist: Optional[str] = None    # Slurm's hostlist expression of its nodes
    gpu_kwh: Optional[float] = None   # what NVML measured of its GPUs (slurmkit.energy.nvml); None: not measured
    gpu_why: Optional[str] = None     # why not, where the cluster samples NVML


def attempts_from_rows(cluster: str, rows: List[Dict[str, str]]) -> List[Attempt]:
    """Each job row with its steps' peaks, in the order sacct gave them (runs of one id in time order)."""
    attempts: List[dict] = []
    for row in rows:
        job_id = row.get("JobID", "")
        if "." not in job_id:          # a job's own row: a new attempt
            alloc = tres(row.get("AllocTRES", ""))
            limit = row.get("TimelimitRaw", "")
            energy = row.get("ConsumedEnergyRaw", "")
            attempts.append(dict(
                cluster=cluster, job_id=job_id, state=(row.get("State") or "").split(" ")[0],
                elapsed_s=int(row.get("ElapsedRaw") or 0),
                limit_s=int(limit) * 60 if limit.isdigit() else None,
                cpus=int(row.get("NCPUS") or 0), nodes=int(row.get("NNodes") or 0),
                cpu_s=cpu_seconds(row.get("TotalCPU", "")), mem_bytes=size_bytes(alloc.get("mem", "")),
                peak_rss_bytes=None, gpus=_gpus(alloc), gpu_util=None, gpu_mem_bytes=None,
                energy_j=int(energy) if energy.isdigit() and int(energy) > 0 else None,
                partition=(row.get("Partition") or "").split(",")[0] or None,
                start=row.get("Start") if (row.get("Start") or "")[:1].isdigit() else None,
                nodelist=row.get("NodeList") if row.get("NodeList") not in (None, "", "None assigned") else None))
            continue
        if not attempts:
            continue
        current = attempts[-1]
        rss = size_bytes(row.get("MaxRSS", ""))
        if rss is not None:
            current["peak_rss_bytes"] = max(current["peak_rss_bytes"] or 0, rss)
        ave, peak = tres(row.get("TRESUsageInAve", "")), tres(row.get("TRESUsageInMax", ""))
        if "gres/gpuutil" in ave:
            current["gpu_util"] = max(current["gpu_util"] or 0.0, float(ave["gres/gpuutil"]))
        if "gres/gpumem" in peak:
            current["gpu_mem_bytes"] = max(current["gpu_mem_bytes"] or 0, size_bytes(peak["gres/gpumem"]) or 0)
    return [Attempt(**a) for a in attempts]


def human_bytes(n: Optional[float]) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return ("%.0f %s" if unit == "B" else "%.1f %s") % (n, unit)
        n /= 1024.0
    return "?"


def _human_time(seconds: Optional[float]) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return "%d:%02d:%02d" % (h, m, s)


def mem_per_node(attempt: Attempt) -> Optional[float]:
    """The memory an attempt was given on each node (AllocTRES's mem over its nodes); None where unrecorded."""
    return attempt.mem_bytes / attempt.nodes if attempt.mem_bytes and attempt.nodes else None


def over_memory(attempt: Attempt) -> bool:
    """Its largest task's peak went over the memory it was given per node: what Slurm's memory enforcement
    (cgroup, or JobAcctGatherParams=OverMemoryKill) kills a job for."""
    per_node = mem_per_node(attempt)
    return attempt.peak_rss_bytes is not None and per_node is not None and attempt.peak_rss_bytes > per_node


def memory_option(peak_bytes: float) -> str:
    """The --mem to ask for after a peak: a quarter more, rounded up to 64 MiB (``--mem=768M``)."""
    mib = -(-int(peak_bytes * 1.25) // (64 << 20)) * 64
    return "--mem=%dG" % (mib // 1024) if mib % 1024 == 0 else "--mem=%dM" % mib


class Report(NamedTuple):
    ref: str
    attempts: List[Attempt]
    lines: List[str]
    verdicts: List[str]
    data: dict


def energy_of(site, attempts: List[Attempt], gpus: Optional[int]) -> dict:
    """kWh, cost and gCO2e of every attempt, summed; each None when any attempt's is unknown (pure).

    ``source``: ``slurm`` (every attempt measured by Slurm), ``nvml`` (its
    GPUs by NVML, the rest of the nodes by the power model), ``model`` (none
    was: the power model), a ``+`` of those where attempts differ, or None.
    ``nvml_unread``: why NVML's samples were not used where the model stood in.
    """
    from slurmkit.energy.model import used
    from slurmkit.slurm.parsers import slurm_datetime

    kwh = cost = gco2 = 0.0
    known = {"kwh": True, "cost": True, "gco2": True}
    sources, why, nvml_why = set(), [], []
    for a in attempts:
        cluster = site.clusters.get(a.cluster)
        start = slurm_datetime(a.start or "")
        if cluster is None or start is None or not a.elapsed_s:
            if a.elapsed_s:
                why.append("attempt %s: %s" % (a.job_id, "cluster %s is not in the site" % a.cluster
                                               if cluster is None else "no start time recorded"))
                known = dict.fromkeys(known, False)
            continue
        if not a.partition:
            # slurmdbd's first row of a job can lack its partition for a moment after the job ended.
            why.append("attempt %s: accounting holds no partition for it yet; ask again in a moment" % a.job_id)
            known = dict.fromkeys(known, False)
            continue
        n_gpus = a.gpus if a.gpus is not None else gpus
        partition = cluster.partitions.get(a.partition)
        if n_gpus is None and a.energy_j is None and (partition is None or partition.gpus_per_node):
            # Counting no GPUs would leave their watts out: a smaller number, not a known one.
            why.append("attempt %s: its GPUs were not recorded" % a.job_id)
            known = dict.fromkeys(known, False)
            continue
        use, source = used(cluster, partition, a.nodes, n_gpus or 0, start, a.elapsed_s,
                           a.energy_j / 3.6e6 if a.energy_j is not None else None, gpu_kwh=a.gpu_kwh)
        if source:
            sources.add(source)
        if source == "model" and a.gpu_why and a.gpu_why not in nvml_why:
            nvml_why.append(a.gpu_why)
        why.extend(w for w in use.why if w not in why)
        for key, value in (("kwh", use.kwh), ("cost", use.cost), ("gco2", use.gco2)):
            if value is None:
                known[key] = False
        kwh += use.kwh or 0.0
        cost += use.cost or 0.0
        gco2 += use.gco2 or 0.0
    return {"kwh": kwh if known["kwh"] else None, "cost": cost if known["cost"] else None,
            "gco2": gco2 if known["gco2"] else None, "source": "+".join(sorted(sources)) or None,
            "unknown": why, "nvml_unread": nvml_why}


def _energy_lines(energy: dict, measured_j: Optional[int]) -> List[str]:
    how = {"slurm": "measured by Slurm (ConsumedEnergy) x the site's PUE",
           "model": "from the site's power model, busy the whole time (an upper bound); Slurm measured none",
           "model+slurm": "measured by Slurm where it did, the power model elsewhere",
           "nvml": "the GPUs measured by NVML at the job's start and end, the rest of each node from the site's "
                   "power model, x the site's PUE",
           "model+nvml": "the GPUs measured by NVML where they were, the site's power model elsewhere",
           "nvml+slurm": "measured by Slurm where it did, the GPUs by NVML and the rest by the power model elsewhere",
           "model+nvml+slurm": "measured by Slurm, NVML or the site's power model, attempt by attempt"}
    if energy["kwh"] is None:
        line = "energy: unknown (%s)" % ("; ".join(energy["unknown"]) or "not measured and no power model")
        if measured_j is None:
            line += "; Slurm measured none (the cluster has no AcctGatherEnergyType plugin)"
        lines = [line]
    else:
        lines = ["energy: %.3f kWh, %s" % (energy["kwh"], how.get(energy["source"], energy["source"]))]
    if energy.get("nvml_unread"):
        lines.append("NVML not used: %s" % "; ".join(energy["nvml_unread"]))
    lines.append("cost: %s" % ("%.2f" % energy["cost"] if energy["cost"] is not None else "unknown"))
    lines.append("carbon: %s" % ("%.3f kgCO2e (the site's hourly profile)" % (energy["gco2"] / 1000.0)
                                 if energy["gco2"] is not None else "unknown"))
    return lines


def report(ref: str, attempts: List[Attempt], gpus_hint: Optional[int] = None, site=None) -> Report:
    """The numbers and the verdicts for one job's attempts (pure; ``site`` adds energy from its power
    model where Slurm measured none, and cost and carbon)."""
    if not attempts:
        raise SlurmkitError("accounting has no record of job %s yet (it is written as the job starts)" % ref)
    last = attempts[-1]
    elapsed = sum(a.elapsed_s for a in attempts)
    cpu = [a for a in attempts if a.cpu_s is not None and a.cpus and a.elapsed_s]
    # Elapsed is whole seconds: a short busy job reads a little over 100 %; it cannot have been.
    cpu_eff = min(100.0, 100.0 * sum(a.cpu_s for a in cpu) / sum(a.cpus * a.elapsed_s for a in cpu)) if cpu else None
    peak = max((a.peak_rss_bytes for a in attempts if a.peak_rss_bytes is not None), default=None)
    per_node = mem_per_node(last)
    gpus = last.gpus if last.gpus is not None else gpus_hint
    gpu_hours = (sum((a.gpus if a.gpus is not None else gpus) * a.elapsed_s for a in attempts) / 3600.0
                 if gpus is not None else None)
    utils = [a.gpu_util for a in attempts if a.gpu_util is not None]
    energy = [a.energy_j for a in attempts]
    energy_j = sum(energy) if energy and all(e is not None for e in energy) else None

    lines = ["%s: %s after %d attempt(s)%s" % (ref, last.state, len(attempts),
                                               "" if len(attempts) == 1 else " (sums over all of them)"),
             "time: %s elapsed%s" % (_human_time(elapsed), " of a %s limit (%.0f %%)" % (
                 _human_time(last.limit_s), 100.0 * last.elapsed_s / last.limit_s) if last.limit_s else ""),
             "CPU: %s" % ("%.0f %% of %d CPU(s) busy (%s of CPU time)" % (cpu_eff, last.cpus,
                                                                         _human_time(sum(a.cpu_s for a in cpu)))
                          if cpu_eff is not None else "not recorded"),
             "memory: %s" % ("peak %s (the largest task) of %s per node%s" % (
                 human_bytes(peak), human_bytes(per_node), " (%.0f %%)" % (100.0 * peak / per_node) if per_node else "")
                 if peak is not None else "not recorded (no step sampled it)"),
             "GPUs: %s" % ("%d, %.2f GPU-hours" % (gpus, gpu_hours) if gpus is not None else
                           "not recorded (the cluster's AccountingStorageTRES does not count gres/gpu)"),
             "GPU utilisation: %s" % ("%.0f %%%s" % (max(utils), ", peak GPU memory %s" % human_bytes(
                 max(a.gpu_mem_bytes or 0 for a in attempts)) if any(a.gpu_mem_bytes for a in attempts) else "")
                                     if utils else "not collected (AccountingStorageTRES gres/gpuutil and an NVML "
                                                   "gather plugin, Slurm 23.02+)"),
             "energy: %s" % ("%.3f kWh" % (energy_j / 3.6e6) if energy_j is not None else
                             "not measured (the cluster has no AcctGatherEnergyType plugin)")]
    energy = energy_of(site, attempts, gpus) if site is not None else None
    if energy is not None:
        lines[-1:] = _energy_lines(energy, energy_j)
    verdicts = []
    if any(over_memory(a) for a in attempts):
        verdicts.append("it used more memory than it asked for (peak %s of %s per node) and Slurm kills a job for "
                        "that: ask for %s" % (human_bytes(peak), human_bytes(per_node), memory_option(peak)))
    elif last.state == "OUT_OF_MEMORY":
        verdicts.append("it ran out of memory: ask for more (--mem) than its peak")
    elif peak is not None and per_node and peak < 0.25 * per_node and per_node > (1 << 30):
        verdicts.append("asked for %s per node, used at most %s: ask for about %s (--mem)"
                        % (human_bytes(per_node), human_bytes(peak), human_bytes(max(peak * 1.5, 256 << 20))))
    if cpu_eff is not None and last.cpus > 1 and cpu_eff < 50:
        need = max(1, int(round(last.cpus * cpu_eff / 100.0 * 1.25)))
        verdicts.append("asked for %d CPUs, kept about %.1f busy: ask for %d" % (last.cpus, last.cpus * cpu_eff / 100.0,
                                                                                need))
    if utils and gpus and max(utils) < 50:
        used = max(1, int(round(gpus * max(utils) / 100.0)))
        verdicts.append("asked for %d GPUs, used about %d: ask for fewer" % (gpus, used))
    if last.limit_s and last.state == "COMPLETED" and last.limit_s >= 3600 and last.elapsed_s < 0.25 * last.limit_s:
        verdicts.append("used %s of its %s limit: a shorter --time (about %s) lets backfill start it sooner"
                        % (_human_time(last.elapsed_s), _human_time(last.limit_s),
                           _human_time(max(last.elapsed_s * 2, 600))))
    if last.state == "TIMEOUT":
        verdicts.append("it reached its time limit: ask for more --time, or checkpoint and restart (--auto-requeue)")
    data = {"id": ref, "state": last.state, "attempts": [a._asdict() for a in attempts], "elapsed_s": elapsed,
            "cpu_efficiency_pct": cpu_eff, "peak_rss_bytes": peak, "mem_per_node_bytes": per_node,
            "gpus": gpus, "gpu_hours": gpu_hours, "gpu_util_pct": max(utils) if utils else None,
            "energy_j": energy_j, "verdicts": verdicts}
    if energy is not None:
        data.update(energy_kwh=energy["kwh"], energy_source=energy["source"], cost=energy["cost"],
                    nvml_unread=energy["nvml_unread"],
                    gco2=energy["gco2"], energy_unknown=energy["unknown"])
    return Report(ref, attempts, lines, verdicts, data)


def array_report(ref: str, tasks: List[List[Attempt]]) -> Report:
    """An array (a sweep's): a line per task, then the sums over all of them."""
    reports = [report("%s_%s" % (ref, t[0].job_id.partition("_")[2]), t) for t in tasks]
    lines = ["%s: an array of %d task(s)" % (ref, len(reports))]
    for r in reports:
        d = r.data
        lines.append("  %-16s %-12s %s elapsed, CPU %s, peak memory %s" % (
            r.ref.split(":")[-1], d["state"], _human_time(d["elapsed_s"]),
            "%.0f %%" % d["cpu_efficiency_pct"] if d["cpu_efficiency_pct"] is not None else "?",
            human_bytes(d["peak_rss_bytes"])))
    gpu_hours = [r.data["gpu_hours"] for r in reports]
    cpu_time = sum(a.cpu_s or 0 for t in tasks for a in t)
    cpu_alloc = sum(a.cpus * a.elapsed_s for t in tasks for a in t)
    lines.append("all tasks: %s elapsed in total, CPU %s, GPU-hours %s" % (
        _human_time(sum(r.data["elapsed_s"] for r in reports)),
        "%.0f %%" % (100.0 * cpu_time / cpu_alloc) if cpu_alloc else "?",
        "%.2f" % sum(gpu_hours) if all(g is not None for g in gpu_hours) else "not recorded"))
    verdicts = sorted({v for r in reports for v in r.verdicts})
    data = {"id": ref, "tasks": [r.data for r in reports],
            "gpu_hours": sum(gpu_hours) if all(g is not None for g in gpu_hours) else None,
            "cpu_efficiency_pct": (100.0 * cpu_time / cpu_alloc) if cpu_alloc else None, "verdicts": verdicts}
    return Report(ref, [a for t in tasks for a in t], lines, verdicts, data)


def efficiency(session: "Session", ref: "LogRef", journal_path: Optional[str] = None) -> Report:
    """``ref``'s report, over every attempt the requeue daemon's journal knows of (else Slurm's own runs)."""
    from slurmkit.observe import logs

    chain = [(ref.cluster, ref.slurm_id)]
    tracked = logs.tracked_job(ref, journal_path)
    if tracked is not None:
        chain = [(a.cluster, a.job_id) for a in tracked.attempts if a.job_id]
    attempts: List[Attempt] = []
    for cluster in dict.fromkeys(c for c, _ in chain):
        backend = session.backend(cluster)
        ids = [j for c, j in chain if c == cluster]
        rows = backend.usage_records(ids)
        if rows is None:
            raise SlurmkitError("cluster %s keeps no accounting, and what a job used is known only to accounting "
                                "(sacct): eff cannot say for %s" % (cluster, ref))
        wanted = set(ids)
        # sacct -j also lists jobs whose steps or array it matches: keep the job asked for (an array's
        # id: its tasks, 72_0 ...; a task's own id: its row, shown as 72_0).
        def asked(row):
            shown, raw = row.get("JobID", "").split(".")[0], row.get("JobIDRaw", "").split(".")[0]
            return shown in wanted or raw in wanted or shown.partition("_")[0] in wanted
        rows = [r for r in rows if asked(r)]
        attempts.extend(with_nvml_energy(session, attempts_from_rows(cluster, rows)))
    tasks = list(dict.fromkeys(a.job_id for a in attempts))
    if ref.task is None and tasks and all("_" in t for t in tasks):   # an array's id: its tasks
        return array_report(str(ref), [[a for a in attempts if a.job_id == t] for t in tasks])
    hint = None
    if attempts and attempts[-1].gpus is None:
        backend = session.backend(ref.cluster)
        hint = _gpus_from_controller(backend, ref.slurm_id, attempts[-1].nodes)
        if hint is None and "gres/gpu" in backend.setting("AccountingStorageTRES"):
            hint = 0      # the cluster counts GPUs and this job had none
    return report(str(ref), attempts, hint, site=session.site)


def with_nvml_energy(session: "Session", attempts: List[Attempt]) -> List[Attempt]:
    """``attempts`` (of one cluster) with what NVML measured of their GPUs, where the cluster's site entry
    has them sampled (``energy.nvml_samples``): their sample files read in one go, here or on the login
    node, and each attempt's GPU kWh or why it is not known (:mod:`slurmkit.energy.nvml`)."""
    from slurmkit.energy import nvml
    from slurmkit.slurm.hostlist import expand
    from slurmkit.slurm.parsers import slurm_datetime

    cluster = session.site.clusters.get(attempts[0].cluster) if attempts else None
    directory = cluster.energy.nvml_samples if cluster is not None else None
    if not directory:
        return attempts
    wanted, paths = [], []
    runs: Dict[str, int] = {}
    for a in attempts:
        attempt = runs[a.job_id] = runs.get(a.job_id, -1) + 1     # Slurm's restart count: sacct -D's order
        partition = cluster.partitions.get(a.partition or "")
        if partition is None or partition.accelerator != "nvidia" or not a.elapsed_s:
            wanted.append(None)
            continue
        nodes = expand(a.nodelist) if a.nodelist else []
        wanted.append((attempt, nodes))
        paths.extend(nvml.sample_paths(directory, a.job_id, attempt, nodes))
    texts = session.files(cluster.name).tails(paths, 1 << 16) if paths else {}
    out = []
    for a, want in zip(attempts, wanted):
        if want is None:
            out.append(a)
            continue
        start = slurm_datetime(a.start or "")
        use = nvml.attempt_energy(texts, directory, a.job_id, want[0], want[1],
                                  start.timestamp() if start is not None else None, a.elapsed_s)
        out.append(a._replace(gpu_kwh=use.kwh, gpu_why=use.why))
    return out


def _gpus_from_controller(backend, job_id: str, nodes: int) -> Optional[int]:
    """GPUs of a job the controller still knows: ``TresPerNode=gres:gpu:2`` (or ``gres/gpu:h100:2``) times its
    nodes, ``TresPerJob`` as it is; None when it asked for none it says, or forgot the job."""
    try:
        records = backend.job_records(job_id)
    except SlurmkitError:
        return None
    if not records:
        return None
    kv = records[0]
    for key, times in (("TresPerJob", 1), ("TresPerNode", max(nodes, 1))):
        m = re.search(r"gres[:/]gpu(?::[A-Za-z0-9_.-]+)?[:=](\d+)", kv.get(key, ""))
        if m:
            return int(m.group(1)) * times
    return None
