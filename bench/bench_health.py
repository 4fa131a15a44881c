#!/usr/bin/env python3
"""Health benchmark on the local clusters (make cluster-up).

1. One ``slurmkit health check`` as a whole process (interpreter start, CLI,
   site from its cache, every host check: memory, swap, load, a writable
   mount probe, daemons, D state), as an admin or cron runs it; median of N.
   Target: under 0.5 s.
2. ``slurmkit health sweep`` of every local node (9, over SSH to each
   node's own address, each running a check there) against a sweep of one
   node, both whole processes, alternating, median of N.  Target: all
   within 1.5 times one.  Also the CPU one node's check costs: the local
   "nodes" share this machine's cores, real ones do not.
3. Where the time of a sweep of all goes, on this machine: the CPU of the
   node side of each node (its sshd session, shell and check, counted from
   the sshd listeners' reaped children), of the sweep process itself, the
   machine's load, and the same sweeps with a check that costs nothing (a
   shell script printing a canned report): the floor that SSH and the sweep
   itself leave on these shared cores.  Real nodes run their checks on
   their own CPUs; here nine of them queue for two cores, so the ratio is
   bounded by ``one + (nodes - 1) x node-side CPU / cores``.

Results go to ``.bench/health.json`` and are printed.
"""

import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STATE = Path(os.environ.get("DEVCLUSTER_STATE") or (ROOT / ".devcluster"))
N_CHECK = int(os.environ.get("BENCH_HEALTH_N", "15"))
N_SWEEP = int(os.environ.get("BENCH_SWEEP_N", "7"))
OUT = ROOT / ".bench"


def write_site(raw):
    """The local clusters with checks that pass on this machine (no NVML here; its load is other people's)."""
    scratch = OUT / "health-scratch"
    lines = ["site: bench-health", "health:", "  state_dir: %s" % json.dumps(str(OUT / "health-state")),
             "  command: %s" % json.dumps([sys.executable, "-m", "slurmkit.health"]), "clusters:"]
    for name, c in raw["clusters"].items():
        gres = c["gres"]
        ascend = gres["name"] == "npu"
        lines += ["  %s:" % name, "    slurm_conf: %s" % json.dumps(c["slurm_conf"]),
                  "    login: {host: %s, port: %d, user: root, identity_file: %s, known_hosts: %s}" % (
                      c["login"]["host"], c["login"]["port"], json.dumps(raw["ssh"]["identity"]),
                      json.dumps(raw["ssh"]["known_hosts"])),
                  "    partitions:"]
        for part in c["partitions"]:
            lines += ["      %s:" % part["name"]]
            if part["name"] == "cpu":
                # alpha's host-only partition: the one-check benchmark, every host check on
                lines += ["        accelerator: none", "        cpus_per_node: 4",
                          "        memory_mb: %d" % c["memory_mb_per_node"], "        health:",
                          "          mounts: [{path: %s, writable: true}]" % json.dumps(str(scratch / "%n"))]
                continue
            lines += ["        accelerator: %s" % ("ascend" if ascend else "nvidia"),
                      "        gpu_model: %s" % gres["type"], "        gres_name: %s" % gres["name"],
                      "        gpus_per_node: %d" % gres["count"], "        cpus_per_node: 4",
                      "        memory_mb: %d" % c["memory_mb_per_node"], "        health:",
                      "          skip: %s" % ("[load, dstate]" if ascend else "[gpu, load, dstate]"),
                      "          device_dir: %s" % json.dumps(gres["device_dir"]),
                      "          mounts: [{path: %s, writable: true}]" % json.dumps(str(scratch / "%n"))]
        for node in c["node_names"]:
            (scratch / node).mkdir(parents=True, exist_ok=True)
    path = OUT / "health-site.yaml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def write_floor_site(site, report):
    """The bench site with health.command a script that prints one healthy report and nothing else."""
    canned = OUT / "health-canned-report.json"
    canned.write_text(json.dumps(report) + "\n")
    script = OUT / "health-free-check.sh"
    script.write_text("#!/bin/sh\n# bench_health.py: a check that costs nothing, for the floor of a sweep\n"
                      "exec cat %s\n" % shlex.quote(str(canned)))
    script.chmod(0o755)
    text = Path(site).read_text()
    lines = [("  command: %s" % json.dumps([str(script)])) if line.startswith("  command: ") else line
             for line in text.splitlines()]
    path = OUT / "health-site-free-check.yaml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def node_cpu_ms(site, env, runs=10):
    """CPU (user + system) of one node's check as a sweep starts it (python -m slurmkit.health), in ms.

    On real nodes each check has its node's CPUs to itself; here the nine
    "nodes" share this machine's, so a sweep of all of them costs at least
    nine times this (plus sshd's share per connection) spread over its cores.
    """
    import resource

    sys.path.insert(0, str(ROOT))
    from slurmkit.health.plan import build
    from slurmkit.site import find_site

    s = find_site(site)
    cluster = s.cluster("beta")
    plan = build(s, cluster, cluster.partitions["gpu"], "bn1").to_json()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(runs):
        subprocess.run([sys.executable, "-m", "slurmkit.health", "--plan", "-"], input=plan, capture_output=True,
                       text=True, env=env, cwd=str(ROOT))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return 1000.0 * (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / runs


def timed(argv, env):
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=str(ROOT))
    return time.perf_counter() - start, proc


def sshd_cpu_ms(raw):
    """CPU (ms) of every SSH session the local clusters' sshds have served and reaped so far:
    cutime + cstime of each listener, which waits for its sessions (each of which waits for
    its shell and the command)."""
    total = 0
    for c in raw["clusters"].values():
        pid_file = Path(c["state_dir"]) / "sshd" / "sshd.pid"
        try:
            fields = (Path("/proc") / pid_file.read_text().strip() / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None
        total += int(fields[13]) + int(fields[14])
    return 1000.0 * total / os.sysconf("SC_CLK_TCK")


def children_cpu_ms():
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return 1000.0 * (usage.ru_utime + usage.ru_stime)


def sweeps(one, every, env, raw, runs):
    """Alternating one-node and all-node sweeps: {one|all: {"wall": [...], "node_cpu_ms": [...],
    "sweep_cpu_ms": [...]}}, the all-node count; exits on a sweep that is not clean."""
    out = {"one": {"wall": [], "node_cpu_ms": [], "sweep_cpu_ms": []},
           "all": {"wall": [], "node_cpu_ms": [], "sweep_cpu_ms": []}}
    nodes = 0
    for _ in range(runs):
        for argv, key in ((one, "one"), (every, "all")):
            sshd0, own0 = sshd_cpu_ms(raw), children_cpu_ms()
            seconds, proc = timed(argv, env)
            time.sleep(0.2)   # the listeners reap their last sessions
            sshd1, own1 = sshd_cpu_ms(raw), children_cpu_ms()
            result = json.loads(proc.stdout or "{}")
            bad = ["%s %s: %s" % (r["node"], r["status"], r["error"][:80]) for r in result.get("nodes", [])
                   if r["status"] != "healthy"]
            if proc.returncode != 0 or bad:
                sys.exit("benchmark: sweep not clean (%s): %s" % (", ".join(bad) or "exit %d" % proc.returncode,
                                                                  proc.stderr.strip()[-300:]))
            out[key]["wall"].append(seconds)
            out[key]["sweep_cpu_ms"].append(own1 - own0)
            if sshd0 is not None and sshd1 is not None:
                out[key]["node_cpu_ms"].append(sshd1 - sshd0)
            if key == "all":
                nodes = len(result["nodes"])
    return out, nodes


def summary(runs, nodes):
    med = statistics.median
    one, every = runs["one"], runs["all"]
    out = {"one_node_median_s": med(one["wall"]), "all_nodes_median_s": med(every["wall"]),
           "ratio_all_to_one": med(every["wall"]) / med(one["wall"]),
           "ratios": sorted(round(a / b, 2) for a, b in zip(every["wall"], one["wall"])),
           "sweep_process_cpu_ms": {"one": med(one["sweep_cpu_ms"]), "all": med(every["sweep_cpu_ms"])}}
    if every["node_cpu_ms"]:
        per_node = med(every["node_cpu_ms"]) / max(nodes, 1)
        out["node_side_cpu_ms_per_node"] = per_node
        # What the shared cores alone allow: the extra nodes' node-side CPU spread over the cores.
        out["cpu_bound_ratio"] = (med(one["wall"]) + (nodes - 1) * per_node / 1000.0 / (os.cpu_count() or 1)) \
            / med(one["wall"])
    return out


def main():
    raw = json.loads((STATE / "clusters.json").read_text())
    OUT.mkdir(exist_ok=True)
    site = write_site(raw)
    env = dict(os.environ, SLURMKIT_CACHE_DIR=str(OUT / "health-cache"))
    slurmkit = [str(Path(sys.executable).parent / "slurmkit")]
    if not os.path.exists(slurmkit[0]):
        slurmkit = [sys.executable, "-m", "slurmkit"]

    check = slurmkit + ["health", "check", "--site", site, "--cluster", "alpha", "--node", "an1", "--partition",
                        "cpu", "--json"]
    timed(check, env)   # the first run parses the site file into the cache, as the first cron run would
    checks = []
    for _ in range(N_CHECK):
        seconds, proc = timed(check, env)
        if proc.returncode not in (0, 1):
            sys.exit("benchmark: health check failed: %s" % proc.stderr.strip())
        checks.append(seconds)
    report = json.loads(proc.stdout)

    def argvs(site_file):
        return (slurmkit + ["health", "sweep", "--site", site_file, "--cluster", "beta", "--node", "bn1", "--json"],
                slurmkit + ["health", "sweep", "--site", site_file, "--cluster", "all", "--json"])

    load_before = os.getloadavg()
    runs, nodes = sweeps(*argvs(site), env, raw, N_SWEEP)
    # The floor: the same sweeps with a check that costs (almost) nothing on the node.
    floor_site = write_floor_site(site, report)
    floor_runs, _ = sweeps(*argvs(floor_site), env, raw, N_SWEEP)
    sweep = dict(summary(runs, nodes), runs=N_SWEEP, nodes=nodes, target="<= 1.5")
    sweep["met"] = sweep["ratio_all_to_one"] <= 1.5
    result = {
        "check": {"runs": N_CHECK, "median_s": statistics.median(checks), "min_s": min(checks),
                  "checks": [r["name"] for r in report["results"]], "target_s": 0.5,
                  "met": statistics.median(checks) < 0.5},
        "sweep": sweep,
        "sweep_with_free_check": dict(summary(floor_runs, nodes), runs=N_SWEEP,
                                      note="health.command is a shell script printing a canned report: "
                                           "what SSH and the sweep itself cost on these cores"),
        "per_node": {"check_cpu_ms": node_cpu_ms(site, env),
                     "note": "the local nodes share this machine's CPUs: a sweep of all costs 9 such checks "
                             "and 9 sshd sessions on them"},
        "machine": {"cpus": os.cpu_count(), "load_before": list(load_before), "load_at_end": list(os.getloadavg()),
                    "load1_at_end": os.getloadavg()[0]},
    }
    (OUT / "health.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
