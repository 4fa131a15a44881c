#!/usr/bin/env python3
"""Submission overhead: slurmkit vs plain sbatch vs simple-slurm, side by side.

For N submissions of the same one-node job to the local cluster ``alpha``
(``make cluster-up``), time whole processes, round-robin so that drift in the
machine's load hits all three alike:

- ``sbatch``: plain ``sbatch --parsable`` of the script slurmkit rendered;
- ``slurmkit``: ``slurmkit submit`` (render + submit) in a fresh process;
- ``simple-slurm``: a fresh Python process submitting with simple_slurm.

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
    runs = {"sbatch": [], "slurmkit": [], "simple-slurm": []}
    ids = []
    for _ in range(N):
        t, out = timed(["sbatch", "--parsable"], env_hold, stdin=script)
        runs["sbatch"].append(t)
        ids.append(out.strip().split(";")[0])
        t, out = timed(slurmkit + ["submit", *job, "--", "true"], env_hold)
        runs["slurmkit"].append(t)
        ids.append(out.strip().split(":")[-1])
        t, _ = timed(simple, env_hold)
        runs["simple-slurm"].append(t)
    subprocess.run(["scancel", "--name=bench"], env=env, check=False)
    med = {k: statistics.median(v) for k, v in runs.items()}
    over_sk = med["slurmkit"] - med["sbatch"]
    over_ss = med["simple-slurm"] - med["sbatch"]
    result = {
        "submissions_each": N,
        "median_seconds": med,
        "ratio_to_sbatch": {k: med[k] / med["sbatch"] for k in med},
        "overhead_seconds": {"slurmkit": over_sk, "simple-slurm": over_ss},
        "slurmkit_overhead_over_simple_slurm_overhead": over_sk / over_ss if over_ss > 0 else None,
        "target": "<= 1.5",
    }
    out_dir = ROOT / ".bench"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "submit.json").write_text(json.dumps(result, indent=2))
    print("submission wall time, median of %d (s): sbatch %.3f  slurmkit %.3f  simple-slurm %.3f"
          % (N, med["sbatch"], med["slurmkit"], med["simple-slurm"]))
    print("ratio to plain sbatch: slurmkit %.2fx  simple-slurm %.2fx"
          % (result["ratio_to_sbatch"]["slurmkit"], result["ratio_to_sbatch"]["simple-slurm"]))
    ratio = result["slurmkit_overhead_over_simple_slurm_overhead"]
    print("slurmkit overhead / simple-slurm overhead: %s (target <= 1.5)"
          % ("%.2f" % ratio if ratio is not None else "n/a"))


if __name__ == "__main__":
    main()
