#!/usr/bin/env python3
"""Submission overhead: slurmkit vs plain sbatch vs simple-slurm, side by side.

For N submissions of a one-node job to the local cluster ``alpha``
(``make cluster-up``), time whole processes, round-robin so that drift in the
machine's load hits all three alike:

- ``sbatch``: plain ``sbatch --parsable`` of the script slurmkit rendered;
- ``slurmkit``: ``slurmkit submit`` (render + submit) in a fresh process;
- ``simple-slurm``: a fresh Python process submitting with simple_slurm.

Two series: the *same* job each time (slurmkit renders it once, then reuses
the rendered script: see slurmkit/script/cache.py) and *distinct* jobs (a
different argument each time, so slurmkit renders every one with Jinja2).
Reports medians, each tool's overhead over plain sbatch, and the ratio of
slurmkit's overhead to simple-slurm's (target: at most 1.5).  Results go to
``.bench/submit.json``.  Submitted jobs are held and cancelled at the end, so
the benchmark leaves the cluster as it found it.
"""

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SITE = str(ROOT / "site_configs" / "local.yaml")
N = int(os.environ.get("BENCH_N", "20"))


def cluster_env():
    info = json.loads((ROOT / ".devcluster" / "clusters.json").read_text())
    return dict(os.environ, SLURM_CONF=info["clusters"]["alpha"]["slurm_conf"])


def timed(argv, env, stdin=None):
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, input=stdin, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit("benchmark command failed: %s\n%s" % (" ".join(argv), proc.stderr))
    return elapsed, proc.stdout


def main():
    env = cluster_env()
    env.pop("SLURMKIT_DEBUG", None)
    slurmkit = [str(ROOT / ".venv" / "bin" / "slurmkit")]
    job = ["--site", SITE, "--cluster", "alpha", "-p", "cpu", "-t", "1", "-T", "single", "-J", "bench",
           "-o", "/dev/null"]
    script = subprocess.run(slurmkit + ["render", *job, "--", "true"], env=env, capture_output=True,
                            text=True, check=True).stdout
    # Held jobs never run: the benchmark measures submission, not the scheduler.
    script = script.replace("#SBATCH --job-name=bench\n", "#SBATCH --job-name=bench\n#SBATCH --hold\n")
    env_hold = dict(env, SBATCH_HOLD="1")
    simple = [sys.executable, "-c",
              "from simple_slurm import Slurm\n"
              "s = Slurm(job_name='bench', partition='cpu', nodes=1, ntasks_per_node=1, time='1',"
              " output='/dev/null', hold=True, parsable=True)\n"
              "s.sbatch('true', verbose=False)\n"]
    result = {"submissions_each": N, "target": "<= 1.5"}
    for series in ("same", "distinct"):
        runs = {"sbatch": [], "slurmkit": [], "simple-slurm": []}
        for i in range(N):
            arg = "x" if series == "same" else "run-%d-%d" % (os.getpid(), i)
            t, _ = timed(["sbatch", "--parsable"], env_hold, stdin=script.replace("exec true", "exec true " + arg))
            runs["sbatch"].append(t)
            t, _ = timed(slurmkit + ["submit", *job, "--", "true", arg], env_hold)
            runs["slurmkit"].append(t)
            t, _ = timed(simple[:-1] + [simple[-1].replace("'true'", "'true %s'" % arg)], env_hold)
            runs["simple-slurm"].append(t)
        med = {k: statistics.median(v) for k, v in runs.items()}
        over_sk = med["slurmkit"] - med["sbatch"]
        over_ss = med["simple-slurm"] - med["sbatch"]
        result[series] = {
            "median_seconds": med,
            "ratio_to_sbatch": {k: med[k] / med["sbatch"] for k in med},
            "overhead_seconds": {"slurmkit": over_sk, "simple-slurm": over_ss},
            "slurmkit_overhead_over_simple_slurm_overhead": over_sk / over_ss if over_ss > 0 else None,
        }
    subprocess.run(["scancel", "--name=bench"], env=env, check=False)
    out_dir = ROOT / ".bench"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "submit.json").write_text(json.dumps(result, indent=2))
    for series in ("same", "distinct"):
        r = result[series]
        med, ratio = r["median_seconds"], r["slurmkit_overhead_over_simple_slurm_overhead"]
        print("%-8s jobs, median of %d (s): sbatch %.3f  slurmkit %.3f  simple-slurm %.3f | vs sbatch: "
              "slurmkit %.1fx, simple-slurm %.1fx | overhead ratio %s (target <= 1.5)"
              % (series, N, med["sbatch"], med["slurmkit"], med["simple-slurm"], r["ratio_to_sbatch"]["slurmkit"],
                 r["ratio_to_sbatch"]["simple-slurm"], "%.2f" % ratio if ratio is not None else "n/a"))


if __name__ == "__main__":
    main()
