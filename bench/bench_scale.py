#!/usr/bin/env python3
"""slurmkit against clusters of 64, 256 and 1,024 real slurmds (devcluster/scale.py).

At each size (SCALE_SIZES, default "64 256 1024") the scale cluster is
started (its start time and memory are recorded), then each command below is
run as a whole process (python -m slurmkit ..., what a user pays) several
times, first with no other jobs, then with SCALE_QUEUE (default 10,000)
separate held jobs queued (an array would be one record in slurmctld):

  clusters            is every cluster reachable (ping, partitions, nodes, queue)
  status IDS          two jobs by id
  status              your slurmkit jobs (none of the queued ones are)
  topology            the per-switch summary (the default above 64 nodes)
  topology --detail   every node: the one expected to grow with the nodes
  render --comm heavy 64 nodes, with an empty topology cache (the cache is
                      what makes the next render free; the cold one is the cost)

Per command: the median wall time, and of one run the slurmctld RPCs (sdiag's
counts by client message type, before and after, devcluster/scale.py
rpc_counts) and the time slurmctld spent on them (sdiag's total_time): the
count stays flat where a listing of every job grows in work.  Targets (issue 13): no command's RPCs grow with nodes or jobs;
each command at 1,024 nodes within twice its time at 64, except topology
--detail.  Results: .bench/scale.json and .bench/scale.png (cost against
cluster size, one line per command; needs matplotlib, the bench extra).
The cluster is stopped at the end.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "devcluster"))
import scale  # noqa: E402

OUT = ROOT / ".bench"
SIZES = [int(x) for x in os.environ.get("SCALE_SIZES", "64 256 1024").split()]
QUEUE = int(os.environ.get("SCALE_QUEUE", "10000"))
REPEAT = int(os.environ.get("SCALE_REPEAT", "3"))
SITE = str(scale.SITE_YAML)
PY = sys.executable


def run(argv, env, timeout=600, check=True):
    p = subprocess.run([str(a) for a in argv], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, timeout=timeout)
    if check and p.returncode != 0:
        raise SystemExit("%s exited %d:\n%s%s" % (" ".join(map(str, argv)), p.returncode, p.stdout, p.stderr))
    return p


def commands(ids):
    sk = [PY, "-m", "slurmkit"]
    return [
        ("clusters", sk + ["clusters", "--site", SITE], False),
        ("status IDS", sk + ["status", "--site", SITE] + ids, False),
        ("status", sk + ["status", "--site", SITE], False),
        ("topology", sk + ["topology", "--site", SITE, "--summary"], False),
        ("topology --detail", sk + ["topology", "--site", SITE, "--detail"], False),
        ("render --comm heavy", sk + ["render", "--site", SITE, "-T", "srun", "-N", "64", "--procs-per-node", "1",
                                      "--comm", "heavy", "--", "true"], True),
    ]


def measure(env, argv, cold_cache):
    times, rpcs = [], None
    for i in range(REPEAT):
        e = dict(env)
        tmp = None
        if cold_cache:
            tmp = tempfile.mkdtemp(prefix="bench-scale-cache-")
            e["SLURMKIT_CACHE_DIR"] = tmp
        before = scale.rpc_counts(env) if i == 0 else None
        t0 = time.perf_counter()
        run(argv, e)
        times.append(time.perf_counter() - t0)
        if i == 0:
            rpcs, ctld_us = scale.rpc_split(scale.rpc_diff(before, scale.rpc_counts(env)))
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return {"seconds": round(statistics.median(times), 4), "all_seconds": [round(t, 4) for t in times],
            "rpcs": sum(rpcs.values()), "rpc_types": rpcs, "slurmctld_ms": round(ctld_us / 1000.0, 2)}


def one_size(n, env):
    t0 = time.monotonic()
    run([PY, scale.__file__, "up", str(n)], env, timeout=900)
    info = json.loads(scale.SCALE_JSON.read_text())
    print("%d nodes: up in %.1fs, %s MB PSS" % (n, time.monotonic() - t0, info["memory"]["total_mb"]), flush=True)
    out_dir = scale.STATE / "out" / "jobs"
    out_dir.mkdir(parents=True, exist_ok=True)
    # Two finished slurmkit jobs for `status IDS` (and `status`) to find.
    ids = []
    for _ in range(2):
        p = run([PY, "-m", "slurmkit", "submit", "--site", SITE, "-T", "srun", "-N", 16, "--procs-per-node", 1,
                 "--output", str(out_dir / "%j.out"), "--json", "--", "true"], env)
        ids.append(json.loads(p.stdout)["id"])
    for ref in ids:
        deadline = time.monotonic() + 120
        while "JobState=COMPLETED" not in run(["scontrol", "show", "job", ref.split(":")[1]], env).stdout:
            if time.monotonic() > deadline:
                raise SystemExit("job %s did not complete" % ref)
            time.sleep(0.5)
    result = {"nodes": n, "start": info["timing"], "memory": info["memory"], "queues": {}}
    for queued in (0, QUEUE):
        if queued:
            t0 = time.monotonic()
            scale.queue_held_jobs(env, queued, name="scale-others")
            print("  %d held jobs queued in %.1fs" % (queued, time.monotonic() - t0), flush=True)
        rows = {}
        try:
            for name, argv, cold in commands(ids):
                rows[name] = measure(env, argv, cold)
                print("  %-6d queued  %-20s %7.3fs  %2d RPCs %7.2f ms in slurmctld  %s"
                      % (queued, name, rows[name]["seconds"], rows[name]["rpcs"], rows[name]["slurmctld_ms"],
                         rows[name]["rpc_types"]), flush=True)
        finally:
            if queued:
                run(["scancel", "--name=scale-others"], env, check=False)
        result["queues"][str(queued)] = rows
    mem = scale.rss_mb([scale.Scale(n).slurmctld().pid()])
    result["slurmctld_pss_mb_after"] = round(mem, 1)
    return result


def plot(results, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib (pip install -e '.[bench]'): no plot", flush=True)
        return False
    sizes = [r["nodes"] for r in results]
    names = list(results[0]["queues"]["0"])
    fig, (ax_t, ax_r, ax_c) = plt.subplots(1, 3, figsize=(18, 5.5))
    queue = max(int(q) for q in results[0]["queues"])
    for k, name in enumerate(names):
        # One colour per command; solid: no other jobs, dashed: with the queue.
        for queued, style in (("0", "-o"), (str(queue), "--x")):
            if all(queued in r["queues"] for r in results):
                label = "%s%s" % (name, "" if queued == "0" else " (%d queued)" % queue)
                kw = dict(label=label, color="C%d" % k)
                ax_t.plot(sizes, [r["queues"][queued][name]["seconds"] for r in results], style, **kw)
                ax_r.plot(sizes, [r["queues"][queued][name]["rpcs"] for r in results], style, **kw)
                ax_c.plot(sizes, [r["queues"][queued][name].get("slurmctld_ms", 0) for r in results], style, **kw)
    ax_t.plot(sizes, [r["start"]["up_s"] for r in results], ":s", color="grey", label="cluster start (s)")
    for ax, title in ((ax_t, "whole-process time (s)"), (ax_r, "slurmctld RPCs per command (sdiag)"),
                      (ax_c, "slurmctld time on them (ms, sdiag total_time)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes)
        ax.set_xticklabels([str(s) for s in sizes])
        ax.set_xlabel("nodes (real slurmds)")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    ax_t.set_yscale("log")
    ax_t.legend(fontsize=7, loc="upper left")
    fig.suptitle("slurmkit against devcluster/scale.py (Slurm 22.05, one machine)")
    fig.tight_layout()
    fig.savefig(str(path), dpi=110)
    return True


def verdict(results):
    """The issue's targets, checked: lines of text."""
    lines = []
    first, last = results[0], results[-1]
    for name in first["queues"]["0"]:
        rpcs = {(r["nodes"], q): r["queues"][q][name]["rpcs"] for r in results for q in r["queues"]}
        flat = len(set(rpcs.values())) == 1
        t0, t1 = first["queues"]["0"][name]["seconds"], last["queues"]["0"][name]["seconds"]
        within = t1 <= 2 * t0 or name == "topology --detail"
        lines.append("%-20s RPCs %s  time %d->%d nodes x%.2f %s" % (
            name, "constant (%d)" % next(iter(rpcs.values())) if flat else "VARY %s" % sorted(set(rpcs.values())),
            first["nodes"], last["nodes"], t1 / t0, "ok" if within else "OVER 2x"))
    return lines


def main():
    if sys.argv[1:] == ["--plot"]:  # redraw .bench/scale.png from .bench/scale.json
        plot(json.loads((OUT / "scale.json").read_text())["results"], OUT / "scale.png")
        return
    if os.geteuid() != 0:
        raise SystemExit("bench_scale: run as root (the scale cluster's daemons)")
    env = dict(os.environ)
    env["SLURM_CONF"] = str(scale.STATE / "etc" / "slurm.conf")
    for var in ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_CLUSTERS"):
        env.pop(var, None)
    OUT.mkdir(exist_ok=True)
    # Held until exit: a test module of another session would resize the cluster under us.
    lock = scale.use_lock()
    results = []
    try:
        for n in SIZES:
            results.append(one_size(n, env))
            data = {"sizes": SIZES, "queue": QUEUE, "repeat": REPEAT, "results": results,
                    "machine": {"cpus": os.cpu_count()}, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            (OUT / "scale.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    finally:
        run([PY, scale.__file__, "down"], env, check=False)
        lock.close()
    if plot(results, OUT / "scale.png"):
        print("plot: %s" % (OUT / "scale.png"))
    print("results: %s" % (OUT / "scale.json"))
    for line in verdict(results):
        print(line)


if __name__ == "__main__":
    main()
