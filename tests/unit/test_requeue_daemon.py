"""The requeue daemon's cycle against FakeSlurm and a FakeClock, with real checkpoint directories."""

import os

import pytest

from slurmkit import checkpoint
from slurmkit.errors import RemoteError
from slurmkit.requeue.daemon import CycleReport, Daemon

import harness

SCRIPT = "#!/bin/bash\n#SBATCH --job-name=train\n#SBATCH --nodes=2\n#SBATCH --time=60\n#SBATCH --comment=slurmkit:%s\n" \
         "python train.py\n# end of slurmkit job script\n"


class World(harness.World):
    """Two fake clusters, a journal, real checkpoint files and a daemon over them."""

    def __init__(self, tmp_path):
        super().__init__(tmp_path, {"alpha": dict(nodes=["an1", "an2", "an3", "an4"], accounting=True),
                                    "beta": dict(nodes=["bn1", "bn2"])}, tmp_path / "requeue.db")
        self.ckpt = tmp_path / "ckpt"
        self.ckpt.mkdir()
        self.submitted = []

    def submit_attempt(self, tracked, attempt, cluster):
        backend = self.session.backend(cluster)
        job_id = backend.submit(SCRIPT % attempt.token, token=attempt.token)
        self.submitted.append((cluster, job_id, attempt.number, attempt.resume_from,
                               tuple(tracked.excluded)))
        return cluster, job_id

    def track(self, shared=(), **budget):
        tid = self.journal.track(name="train", site="fake", cluster="alpha", partition="gpu",
                                 spec={"command": ["python", "train.py"]}, checkpoint_dir=str(self.ckpt),
                                 shared_clusters=shared, budget=budget)
        token = "tok-%d" % tid
        aid = self.journal.begin_attempt(tid, 1, token, "alpha")
        job = self.alpha.submit(SCRIPT % token)
        self.journal.submitted(aid, job)
        return tid, job

    def save(self, step):
        self.save_checkpoint(self.ckpt, step)

    def job(self, tid):
        return self.journal.job(tid)


@pytest.fixture
def world(tmp_path):
    w = World(tmp_path)
    yield w
    w.journal.close()


def test_node_failure_restarts_from_the_latest_complete_checkpoint_on_other_nodes(world):
    tid, job = world.track()
    world.alpha.set_state(job, "RUNNING", nodes="an[1-2]")
    world.save(10)
    world.save(20)
    # A newer checkpoint cut off mid-write: no COMPLETE marker.
    partial = world.ckpt / "step-000030"
    partial.mkdir()
    (partial / "state.pt").write_bytes(b"half")
    world.daemon.cycle()
    assert world.job(tid).current.state == "RUNNING"
    world.alpha.set_node("an2", "DOWN", reason="Not responding")
    world.alpha.finish(job, "NODE_FAIL")
    report = world.daemon.cycle()
    assert report.finished == [(tid, "NODE_FAIL")] and len(report.restarted) == 1
    (cluster, new_job, number, resume_from, excluded), = world.submitted
    assert (cluster, number) == ("alpha", 2) and new_job != job
    assert resume_from == str(world.ckpt / "step-000020")
    assert excluded == ("an2",)
    tracked = world.job(tid)
    assert tracked.attempts[0].cause == "node_fail" and tracked.attempts[1].resume_step == 20
    assert any("step-000030" in e["message"] for e in tracked.events)   # the skip is shown
    # The new attempt completes: tracking ends.
    world.alpha.finish(new_job, "COMPLETED")
    world.daemon.cycle()
    assert world.job(tid).state == "completed" and len(world.submitted) == 1


def test_a_poll_costs_at_most_two_commands_per_cluster_whatever_the_number_of_jobs(world):
    jobs = []
    for n in range(50):
        tid = world.journal.track(name="j%d" % n, site="fake", cluster="alpha", partition="gpu",
                                  spec={"command": ["x"]}, checkpoint_dir=str(world.ckpt))
        aid = world.journal.begin_attempt(tid, 1, "t%d" % n, "alpha")
        job = world.alpha.submit(SCRIPT % ("t%d" % n))
        world.journal.submitted(aid, job)
        jobs.append(job)
    for job in jobs[:25]:
        world.alpha.set_state(job, "RUNNING")
    for job in jobs[:10]:
        world.alpha.forget(job)          # only sacct knows these
    world.daemon.cycle()                 # the first poll also reads the config (accounting?), once
    before = len(world.alpha.commands)
    world.daemon.cycle()
    assert len(world.alpha.commands) - before <= 2
    assert {c[0] for c in world.alpha.commands[before:]} <= {"squeue", "sacct"}


def test_failures_that_are_not_transient_stop_and_completed_ends(world):
    tid, job = world.track()
    world.alpha.finish(job, "FAILED", exit_code=3)
    world.daemon.cycle()
    tracked = world.job(tid)
    assert tracked.state == "stopped" and "exit code 3" in tracked.reason and world.submitted == []


def test_transient_exit_code_restarts(world):
    tid, job = world.track(transient_exit_codes=[75, 76])
    world.save(5)
    world.alpha.finish(job, "FAILED", exit_code=76)
    world.daemon.cycle()
    assert [s[2] for s in world.submitted] == [2]


def test_timeout_needs_a_newer_checkpoint(world):
    tid, job = world.track()
    world.alpha.finish(job, "TIMEOUT")
    world.daemon.cycle()
    assert world.job(tid).state == "stopped" and world.submitted == []
    tid, job = world.track()
    world.save(7)
    world.alpha.finish(job, "TIMEOUT")
    world.daemon.cycle()
    assert world.job(tid).attempts[-1].resume_step == 7


def test_a_slow_or_unreachable_cluster_is_never_a_failed_job(world):
    tid, job = world.track()
    world.alpha.set_state(job, "RUNNING")
    world.alpha.fail_next("jobs_by_id", RemoteError("cannot reach login node of alpha"))
    report = world.daemon.cycle()
    assert report.errors and world.job(tid).current.phase == "submitted" and world.job(tid).state == "active"
    # Backing off: the next cycle right away does not ask alpha again.
    before = len(world.alpha.commands)
    world.daemon.cycle()
    assert len(world.alpha.commands) == before
    world.clock.advance(60)
    world.daemon.cycle()
    assert len(world.alpha.commands) > before and world.job(tid).current.state == "RUNNING"


def test_an_intent_whose_sbatch_ran_before_a_crash_is_not_submitted_again(world):
    tid, job = world.track()
    world.save(3)
    world.alpha.finish(job, "PREEMPTED")
    # The daemon decided and wrote the next intent, sbatch ran, then it died (kill -9)
    # before writing the job id: simulate with the journal and Slurm in exactly that state.
    world.daemon._poll(world.journal.jobs(state="active"), CycleReport())
    world.daemon._decide(world.journal.jobs(state="active"), CycleReport())
    intent = world.job(tid).current
    assert intent.phase == "intent" and intent.number == 2
    orphan = world.alpha.submit(SCRIPT % intent.token)          # the sbatch that happened
    fresh = Daemon(world.journal, sessions=lambda site: world.session, submit_attempt=world.submit_attempt,
                   clock=world.clock)
    fresh.cycle()
    assert world.submitted == [] and world.job(tid).current.job_id == orphan


def _token_lookups_in_accounting(commands):
    """The sacct calls that look for tokens (by time and user), not those by job id."""
    return [c for c in commands if c[0] == "sacct" and not any(a.startswith("--jobs=") for a in c)]


def test_an_intent_whose_job_ran_and_was_forgotten_while_no_daemon_was_up_is_found_in_accounting(world):
    tid, job = world.track()
    world.save(3)
    world.alpha.finish(job, "PREEMPTED")
    world.daemon._poll(world.journal.jobs(state="active"), CycleReport())
    world.daemon._decide(world.journal.jobs(state="active"), CycleReport())
    intent = world.job(tid).current
    assert intent.phase == "intent"
    # The crashed daemon's sbatch made the job; it ran to its end while no daemon was up, and
    # MinJobAge later squeue no longer shows it: only accounting has its token.
    orphan = world.alpha.submit(SCRIPT % intent.token)
    world.clock.advance(600)
    world.alpha.finish(orphan, "COMPLETED")
    world.clock.advance(7200)
    world.alpha.forget(orphan)
    fresh = Daemon(world.journal, sessions=lambda site: world.session, submit_attempt=world.submit_attempt,
                   clock=world.clock)
    before = len(world.alpha.commands)
    fresh.cycle()
    assert world.submitted == [] and world.job(tid).current.job_id == orphan
    (lookup,) = _token_lookups_in_accounting(world.alpha.commands[before:])
    # One sacct for every intent of the cluster, back past the oldest intent, of the user's jobs.
    back = int([a for a in lookup if a.startswith("--starttime=now-")][0].rpartition("-")[2])
    assert back >= world.clock.time() - intent.created and "--user=" + world.alpha.user in lookup
    # The next poll finds it ended (through sacct by id) and tracking ends: nothing ran twice.
    fresh.cycle()
    tracked = world.job(tid)
    assert tracked.state == "completed" and len(tracked.attempts) == 2 and world.submitted == []


def test_without_accounting_the_token_lookup_is_squeue_alone(world):
    tid = world.journal.track(name="train", site="fake", cluster="beta", partition="gpu",
                              spec={"command": ["python", "train.py"]}, checkpoint_dir=str(world.ckpt))
    world.journal.begin_attempt(tid, 1, "tok-beta", "beta")       # an intent left by a crash
    world.daemon.cycle()
    assert not _token_lookups_in_accounting(world.beta.commands)
    assert [s[:3] for s in world.submitted] == [("beta", world.job(tid).current.job_id, 1)]


def test_a_restart_this_daemon_planned_itself_costs_no_accounting_query(world):
    tid, job = world.track()
    world.save(3)
    world.alpha.finish(job, "NODE_FAIL")
    before = len(world.alpha.commands)
    world.daemon.cycle()
    assert len(world.submitted) == 1
    # Its own intent: no sbatch can have run for it before, squeue alone is asked.
    assert not _token_lookups_in_accounting(world.alpha.commands[before:])


def test_a_lost_sbatch_answer_is_resolved_by_token_on_the_same_cluster(world):
    from slurmkit.errors import ConnectTimeoutError

    tid, job = world.track(shared=["beta"])
    world.save(3)
    world.alpha.finish(job, "NODE_FAIL")
    world.alpha.fail_next("submit", ConnectTimeoutError("answer lost").outcome_unknown())
    report = world.daemon.cycle()
    assert any("outcome of the submission unknown" in e for e in report.errors)
    assert world.job(tid).current.phase == "intent"
    world.daemon.cycle()
    tokens = [j for j in world.alpha.table.values() if j.comment == "slurmkit:" + world.job(tid).current.token]
    assert len(tokens) == 1 and world.job(tid).current.job_id == tokens[0].job_id
    assert not world.beta.table                                  # never failed over after a lost answer


def test_an_unreachable_cluster_sends_the_restart_to_one_sharing_the_checkpoints(world):
    tid, job = world.track(shared=["beta"])
    world.save(3)
    world.alpha.finish(job, "NODE_FAIL")
    world.daemon._poll(world.journal.jobs(state="active"), CycleReport())
    world.alpha.fail_next("jobs", RemoteError("cannot reach login node of alpha"))
    world.daemon.cycle()
    current = world.job(tid).current
    assert current.cluster == "beta" and current.job_id in world.beta.table
    assert any("shares the checkpoint directory" in e["message"] for e in world.job(tid).events)


def test_backoff_delays_repeated_restarts_of_one_cause(world):
    tid, job = world.track()
    for step in (1, 2, 3):
        world.save(step * 10)
        current = world.job(tid).current
        world.alpha.finish(current.job_id, "NODE_FAIL")
        world.daemon.cycle()
        if step == 1:
            assert len(world.submitted) == 1                     # the first restart is immediate
        else:
            assert len(world.submitted) == step - 1              # later ones wait
            world.clock.advance(3600)
            world.daemon.cycle()
            assert len(world.submitted) == step


def test_interval_adapts(world):
    d = world.daemon
    d.interval = d.min_interval
    quiet = CycleReport()
    assert d.next_interval(quiet) == d.min_interval * 2
    d.interval = d.max_interval
    assert d.next_interval(quiet) == d.max_interval
    assert d.next_interval(CycleReport(changed=True)) == d.min_interval
    near = CycleReport(next_end=world.clock.time() + 12)
    assert d.next_interval(near) == 12
    # A restart waiting for its backoff: the next cycle comes no later than it is due, even
    # sooner than the shortest interval, and at once when it is due already.
    now = world.clock.time()
    assert d.next_interval(CycleReport(next_due=now + 17)) == 17
    assert d.next_interval(CycleReport(changed=True, next_due=now + 2)) == 2
    assert d.next_interval(CycleReport(next_due=now - 1)) == 0
    assert d.next_interval(CycleReport(next_due=now + 3600)) == d.max_interval


def test_a_restart_in_backoff_is_submitted_when_due_not_a_slow_interval_later(world):
    tid, job = world.track()
    d = world.daemon
    world.save(10)
    world.alpha.finish(job, "NODE_FAIL")
    d.cycle()                                            # the first restart: at once
    second = world.job(tid).current.job_id
    world.save(20)
    world.alpha.finish(second, "NODE_FAIL")
    d.interval = d.max_interval                          # a quiet daemon, at its slowest
    submitted_at = None
    for _ in range(20):                                  # what run() does, on the fake clock
        report = d.cycle()
        if len(world.submitted) == 2:
            submitted_at = world.clock.time()
            break
        d.interval = d.next_interval(report)
        d.sleep(d.interval)
    attempts = world.job(tid).attempts
    due = attempts[2].not_before
    assert due - attempts[1].updated >= 29               # the backoff of a second node failure (30 s)
    assert submitted_at is not None and due <= submitted_at <= due + 0.001, (due, submitted_at)


def test_an_unreadable_checkpoint_directory_holds_that_job_only(world, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    tid, job = world.track()
    other = world.journal.track(name="other", site="fake", cluster="alpha", partition="gpu",
                                spec={"command": ["python", "train.py"]}, checkpoint_dir=str(broken))
    aid = world.journal.begin_attempt(other, 1, "tok-other", "alpha")
    other_job = world.alpha.submit(SCRIPT % "tok-other")
    world.journal.submitted(aid, other_job)
    readable = world.daemon.latest_checkpoint
    failing = {str(broken)}

    def latest(directory, conventions=None):
        if directory in failing:
            raise PermissionError(13, "Permission denied", directory)
        return readable(directory, conventions)

    world.daemon.latest_checkpoint = latest
    world.alpha.finish(job, "NODE_FAIL")
    world.alpha.finish(other_job, "NODE_FAIL")
    report = world.daemon.cycle()                 # does not raise
    assert [s[2] for s in world.submitted] == [2]                  # the readable job was restarted
    assert world.job(tid).current.number == 2
    assert world.job(other).current.phase == "finished"           # the other waits, still tracked
    assert any("cannot read its checkpoint directory %s" % broken in e for e in report.errors)
    failing.clear()                                                # readable again: decided now
    world.daemon.cycle()
    assert world.job(other).current.number == 2 and len(world.submitted) == 2


def test_sighup_and_sigterm_end_the_wait_between_cycles(world):
    import threading
    import time

    for request in (world.daemon.request_reload, world.daemon.request_stop):
        waiter = threading.Thread(target=world.daemon._wait, args=(60,))
        started = time.monotonic()
        waiter.start()
        request()
        waiter.join(5)
        assert not waiter.is_alive() and time.monotonic() - started < 5
    assert world.daemon.reload_requested.is_set() and world.daemon.stop_requested.is_set()


def test_checkpoint_conventions_chosen_by_the_job(world):
    """A job that said 'file' resumes from its atomically renamed file, not a marker directory."""
    tid = world.journal.track(name="train", site="fake", cluster="alpha", partition="gpu",
                              spec={"command": ["python", "train.py"]}, checkpoint_dir=str(world.ckpt),
                              budget={"checkpoint_conventions": ["file"]})
    aid = world.journal.begin_attempt(tid, 1, "tok-conv", "alpha")
    job = world.alpha.submit(SCRIPT % "tok-conv")
    world.journal.submitted(aid, job)
    world.save(50)                                   # a marker directory: not this job's convention
    (world.ckpt / "step-000040.pt").write_bytes(b"weights")
    world.alpha.finish(job, "NODE_FAIL")
    world.daemon.cycle()
    assert world.job(tid).current.resume_from == str(world.ckpt / "step-000040.pt")


def test_an_attempts_end_is_slurms_end_time_not_the_poll_time(world):
    tid, job = world.track()
    world.alpha.set_state(job, "RUNNING", nodes="an[1-2]")
    started = world.clock.time()
    world.daemon.cycle()
    world.clock.advance(30)
    ended = world.clock.time()
    world.alpha.finish(job, "FAILED", exit_code=3)
    world.clock.advance(45)                 # the daemon polls 45 s later (or was down meanwhile)
    world.daemon.cycle()
    attempt = world.job(tid).attempts[0]
    assert (attempt.started_at, attempt.ended_at) == (int(started), int(ended))


def test_a_live_jobs_end_time_in_squeue_json_is_not_an_end():
    import json

    from slurmkit.slurm import parsers

    base = {"job_id": 7, "name": "x", "start_time": 1796040000, "end_time": 1796043600, "nodes": "an1",
            "exit_code": 0}
    [running] = parsers.parse_squeue_json(json.dumps({"jobs": [dict(base, job_state="RUNNING")]}))
    [failed] = parsers.parse_squeue_json(json.dumps({"jobs": [dict(base, job_state="FAILED", exit_code=256)]}))
    assert running.end_time is None       # when its time limit would end it
    assert failed.end_time.timestamp() == 1796043600 and failed.to_dict()["end_time"] == failed.end_time.isoformat()


# ---------------------------------------------------------------- a job that stops making progress

def beat(world, job, at_ns):
    """The job's heartbeat, its directory's time set explicitly (the file server's clock: two beats
    within a few milliseconds of each other would otherwise leave the same time)."""
    path = checkpoint.heartbeat_path(str(world.ckpt), job)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    assert checkpoint.heartbeat(step=at_ns % 1000, path=path, every=0)
    os.utime(os.path.dirname(path), ns=(at_ns, at_ns))


def test_a_job_whose_heartbeat_and_checkpoints_stop_is_cancelled_and_restarted_as_hung(world):
    tid, job = world.track(hang_timeout_s=600)
    world.alpha.set_state(job, "RUNNING", nodes="an[1-2]")
    world.save(10)
    # Making progress for longer than the timeout: a heartbeat every 5 minutes is enough.
    for k in range(1, 5):
        beat(world, job, k * 10 ** 9)
        world.daemon.cycle()
        assert world.job(tid).current.ended_by == "" and world.alpha.table[job].state == "RUNNING"
        world.clock.advance(300)
    # Then nothing moves: not yet at 599 s after the last change the daemon saw ...
    report = world.daemon.cycle()
    assert report.next_hang == pytest.approx(world.clock.time() + 300)
    world.clock.advance(299)
    world.daemon.cycle()
    assert world.alpha.table[job].state == "RUNNING"
    # ... ended at 600 s: marked first, then cancelled; the next cycle restarts it from its checkpoint.
    world.clock.advance(2)
    world.daemon.cycle()
    attempt = world.job(tid).attempts[0]
    assert attempt.ended_by.startswith("hung: no progress for 601 s (the hang timeout is 600 s)")
    assert "(in %s) nor its checkpoint directory changed" % (world.ckpt / ".slurmkit" / "heartbeat") in attempt.ended_by
    assert world.alpha.table[job].state == "CANCELLED"
    report = world.daemon.cycle()
    assert report.finished == [(tid, "CANCELLED")] and len(report.restarted) == 1
    tracked = world.job(tid)
    first, second = tracked.attempts
    assert first.cause == "hung" and first.decision.startswith("ended by the daemon: no progress for 601 s")
    assert second.resume_from == str(world.ckpt / "step-000010") and second.phase == "submitted"
    assert any("cancelling it" in e["message"] for e in tracked.events)


def test_a_new_checkpoint_counts_as_progress_and_no_timeout_means_no_watch(world):
    tid, job = world.track(hang_timeout_s=600)
    other, other_job = world.track()                  # no hang timeout of its own, none at the site
    for j in (job, other_job):
        world.alpha.set_state(j, "RUNNING")
    for step in (10, 20, 30):
        world.daemon.cycle()
        world.clock.advance(500)
        world.save(step)                               # no heartbeat at all: checkpoints alone
        os.utime(str(world.ckpt), ns=(step * 10 ** 9, step * 10 ** 9))
    world.daemon.cycle()
    assert world.alpha.table[job].state == "RUNNING" and world.alpha.table[other_job].state == "RUNNING"
    world.clock.advance(3600)
    world.daemon.cycle()
    assert world.alpha.table[job].state == "CANCELLED" and world.alpha.table[other_job].state == "RUNNING"


def test_a_hang_verdict_written_before_a_crash_is_carried_out_and_a_persons_cancel_stays_final(world):
    tid, job = world.track(hang_timeout_s=60)
    world.alpha.set_state(job, "RUNNING")
    aid = world.job(tid).attempts[0].id
    world.journal.end_as_hung(aid, "hung: no progress for 61 s")     # then the daemon was killed
    world.daemon.cycle()                                              # a fresh daemon cancels it
    assert world.alpha.table[job].state == "CANCELLED"
    world.daemon.cycle()
    assert world.job(tid).attempts[0].cause == "hung" and len(world.job(tid).attempts) == 2
    # A cancel of someone else's making is never undone.
    tid2, job2 = world.track(hang_timeout_s=60)
    world.alpha.set_state(job2, "RUNNING")
    world.alpha.finish(job2, "CANCELLED")
    world.daemon.cycle()
    assert world.job(tid2).state == "stopped" and world.job(tid2).attempts[0].cause == "cancelled"


def test_a_job_that_hangs_every_time_is_stopped_by_its_budget(world):
    tid, job = world.track(hang_timeout_s=60)
    for number in range(1, 5):
        current = world.job(tid).current
        world.alpha.set_state(current.job_id, "RUNNING")
        world.daemon.cycle()
        world.clock.advance(200)              # past quick_failure_s too: not a crash loop
        world.daemon.cycle()                  # cancelled
        world.daemon.cycle()                  # decided
        world.clock.advance(1000)             # past any backoff
        world.daemon.cycle()                  # the next attempt submitted
    tracked = world.job(tid)
    assert tracked.state == "stopped" and [a.cause for a in tracked.attempts] == ["hung"] * 4
    assert "hung 4 times; the budget for hung is 3" in tracked.reason


def test_the_sites_hang_timeout_applies_unless_the_job_has_its_own(world):
    from types import SimpleNamespace

    site = SimpleNamespace(requeue=SimpleNamespace(hang_timeout=900))
    daemon = Daemon(world.journal, sessions=lambda s: SimpleNamespace(site=site), submit_attempt=world.submit_attempt)
    tid, _ = world.track()
    own, _ = world.track(hang_timeout_s=0)
    assert daemon.hang_timeout(world.job(tid)) == 900 and daemon.hang_timeout(world.job(own)) == 0


def test_the_wait_between_cycles_ends_when_a_job_may_be_found_hung(world):
    world.daemon.interval = 60
    soon = world.clock.time() + 12
    assert world.daemon.next_interval(CycleReport(next_hang=soon)) == pytest.approx(12)


def test_a_new_daemon_each_cycle_as_crons_daemon_once_still_finds_the_hang(world):
    tid, job = world.track(hang_timeout_s=120)
    world.alpha.set_state(job, "RUNNING")
    beat(world, job, 10 ** 9)

    def once():
        Daemon(world.journal, sessions=lambda site: world.session, submit_attempt=world.submit_attempt,
               clock=world.clock).cycle()
    for _ in range(3):                       # one process per minute, nothing moves after the first
        once()
        world.clock.advance(60)
    assert world.alpha.table[job].state == "CANCELLED"
    assert world.job(tid).attempts[0].ended_by.startswith("hung: no progress for 120 s")


def starting(world):
    """A job with a 20 s hang timeout and 120 s for its start, just started: (tracked id, job id)."""
    tid, job = world.track(hang_timeout_s=20, hang_startup_s=120)
    world.alpha.set_state(job, "RUNNING", nodes="an[1-2]")
    return tid, job


def test_a_start_without_a_heartbeat_has_its_allowance_then_the_short_hang_timeout_counts(world):
    # A 20 s hang timeout for a job that beats every few seconds, and 120 s for its start (imports, the
    # rendezvous): a slow start is no hang, a hang after the first beat costs 20 s, not 120.
    tid, job = starting(world)
    report = world.daemon.cycle()
    assert report.next_hang == pytest.approx(world.clock.time() + 120)
    world.clock.advance(100)
    world.daemon.cycle()
    assert world.alpha.table[job].state == "RUNNING"
    beat(world, job, 10 ** 9)                     # its first heartbeat: started
    world.daemon.cycle()
    world.clock.advance(19)
    world.daemon.cycle()
    assert world.alpha.table[job].state == "RUNNING"
    world.clock.advance(2)
    world.daemon.cycle()
    assert world.alpha.table[job].state == "CANCELLED"
    assert world.job(tid).attempts[0].ended_by.startswith("hung: no progress for 21 s (the hang timeout is 20 s)")


def test_a_start_that_never_beats_is_ended_when_its_allowance_is_spent(world):
    tid, job = starting(world)
    world.daemon.cycle()
    world.clock.advance(119)
    world.daemon.cycle()
    assert world.alpha.table[job].state == "RUNNING"
    world.clock.advance(2)
    world.daemon.cycle()
    assert world.alpha.table[job].state == "CANCELLED"
    assert world.job(tid).attempts[0].ended_by.startswith(
        "hung: no progress for 121 s (the hang timeout is 20 s, after a start-up allowance of 120 s without a "
        "heartbeat)")


def test_the_start_up_allowance_is_the_jobs_else_the_sites_and_never_below_the_hang_timeout(world):
    from types import SimpleNamespace

    site = SimpleNamespace(requeue=SimpleNamespace(hang_timeout=30, hang_startup=300))
    daemon = Daemon(world.journal, sessions=lambda s: SimpleNamespace(site=site), submit_attempt=world.submit_attempt)
    from_site, _ = world.track()
    own, _ = world.track(hang_startup_s=90)
    short, _ = world.track(hang_timeout_s=600, hang_startup_s=60)
    timeout = daemon.hang_timeout
    assert daemon.hang_startup(world.job(from_site), timeout(world.job(from_site))) == 300
    assert daemon.hang_startup(world.job(own), timeout(world.job(own))) == 90
    assert daemon.hang_startup(world.job(short), timeout(world.job(short))) == 600
