"""auto_requeue=True on the real clusters: a call whose node fails (NODE_FAIL) is restarted by the requeue daemon
as a new job, and the call's Job follows it to the result; a call saved on USR1 restarts from its returned
submission, and from that same submission again when the restart's own node fails.

The job is kept on one node (alpha's an4: the others excluded; not --nodelist, which the daemon's restart would
contradict by excluding the failed node, as it leaves an exclusion out when nothing else would remain) and that
node alone is set DOWN, under the suite's node lock, then resumed at once: downing a node ends every job on it.
The daemon is the real one over the test's own journal, cycled here as ``slurmkit daemon once`` would be.
"""

import os
import sys
import time
from pathlib import Path

import cloudpickle
import pytest

import slurmkit

from conftest import job_info, local_site_data, node_lock, slurm, wait_job_state
from harness import wait_until

ROOT = Path(__file__).resolve().parents[2]
SITE = str(ROOT / "site_configs" / "local.yaml")
VICTIM = "an4"
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def survive():
    """Waits on its first attempt (until its node fails); a restart returns where and what it is."""
    from slurmkit.helpers import JobEnvironment

    attempt = int(os.environ["SLURMKIT_ATTEMPT"])
    if attempt == 1:
        print("attempt 1 running", flush=True)
        time.sleep(600)
    return attempt, JobEnvironment().global_job_id, os.environ["SLURMD_NODENAME"]


def node_field(node, key):
    out = slurm("alpha", "scontrol", "show", "node", "-o", node).stdout
    return dict(tok.split("=", 1) for tok in out.split() if "=" in tok).get(key, "")


def node_usable(node):
    return not any(s in node_field(node, "State") for s in ("DOWN", "DRAIN", "NOT_RESPONDING", "FAIL"))


def cycle():
    from slurmkit.requeue.daemon import open_daemon

    daemon, sessions = open_daemon()
    try:
        return daemon.cycle()
    finally:
        sessions.close()
        daemon.journal.close()


def fail_the_node_under(job, attempt_id, devcluster, restarted=1):
    """Set VICTIM DOWN (under the suite's node lock) until the attempt on it has ended NODE_FAIL and one daemon
    cycle has seen it and restarted the job (``restarted``: 0 when the restart waits for its backoff); the node
    is resumed in a finally, whatever happened.  The cycle's report."""
    reason = "slurmkit-test: api node failure %d" % os.getpid()
    with node_lock(devcluster):
        slurm("alpha", "scontrol", "update", "NodeName=" + VICTIM, "State=DOWN", "Reason=" + reason)
        try:
            wait_job_state("alpha", attempt_id.split(":")[1], "NODE_FAIL", timeout=60)
            report = cycle()
            assert report.finished == [(job.tracked_id, "NODE_FAIL")] and len(report.restarted) == restarted, report
            return report
        finally:
            if node_field(VICTIM, "Reason").startswith("slurmkit-test"):
                slurm("alpha", "scontrol", "update", "NodeName=" + VICTIM, "State=RESUME", check=False)
            wait_until(lambda: node_usable(VICTIM), 90, interval=1.0, what="node %s back" % VICTIM)


@pytest.mark.slow
def test_a_call_whose_node_fails_is_restarted_by_the_daemon_and_followed_to_its_result(tmp_path, monkeypatch,
                                                                                     devcluster):
    monkeypatch.setenv("SLURMKIT_STATE_DIR", str(tmp_path / "state"))       # the test's own journal
    others = [n for n in ("an1", "an2", "an3", "an4") if n != VICTIM]
    with slurmkit.AutoExecutor(tmp_path / "jobs", cluster="alpha", site=SITE) as ex:
        ex.update_parameters(timeout_min=5, slurm_partition="cpu", auto_requeue=True,
                             slurm_additional_parameters={"exclude": others})
        job = ex.submit(survive)
        first = job.job_id
        assert job.tracked_id is not None and job_info("alpha", first.split(":")[1])["Requeue"] == "0"
        wait_until(lambda: "attempt 1 running" in (job.stdout() or ""), 60, what="the first attempt to run")
        fail_the_node_under(job, first, devcluster)
        attempt, seen_id, node = job.result()
        assert job.job_id != first and (attempt, seen_id, node) == (2, job.job_id, VICTIM)
        assert cycle().stopped == [(job.tracked_id, "the job completed")]
        assert job_info("alpha", job.job_id.split(":")[1])["JobState"] == "COMPLETED"
    # Another process finds it by the id it was given first, and follows it too.
    again = slurmkit.Job.from_id(first, tmp_path / "jobs", site=SITE)
    assert again.result() == (2, job.job_id, VICTIM) and again.job_id == job.job_id


class Resumable:
    """Checkpointable by submitit's protocol, no import needed: restarted as it is when USR1 comes."""

    def __init__(self):
        self.step, self.starts = 0, []

    def checkpoint(self, *args):
        from slurmkit.helpers import DelayedSubmission

        return DelayedSubmission(self, *args)


class Count(Resumable):
    """Counts to ``total``, waiting at ``pause`` on its first run for USR1."""

    def __call__(self, total, pause):
        self.starts.append(self.step)
        while self.step < total:
            if len(self.starts) == 1 and self.step == pause:
                print("paused at", self.step, flush=True)
                while True:
                    time.sleep(0.1)
            self.step += 1
        return {"step": self.step, "starts": self.starts, "attempt": os.environ["SLURMKIT_ATTEMPT"]}


@pytest.mark.slow
def test_a_call_saved_on_usr1_is_restarted_by_the_daemon_from_the_returned_submission(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMKIT_STATE_DIR", str(tmp_path / "state"))
    with slurmkit.AutoExecutor(tmp_path / "jobs", cluster="alpha", site=SITE) as ex:
        ex.update_parameters(timeout_min=5, slurm_partition="cpu", auto_requeue=True)
        job = ex.submit(Count(), 12, 5)
        first = job.job_id
        info = job_info("alpha", first.split(":")[1])
        assert info["Requeue"] == "0", info            # the daemon's, not Slurm's
        wait_until(lambda: "paused at 5" in (job.stdout() or ""), 60, what="the first attempt to pause")
        # As Slurm's own signal before the limit comes: to the batch shell, which passes it to the call.
        slurm("alpha", "scancel", "--signal=USR1", "--batch", first.split(":")[1])
        ended = wait_job_state("alpha", first.split(":")[1], {"FAILED"}, timeout=60)
        assert ended["ExitCode"] == "75:0", ended
        report = cycle()                               # saved and asked to resume: restarted from step-1.call
        assert len(report.restarted) == 1, report
        tracked = job._tracked()
        assert tracked.attempts[1].resume_from.endswith("/step-1.call") and tracked.attempts[1].resume_step == 1
        assert job.result() == {"step": 12, "starts": [0, 5], "attempt": "2"} and job.job_id != first
        assert cycle().stopped == [(job.tracked_id, "the job completed")]


class Relay(Resumable):
    """Counts to ``total``; attempt 1 waits at ``pause`` for USR1 (its returned submission is saved), attempt 2
    waits at ``hold`` for its node to fail; each start is kept as (attempt, step)."""

    def __call__(self, total, pause, hold):
        attempt = int(os.environ["SLURMKIT_ATTEMPT"])
        self.starts.append((attempt, self.step))
        while self.step < total:
            if (attempt, self.step) in ((1, pause), (2, hold)):
                print("attempt %d waits at %d" % (attempt, self.step), flush=True)
                while True:
                    time.sleep(0.1)
            self.step += 1
        return {"step": self.step, "starts": self.starts, "node": os.environ["SLURMD_NODENAME"]}


@pytest.mark.slow
def test_after_a_node_failure_the_daemon_restarts_the_returned_submission_again(tmp_path, monkeypatch, devcluster):
    # USR1 saves attempt 1's returned submission (step-1.call) and the daemon resumes it as attempt 2; attempt 2's
    # node then fails before it saves anything, so attempt 3 starts from that same returned submission: from
    # attempt 1's step 5, not from 0, and without attempt 2's unsaved steps.
    monkeypatch.setenv("SLURMKIT_STATE_DIR", str(tmp_path / "state"))
    others = [n for n in ("an1", "an2", "an3", "an4") if n != VICTIM]
    with slurmkit.AutoExecutor(tmp_path / "jobs", cluster="alpha", site=SITE) as ex:
        ex.update_parameters(timeout_min=5, slurm_partition="cpu", auto_requeue=True,
                             slurm_additional_parameters={"exclude": others})
        job = ex.submit(Relay(), 12, 5, 8)
        first = job.job_id
        wait_until(lambda: "attempt 1 waits at 5" in (job.stdout() or ""), 60, what="attempt 1 to pause")
        slurm("alpha", "scancel", "--signal=USR1", "--batch", first.split(":")[1])
        ended = wait_job_state("alpha", first.split(":")[1], {"FAILED"}, timeout=60)
        assert ended["ExitCode"] == "75:0", ended
        assert len(cycle().restarted) == 1
        wait_until(lambda: "attempt 2 waits at 8" in (job.stdout() or ""), 90, what="attempt 2 to run on")
        second = job.job_id
        assert second != first
        fail_the_node_under(job, second, devcluster)
        assert job.result() == {"step": 12, "starts": [(1, 0), (3, 5)], "node": VICTIM}
        attempts = job._tracked().attempts
        assert [a.resume_from.rsplit("/", 1)[-1] if a.resume_from else None for a in attempts] == \
            [None, "step-1.call", "step-1.call"]
        assert job.job_id not in (first, second) and cycle().stopped == [(job.tracked_id, "the job completed")]


def outlive_two_failures():
    """Waits on its first two attempts (until their node fails); the third returns where and what it is."""
    from slurmkit.helpers import JobEnvironment

    attempt = int(os.environ["SLURMKIT_ATTEMPT"])
    if attempt < 3:
        print("attempt %d running" % attempt, flush=True)
        time.sleep(600)
    return attempt, JobEnvironment().global_job_id, os.environ["SLURMD_NODENAME"]


@pytest.mark.slow
def test_a_restart_goes_to_a_cluster_sharing_the_checkpoints_when_its_own_cannot_be_reached(
        tmp_path, monkeypatch, devcluster, devcluster_control):
    """The site says alpha and beta share the checkpoint filesystem.  The call's node fails twice in a row: the
    second restart waits for its backoff (30 s), during which alpha's slurmctld is stopped; the daemon's next
    cycle cannot reach alpha and submits the restart to beta, without alpha's node names (beta refuses a job
    excluding a node it does not know), and the call's Job follows it there to the result."""
    import yaml

    monkeypatch.setenv("SLURMKIT_STATE_DIR", str(tmp_path / "state"))
    data = local_site_data()
    data["requeue"]["shared_checkpoint_clusters"] = ["alpha", "beta"]
    site = tmp_path / "shared.yaml"
    site.write_text(yaml.safe_dump(data))
    others = [n for n in ("an1", "an2", "an3", "an4") if n != VICTIM]
    with slurmkit.AutoExecutor(tmp_path / "jobs", cluster="alpha", site=str(site)) as ex:
        ex.update_parameters(timeout_min=5, slurm_partition="cpu", auto_requeue=True,
                             slurm_additional_parameters={"exclude": others})
        job = ex.submit(outlive_two_failures)
        first = job.job_id
        wait_until(lambda: "attempt 1 running" in (job.stdout() or ""), 60, what="the first attempt to run")
        fail_the_node_under(job, first, devcluster)                   # restarted at once, on alpha
        wait_until(lambda: "attempt 2 running" in (job.stdout() or ""), 90, what="the second attempt to run")
        second = job.job_id
        report = fail_the_node_under(job, second, devcluster, restarted=0)     # the second in a row: backoff
        assert report.next_due is not None and report.next_due > time.time() + 10, report
        with devcluster_control.ctld_stopped("alpha"):
            time.sleep(max(0.0, report.next_due - time.time()) + 0.5)
            moved = cycle()
        assert [where.split(":")[0] for _, where in moved.restarted] == ["beta"], moved
        attempt, seen_id, node = job.result()
        assert (attempt, seen_id) == (3, job.job_id) and job.job_id.startswith("beta:") and node.startswith("bn")
        events = " ".join(e["message"] for e in job._tracked().events)
        assert "submitting to beta, which shares the checkpoint directory" in events, events
        assert cycle().stopped == [(job.tracked_id, "the job completed")]

