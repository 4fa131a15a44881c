"""Sweeps under the requeue daemon (submit --sweep ... --auto-requeue) against FakeArraySlurm: every task
tracked, the daemon's policy restarting only the task that failed, from its own point's checkpoint, as a
one-task array of the same table; reruns, moves and cancels by hand take the point from the daemon."""

import os
import re

import pytest

from slurmkit.requeue.daemon import CycleReport
from slurmkit.script.render import JobSpec
from slurmkit.errors import UsageError
from slurmkit.sweep import actions, submission
from slurmkit.sweep import state
from slurmkit.sweep.autorequeue import SweepDaemon
from slurmkit.sweep.journal import Journal
from slurmkit.sweep.script import table_rows
from slurmkit.testing import FakeArraySlurm
from slurmkit.sweep.tracked import point_of
from slurmkit.testing import fake_session

import harness

COMMAND = ("python3", "train.py", "--seed", "{seed}")


class World(harness.World):
    """One fake cluster running arrays, a sweep journal, and the sweep daemon over the requeue journal."""

    def __init__(self, tmp_path, monkeypatch):
        monkeypatch.setenv("SLURMKIT_CACHE_DIR", str(tmp_path / "cache"))
        monkeypatch.setenv("SLURMKIT_STATE_DIR", str(tmp_path / "state"))
        monkeypatch.delenv("SLURMKIT_VIA", raising=False)
        super().__init__(tmp_path, {"alpha": dict(nodes=["an1", "an2", "an3", "an4"])},
                         tmp_path / "state" / "requeue.db", slurm=FakeArraySlurm, daemon=SweepDaemon)
        self.sweeps = Journal(str(tmp_path / "state" / "sweeps.db"))
        self.plain = []

    def submit_attempt(self, tracked, attempt, cluster):
        self.plain.append(tracked.id)
        raise AssertionError("a sweep point went to the plain submission")

    def submit(self, grid=("seed=0..3",), **budget):
        spec = JobSpec(command=COMMAND, template="single", gpus_per_node=0, time="00:05:00")
        request = submission.SweepRequest(spec=spec, grid=grid, sweep_dir=str(self.tmp / "sweep"), auto_requeue=budget)
        return submission.submit(self.session, request, self.sweeps)

    def tracked(self):
        return {point_of(t)[1]: t for t in self.daemon.journal.jobs()}

    def point_dir(self, point_id):
        return self.tmp / "sweep" / "points" / point_id

    def save(self, point_id, step):
        return self.save_checkpoint(self.point_dir(point_id) / "checkpoint", step)

    def close(self):
        self.sweeps.close()
        super().close()


@pytest.fixture
def world(tmp_path, monkeypatch):
    w = World(tmp_path, monkeypatch)
    yield w
    w.close()


def rows(script):
    return {index: point for index, (point, _) in table_rows(script).items()}


def test_every_task_is_tracked_with_its_own_checkpoint_directory_and_the_daemons_script(world):
    report = world.submit(max_restarts=4)
    (array,) = world.alpha.arrays.values()
    script = array.script
    assert "#SBATCH --no-requeue" in script and re.search(r"(?m)^#SBATCH --signal=B:USR1@\d+$", script)
    assert 'export SLURMKIT_CHECKPOINT_DIR="$SLURMKIT_CHECKPOINT_DIR"' in script     # the prologue's, per point
    assert "SLURMKIT_SWEEP_CHECKPOINT_DIR_" not in script and "slurmkit_run_step " in script
    assert "export SLURMKIT_ATTEMPT=1" in script
    tracked = world.tracked()
    assert set(tracked) == set(rows(script).values()) and len(tracked) == 4
    for index, point_id in rows(script).items():
        t = tracked[point_id]
        assert t.name == "%s/%s" % (report.sweep_id, point_id) and t.budget == {"max_restarts": 4}
        assert t.checkpoint_dir == str(world.point_dir(point_id) / "checkpoint") and t.cluster == "alpha"
        (first,) = t.attempts
        assert (first.phase, first.job_id, first.number) == ("submitted", "%s_%d" % (array.job_id, index), 1)


def test_a_node_failure_restarts_only_that_task_from_its_checkpoint_as_a_one_task_array(world):
    report = world.submit()
    (array,) = world.alpha.arrays.values()
    points = rows(array.script)
    world.alpha.run(array.job_id)                                      # all four complete ...
    world.alpha.finish_task(array.job_id, 2, "NODE_FAIL")              # ... but task 2's node died
    failed = world.alpha.task(array.job_id, 2)
    world.alpha.set_node(failed.nodes, "DOWN", reason="dead")
    world.save(points[2], 10)
    newest = world.save(points[2], 20)
    report_ = world.daemon.cycle()
    assert sorted(state for _, state in report_.finished) == ["COMPLETED"] * 3 + ["NODE_FAIL"]
    assert len(report_.restarted) == 1 and not world.plain
    (restart,) = [a for a in world.alpha.arrays.values() if a.job_id != array.job_id]
    assert restart.indices == [2] and rows(restart.script) == {2: points[2]}   # same index, same point
    assert "export SLURMKIT_RESUME_FROM=%s" % newest in restart.script
    assert "export SLURMKIT_ATTEMPT=2" in restart.script
    assert "#SBATCH --exclude=%s" % failed.nodes in restart.script
    assert "#SBATCH --comment=slurmkit:%s" % world.tracked()[points[2]].attempts[1].token in restart.script
    tracked = world.tracked()
    assert {p: t.state for p, t in tracked.items()} == {p: "completed" if p != points[2] else "active"
                                                        for p in points.values()}
    status = state.status(world.session, report.sweep_id, world.sweeps)
    assert status.counts() == {"COMPLETED": 3, "PENDING": 1}
    (pending,) = [p for p in status.points if p.state == "PENDING"]
    assert status.task_name(pending) == "alpha:%s_2" % restart.job_id           # its latest attempt
    world.alpha.run(restart.job_id)
    again = world.daemon.cycle()
    assert again.finished == [(tracked[points[2]].id, "COMPLETED")] and again.restarted == []
    assert world.tracked()[points[2]].state == "completed"
    assert state.status(world.session, report.sweep_id, world.sweeps).counts() == {"COMPLETED": 4}


def test_a_program_failure_is_not_restarted_and_stays_failed_for_sweep_rerun(world):
    report = world.submit()
    (array,) = world.alpha.arrays.values()
    world.alpha.run(array.job_id, {1: 3})
    cycle = world.daemon.cycle()
    assert cycle.restarted == [] and len(world.alpha.arrays) == 1
    states = {t.state for t in world.tracked().values()}
    assert states == {"completed", "stopped"}
    assert state.status(world.session, report.sweep_id, world.sweeps).counts() == {"COMPLETED": 3, "FAILED": 1}


def test_a_rerun_by_hand_takes_the_point_from_the_daemon_and_it_never_runs_twice(world):
    report = world.submit()
    (array,) = world.alpha.arrays.values()
    points = rows(array.script)
    world.alpha.run(array.job_id)
    world.alpha.finish_task(array.job_id, 1, "NODE_FAIL")
    first = world.tracked()[points[1]]
    rerun = actions.rerun(world.session, report.sweep_id, journal=world.sweeps)
    assert [a.kind for a in rerun.arrays] == ["rerun"]                  # a sparse array, tracked anew
    by_point = {}
    for t in world.daemon.journal.jobs():
        by_point.setdefault(point_of(t)[1], []).append(t)
    assert [t.state for t in by_point[points[1]]] == ["stopped", "active"]
    assert world.daemon.journal.job(first.id).reason.startswith("the point was placed again")
    cycle = world.daemon.cycle()
    assert cycle.restarted == [] and len(world.alpha.arrays) == 2       # the daemon submitted nothing


def test_the_daemon_adopts_a_placement_made_while_it_was_deciding(world):
    """Its list of jobs was read before a rerun by hand stopped the old tracking: under the sweep's lock it
    sees the point placed again and submits nothing."""
    report = world.submit()
    (array,) = world.alpha.arrays.values()
    points = rows(array.script)
    world.alpha.run(array.job_id)
    world.alpha.finish_task(array.job_id, 3, "NODE_FAIL")
    world.daemon._poll(world.daemon.journal.jobs(state="active"), CycleReport())
    world.daemon._decide(world.daemon.journal.jobs(state="active"), CycleReport())
    stale = world.daemon.journal.jobs(state="active")                   # the daemon's view: one intent
    assert [t.current.phase for t in stale] == ["intent"]
    actions.rerun(world.session, report.sweep_id, journal=world.sweeps)   # the user, meanwhile
    tracked, attempt = stale[0], stale[0].current
    cluster, task = world.daemon.submit_attempt(tracked, attempt, "alpha")
    (rerun,) = [a for a in world.alpha.arrays.values() if a.job_id != array.job_id]
    assert (cluster, task) == ("alpha", "%s_3" % rerun.job_id) and len(world.alpha.arrays) == 2
    assert point_of(tracked)[1] == points[3]


def test_cancel_stops_the_tracking_so_nothing_cancelled_comes_back(world):
    report = world.submit()
    (array,) = world.alpha.arrays.values()
    world.alpha.finish_task(array.job_id, 0, "NODE_FAIL")
    actions.cancel(world.session, report.sweep_id, world.sweeps)
    assert {t.state for t in world.tracked().values()} == {"stopped"}
    cycle = world.daemon.cycle()
    assert cycle.restarted == [] and len(world.alpha.arrays) == 1


def test_auto_requeue_needs_an_absolute_sweep_dir_and_takes_no_checkpoint_dir(world):
    spec = JobSpec(command=COMMAND, template="single", gpus_per_node=0, checkpoint_dir="/x")
    with pytest.raises(UsageError, match="--checkpoint-dir does not apply to a sweep"):
        submission.submit(world.session,
                          submission.SweepRequest(spec=spec, grid=("seed=1",), sweep_dir=str(world.tmp / "s")),
                          world.sweeps)
    assert world.alpha.arrays == {}


def test_a_time_limit_restarts_a_task_only_when_its_point_has_a_newer_checkpoint(world):
    world.submit()
    (array,) = world.alpha.arrays.values()
    points = rows(array.script)
    world.alpha.finish_task(array.job_id, 0, "TIMEOUT")
    world.alpha.finish_task(array.job_id, 1, "TIMEOUT")
    saved = world.save(points[1], 7)                         # only point 1 checkpointed before its limit
    cycle = world.daemon.cycle()
    assert len(cycle.restarted) == 1
    (restart,) = [a for a in world.alpha.arrays.values() if a.job_id != array.job_id]
    assert rows(restart.script) == {1: points[1]} and "export SLURMKIT_RESUME_FROM=%s" % saved in restart.script
    tracked = world.tracked()
    assert tracked[points[0]].state == "stopped" and "without a newer checkpoint" in tracked[points[0]].reason
    assert tracked[points[1]].state == "active" and tracked[points[1]].current.resume_step == 7


PLAIN = "#!/bin/bash\n#SBATCH --job-name=train\n#SBATCH --time=60\n#SBATCH --comment=slurmkit:%s\npython train.py\n"


def test_a_cycle_asks_each_cluster_once_for_every_sweep_whatever_their_number(tmp_path, monkeypatch):
    """3 sweeps on 2 clusters: one ``squeue --array`` (plus one sacct where tasks were forgotten and there is
    accounting) per cluster for all of them, not one per sweep; plain tracked jobs keep their own batched poll.
    The decisions are those of one sweep alone: a node failure restarts only that task."""
    world = World(tmp_path, monkeypatch)
    try:
        world.beta = FakeArraySlurm("beta", nodes=["bn1", "bn2"], clock=world.clock, first_job_id=5000)
        world.alpha.accounting_enabled = True
        world.alpha.config_values["AccountingStorageType"] = "accounting_storage/slurmdbd"
        world.session = fake_session(alpha=world.alpha, beta=world.beta)
        spec = JobSpec(command=COMMAND, template="single", gpus_per_node=0, time="00:05:00")
        sweeps = []
        for name, cluster in (("one", "alpha"), ("two", "alpha"), ("three", "beta")):
            request = submission.SweepRequest(spec=spec, grid=("seed=0..2",), name=name, cluster=cluster,
                                              sweep_dir=str(tmp_path / name), auto_requeue={})
            sweeps.append(submission.submit(world.session, request, world.sweeps))
        plain = []
        for n, backend in enumerate((world.alpha, world.alpha, world.beta)):
            tid = world.daemon.journal.track(name="p%d" % n, site="fake", cluster=backend.cluster_name,
                                             partition="gpu", spec={"command": ["x"]},
                                             checkpoint_dir=str(tmp_path / ("ckpt%d" % n)))
            aid = world.daemon.journal.begin_attempt(tid, 1, "plain%d" % n, backend.cluster_name)
            job = backend.submit(PLAIN % ("plain%d" % n))
            world.daemon.journal.submitted(aid, job)
            backend.set_state(job, "RUNNING", nodes=sorted(backend.nodes_table)[-1])
            plain.append(tid)
        (one, two) = sorted(world.alpha.arrays.values(), key=lambda a: int(a.job_id))
        (three,) = world.beta.arrays.values()
        for array in (one, two):
            for index in sorted(array.tasks):
                world.alpha.set_state(array.tasks[index].job_id, "RUNNING", nodes="an%d" % (index + 1))
        world.alpha.forget_array(two.job_id)     # squeue forgot them: only accounting knows (still running)
        world.daemon.cycle()                     # the first poll also reads each cluster's config, once
        counts = {}
        for backend in (world.alpha, world.beta):
            counts[backend.cluster_name] = len(backend.commands)
        world.alpha.finish_task(one.job_id, 1, "NODE_FAIL")
        world.alpha.set_node("an2", "DOWN", reason="dead")
        report = world.daemon.cycle()

        def sweep_queries(backend):
            made = backend.commands[counts[backend.cluster_name]:]
            return [c for c in made if c[0] == "squeue" and "--array" in c or
                    c[0] == "sacct" and any(a.startswith("--format=JobID,JobIDRaw") for a in c)]

        alpha_sweeps, beta_sweeps = sweep_queries(world.alpha), sweep_queries(world.beta)
        assert [c[0] for c in alpha_sweeps] == ["squeue", "sacct"]        # 2 sweeps: one of each, not two
        assert {a for c in alpha_sweeps for a in c if a.startswith("--jobs=")} == {
            "--jobs=%s,%s" % (one.job_id, two.job_id), "--jobs=%s" % two.job_id}
        assert [c[0] for c in beta_sweeps] == ["squeue"]                   # no accounting there
        # Plain tracked jobs: their own one query per cluster (squeue --json, or --Format where there is
        # one job; nothing forgotten), and the restart's own commands (the token lookup and the sbatch)
        # only on alpha.
        polls = {b.cluster_name: [c for c in b.commands[counts[b.cluster_name]:]
                                  if c[0] == "squeue" and "--array" not in c
                                  and ("--json" in c or any(a.startswith("--Format=") for a in c))]
                 for b in (world.alpha, world.beta)}
        assert {k: len(v) for k, v in polls.items()} == {"alpha": 2, "beta": 1}   # the 2nd: the restart's lookup
        # The decisions: only task 1 of the first sweep failed; it alone is restarted, on its own index.
        assert report.finished and {state for _, state in report.finished} == {"NODE_FAIL"}
        assert len(report.restarted) == 1 and not world.plain
        restart = [a for a in world.alpha.arrays.values() if a.job_id not in (one.job_id, two.job_id)]
        assert [a.indices for a in restart] == [[1]] and not [a for a in world.beta.arrays.values()
                                                              if a is not three]
        assert {world.daemon.journal.job(t).state for t in plain} == {"active"}
        assert {world.daemon.journal.job(t).current.state for t in plain} == {"RUNNING"}
        for result in sweeps:
            status = state.status(world.session, result.sweep_id, world.sweeps)
            assert not status.unreachable
    finally:
        world.close()


def test_a_task_that_keeps_failing_soon_after_it_starts_is_stopped_as_a_crash_loop(world):
    """squeue's StartTime/EndTime give each task's attempt how long it ran: three transient exits in a row
    within seconds of starting end the tracking as a crash loop (without them the transient budget of 3
    restarts would be spent first, and a fourth attempt run)."""
    world.submit(transient_exit_codes=[3])
    (array,) = world.alpha.arrays.values()
    point = rows(array.script)[1]
    world.alpha.run(array.job_id, {1: 3})
    for _ in range(10):
        world.daemon.cycle()
        if world.tracked()[point].state != "active":
            break
        for restart in world.alpha.arrays.values():
            world.alpha.run(restart.job_id, {1: 3})       # the restarted task fails at once again
        world.clock.advance(120)                          # past the backoff of the next restart
    tracked = world.tracked()[point]
    assert tracked.state == "stopped" and tracked.reason.startswith("crash loop"), tracked.reason
    assert len(tracked.attempts) == 3 and len(world.alpha.arrays) == 3
    for attempt in tracked.attempts:
        assert attempt.started_at is not None and 0 <= attempt.ended_at - attempt.started_at < 120
    assert {t.state for p, t in world.tracked().items() if p != point} == {"completed"}



def test_a_task_that_stops_making_progress_is_cancelled_alone_and_restarted_from_its_checkpoint(world):
    from slurmkit.requeue.tracking import budget_overrides

    world.submit(**budget_overrides(hang_timeout="2"))          # two minutes
    (array,) = world.alpha.arrays.values()
    points = rows(array.script)
    for index in points:
        world.alpha.set_state(world.alpha.task(array.job_id, index).job_id, "RUNNING")
    world.save(points[1], 10)
    beats = {}

    def beat(index, when):                                     # the heartbeat directory, as the job's writes leave it
        path = world.point_dir(points[index]) / "checkpoint" / ".slurmkit" / "heartbeat"
        path.mkdir(parents=True, exist_ok=True)
        os.utime(str(path), ns=(when, when))
        beats[index] = when
    cancelled_at = None
    for minute in range(5):
        for index in points:
            if index != 1 or minute == 0:                      # task 1's last beat is in the first minute
                beat(index, (minute + 1) * 10 ** 9)
        world.daemon.cycle()
        if cancelled_at is None and world.alpha.task(array.job_id, 1).state == "CANCELLED":
            cancelled_at = minute
        world.clock.advance(60)
    assert cancelled_at == 2                                   # two minutes after the last beat it saw, not sooner
    tasks = {i: world.alpha.task(array.job_id, i).state for i in points}
    assert tasks == {0: "RUNNING", 1: "CANCELLED", 2: "RUNNING", 3: "RUNNING"}, tasks
    first = world.tracked()[points[1]].attempts[0]
    assert first.cause == "hung" and first.ended_by.startswith("hung: no progress for 120 s")
    assert [len(t.attempts) for p, t in sorted(world.tracked().items())].count(2) == 1
    (restart,) = [a for a in world.alpha.arrays.values() if a.job_id != array.job_id]
    assert restart.indices == [1] and "export SLURMKIT_RESUME_FROM=%s" % (
        world.point_dir(points[1]) / "checkpoint" / "step-000010") in restart.script
