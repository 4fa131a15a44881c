#!/usr/bin/env python3
"""The Python API against submitit, the same calls to the same cluster, side by side in one run.

For 1 call (``submit``) and 100 calls (``map_array``) of ``int(i)`` to the local cluster ``alpha``
(``make cluster-up``; partition ``cpu``), each tool in a fresh Python process, in turns:

- the time until the calls are queued (the executor made, the calls pickled and submitted);
- the time until every result is back in the submitting process;
- the controller's RPCs while it waited (``sdiag``'s counts by type, before and after): what each
  tool's polling costs slurmctld.

Results go to ``.bench/api.json``.  Every job runs to its end (tiny calls): nothing is left queued.
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

CALLS = """
import sys, time
start = time.perf_counter()
tool, folder, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
if tool == "slurmkit":
    import slurmkit
    executor = slurmkit.AutoExecutor(folder, cluster="alpha", site=sys.argv[4])
else:
    import submitit
    executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
# 5 minutes: submitit asks for its signal 90 s before the limit, which a 1-minute job gets as it starts
executor.update_parameters(slurm_partition="cpu", timeout_min=5, name="bench-api")
jobs = executor.map_array(int, range(n)) if n > 1 else [executor.submit(int, 0)]
queued = time.perf_counter()
results = [job.result() for job in jobs]
done = time.perf_counter()
assert results == list(range(n)), results
print("%.4f %.4f" % (queued - start, done - start))
"""


def one(tool, n, env, tmp):
    before = rpc_counts(env)
    proc = subprocess.run([sys.executable, "-c", CALLS, tool, str(tmp / ("%s-%d" % (tool, n))), str(n), SITE],
                          env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        sys.exit("%s with %d call(s) failed:\n%s" % (tool, n, proc.stderr[-2000:]))
    queued, done = (float(x) for x in proc.stdout.split())
    delta = rpc_delta(before, rpc_counts(env))
    return {"queued_s": queued, "results_s": done, "rpcs": sum(delta.values()), "rpc_types": delta}


def main():
    try:
        import submitit  # noqa: F401
    except ImportError:
        sys.exit("submitit is not installed (make venv installs it with the bench extras)")
    env = cluster_env("alpha")
    report = {}
    with tempfile.TemporaryDirectory(prefix="bench-api-") as tmp:
        tmp = Path(tmp)
        for n in (1, 100):
            runs = {"slurmkit": [], "submitit": []}
            for _ in range(ROUNDS):
                for tool in runs:
                    runs[tool].append(one(tool, n, env, tmp))
            report[n] = {tool: {key: statistics.median(r[key] for r in values)
                                for key in ("queued_s", "results_s", "rpcs")} for tool, values in runs.items()}
    out = ROOT / ".bench"
    out.mkdir(exist_ok=True)
    (out / "api.json").write_text(json.dumps(report, indent=2) + "\n")
    print("%-10s %-9s %10s %12s %8s" % ("calls", "tool", "queued s", "results s", "RPCs"))
    for n, tools in report.items():
        for tool, m in tools.items():
            print("%-10s %-9s %10.3f %12.3f %8d" % (n, tool, m["queued_s"], m["results_s"], m["rpcs"]))


if __name__ == "__main__":
    main()
