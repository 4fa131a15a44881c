#!/usr/bin/env python3
"""The commands a researcher types all day, against what they cost at the least.

For one finished job and one pending job on the local cluster ``alpha`` (``make cluster-up``), time
whole processes, round-robin so that drift in the machine's load hits all alike:

- ``python -c pass``: the floor of any Python command;
- the plain Slurm commands each slurmkit command runs at least (``scontrol show job``, ``squeue``,
  ``sacct``), and ``tail`` of the output file;
- ``slurmkit status``, ``logs``, ``why --here``, ``eff`` and ``--help``.

Reports medians, and for each slurmkit command the ratio of its time to ``python -c pass`` plus the
Slurm commands it needs (issue 21's target: at most 1.5).  Results go to ``.bench/observe.json``.
The pending job is held and cancelled at the end: the benchmark leaves the cluster as it found it.
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
N = int(os.environ.get("BENCH_N", "15"))


def cluster_env():
    info = json.loads((ROOT / ".devcluster" / "clusters.json").read_text())
    return dict(os.environ, SLURM_CONF=info["clusters"]["alpha"]["slurm_conf"], SLURMKIT_SITE=SITE)


def timed(argv, env):
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0,):
        sys.exit("benchmark command failed: %s\n%s" % (" ".join(argv), proc.stderr))
    return elapsed


def sbatch(env, *argv):
    out = subprocess.run(["sbatch", "--parsable", *argv], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip().split(";")[0]


def main():
    env = cluster_env()
    env.pop("SLURMKIT_DEBUG", None)
    out_dir = ROOT / ".bench"
    out_dir.mkdir(exist_ok=True)
    log = out_dir / "observe-%j.out"
    done = sbatch(env, "-o", str(log), "-t", "5", "--wrap", "seq 1 20000")
    pending = sbatch(env, "--hold", "-o", str(out_dir / "observe-held-%j.out"), "-t", "5", "--wrap", "true")
    deadline = time.monotonic() + 60
    while "COMPLETED" not in subprocess.run(["scontrol", "show", "job", done], env=env, capture_output=True,
                                            text=True).stdout:
        if time.monotonic() > deadline:
            sys.exit("the benchmark's job did not complete within 60 s")
        time.sleep(0.5)
    time.sleep(3)   # slurmdbd records it a moment later (eff reads accounting)
    sk = [str(ROOT / ".venv" / "bin" / "slurmkit")]
    out_file = str(log).replace("%j", done)
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "scontrol show job": ["scontrol", "--oneliner", "show", "job", done],
        "squeue --jobs": ["squeue", "--noheader", "--local", "--states=all", "--jobs=" + done],
        "sacct --jobs": ["sacct", "--noheader", "--parsable2", "--jobs=" + done],
        "tail -n 20": ["tail", "-n", "20", out_file],
        "slurmkit --help": sk + ["--help"],
        "slurmkit status": sk + ["status", "alpha:" + done],
        "slurmkit logs -n 20": sk + ["logs", "-n", "20", "alpha:" + done],
        "slurmkit why --here (ended)": sk + ["why", "--here", "alpha:" + done],
        "slurmkit why --here (pending)": sk + ["why", "--here", "alpha:" + pending],
        "slurmkit eff": sk + ["eff", "alpha:" + done],
    }
    times = {name: [] for name in commands}
    try:
        for _ in range(N):
            for name, argv in commands.items():
                times[name].append(timed(argv, env))
    finally:
        subprocess.run(["scancel", pending], env=env)
    med = {name: statistics.median(values) for name, values in times.items()}
    floor = med["python -c pass"]
    # What each slurmkit command needs at the least: Python, and the Slurm commands it runs.
    needs = {
        "slurmkit --help": [],
        "slurmkit status": ["squeue --jobs"],
        "slurmkit logs -n 20": ["scontrol show job", "squeue --jobs", "tail -n 20"],
        "slurmkit why --here (ended)": ["scontrol show job", "sacct --jobs", "tail -n 20"],
        "slurmkit why --here (pending)": ["scontrol show job", "squeue --jobs"],
        "slurmkit eff": ["sacct --jobs"],
    }
    report = {"n": N, "median_s": med, "ratios": {}}
    print("%-32s %9s" % ("command (median of %d)" % N, "ms"))
    for name in commands:
        print("%-32s %9.1f" % (name, med[name] * 1000))
    print()
    print("%-32s %9s %9s %7s" % ("slurmkit command", "ms", "floor ms", "ratio"))
    for name, parts in needs.items():
        least = floor + sum(med[p] for p in parts)
        ratio = med[name] / least
        report["ratios"][name] = {"ms": med[name] * 1000, "floor_ms": least * 1000, "ratio": ratio}
        print("%-32s %9.1f %9.1f %6.2fx" % (name, med[name] * 1000, least * 1000, ratio))
    (out_dir / "observe.json").write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
