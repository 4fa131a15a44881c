"""Record the Slurm outputs that the unit tests and slurmkit.testing replay.

Run against the local dev clusters (``make cluster-up``), from the repo root:

    .venv/bin/python tests/unit/data/slurm/record.py [alpha beta]

Each recording is one JSON file here, ``CLUSTER-WHAT-RELEASE.json`` (RELEASE:
the clusters' Slurm, 22.05, 24.11 ...; scripts/releases/record.sh records
another release inside its Debian root):
``{"recorded": how, "cluster": ..., "argv": [...], "returncode": n,
"stdout": ..., "stderr": ..., "jobs": {role: job id}}``.  The argv is built
by :mod:`slurmkit.slurm.commands`, so a recording is exactly what the code
runs.  alpha has accounting (slurmdbd, so ``sacct`` answers); beta has none.

The script submits a handful of tiny jobs (completed, failed, cancelled
before starting, running, held), drains and downs nodes and resumes them;
everything it changed is undone at the end, even on failure.
"""

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[3]
sys.path.insert(0, str(REPO))

from slurmkit.slurm import commands  # noqa: E402
from slurmkit.slurm.runner import LocalRunner  # noqa: E402

# The release of the clusters recorded (MAJOR.MINOR), part of every file name.
VERSION = None
UNKNOWN_ID = "999999"   # far above any id the dev clusters reach


def slurm_conf(cluster):
    data = json.loads((REPO / ".devcluster" / "clusters.json").read_text())
    return data["clusters"][cluster]["slurm_conf"], data["clusters"][cluster]["node_names"]


class Recorder:
    def __init__(self, cluster):
        self.cluster = cluster
        conf, self.nodes = slurm_conf(cluster)
        self.runner = LocalRunner({"SLURM_CONF": conf}, default_timeout=60)
        self.jobs = {}
        self.nodes_by_role = {}

    def run(self, argv, stdin=None):
        return self.runner.run(argv, stdin=stdin)

    def record(self, what, argv, how):
        result = self.run(argv)
        path = HERE / ("%s-%s-%s.json" % (self.cluster, what, VERSION))
        path.write_text(json.dumps({
            "recorded": "%s; on the dev cluster %s (Slurm %s) by tests/unit/data/slurm/record.py"
                        % (how, self.cluster, VERSION),
            "cluster": self.cluster, "argv": list(argv), "returncode": result.returncode,
            "stdout": result.stdout, "stderr": result.stderr, "jobs": dict(self.jobs),
            "nodes": dict(self.nodes_by_role)}, indent=1) + "\n")
        print("%-45s rc=%d %s" % (path.name, result.returncode, result.stderr.strip()[:80]))
        return result

    def sbatch(self, role, *options, wrap="true"):
        script = "#!/bin/sh\n%s\n" % wrap
        argv = ["sbatch", "--parsable", "-J", "rec-" + role, "-o", "/dev/null", "-t", "5",
                "--comment=slurmkit:rec-" + role, *options]
        result = self.run(argv, stdin=script)
        if result.returncode != 0:
            raise SystemExit("sbatch on %s failed: %s" % (self.cluster, result.stderr))
        self.jobs[role] = result.stdout.strip().split(";")[0]
        return self.jobs[role]

    def state(self, job_id):
        out = self.run(["squeue", "--noheader", "--states=all", "--jobs=" + job_id, "--format=%T"]).stdout
        return out.strip()

    def wait_for(self, job_id, states, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.state(job_id) in states:
                return
            time.sleep(0.5)
        raise SystemExit("job %s on %s never reached %s" % (job_id, self.cluster, states))

    def wait_for_accounting(self, job_ids, timeout=30):
        # slurmctld reports to slurmdbd asynchronously: right after a job ends,
        # sacct may still show a half-written record (JobName "allocation", no
        # partition or time limit).  Record what a poll a few seconds later sees.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = self.run(["sacct", "--noheader", "--parsable2", "--allocations", "--jobs=" + ",".join(job_ids),
                            "--format=JobName,Partition"]).stdout.split()
            if len(out) == len(job_ids) and all(line.startswith("rec-") and not line.endswith("|")
                                                for line in out):
                return
            time.sleep(0.5)
        raise SystemExit("slurmdbd of %s never caught up with jobs %s" % (self.cluster, job_ids))


def record_cluster(cluster):
    r = Recorder(cluster)
    accounting = cluster == "alpha"
    touched = []
    try:
        r.record("config", commands.show_config(), "scontrol show config")
        r.sbatch("ok", wrap="true")
        r.sbatch("failed", wrap="exit 3")
        r.sbatch("cancelled", "--hold")
        r.run(commands.scancel([r.jobs["cancelled"]]))
        r.sbatch("running", wrap="sleep 300")
        r.sbatch("held", "--hold")
        for role in ("ok", "failed", "cancelled"):
            r.wait_for(r.jobs[role], ("COMPLETED", "FAILED", "CANCELLED"))
        r.wait_for(r.jobs["running"], ("RUNNING",))
        ids = [r.jobs[k] for k in ("ok", "failed", "cancelled", "running", "held")]
        r.record("squeue-json", commands.squeue_json(ids + [UNKNOWN_ID]),
                 "squeue --json for a completed, a failed, a cancelled, a running and a held job and an unknown id")
        r.record("squeue-parsable", commands.squeue_parsable(ids + [UNKNOWN_ID]),
                 "squeue with slurmkit's format for the same jobs and an unknown id")
        r.record("squeue-unknown", commands.squeue_parsable([UNKNOWN_ID]), "squeue for an unknown id only")
        if accounting:
            r.wait_for_accounting([r.jobs[k] for k in ("ok", "failed", "cancelled")])
        r.record("sacct", commands.sacct(ids + [UNKNOWN_ID]),
                 "sacct for the same jobs and an unknown id" + ("" if accounting else " without accounting"))

        # Nodes: drain the running job's node (-> ALLOCATED/MIXED+DRAIN), drain an
        # idle one, down another, then read them back, all in one listing.
        running_node = r.run(["squeue", "--noheader", "--jobs=" + r.jobs["running"], "--format=%N"]).stdout.strip()
        idle = [n for n in r.nodes if n != running_node]
        drained, downed = idle[-1], idle[-2]
        touched = [running_node, drained, downed]
        r.nodes_by_role.update(draining=running_node, drained=drained, down=downed,
                               untouched=",".join(n for n in idle if n not in (drained, downed)))
        r.record("drain", commands.update_nodes([running_node, drained], "DRAIN", "slurmkit: recorded drain"),
                 "scontrol update State=DRAIN of %s (running a job) and %s (idle)" % (running_node, drained))
        r.record("down", commands.update_nodes([downed], "DOWN", "recorded down by an admin"),
                 "scontrol update State=DOWN of %s" % downed)
        r.record("nodes-drained", commands.show_nodes(),
                 "scontrol show node with %s draining, %s drained, %s down" % (running_node, drained, downed))
        r.record("node-one", commands.show_nodes([drained]), "scontrol show node of the drained %s" % drained)
        r.record("drain-unknown", commands.update_nodes(["nosuchnode"], "DRAIN", "x"),
                 "scontrol update State=DRAIN of a node that does not exist")
        r.record("resume", commands.update_nodes(touched, "RESUME"), "scontrol update State=RESUME of all three")
        touched = []

        # Jobs: hold/release a pending job, requeue a running one, errors for finished and unknown ones.
        r.record("release", commands.release([r.jobs["held"]]), "scontrol release of the held job")
        r.record("hold", commands.hold([r.jobs["held"]]), "scontrol hold of the same job, now pending")
        r.record("hold-unknown", commands.hold([UNKNOWN_ID]), "scontrol hold of an unknown id")
        r.record("requeue", commands.requeue([r.jobs["running"]]), "scontrol requeue of the running job")
        r.record("requeue-finished", commands.requeue([r.jobs["failed"]]), "scontrol requeue of the failed job")
        r.record("squeue-json-after", commands.squeue_json([r.jobs["running"], r.jobs["held"]]),
                 "squeue --json after the requeue and the hold")
    finally:
        if touched:
            r.run(commands.update_nodes(touched, "RESUME"))
        live = [j for k, j in r.jobs.items() if k in ("running", "held")]
        if live:
            r.run(commands.scancel(live))


def main(argv):
    global VERSION
    conf, _ = slurm_conf("alpha")
    words = LocalRunner({"SLURM_CONF": conf}).run(commands.version()).stdout.split()
    VERSION = ".".join(words[1].split(".")[:2])
    for cluster in argv or ["alpha", "beta"]:
        record_cluster(cluster)
    if shutil.which("git"):  # a release's Debian root (scripts/releases/record.sh) has none
        subprocess.run(["git", "status", "--short", str(HERE)], cwd=str(REPO))


if __name__ == "__main__":
    main(sys.argv[1:])
