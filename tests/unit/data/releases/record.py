"""Record, on the local clusters of one Slurm release, the outputs whose shape changes between releases.

Run with the clusters of that release up (``scripts/releases/record.sh RELEASE``
does it all inside the release's root: clusters up, this script,
tests/unit/data/slurm/record.py and tests/unit/data/exit_codes/record.py,
clusters down):

    .venv/bin/python tests/unit/data/releases/record.py

It writes ``tests/unit/data/releases/MAJOR.MINOR/NAME.json``, each
``{"recorded": how, "cluster": .., "argv": [..], "returncode": n, "stdout": ..,
"stderr": .., "jobs": {role: id}}``, with the argv built by
:mod:`slurmkit.slurm.commands` (so a recording is what the code runs):

  version                 scontrol --version
  config-CLUSTER          scontrol show config (alpha, beta, gamma)
  topology-CLUSTER        scontrol show topology (alpha: two leaves under a spine;
                          beta: leaf2 has one node; gamma: one leaf, no spine)
  partitions-CLUSTER      scontrol -o show partition (alpha, beta)
  nodes-alpha-idle        scontrol -o -d show node, nothing running
  nodes-alpha-busy        the same with a 2-node 2-GPU-per-node job running
  test-only-alpha         sbatch --test-only (slurmkit's wrapper) for 2 nodes x 2 GPUs
                          under one switch, while that job runs
  test-only-refused       the same asking for 9 nodes of a 4-node partition
  job-alpha-running       scontrol -o -d show job of that running job
  job-gamma-npu           scontrol -o -d show job of a gamma job with --gres=npu:8
  squeue-json-gamma       squeue --json for that job
  probe-alpha             slurmkit's probe script (federation.survey.probe_argv) on alpha, busy
  nodes-beta-resumed      scontrol -o show node of a beta node drained, downed and resumed
                          (beta has no accounting: 24.11 keeps the reason there)
  resume-beta-again       scontrol update State=RESUME of that node, already in service

  squeue-one-beta         squeue --Format for one job (commands.squeue_format), for each of
                          a failed (exit 3), a signalled, a cancelled-while-pending, a
                          pending job and a pending one with a relative --output, on beta;
                          squeue-json-one-beta: squeue --json then

``record.py resumed`` records only nodes-beta-resumed and resume-beta-again,
``record.py one`` only squeue-one-beta and squeue-json-one-beta (the clusters up as above).

Every job it submits is cancelled at the end, even on failure.
"""

import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[3]
sys.path.insert(0, str(REPO))

from slurmkit.federation import survey  # noqa: E402
from slurmkit.slurm import commands  # noqa: E402
from slurmkit.slurm.runner import LocalRunner  # noqa: E402


def clusters():
    return json.loads((REPO / ".devcluster" / "clusters.json").read_text())["clusters"]


class Recorder:
    def __init__(self):
        self.info = clusters()
        self.runners = {name: LocalRunner({"SLURM_CONF": c["slurm_conf"]}, default_timeout=60)
                        for name, c in self.info.items()}
        words = self.runners["alpha"].run(commands.version()).stdout.split()
        self.version = words[1]
        self.release = ".".join(self.version.split(".")[:2])
        self.out = HERE / self.release
        self.out.mkdir(exist_ok=True)
        self.jobs = {}

    def run(self, cluster, argv, stdin=None):
        return self.runners[cluster].run(argv, stdin=stdin)

    def record(self, name, cluster, argv, how, stdin=None):
        result = self.run(cluster, argv, stdin=stdin)
        data = {"recorded": "%s; on the dev cluster %s (Slurm %s) by tests/unit/data/releases/record.py"
                            % (how, cluster, self.version),
                "cluster": cluster, "argv": list(argv), "returncode": result.returncode,
                "stdout": result.stdout, "stderr": result.stderr, "jobs": dict(self.jobs)}
        if stdin is not None:
            data["stdin"] = stdin
        (self.out / (name + ".json")).write_text(json.dumps(data, indent=1) + "\n")
        print("%-32s rc=%d %s" % (name, result.returncode, result.stderr.strip()[:90]))
        return result

    def sbatch(self, cluster, role, script):
        result = self.run(cluster, commands.sbatch(), stdin=script)
        if result.returncode != 0:
            raise SystemExit("sbatch on %s failed: %s" % (cluster, result.stderr))
        self.jobs[role] = result.stdout.strip().split(";")[0]
        return self.jobs[role]

    def wait_running(self, cluster, job_id, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = self.run(cluster, ["squeue", "--noheader", "--jobs=" + job_id, "--format=%T"]).stdout.strip()
            if out == "RUNNING":
                return
            time.sleep(0.5)
        raise SystemExit("job %s on %s never started" % (job_id, cluster))


def script(*directives, body="sleep 300"):
    return "#!/bin/sh\n%s\n%s\n" % ("\n".join("#SBATCH " + d for d in directives), body)


def record_resumed(r):
    """A beta node through DRAIN, DOWN and RESUME, back in service; then RESUME once more."""
    node = "bn3"
    for state, reason in (("DRAIN", "rec: drained"), ("DOWN", "rec: downed"), ("RESUME", None)):
        result = r.run("beta", commands.update_nodes([node], state, reason))
        if result.returncode != 0:
            raise SystemExit("scontrol update %s of %s failed: %s" % (state, node, result.stderr))
    deadline = time.monotonic() + 60
    while "NOT_RESPONDING" in r.run("beta", commands.show_nodes([node])).stdout:
        if time.monotonic() > deadline:
            raise SystemExit("%s never answered after its resume" % node)
        time.sleep(0.5)
    r.record("nodes-beta-resumed", "beta", commands.show_nodes([node]),
             "scontrol -o -d show node %s after DRAIN, DOWN and RESUME (Reason=rec: ...), once it answered" % node)
    r.record("resume-beta-again", "beta", commands.update_nodes([node], "RESUME"),
             "scontrol update State=RESUME of %s, already resumed" % node)


def record_one(r):
    """One job by id against the whole list, for jobs that ended several ways and one pending."""
    common = ["-t 5", "-o /tmp/rec-%x-%j.out", '--comment="slurmkit:rec one|two"']
    ids = {"failed": r.sbatch("beta", "one-failed", script('-J "rec failed"', *common, body="exit 3")),
           "signalled": r.sbatch("beta", "one-signalled", script("-J rec-signalled", *common, body="kill -9 $$")),
           "cancelled": r.sbatch("beta", "one-cancelled", script("-J rec-cancelled", "-H", *common, body="true")),
           "pending": r.sbatch("beta", "one-pending", script("-J rec-pending", "-H", *common, body="true")),
           # an #SBATCH --output relative to the working directory, as slurmkit's templates write it
           "relative": r.sbatch("beta", "one-relative", script("-J rec-relative", "-H", "-t 5", "-D /tmp",
                                                                "-o rec-%x-%j.out", body="true"))}
    r.run("beta", commands.scancel([ids["cancelled"]]))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        out = r.run("beta", ["squeue", "--noheader", "--states=all", "--format=%i %T",
                             "--jobs=" + ",".join(ids.values())]).stdout
        states = dict(line.split() for line in out.splitlines() if line.strip())
        if all(states.get(ids[k]) in ("FAILED", "CANCELLED") for k in ("failed", "signalled", "cancelled")):
            break
        time.sleep(0.5)
    outs = []
    for role in ("failed", "signalled", "cancelled", "pending", "relative"):
        result = r.run("beta", commands.squeue_format([ids[role]]))
        outs.append(result.stdout)
    data = {"recorded": "squeue --Format (commands.squeue_format) of each of 5 jobs: failed (exit 3), signalled "
                        "(kill -9), cancelled while pending, pending, pending with a relative --output; stdout is "
                        "their rows in that order; on the "
                        "dev cluster beta (Slurm %s) by tests/unit/data/releases/record.py" % r.version,
            "cluster": "beta", "argv": commands.squeue_format(["ID"]), "returncode": 0, "stdout": "".join(outs),
            "stderr": "", "jobs": ids}
    (r.out / "squeue-one-beta.json").write_text(json.dumps(data, indent=1) + "\n")
    r.record("squeue-json-one-beta", "beta", commands.squeue_json(list(ids.values())),
             "squeue --json right after, for the same jobs")
    r.run("beta", commands.scancel([ids["pending"], ids["relative"]]))


def main():
    r = Recorder()
    if sys.argv[1:] == ["resumed"]:
        record_resumed(r)
        return
    if sys.argv[1:] == ["one"]:
        record_one(r)
        return
    try:
        r.record("version", "alpha", commands.version(), "scontrol --version")
        for c in ("alpha", "beta", "gamma"):
            r.record("config-" + c, c, commands.show_config(), "scontrol show config")
            r.record("topology-" + c, c, commands.show_topology(), "scontrol show topology")
        for c in ("alpha", "beta"):
            r.record("partitions-" + c, c, commands.show_partition(), "scontrol -o show partition")
        r.record("nodes-alpha-idle", "alpha", commands.show_nodes(), "scontrol -o -d show node, all idle")
        job = r.sbatch("alpha", "running", script(
            "-J rec-running", "-p gpu", "-N 2", "--gpus-per-node=2", "--switches=1@00:01:00", "-t 10",
            "-o /dev/null", "--comment=slurmkit:rec-running"))
        r.wait_running("alpha", job)
        r.record("nodes-alpha-busy", "alpha", commands.show_nodes(),
                 "scontrol -o -d show node while job %s (2 nodes x 2 GPUs) runs" % job)
        r.record("job-alpha-running", "alpha", ["scontrol", "--oneliner", "--details", "show", "job", job],
                 "scontrol -o -d show job of the running 2-node job")
        want = script("-J rec-estimate", "-p gpu", "-N 2", "--gpus-per-node=2", "--switches=1@00:01:00", "-t 10",
                      body="true")
        r.record("test-only-alpha", "alpha", commands.sbatch(test_only=True),
                 "sbatch --test-only (after scontrol ping) for 2 nodes x 2 GPUs under one switch, "
                 "while the 2-node job runs", stdin=want)
        r.record("test-only-refused", "alpha", commands.sbatch(test_only=True),
                 "sbatch --test-only for 9 nodes of the 4-node partition gpu",
                 stdin=script("-J rec-too-big", "-p gpu", "-N 9", "-t 10", body="true"))
        npu = r.sbatch("gamma", "npu", script("-J rec-npu", "-N 1", "--gres=npu:8", "-t 10", "-o /dev/null",
                                              "--comment=slurmkit:rec-npu"))
        r.wait_running("gamma", npu)
        r.record("job-gamma-npu", "gamma", ["scontrol", "--oneliner", "--details", "show", "job", npu],
                 "scontrol -o -d show job of a running --gres=npu:8 job")
        r.record("squeue-json-gamma", "gamma", commands.squeue_json([npu]),
                 "squeue --json for the running --gres=npu:8 job")
        r.record("probe-alpha", "alpha", survey.probe_argv(),
                 "slurmkit's probe script, run locally, while the 2-node job runs")
        record_resumed(r)
        record_one(r)
    finally:
        for role, job_id in r.jobs.items():
            r.run("gamma" if role == "npu" else "beta" if role.startswith("one-") else "alpha",
                  commands.scancel([job_id]))


if __name__ == "__main__":
    main()
