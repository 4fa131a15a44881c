"""A user of the requeue daemon on the real clusters, as the requeue and container tests drive one.

:class:`User` submits one tracked job with the CLI (``submit --auto-requeue``, a subprocess in an
environment of its own: a HOME, a cache and a journal under the test's directory), drives the daemon
with ``daemon once``, reads ``jobs --json`` and waits on Slurm and on the job's checkpoints, noting
each event with its time for the report of a failed test.
"""

import itertools
import json
import os
import time
from pathlib import Path
from typing import Optional

from harness import run_slurmkit, wait_until
from conftest import TERMINAL_STATES, job_info, slurm, wait_job_state
from slurmkit import checkpoint
from training_output import PYTHON

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "site_configs" / "local.yaml"


def user_env(home: Path, state: Path, site=SITE):
    """A user's environment: nothing of ours (SLURMKIT_*, SLURM_*), a HOME and journal of the test's."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURMKIT_", "SLURM_", "SBATCH_", "SRUN_")) and k != "SSH_AUTH_SOCK"}
    home.mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), SLURMKIT_CACHE_DIR=str(home / "cache"), SLURMKIT_SITE=str(site),
               SLURMKIT_STATE_DIR=str(state))
    return env


def slurmkit(env, *args, check=True, timeout=120):
    return run_slurmkit(args, env=env, check=check, timeout=timeout)


def named_jobs(cluster, name):
    """Every job of this name Slurm knows, finished ones included: [(job id, comment, state)]."""
    out = slurm(cluster, "squeue", "--noheader", "--states=all", "--name=" + name, "--format=%i|%k|%T").stdout
    return [tuple(line.split("|", 2)) for line in out.splitlines() if line.strip()]


def hostnames(cluster, nodelist):
    return slurm(cluster, "scontrol", "show", "hostnames", nodelist).stdout.split()


_USERS = itertools.count()


class User:
    """One user's tracked job: submitted with the CLI, driven with ``daemon once``, read with ``jobs --json``."""

    def __init__(self, base: Path, key: str, cluster: str, python: str = PYTHON, image: Optional[str] = None,
                 site=SITE, mount_repo: bool = True):
        """``python``: the one the job's command names; ``image``: the job runs in this container image, with
        the repository mounted at its own path (the training program and its checkpoint helper are there;
        ``mount_repo`` False: the site's image has it already, as an OCI bundle must)."""
        self.key, self.cluster, self.python, self.image = key, cluster, python, image
        self.mount_repo = mount_repo
        self.dir = base / key
        self.dir.mkdir(parents=True)
        self.env = user_env(self.dir / "home", self.dir / "state", site)
        self.ckpt = self.dir / "ckpt"
        self.name = "skt-rq-%s-%d-%d" % (key, os.getpid(), next(_USERS))   # unique: jobs are counted by name
        self.times = []          # (seconds since the start, event): shown when a test fails
        self.extra = []          # other jobs of the test, cancelled at the end
        self.t0 = time.monotonic()

    def note(self, event):
        self.times.append((round(time.monotonic() - self.t0, 1), event))

    def submit(self, *args, command):
        image = ("--image", self.image) + (("--mount", ROOT) if self.mount_repo else ()) if self.image else ()
        out = slurmkit(self.env, "submit", "--json", "--auto-requeue", "--checkpoint-dir", self.ckpt,
                       "-M", self.cluster, "-J", self.name, "-o", self.dir / ("%s-%%j.out" % self.key), *image,
                       *args, "--", *command)
        data = json.loads(out.stdout)
        self.note("submitted %s" % data["id"])
        return data

    def once(self):
        proc = slurmkit(self.env, "daemon", "once", "--json", check=False)
        assert proc.returncode in (0, 1) and proc.stdout, proc.stderr
        report = json.loads(proc.stdout)
        self.note("daemon once: %s" % {k: v for k, v in report.items() if v and k != "next_end"})
        return report

    def tracked(self):
        jobs = json.loads(slurmkit(self.env, "daemon", "jobs", "--json", "--all").stdout)
        assert len(jobs) == 1, jobs
        return jobs[0]

    def attempt(self, number):
        return self.tracked()["attempts"][number - 1]

    def output(self, job_id):
        return (self.dir / ("%s-%s.out" % (self.key, job_id))).read_text(errors="replace")

    def running(self, job_id, timeout=240):
        info = wait_job_state(self.cluster, job_id, "RUNNING", timeout=timeout)
        self.note("%s running on %s" % (job_id, info["NodeList"]))
        return hostnames(self.cluster, info["NodeList"])

    def ended(self, job_id, timeout=300):
        """Wait for the job to end (any final state); its state."""
        state = wait_until(lambda: (job_info(self.cluster, job_id).get("JobState") in TERMINAL_STATES
                                    and job_info(self.cluster, job_id)["JobState"]), timeout, interval=1.0,
                           what="job %s:%s to end" % (self.cluster, job_id))
        self.note("%s ended %s" % (job_id, state))
        return state

    def checkpointed(self, step, job_id, timeout=240):
        """Wait for a complete checkpoint at ``step`` or later while the job still runs."""
        def probe():
            found = checkpoint.latest(str(self.ckpt))
            if found.step is not None and found.step >= step:
                return found
            state = job_info(self.cluster, job_id).get("JobState")
            assert state not in TERMINAL_STATES, "job %s ended %s before checkpoint %d:\n%s" % (
                job_id, state, step, self.output(job_id)[-3000:])
            return None
        found = wait_until(probe, timeout, interval=0.5, what="checkpoint %d of job %s" % (step, job_id))
        self.note("checkpoint step %d" % found.step)
        return found

    def settled(self, quiet=3.0, timeout=60):
        """Wait until nothing changes in the checkpoint directory for ``quiet`` s: the failed job's
        processes (killed by Slurm a moment after its state changed) write no more."""
        def listing():
            return sorted((p.name, p.stat().st_mtime) for p in self.ckpt.iterdir())
        last, since = listing(), time.monotonic()
        deadline = time.monotonic() + timeout
        while time.monotonic() - since < quiet:
            assert time.monotonic() < deadline, "checkpoints of %s still changing after %d s" % (self.key, timeout)
            time.sleep(0.5)
            now = listing()
            if now != last:
                last, since = now, time.monotonic()
        return checkpoint.latest(str(self.ckpt))

    def partial_after(self, found, how="no marker"):
        """Put a newer checkpoint than ``found`` that is not complete: what a save cut off by the failure leaves."""
        step = found.step + 5
        path = self.ckpt / ("step-%06d" % step)
        path.mkdir()
        (path / "state.pt").write_bytes(b"PK\x03\x04 cut off")
        if how == "short file":
            # A marker that promises more bytes than the file has.
            (path / checkpoint.MARKER).write_text(json.dumps(
                {"format": checkpoint.MARKER_FORMAT, "step": step, "files": {"state.pt": 1 << 20}, "world_size": 2}))
        self.note("partial checkpoint %s (%s)" % (path.name, how))
        return path

    def finish(self, timeout=300):
        """Drive the daemon until tracking ends (the job completed or was stopped); the tracked job."""
        def probe():
            tracked = self.tracked()
            if tracked["state"] != "active":
                return tracked
            current = tracked["attempts"][-1]
            if current["job_id"] and job_info(self.cluster, current["job_id"]).get("JobState") in TERMINAL_STATES:
                self.once()
            return None
        tracked = wait_until(probe, timeout, interval=2.0, what="tracked job %s to end" % self.key)
        self.note("tracking ended: %s (%s)" % (tracked["state"], tracked["reason"]))
        return tracked

    def cleanup(self):
        for job_id, _, state in named_jobs(self.cluster, self.name):
            if state not in TERMINAL_STATES:
                slurm(self.cluster, "scancel", job_id, check=False)
        if self.extra:
            slurm(self.cluster, "scancel", *self.extra, check=False)
