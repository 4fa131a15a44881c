#!/usr/bin/env python3
"""Record how every source reports the end of the same jobs (the exit-code test data).

Run against a local dev cluster with accounting (alpha has slurmdbd):

    make cluster-up
    SLURM_CONF=$PWD/.devcluster/alpha/etc/slurm.conf \
        .venv/bin/python tests/unit/data/exit_codes/record.py tests/unit/data/exit_codes/22.05

(PYSLURM_PYTHON names another interpreter for the pyslurm part, if the
venv's has no pyslurm.)

It submits one small job per way a job can end (see JOBS), waits for all of
them to end, and writes into the output directory, each file as the source
printed it:

  jobs.json           what each job did: name, script line, the expected
                      (exit_code, signal), the job id and Slurm's version
  squeue.json         squeue --json --states=all   (22.05: raw wait status)
  scontrol.txt        scontrol --oneliner show job ID  (ExitCode=E:S)
  sacct.txt           the argv of slurmkit's commands.sacct, then its output
                      (ExitCode as E:S, jobs and their steps)
  pyslurm.json        pyslurm's own view, where pyslurm imports: the Job API
                      (exit_code, exit_code_signal), the deprecated job API
                      (``"E:S"``), pyslurm.db (exit_code, exit_code_signal)
                      and the deprecated slurmdb_jobs (raw ``exitcode`` of
                      the job and of its batch step)

Nothing here is edited after recording: the unit tests read these files.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from slurmkit.slurm import commands

# name -> (body of the batch script, expected (exit_code, signal) as the
# normalized JobInfo must report them).  Each body is what a real job does:
JOBS = {
    "ok": ("true", (0, None)),
    "exit3": ("exit 3", (3, None)),
    # An exit status above 128 that no signal caused: sources that subtract
    # 128 (pyslurm's Job API) would report 9.
    "exit137": ("exit 137", (137, None)),
    # A child killed by SIGTERM: bash exits 128+15 = 143, itself not signalled.
    "child_term": ("sleep 30 & kill -TERM $!; wait $!", (143, None)),
    # The batch shell itself killed by a signal: no exit status at all.
    "self_term": ("kill -TERM $$; sleep 5", (None, 15)),
    "self_kill": ("kill -KILL $$; sleep 5", (None, 9)),
    # Cancelled while running: slurmstepd signals the batch shell.
    "scancel_running": ("sleep 120", (None, 15)),
    # Cancelled before it ever started: it never ran, so it has no exit status.
    "scancel_pending": ("true", (None, None)),
}
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED"}
PARTITION = os.environ.get("RECORD_PARTITION", "cpu")


def run(*argv, stdin=None):
    return subprocess.run(list(argv), input=stdin, capture_output=True, text=True, check=True).stdout


def state(job_id):
    out = run("scontrol", "--oneliner", "show", "job", job_id)
    return out.split("JobState=", 1)[1].split()[0]


def wait(job_id, states, timeout=120):
    deadline = time.monotonic() + timeout
    while state(job_id) not in states:
        if time.monotonic() > deadline:
            raise SystemExit("job %s still %s" % (job_id, state(job_id)))
        time.sleep(0.5)


PYSLURM_PROBE = r"""
import json, sys
import pyslurm
ids = [int(i) for i in sys.argv[1:]]
out = {"version": pyslurm.__version__, "job": {}, "deprecated_job": {}, "db": {}, "deprecated_db": {}}
for job in pyslurm.Jobs.load().values():
    if job.id in ids:
        out["job"][str(job.id)] = {"state": job.state, "exit_code": job.exit_code,
                                   "exit_code_signal": job.exit_code_signal}
for i in ids:
    out["deprecated_job"][str(i)] = pyslurm.job().find_id(str(i))[0]["exit_code"]
for job in pyslurm.db.Jobs.load(pyslurm.db.JobFilter(ids=ids)).values():
    out["db"][str(job.id)] = {"state": job.state, "exit_code": job.exit_code,
                              "exit_code_signal": job.exit_code_signal}
for jid, rec in pyslurm.slurmdb_jobs().get(jobids=ids).items():
    batch = rec["steps"].get(0xFFFFFFFB, {})
    out["deprecated_db"][str(jid)] = {"exitcode": rec["exitcode"], "batch": batch.get("exitcode")}
print(json.dumps(out, indent=1, sort_keys=True))
"""


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    version = run("scontrol", "--version").split()[1]
    ids = {}
    for name, (body, _) in JOBS.items():
        script = "#!/bin/bash\n#SBATCH --job-name=ec-%s --partition=%s --time=2 --output=/dev/null\n%s\n" % (
            name, PARTITION, body)
        argv = ["sbatch", "--parsable"] + (["--hold"] if name == "scancel_pending" else [])
        ids[name] = run(*argv, stdin=script).strip().split(";")[0]
    wait(ids["scancel_running"], {"RUNNING"})
    time.sleep(2)  # the batch shell has started its sleep
    run("scancel", ids["scancel_running"], ids["scancel_pending"])
    for job_id in ids.values():
        wait(job_id, TERMINAL)
    # sacct learns of the end through slurmdbd, a moment later, and a job
    # cancelled while running first reads 0:0 there, then 0:15 once its batch
    # step has ended: wait until two reads three seconds apart agree.
    deadline = time.monotonic() + 60
    sacct_argv = commands.sacct(list(ids.values()))
    previous, sacct = None, run(*sacct_argv)
    while sacct != previous or "|RUNNING|" in sacct or "|PENDING|" in sacct:
        if time.monotonic() > deadline:
            raise SystemExit("sacct does not settle:\n" + sacct)
        time.sleep(3)
        previous, sacct = sacct, run(*sacct_argv)

    (out / "jobs.json").write_text(json.dumps({
        "slurm": version, "recorded_with": "tests/unit/data/exit_codes/record.py",
        "jobs": {name: {"id": ids[name], "script": body, "exit_code": exp[0], "signal": exp[1]}
                 for name, (body, exp) in JOBS.items()}}, indent=1) + "\n")
    (out / "squeue.json").write_text(run("squeue", "--json", "--states=all"))
    (out / "scontrol.txt").write_text("".join(run("scontrol", "--oneliner", "show", "job", i) for i in ids.values()))
    (out / "sacct.txt").write_text(json.dumps(sacct_argv) + "\n" + sacct)
    probe = subprocess.run([os.environ.get("PYSLURM_PYTHON", sys.executable), "-c", PYSLURM_PROBE]
                           + list(ids.values()), capture_output=True, text=True)
    if probe.returncode == 0:
        (out / "pyslurm.json").write_text(probe.stdout)
    else:
        print("pyslurm not recorded: %s" % probe.stderr.strip().splitlines()[-1:], file=sys.stderr)
    print("recorded %d jobs into %s" % (len(ids), out))


if __name__ == "__main__":
    main()
