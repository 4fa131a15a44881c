#!/usr/bin/env python3
"""Green placement benchmark (``make bench-green``): a week of submissions replayed in SIMULATED time.

The three local clusters of site_configs/local.yaml, each put on a published
grid (slurmkit.energy.published: the "Let's Wait Awhile" data set's 2020
hourly carbon means and RTE's 2020 day-ahead prices): alpha on Great
Britain's, beta on France's, gamma on Germany's.  The workload is
slurmkit.federation.replay.week_workload (urgent jobs, the study's
next-workday jobs, overnight runs, long urgent runs).  The planner is the
real one (submit_best, as ``submit --prefer`` runs it); Slurm is simulated
(replay.SimulatedCluster), with as many nodes as each devcluster has.

Two comparisons, each against submitting every job at once to the soonest
cluster (``--prefer soon``, no deadline):

1. **Place and time**: the three clusters, each job with its own preference.
2. **Time only**: alpha alone (Great Britain's grid), the study's setting: its
   cut for next-workday jobs there is 6.56 % (non-interruptible).

Targets: every deadline met; the time-only cut on next-workday jobs at least
the study's; the whole run under 60 s of wall time.  Results go to
``.bench/green.json``; exits 1 when a target is missed.
"""

import json
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SITE = ROOT / "site_configs" / "local.yaml"
REGIONS = {"alpha": "GB", "beta": "FR", "gamma": "DE"}
# The devclusters' node counts (devcluster/devcluster.py): what each simulated cluster has.
NODES = {"alpha": 4, "beta": 3, "gamma": 2}
# A week of June 2020 (no daylight-saving change in it), Monday first: the profiles are the year's means.
MONDAY = datetime(2020, 6, 8)
WALL_TARGET_S = 60.0


def by_kind(outcomes):
    kinds = {}
    for o in outcomes:
        k = kinds.setdefault(o.job.kind, {"jobs": 0, "gco2": 0.0, "cost": 0.0, "delay_h": 0.0, "met": 0, "due": 0})
        k["jobs"] += 1
        k["gco2"] += o.use.gco2
        k["cost"] += o.use.cost
        k["delay_h"] += o.delay.total_seconds() / 3600.0
        if o.job.deadline is not None:
            k["due"] += 1
            k["met"] += o.met
    for k in kinds.values():
        k["delay_h"] /= k["jobs"]
    return kinds


def compare(site, jobs, clusters=None):
    from slurmkit.federation.replay import replay, totals

    base = replay(site, jobs, NODES, clusters=clusters, baseline=True)
    green = replay(site, jobs, NODES, clusters=clusters)
    out = {"baseline": totals(base).to_dict(), "green": totals(green).to_dict(),
           "baseline_by_kind": by_kind(base), "green_by_kind": by_kind(green)}
    b, g = out["baseline"], out["green"]
    out["gco2_cut"] = 1 - g["gco2"] / b["gco2"]
    out["cost_cut"] = 1 - g["cost"] / b["cost"]
    kb, kg = out["baseline_by_kind"]["next-workday"], out["green_by_kind"]["next-workday"]
    out["next_workday_gco2_cut"] = 1 - kg["gco2"] / kb["gco2"]
    return out


def row(label, t):
    return ("%-28s %10.1f kg %10.2f %6d/%-3d %8.2f h  %s"
            % (label, t["gco2"] / 1000, t["cost"], t["deadlines_met"], t["deadlines"], t["mean_delay_hours"],
               ", ".join("%s %d" % kv for kv in sorted(t["by_cluster"].items()))))


def main():
    from slurmkit.energy.published import STUDY_CUT_NEXT_WORKDAY
    from slurmkit.federation.replay import week_workload, with_published_grids
    from slurmkit.site.loader import load_site

    started = time.perf_counter()
    site = with_published_grids(load_site(str(SITE)), REGIONS)
    jobs = week_workload(MONDAY)
    results = {"jobs": len(jobs), "regions": REGIONS, "nodes": NODES, "week_from": MONDAY.isoformat(),
               "place_and_time": compare(site, jobs),
               "time_only_alpha_gb": compare(site, jobs, clusters=["alpha"])}
    wall = time.perf_counter() - started
    results["wall_s"] = wall
    study = STUDY_CUT_NEXT_WORKDAY["GB"]
    results["study_cut_gb_next_workday"] = study

    print("%d jobs over 7 simulated days; clusters %s" % (len(jobs), ", ".join("%s=%s" % kv for kv in REGIONS.items())))
    print("%-28s %13s %10s %10s %10s  %s" % ("", "gCO2e", "cost", "deadlines", "delay", "jobs per cluster"))
    for name, label in (("place_and_time", "three clusters"), ("time_only_alpha_gb", "alpha only (GB)")):
        r = results[name]
        print(row(label + ", soonest", r["baseline"]))
        print(row(label + ", green", r["green"]))
        print("%-28s gCO2e %.1f %% less, cost %.1f %% less; next-workday jobs: %.1f %% less"
              % ("", 100 * r["gco2_cut"], 100 * r["cost_cut"], 100 * r["next_workday_gco2_cut"]))
    print("study (Wiesner et al. 2021), GB, next-workday, non-interruptible: %.2f %% less" % (100 * study))
    print("wall time %.1f s (simulated time: nothing sleeps)" % wall)

    out = ROOT / ".bench" / "green.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str))

    missed = []
    for name in ("place_and_time", "time_only_alpha_gb"):
        g = results[name]["green"]
        if g["deadlines_met"] != g["deadlines"]:
            missed.append("%s: %d of %d deadlines met" % (name, g["deadlines_met"], g["deadlines"]))
    if results["time_only_alpha_gb"]["next_workday_gco2_cut"] < study:
        missed.append("time-only cut below the study's %.2f %%" % (100 * study))
    if wall > WALL_TARGET_S:
        missed.append("wall time %.1f s over %.0f s" % (wall, WALL_TARGET_S))
    if missed:
        print("TARGET MISSED: " + "; ".join(missed))
        return 1
    print("targets met: every deadline, at least the study's cut, under %.0f s" % WALL_TARGET_S)
    return 0


if __name__ == "__main__":
    sys.exit(main())
