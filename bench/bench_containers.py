#!/usr/bin/env python3
"""What a container costs a job, per runtime, on the local clusters (make cluster-up, make image).

1. The runtime's own start, without Slurm: the same one-line Python program started on the host
   (Debian's /usr/bin/python3, the interpreter the Debian 12 image has too), with Charliecloud (``ch-run`` on the image's rootfs, the job's working
   directory bound, as slurmkit renders it) and with runc (the image's OCI bundle, as Slurm's
   ``--container`` runs it).  Each ``BENCH_CONTAINERS_RUNS`` times in turn; medians and ranges.
2. Through Slurm, what a researcher waits for: from the first line of the batch script to the
   program's first line, for one task started by the srun template, on the host (alpha, no image),
   with Charliecloud (alpha) and with Slurm's OCI containers (beta).  The batch script takes its
   start time in a site ``setup`` line; the program prints the difference.  The same runs.

Results go to ``.bench/containers.json`` and are printed.  Nothing here is a pass/fail: the
figures and their spread are the result.
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
sys.path.insert(0, str(ROOT))
SITE = ROOT / "site_configs" / "local.yaml"
STATE = Path(os.environ.get("DEVCLUSTER_STATE") or (ROOT / ".devcluster"))
OUT = ROOT / ".bench"
RUNS = int(os.environ.get("BENCH_CONTAINERS_RUNS", "7"))
IMAGE_PYTHON = "/opt/slurmkit-image/venv/bin/python"
# The host's Debian Python: the image is Debian 12 too, so both sides start the same interpreter.
HOST_PYTHON = "/usr/bin/python3"
PROGRAM = "import sys"


def image_bundle():
    made = subprocess.run(["make", "--no-print-directory", "-s", "image"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip().splitlines()[-1]
    return Path(made)


def timed(argv, cwd, env=None):
    t0 = time.monotonic()
    subprocess.run(argv, cwd=cwd, env=env, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE)
    return time.monotonic() - t0


def runtime_starts(bundle, work):
    """{contender: [seconds]} of the one-line program, each contender in turn."""
    env = dict(os.environ, USER=os.environ.get("USER") or "root")
    oci = Path(work) / "bundle"
    oci.mkdir()
    config = json.loads((bundle / "config.json").read_text())
    config["root"]["path"] = str(bundle / "rootfs")
    config["process"]["args"] = [IMAGE_PYTHON, "-c", PROGRAM]
    config["process"]["cwd"] = "/tmp"
    (oci / "config.json").write_text(json.dumps(config))
    state = Path(work) / "runc-state"
    contenders = {
        "host": [HOST_PYTHON, "-c", PROGRAM],
        "charliecloud": ["ch-run", "--bind=%s:%s" % (work, work), "--cd=%s" % work, str(bundle / "rootfs"), "--",
                         IMAGE_PYTHON, "-c", PROGRAM],
        "oci (runc)": None,
    }
    times = {name: [] for name in contenders}
    for run in range(RUNS + 1):                  # the first round warms the page cache, uncounted
        for name, argv in contenders.items():
            if argv is None:
                argv = ["runc", "--root=%s" % state, "run", "--bundle", str(oci), "bench-%d-%d" % (os.getpid(), run)]
            seconds = timed(argv, work, env)
            if run:
                times[name].append(seconds)
    return times


def bench_site(work):
    """local.yaml with absolute paths and a setup line that takes the batch script's start time."""
    text = SITE.read_text().replace("../.devcluster", str(STATE))
    text = text.replace("\nclusters:\n", "\nsetup:\n  - 'export BENCH_T0=$(date +%s.%N)'\n\nclusters:\n", 1)
    path = Path(work) / "site.yaml"
    path.write_text(text)
    return str(path)


def slurm_env(cluster):
    info = json.loads((STATE / "clusters.json").read_text())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_"))}
    env["SLURM_CONF"] = info["clusters"][cluster]["slurm_conf"]
    return env


def through_slurm(site, work):
    """{contender: [seconds from the batch script's first line to the program's]}, each in turn."""
    probe = "import os, time; print('first-line', time.time() - float(os.environ['BENCH_T0']))"
    contenders = {
        "host (alpha)": ("alpha", "cpu", (), HOST_PYTHON),
        "charliecloud (alpha)": ("alpha", "cpu", ("--image", "debian-12"), IMAGE_PYTHON),
        "oci (beta)": ("beta", "gpu", ("--image", "debian-12", "--gpus-per-node", "1"), IMAGE_PYTHON),
    }
    times = {name: [] for name in contenders}
    for run in range(RUNS):
        for name, (cluster, partition, extra, python) in contenders.items():
            out = Path(work) / ("%s-%d.out" % (name.split()[0], run))
            argv = [sys.executable, "-m", "slurmkit", "submit", "--json", "--site", site, "-M", cluster, "-p",
                    partition, "-T", "srun", "-t", "2", "-o", str(out), *extra, "--", python, "-c", probe]
            job = json.loads(subprocess.run(argv, cwd=work, check=True, capture_output=True, text=True).stdout)
            env = slurm_env(cluster)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                state = subprocess.run(["squeue", "-h", "-j", job["job_id"], "-o", "%T"], env=env,
                                       capture_output=True, text=True).stdout.strip()
                if not state:
                    break
                time.sleep(0.5)
            lines = [ln.split()[1] for ln in out.read_text().splitlines() if ln.startswith("first-line ")]
            if not lines:
                raise SystemExit("%s: no first line in %s:\n%s" % (name, out, out.read_text()[-2000:]))
            times[name].append(float(lines[0]))
    return times


def summary(times):
    return {name: {"median_s": round(statistics.median(v), 4), "min_s": round(min(v), 4),
                   "max_s": round(max(v), 4), "runs": len(v)} for name, v in times.items()}


def main():
    for program in ("ch-run", "runc"):
        if shutil.which(program) is None:
            raise SystemExit("bench_containers: %s is not installed (make install-system)" % program)
    bundle = image_bundle()
    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="skt-bench-containers-", dir="/tmp") as work:
        starts = summary(runtime_starts(bundle, work))
        slurm = summary(through_slurm(bench_site(work), work))
    result = {"runs": RUNS, "program": PROGRAM, "runtime_start": starts, "job_start_to_first_line": slurm}
    (OUT / "containers.json").write_text(json.dumps(result, indent=2) + "\n")
    print("the runtime's own start (python -c %r), %d runs each:" % (PROGRAM, RUNS))
    base = starts["host"]["median_s"]
    for name, row in starts.items():
        print("  %-22s median %.3f s (%.3f-%.3f), +%.3f s over the host" % (
            name, row["median_s"], row["min_s"], row["max_s"], row["median_s"] - base))
    print("through Slurm, from the batch script's first line to the program's (srun template, one task):")
    base = slurm["host (alpha)"]["median_s"]
    for name, row in slurm.items():
        print("  %-22s median %.3f s (%.3f-%.3f), +%.3f s over the host" % (
            name, row["median_s"], row["min_s"], row["max_s"], row["median_s"] - base))
    print("written to %s" % (OUT / "containers.json"))


if __name__ == "__main__":
    main()
