#!/usr/bin/env python3
"""The Python API against submitit, the same calls to the same cluster, side by side in one run.

For 1 call (``submit``), 100 and 1,000 calls (``map_array``) of ``int(i)`` to the local cluster ``alpha``
(``make cluster-up``; partition ``cpu``), each tool in a fresh Python process, in turns:

- the time until the calls are queued (the executor made, the calls pickled and submitted);
- the time until every result is back in the submitting process;
- the controller's RPCs while it waited (``sdiag``'s counts by type, before and after): what each
  tool's polling costs slurmctld.

Then slurmkit alone, the same calls to ``gamma`` used from this machine and over SSH through its login node
(``SLURMKIT_VIA=ssh``; the call and its outcome travel on the connection, the job's folder on the cluster is
another directory than the executor's): the issue's goal is the SSH run within 1.5 times the local one.

``BENCH_API_SIZES`` (default ``1,100,1000``) and ``BENCH_API_SSH_SIZES`` (default ``1,100``) choose the
sizes, ``BENCH_ROUNDS`` (default 2) the rounds of each, the median kept.  Results go to ``.bench/api.json``.
Every job runs to its end (tiny calls): nothing is left queued.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_requeue import cluster_env, rpc_counts, rpc_delta  # noqa: E402  (one way to read sdiag)

ROOT = Path(__file__).resolve().parents[1]
SITE = str(ROOT / "site_configs" / "local.yaml")
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "2"))
SIZES = [int(n) for n in os.environ.get("BENCH_API_SIZES", "1,100,1000").split(",") if n.strip()]
SSH_SIZES = [int(n) for n in os.environ.get("BENCH_API_SSH_SIZES", "1,100").split(",") if n.strip()]
TOOLS = ("slurmkit", "submitit")
PLACES = ("local", "ssh")          # slurmkit's ways to gamma

CALLS = """
import os, sys, time
start = time.perf_counter()
tool, folder, n, site, cluster = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
if tool == "slurmkit":
    import slurmkit
    # Over SSH the job's folder on the cluster is another directory: nothing passes through this machine's.
    ssh = os.environ.get("SLURMKIT_VIA") == "ssh"
    there = {"python": sys.executable, "cluster_folder": folder + "-there"} if ssh else {}
    executor = slurmkit.AutoExecutor(folder, cluster=cluster, site=site, **there)
else:
    import submitit
    executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
# 5 minutes: submitit asks for its signal 90 s before the limit, which a 1-minute job gets as it starts
executor.update_parameters(timeout_min=5, name="bench-api")
if cluster == "alpha":
    executor.update_parameters(slurm_partition="cpu")
jobs = executor.map_array(int, range(n)) if n > 1 else [executor.submit(int, 0)]
queued = time.perf_counter()
results = [job.result() for job in jobs]
done = time.perf_counter()
assert results == list(range(n)), results
print("%.4f %.4f" % (queued - start, done - start))
"""


def one(tool, n, env, tmp, cluster="alpha", via=None):
    before = rpc_counts(env)
    run_env = dict(env, SLURMKIT_VIA=via) if via else env
    folder = tmp / ("%s-%s-%s-%d-%d" % (tool, cluster, via or "local", n, len(list(tmp.iterdir()))))
    proc = subprocess.run([sys.executable, "-c", CALLS, tool, str(folder), str(n), SITE, cluster],
                          env=run_env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        sys.exit("%s with %d call(s) on %s (%s) failed:\n%s" % (tool, n, cluster, via or "local", proc.stderr[-2000:]))
    queued, done = (float(x) for x in proc.stdout.split())
    delta = rpc_delta(before, rpc_counts(env))
    return {"queued_s": queued, "results_s": done, "rpcs": sum(delta.values()), "rpc_types": delta}


def medians(runs):
    return {name: {key: statistics.median(r[key] for r in values) for key in ("queued_s", "results_s", "rpcs")}
            for name, values in runs.items()}


def main():
    try:
        import submitit  # noqa: F401
    except ImportError:
        sys.exit("submitit is not installed (make venv installs it with the bench extras)")
    report = {"alpha": {}, "gamma_ssh": {}}
    with tempfile.TemporaryDirectory(prefix="bench-api-") as tmp:
        tmp = Path(tmp)
        env = cluster_env("alpha")
        for n in SIZES:
            runs = {tool: [] for tool in TOOLS}
            for _ in range(ROUNDS):
                for tool in TOOLS:
                    runs[tool].append(one(tool, n, env, tmp))
            report["alpha"][n] = medians(runs)
        env = cluster_env("gamma")
        for n in SSH_SIZES:
            runs = {place: [] for place in PLACES}
            for _ in range(ROUNDS):
                for place in PLACES:
                    runs[place].append(one("slurmkit", n, env, tmp, "gamma", "ssh" if place == "ssh" else "local"))
            report["gamma_ssh"][n] = medians(runs)
            local, ssh = report["gamma_ssh"][n]["local"], report["gamma_ssh"][n]["ssh"]
            report["gamma_ssh"][n]["ssh_over_local"] = round(ssh["results_s"] / local["results_s"], 3)
    out = ROOT / ".bench"
    out.mkdir(exist_ok=True)
    (out / "api.json").write_text(json.dumps(report, indent=2) + "\n")
    print("alpha, slurmkit against submitit")
    print("%-10s %-9s %10s %12s %8s" % ("calls", "tool", "queued s", "results s", "RPCs"))
    for n, tools in report["alpha"].items():
        for tool, m in tools.items():
            print("%-10s %-9s %10.3f %12.3f %8d" % (n, tool, m["queued_s"], m["results_s"], m["rpcs"]))
    print("gamma, slurmkit used from this machine against over SSH (goal: SSH results within 1.5x)")
    print("%-10s %-9s %10s %12s %8s" % ("calls", "via", "queued s", "results s", "RPCs"))
    for n, places in report["gamma_ssh"].items():
        for place in PLACES:
            m = places[place]
            print("%-10s %-9s %10.3f %12.3f %8d" % (n, place, m["queued_s"], m["results_s"], m["rpcs"]))
        print("%-10s %-9s %23.2fx" % (n, "ssh/local", places["ssh_over_local"]))


if __name__ == "__main__":
    main()
