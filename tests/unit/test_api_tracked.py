"""auto_requeue=True: a call under the requeue daemon, on FakeSlurm and a FakeClock with a real journal and the
real bootstrap.  The daemon restarts it as a new job after a node failure (from the call a checkpoint saved,
if one did), and the call's Job follows the new attempt to its result."""

import os
import subprocess
import sys

import pytest

import harness
from slurmkit.api import payload
from slurmkit.api.executor import AutoExecutor
from slurmkit.api.job import DAEMON_WAIT_S, Job
from slurmkit.errors import UncompletedJobError

from test_api_rules import _counter_class, _run_until_paused_then_usr1, _stand_in_scontrol


class World(harness.World):
    """alpha as FakeSlurm, the user's journal, a daemon submitting attempts as the real one does."""

    def __init__(self, tmp_path):
        super().__init__(tmp_path, {"alpha": dict(nodes=["an1", "an2", "an3"])}, tmp_path / "state" / "requeue.db")

    def submit_attempt(self, tracked, attempt, cluster):
        from slurmkit.requeue import tracking

        return tracking.submit_attempt(lambda site: self.session, tracked, attempt, cluster)


@pytest.fixture
def world(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMKIT_STATE_DIR", str(tmp_path / "state"))      # the executor's journal: the world's
    (tmp_path / "state").mkdir()
    w = World(tmp_path)
    yield w
    w.close()


def _executor(world):
    ex = AutoExecutor(world.tmp / "jobs", site=world.session, python=sys.executable)
    ex.update_parameters(auto_requeue=True, timeout_min=10)
    ex._watcher.clock, ex._watcher.interval = world.clock, 0.0
    return ex


def _run_bootstrap(job, env, attempt, scontrol_env):
    """The task as the attempt's job script runs it: the call's command, the daemon's exports."""
    files = job._record["files"]
    argv = [sys.executable, "-c", payload.BOOTSTRAP, files["call"], files["result"], files["checkpoint"],
            '{"cluster": "alpha", "log": "%s"}' % files["log"]]
    tracked = job._tracked()
    env = dict(scontrol_env, SLURM_JOB_ID=job.job_id.split(":")[1], SLURMKIT_CHECKPOINT_DIR=tracked.checkpoint_dir,
               SLURMKIT_ATTEMPT=str(attempt), **env)
    return argv, env


def test_a_call_restarted_after_a_node_failure_is_followed_to_its_result(world):
    ex = _executor(world)
    job = ex.submit(pow, 2, 5)
    first = job.job_id.split(":")[1]
    tracked = job._tracked()
    assert job.tracked_id == tracked.id and tracked.attempts[0].job_id == first and tracked.cluster == "alpha"
    script = world.alpha.table[first].script
    # The daemon's job: Slurm's own requeue off, USR1 before the limit, its exports; the call's command.
    assert "#SBATCH --no-requeue" in script and "#SBATCH --signal=B:USR1@" in script
    assert "SLURMKIT_CHECKPOINT_DIR=" in script and job._record["files"]["call"] in script
    world.alpha.set_state(first, "RUNNING", nodes="an1")
    assert not job.done()
    world.alpha.set_node("an1", "DOWN", reason="Not responding")
    world.alpha.finish(first, "NODE_FAIL")
    assert not job.done() and job.state == "NODE_FAIL"          # the daemon has not seen it: it will restart it
    report = world.daemon.cycle()
    assert report.finished == [(tracked.id, "NODE_FAIL")] and len(report.restarted) == 1
    assert not job.done()
    second = job.job_id.split(":")[1]
    assert second != first and job.state == "PENDING"           # followed to the new attempt
    assert "#SBATCH --exclude=an1" in world.alpha.table[second].script
    # The attempt runs the same call and leaves its outcome where the first would have.
    argv, env = _run_bootstrap(job, {}, 2, dict(os.environ))
    assert subprocess.run(argv, env=env, capture_output=True, timeout=60).returncode == 0
    world.alpha.finish(second, "COMPLETED")
    assert job.result() == 32 and job.done()
    world.daemon.cycle()
    assert job._tracked().state == "completed"
    # Either attempt's id finds the job in another process.
    for slurm_id in (first, second):
        assert Job.from_id("alpha:" + slurm_id, ex.folder, site=world.session).result() == 32


def test_the_returned_submission_is_what_the_daemon_restarts_after_usr1_and_after_a_node_failure(world, tmp_path):
    ex = _executor(world)
    job = ex.submit(_counter_class()(), 10, 4)
    first = job.job_id.split(":")[1]
    tracked = job._tracked()
    # Attempt 1 is sent USR1: the call is saved, as the daemon's step 1 too, and nothing asks Slurm to requeue.
    scontrol = _stand_in_scontrol(tmp_path)
    code, err = _run_until_paused_then_usr1(*_run_bootstrap(job, {}, 1, scontrol))
    assert code == 75 and "the requeue daemon restarts the job" in err, err
    assert not (tmp_path / "scontrol.log").exists()
    assert os.listdir(tracked.checkpoint_dir) == ["step-1.call"]
    world.alpha.finish(first, "FAILED", exit_code=75)
    world.daemon.cycle()                               # saved and asked to resume: a time limit met gracefully
    assert not job.done()
    second = job.job_id.split(":")[1]
    attempt = job._tracked().attempts[1]
    assert attempt.resume_from == os.path.join(tracked.checkpoint_dir, "step-1.call") and attempt.resume_step == 1
    # Attempt 2 dies with its node: attempt 3 starts from the same saved call.
    world.alpha.set_state(second, "RUNNING", nodes="an2")
    world.alpha.finish(second, "NODE_FAIL")
    world.daemon.cycle()
    third = job.job_id.split(":")[1]
    assert third not in (first, second) and job._tracked().attempts[2].resume_from == attempt.resume_from
    # On a node that sees only the daemon's directory, the restart reads the call the daemon chose.
    os.remove(job._record["files"]["checkpoint"])
    argv, env = _run_bootstrap(job, {"SLURMKIT_RESUME_FROM": attempt.resume_from}, 3, scontrol)
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "resuming from the checkpoint %s (restart 3)" % attempt.resume_from in proc.stderr
    world.alpha.finish(third, "COMPLETED")
    assert job.result() == {"step": 10, "starts": [0, 4], "restart": None}


def test_without_a_daemon_the_end_is_reported_after_a_while_and_a_cancel_stops_tracking(world):
    ex = _executor(world)
    job = ex.submit(len, "abc")
    first = job.job_id.split(":")[1]
    world.alpha.finish(first, "NODE_FAIL")
    assert not job.done()
    world.clock.sleep(DAEMON_WAIT_S)
    assert job.done()
    with pytest.raises(UncompletedJobError, match=r"ended NODE_FAIL without a result \(attempt 1\), and the requeue "
                                                  r"daemon did not record its end in 180 s.*slurmkit daemon run"):
        job.result()
    # A cancel is never undone: the daemon's record ends with it.
    other = ex.submit(len, "abcd")
    other.cancel()
    assert other._tracked().state == "stopped" and world.alpha.table[other.job_id.split(":")[1]].state == "CANCELLED"
    assert other.done()
    with pytest.raises(UncompletedJobError, match="the requeue daemon does not restart it: stopped by the user"):
        other.result()


def test_an_array_keeps_slurms_own_requeue():
    ex = AutoExecutor.__new__(AutoExecutor)
    ex.parameters = {"auto_requeue": True}
    assert ex._shape(len)[0].requeue is True
