"""The requeue daemon on the real local clusters: real failures, real PyTorch, kill -9 at every step.

A user submits ``examples/ddp_train.py`` with ``slurmkit submit --auto-requeue``
(a subprocess, as from a shell), and the daemon is driven the way cron or
systemd drives it: ``slurmkit daemon once`` cycles, or a background
``slurmkit daemon run``.  Each test has a journal of its own
(``SLURMKIT_STATE_DIR`` under its tmp dir).

Failures, each made by Slurm itself, then restarted (or not) by the daemon:

- NODE_FAIL on alpha (its first node set DOWN while it trains): restarted
  from the latest complete checkpoint, on other nodes;
- PREEMPTED on beta (a job in the ``urgent`` partition on the same node);
- a time limit on gamma (``-t 3``; Slurm's USR1 60 s before it, local.yaml's
  ``requeue.signal_grace``, or up to a minute earlier): the program saves and
  the job exits 75;
- an exit code the site lists as transient (local.yaml: 42), one process;
- a non-transient exit code (3): not restarted;
- the same two from one rank of a torchrun job on two nodes of gamma (rank 1
  exits alone; torchrun and srun then exit 1 and 143, but the job script
  exits with that worker's status, which the daemon records);
- a job that stops making progress on gamma (``--hang-timeout 0:20``): its
  heartbeat and checkpoints stand still, the daemon cancels it and restarts
  it as ``hung``.

After each failure a newer, incomplete checkpoint is put next to the
complete ones (what a node dying mid-save leaves); the daemon must skip it,
say so in ``slurmkit daemon jobs --json``, and resume from the one before.  Every
restarted job runs to its end and its output is read: the resumed step, and
``final rank=R step=S loss=L`` with S = --steps and the same L on every rank.

These seven run side by side (each in a thread started by a module fixture,
only those of the selected tests; their first attempts slowed down by the
example's --first-attempt-* hooks so a test can fail them part-way), while the tests that need no PyTorch run:
the daemon killed with SIGKILL at each point of a restart (a small driver
patches the daemon to kill itself there, then a fresh ``daemon once``
recovers; exactly one new attempt must exist), a crash loop stopped within
its budget by ``daemon run``, and the systemd units' commands.

Needs the clusters (make cluster-up); the training tests need PyTorch in
.venv (make venv-train) and are skipped with that reason without it.
About two minutes on two cores.
"""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

import pytest

from harness import wait_until
from conftest import (CAN_RUN_IMAGES, IMAGE, IMAGE_PYTHON, alpha_with_runtime, needs_apptainer, needs_image,
                      needs_runc, node_lock, slurm, slurm_version, torch_missing, wait_job_state)
from training_output import PYTHON, RESUME_RE, TRAIN, check_final, finals
from tracked_user import User, named_jobs

ROOT = Path(__file__).resolve().parents[2]
TRANSIENT = 42          # local.yaml requeue.transient_exit_codes



_MISSING = torch_missing(PYTHON)
requires_torch = pytest.mark.skipif(bool(_MISSING), reason="PyTorch is not installed in %s (make venv-train): %s"
                                    % (PYTHON, _MISSING))


def skipped_paths(tracked):
    return [e["message"] for e in tracked["events"] if "skipped checkpoint" in e["message"]]


# --------------------------------------------------------------------------
# The five failures, each in a thread of its own
# --------------------------------------------------------------------------

TRAIN_ARGS = ("--timeout", 120, "--log-every", 0, "--checkpoint-every", 10)


class Scenario:
    """A function run in a thread from the module's start; its test waits for it and re-raises what it raised."""

    def __init__(self, user, body):
        self.user, self.body = user, body
        self.result, self.error = None, None
        self.thread = threading.Thread(target=self._run, name=user.key, daemon=True)

    def _run(self):
        try:
            self.result = self.body(self.user)
        except BaseException as exc:       # handed to the test, with its traceback
            self.error = exc
            self.user.note("failed: %s" % traceback.format_exc(limit=3))

    def outcome(self, timeout=600):
        self.thread.join(timeout)
        timeline = "\n".join("  %6.1fs %s" % t for t in self.user.times)
        print("\n%s:\n%s" % (self.user.key, timeline))
        assert not self.thread.is_alive(), "scenario %s still running after %d s:\n%s" % (
            self.user.key, timeout, timeline)
        if self.error is not None:
            raise AssertionError("scenario %s failed:\n%s" % (self.user.key, timeline)) from self.error
        return self.result


# Where a node failure trains, and how many nodes that partition has: alpha's 4 cpu nodes, beta's 3 gpu nodes
# (one GPU each, under Slurm's OCI runtime).
NODE_FAIL_PLACES = {"alpha": (("-p", "cpu"), 4), "beta": (("-p", "gpu", "--gpus-per-node", 1), 3)}


def node_failure(user, devcluster):
    """Two nodes x one worker; the first node goes DOWN while it trains (NODE_FAIL)."""
    cluster = user.cluster
    first = user.submit(*NODE_FAIL_PLACES[cluster][0], "-N", 2, "-t", 5,
                        command=[user.python, TRAIN, "--steps", 60, *TRAIN_ARGS, "--first-attempt-step-seconds", 1])
    nodes = user.running(first["job_id"])
    user.checkpointed(20, first["job_id"])
    victim = nodes[0]
    reason = "slurmkit-test: requeue node failure %d" % os.getpid()
    with node_lock(devcluster):
        slurm(cluster, "scontrol", "update", "NodeName=" + victim, "State=DOWN", "Reason=" + reason)
        user.note("%s set DOWN" % victim)
        try:
            wait_job_state(cluster, first["job_id"], "NODE_FAIL", timeout=60)
            found = user.settled()
            partial = user.partial_after(found)
            report = user.once()
            assert report["finished"] == [[first["tracked_id"], "NODE_FAIL"]] and len(report["restarted"]) == 1
        finally:
            # ReturnToService=2 brings it back once its slurmd answers; make sure, and leave it usable.
            now = job_info_node(cluster, victim)
            if now.get("Reason", "").startswith("slurmkit-test"):
                slurm(cluster, "scontrol", "update", "NodeName=" + victim, "State=RESUME", check=False)
            wait_until(lambda: node_usable(cluster, victim), 90, interval=1.0,
                       what="node %s back in service" % victim)
            user.note("%s back" % victim)
    tracked = user.tracked()
    second = tracked["attempts"][1]
    after = user.running(second["job_id"])
    state = user.ended(second["job_id"])
    return dict(first=first, nodes=nodes, victim=victim, found=found, partial=partial, tracked=tracked,
                second=second, second_nodes=after, second_state=state, final=user.finish())


def job_info_node(cluster, node):
    out = slurm(cluster, "scontrol", "show", "node", "-o", node).stdout
    return dict(tok.split("=", 1) for tok in out.split() if "=" in tok)


def node_usable(cluster, node):
    state = job_info_node(cluster, node).get("State", "")
    return not any(s in state for s in ("DOWN", "DRAIN", "NOT_RESPONDING", "FAIL"))


def preemption(user, devcluster):
    """One node, two workers on beta's gpu partition; an urgent job takes the node (PREEMPTED)."""
    first = user.submit("-N", 1, "--gpus-per-node", 2, "-t", 5,
                        command=[user.python, TRAIN, "--steps", 60, *TRAIN_ARGS, "--first-attempt-step-seconds", 1])
    nodes = user.running(first["job_id"])
    user.checkpointed(20, first["job_id"])
    urgent = slurm("beta", "sbatch", "--parsable", "-p", "urgent", "-w", nodes[0], "--exclusive", "-t", 1,
                   "-J", user.name + "-urgent", "-o", "/dev/null", "--wrap", "sleep 10").stdout.strip()
    user.extra.append(urgent)
    user.note("urgent job %s on %s" % (urgent, nodes[0]))
    wait_job_state("beta", first["job_id"], "PREEMPTED", timeout=60)
    found = user.settled()
    partial = user.partial_after(found)
    report = user.once()
    assert report["finished"] == [[first["tracked_id"], "PREEMPTED"]] and len(report["restarted"]) == 1
    tracked = user.tracked()
    second = tracked["attempts"][1]
    state = user.ended(second["job_id"])
    return dict(first=first, nodes=nodes, found=found, partial=partial, tracked=tracked, second=second,
                second_state=state, final=user.finish())


def time_limit(user, devcluster):
    """One node, two workers on gamma, -t 3: Slurm's USR1 60 s before the limit; the program saves, exits 75.

    sbatch(1): "the signal may be sent up to 60 seconds earlier than specified" (slurmctld looks
    at time limits about once a minute).  With -t 2 and a grace of 60 the warning came anywhere
    from the job's start to a minute into it, once before the workers had written a checkpoint
    (a CI run: FAILED after 46 s, nothing saved).  -t 3 puts it between 60 and 120 s into the
    job, after the first checkpoints; 200 steps at 1 s each cannot end before it."""
    first = user.submit("--gpus-per-node", 2, "-t", 3,
                        command=[user.python, TRAIN, "--steps", 200, *TRAIN_ARGS, "--first-attempt-step-seconds", 1])
    user.running(first["job_id"])
    state = user.ended(first["job_id"], timeout=240)
    found = user.settled()
    partial = user.partial_after(found, how="short file")
    report = user.once()
    assert report["finished"] == [[first["tracked_id"], state]] and len(report["restarted"]) == 1
    tracked = user.tracked()
    second = tracked["attempts"][1]
    second_state = user.ended(second["job_id"])
    return dict(first=first, first_state=state, found=found, partial=partial, tracked=tracked, second=second,
                second_state=second_state, final=user.finish())


def transient_exit(user, devcluster):
    """One process on gamma; it exits 42 after step 30 on the first attempt (local.yaml: transient).

    One process: the exit code must be the job's.  Through a launcher of several ranks it is
    not: torchrun exits 1 when a worker fails, and srun --kill-on-bad-exit returns 143 when it
    terminated the other ranks (the highest status of all tasks)."""
    first = user.submit("-T", "single", "-N", 1, "--gpus-per-node", 1, "-t", 5,
                        command=[user.python, TRAIN, "--steps", 60, *TRAIN_ARGS,
                                 "--first-attempt-exit", "30:%d" % TRANSIENT])
    state = user.ended(first["job_id"], timeout=240)
    found = user.settled()
    partial = user.partial_after(found)
    report = user.once()
    assert report["finished"] == [[first["tracked_id"], state]] and len(report["restarted"]) == 1
    tracked = user.tracked()
    second = tracked["attempts"][1]
    second_state = user.ended(second["job_id"])
    return dict(first=first, first_state=state, found=found, partial=partial, tracked=tracked, second=second,
                second_state=second_state, final=user.finish())


def other_exit(user, devcluster):
    """One process on gamma; exits 3 after step 30: a failure of the program, not restarted."""
    first = user.submit("-T", "single", "-N", 1, "--gpus-per-node", 1, "-t", 5,
                        command=[user.python, TRAIN, "--steps", 60, *TRAIN_ARGS, "--first-attempt-exit", "30:3"])
    state = user.ended(first["job_id"], timeout=240)
    report = user.once()
    assert report["finished"] == [[first["tracked_id"], state]] and report["restarted"] == []
    again = user.once()          # a later cycle does not change its mind
    return dict(first=first, first_state=state, report=report, again=again, tracked=user.tracked())


def transient_exit_one_rank(user, devcluster):
    """torchrun on both nodes of gamma, a worker each; rank 1 alone exits 42 after the checkpoint of
    step 30, at once.  torchrun exits 1 and srun 143 whatever a worker's status: the job's status
    must still be 42, the failing worker's (each worker runs under slurmkit_worker).  On gamma,
    where no scenario takes a node down or preempts (a restart must not meet alpha's NODE_FAIL)."""
    first = user.submit("-T", "torchrun", "-N", 2, "--gpus-per-node", 1, "-t", 5,
                        command=[user.python, TRAIN, "--steps", 60, *TRAIN_ARGS,
                                 "--first-attempt-exit", "30:%d:1" % TRANSIENT])
    state = user.ended(first["job_id"], timeout=240)
    found = user.settled()
    partial = user.partial_after(found)
    report = user.once()
    assert report["finished"] == [[first["tracked_id"], state]] and len(report["restarted"]) == 1, report
    tracked = user.tracked()
    second = tracked["attempts"][1]
    second_state = user.ended(second["job_id"])
    return dict(first=first, first_state=state, found=found, partial=partial, tracked=tracked, second=second,
                second_state=second_state, final=user.finish())


def other_exit_one_rank(user, devcluster):
    """torchrun on both nodes of gamma; rank 1 alone exits 3 after step 30: not restarted."""
    first = user.submit("-T", "torchrun", "-N", 2, "--gpus-per-node", 1, "-t", 5,
                        command=[user.python, TRAIN, "--steps", 60, *TRAIN_ARGS, "--first-attempt-exit", "30:3:1"])
    state = user.ended(first["job_id"], timeout=240)
    report = user.once()
    assert report["finished"] == [[first["tracked_id"], state]] and report["restarted"] == [], report
    return dict(first=first, first_state=state, report=report, tracked=user.tracked())


def hang(user, devcluster):
    """One process on gamma that stops making progress after step 20 (a rank stuck in a collective): its
    heartbeat and checkpoints stand still.  With --hang-timeout 0:20, cron's `daemon once` every few
    seconds must end it about 20 s after its last heartbeat, never sooner, and restart it from step 20.
    Its start-up allowance (--hang-startup 2:00) ends with its first heartbeat: were the job's own
    heartbeat not recognised, the hang would be found only 2 minutes after the start."""
    first = user.submit("-T", "single", "-N", 1, "--gpus-per-node", 1, "-t", 5, "--hang-timeout", "0:20",
                        "--hang-startup", "2:00",
                        command=[user.python, TRAIN, "--steps", 60, *TRAIN_ARGS, "--first-attempt-step-seconds", 0.5,
                                 "--first-attempt-hang", 20])
    user.running(first["job_id"])
    user.checkpointed(20, first["job_id"])
    wait_until(lambda: "hang rank=0 step=20:" in user.output(first["job_id"]), 60, interval=0.2,
               what="the program's hang")
    hung_at = time.monotonic()
    user.note("hung")

    def marked():             # the cycle that finds the hang marks the attempt, then cancels it
        user.once()
        return user.tracked()["attempts"][0]["ended_by"]
    wait_until(marked, 120, interval=2.0, what="the daemon to end the hung job")
    detected = time.monotonic() - hung_at
    state = user.ended(first["job_id"])
    found = user.settled()
    partial = user.partial_after(found)
    report = user.once()
    assert report["finished"] == [[first["tracked_id"], "CANCELLED"]] and len(report["restarted"]) == 1, report
    tracked = user.tracked()
    second = tracked["attempts"][1]
    second_state = user.ended(second["job_id"])
    return dict(first=first, first_state=state, detected=detected, found=found, partial=partial, tracked=tracked,
                second=second, second_state=second_state, final=user.finish())


SCENARIOS = {"node_fail": ("alpha", node_failure), "preempt": ("beta", preemption), "timeout": ("gamma", time_limit),
             "transient": ("gamma", transient_exit), "other_exit": ("gamma", other_exit),
             "transient_rank": ("gamma", transient_exit_one_rank), "other_rank": ("gamma", other_exit_one_rank),
             "hang": ("gamma", hang)}
# The same failures of a job in a container image (Charliecloud, as on alpha and gamma): the daemon
# on the host restarts it from the checkpoint its program wrote inside the image.  A node set DOWN
# ends every job on it, so the node failure in the image waits for the plain one's to be over.
# And under Slurm's own OCI runtime on beta (runc): Slurm's USR1 reaches torchrun and its workers
# through srun's --container; after the preemption on beta, whose urgent job would take this one's node
# too.  And under Apptainer on alpha where Debian has it (the sid root), with the site's --userns.
# Both runtimes pass signals on to the container while slurmstepd signals every process too: torchrun
# gets USR1 twice (on 26.05 the second came as it ended its workers; templates/torchrun.sh.j2).
# Apptainer's node failure comes last on alpha, OCI's on beta: one node DOWN at a time on a cluster.
# The OCI node failure trains on two nodes, which Slurm 22.05's --container cannot give their own variables.
IMAGE_SCENARIOS = {"node_fail_image": ("alpha", node_failure), "timeout_image": ("gamma", time_limit),
                   "timeout_oci": ("beta", time_limit), "timeout_apptainer": ("alpha", time_limit),
                   "node_fail_apptainer": ("alpha", node_failure), "node_fail_oci": ("beta", node_failure)}
AFTER = {"node_fail_image": "node_fail", "timeout_oci": "preempt", "timeout_apptainer": "node_fail_image",
         "node_fail_apptainer": "timeout_apptainer", "node_fail_oci": "timeout_oci"}
# The scenarios that set beta's nodes DOWN or preempt them: the module's other tests on beta wait for them.
BETA_SCENARIOS = ("preempt", "timeout_oci", "node_fail_oci")


def scenario_test(key):
    """A test of the scenario ``key``: only the scenarios of the selected tests are started.  One in the
    container image needs the image's PyTorch, not this machine's (its test is marked needs_image): it
    runs in the release roots too, where the host's PyTorch is not installed."""
    def mark(test):
        test.scenario_key = key
        return test if key in IMAGE_SCENARIOS else requires_torch(test)
    return mark


def _after(before, body, devcluster):
    """A scenario's thread body: ``body``, once the scenario ``before`` (None: none) has ended."""
    def run(user):
        if before is not None:
            before.thread.join()
        return body(user, devcluster)
    return run


@pytest.fixture(scope="module")
def scenarios(devcluster, tmp_path_factory, request):
    base = tmp_path_factory.mktemp("requeue")
    running = {}
    # The scenarios of the selected tests that will run (not those a skipif mark leaves out here).
    wanted = {getattr(item.function, "scenario_key", None) for item in request.session.items
              if item.module is request.module and not any(m.args and m.args[0] is True
                                                           for m in item.iter_markers("skipif"))}
    if "node_fail_oci" in wanted and slurm_version("beta").startswith("22.05"):
        wanted.discard("node_fail_oci")
    try:
        for key, (cluster, body) in dict(SCENARIOS, **IMAGE_SCENARIOS).items():
            # (the tests of those left out skip, saying why)
            if key not in wanted or (not CAN_RUN_IMAGES if key in IMAGE_SCENARIOS else bool(_MISSING)):
                continue
            image = key in IMAGE_SCENARIOS and request.getfixturevalue("container_image") and IMAGE
            # An OCI bundle has the clone in its config.json (the runtime takes no --mount).
            runtime = {}
            if key.endswith("_oci"):
                runtime = {"site": request.getfixturevalue("oci_site_with_repo"), "mount_repo": False}
            elif key.endswith("_apptainer"):
                runtime = {"site": alpha_with_runtime(base, "apptainer", options=["--userns"])}
            user = User(base, key, cluster, IMAGE_PYTHON if image else PYTHON, image=image or None, **runtime)
            running[key] = Scenario(user, _after(running.get(AFTER.get(key)), body, devcluster))
            running[key].thread.start()
        yield running
    finally:
        for scenario in running.values():
            scenario.thread.join(0)
            scenario.user.cleanup()


@pytest.fixture
def beta_to_itself(request):
    """For a test that uses beta while the scenarios run: waits until beta's scenarios (a preemption, a node
    set DOWN) are over, which would otherwise end its jobs."""
    running = request.getfixturevalue("scenarios")
    for key in BETA_SCENARIOS:
        if key in running:
            running[key].thread.join(900)


@pytest.fixture(scope="module", autouse=True)
def _scenarios_first(request):
    """Start the training scenarios before the module's other tests, which then run while they train
    (the scenario tests come last and wait for their threads)."""
    wanted = any("scenarios" in item.fixturenames for item in request.session.items
                 if item.module is request.module)
    if wanted:
        request.getfixturevalue("scenarios")


def resumed(text):
    found = RESUME_RE.findall(text)
    assert len(found) == 1, text[-3000:]
    return found[0][0], int(found[0][1])


def check_restart(result, user, cause, steps, world):
    """What every restarted scenario shares: resumed from the newest complete checkpoint, the partial
    newer one skipped (and said so in `slurmkit daemon jobs --json`), trained to the end on every rank."""
    found, partial, tracked, second = result["found"], result["partial"], result["tracked"], result["second"]
    first = tracked["attempts"][0]
    assert first["cause"] == cause and first["phase"] == "decided", first
    assert second["number"] == 2 and second["resume_step"] == found.step and second["resume_from"] == found.path
    assert any(str(partial) in message for message in skipped_paths(tracked)), tracked["events"]
    assert result["second_state"] == "COMPLETED"
    final = result["final"]
    assert final["state"] == "completed" and len(final["attempts"]) == 2, final
    assert final["attempts"][1]["state"] == "COMPLETED" and final["attempts"][1]["exit_code"] == 0
    text = user.output(second["job_id"])
    assert resumed(text) == (found.path, found.step)
    check_final(text, steps, world)
    # The first attempt stopped part-way: it never printed a final line.
    assert finals(user.output(result["first"]["job_id"])) == {}
    # One Slurm job per attempt, each carrying its attempt's token.
    jobs = named_jobs(user.cluster, user.name)
    assert sorted(c for _, c, _ in jobs) == sorted("slurmkit:" + a["token"] for a in final["attempts"]), jobs


# --------------------------------------------------------------------------
# kill -9 at every point of a restart
# --------------------------------------------------------------------------

# `slurmkit daemon once` in a process that kills itself, and what it started, with SIGKILL at
# one point of a restart.  The daemon has no hook for this: the driver patches the journal or
# the backend the daemon uses, in this process only.
CRASH_DRIVER = r'''
import os, signal, sys, threading, time

point = sys.argv[1]


def crash():
    # The daemon and everything it started (an sbatch in flight) die at once, as with
    # systemd's KillMode=control-group when the daemon's process is killed.
    sys.stderr.write("slurmkit-test: kill -9 at %s\n" % point)
    sys.stderr.flush()
    os.killpg(0, signal.SIGKILL)


def patch(owner, name, before=False, after=False, during=None, when=None):
    original = getattr(owner, name)

    def patched(*args, **kwargs):
        if when is not None and not when(*args, **kwargs):
            return original(*args, **kwargs)
        if before:
            crash()
        if during is not None:
            # The call runs in a thread; the process dies while it is in flight.
            started = threading.Event()
            threading.Thread(target=lambda: (started.set(), original(*args, **kwargs)), daemon=True).start()
            started.wait()
            time.sleep(during)
            crash()
        result = original(*args, **kwargs)
        if after:
            crash()
        return result
    setattr(owner, name, patched)


from slurmkit import session
from slurmkit.requeue.journal import Journal

on_backend = []
make_backend = session.make_backend


def make_patched_backend(cluster, *args, **kwargs):
    backend = make_backend(cluster, *args, **kwargs)
    for name, how in on_backend:
        patch(backend, name, **how)          # an instance attribute: this backend only
    return backend


session.make_backend = make_patched_backend
where, _, delay = point.partition(":")
if where == "finished":            # recording that the attempt failed
    patch(Journal, "finished", before=True)
elif where == "before_intent":     # the decision made, its intent not yet written
    patch(Journal, "decide_and_plan", before=True)
elif where == "after_intent":      # the intent written, sbatch not yet run
    patch(Journal, "decide_and_plan", after=True)
elif where == "during_sbatch":     # the submission in flight
    on_backend.append(("submit", {"during": float(delay or 0)}))
elif where == "after_sbatch":      # the job exists, its id not yet in the journal
    on_backend.append(("submit", {"after": True}))
elif where == "during_reconcile":  # looking for the intent's token among the user's jobs
    on_backend.append(("jobs", {"during": float(delay or 0), "when": lambda *a, **k: k.get("user")}))
elif where == "after_reconcile":   # the token found, the job id not yet in the journal
    patch(Journal, "submitted", before=True)
else:
    sys.exit("unknown point %s" % point)

from slurmkit.cli import main

code = main(["daemon", "once"])
sys.stderr.write("slurmkit-test: no crash at %s (daemon once exited %s)\n" % (point, code))
sys.exit(3)
'''

# (the point the daemon dies at, the crash before it that makes the state it needs, backend)
CRASHES = [
    ("finished", None, None),
    ("before_intent", None, None),
    ("after_intent", None, None),
    ("during_sbatch", None, None),
    ("during_sbatch:0.05", None, None),
    ("after_sbatch", None, None),
    # the sbatch subprocess of the command backend killed with the daemon, mid-flight or done
    ("during_sbatch", None, "commands"),
    ("after_sbatch", None, "commands"),
    # recovering from a crash after sbatch, the recovery itself killed
    ("during_reconcile", "after_sbatch", None),
    ("after_reconcile", "after_sbatch", None),
]


@pytest.fixture(scope="module")
def crash_driver(tmp_path_factory):
    path = tmp_path_factory.mktemp("driver") / "crash_driver.py"
    path.write_text(CRASH_DRIVER)
    return path


def crash_at(user, driver, point, backend=None):
    env = dict(user.env)
    if backend:
        env["SLURMKIT_BACKEND"] = backend
    # A session of its own: the driver's kill -9 of its process group reaches nothing of ours.
    proc = subprocess.run([sys.executable, str(driver), point], env=env, capture_output=True, text=True,
                          timeout=120, start_new_session=True)
    assert proc.returncode == -signal.SIGKILL, "the daemon did not die at %s:\n%s%s" % (
        point, proc.stdout, proc.stderr)
    assert "slurmkit-test: kill -9 at %s" % point in proc.stderr
    user.note("killed at %s" % point)


@pytest.mark.slow
@pytest.mark.parametrize("point,before,backend", CRASHES,
                         ids=["%s%s%s" % (p, "-after-" + b if b else "", "-" + k if k else "") for p, b, k in CRASHES])
def test_kill_9_anywhere_in_a_restart_makes_exactly_one_new_attempt(devcluster, tmp_path, crash_driver, point,
                                                                      before, backend, beta_to_itself):
    user = User(tmp_path, "crash", "beta")
    try:
        # Fails at once with the site's transient code on its first attempt; a restart succeeds.
        first = user.submit("-T", "single", "--gpus-per-node", 1, "-t", 2, command=[
            "bash", "-c", 'echo "attempt $SLURMKIT_ATTEMPT"; [ "$SLURMKIT_ATTEMPT" != 1 ] || exit %d' % TRANSIENT])
        assert user.ended(first["job_id"], timeout=120) == "FAILED"
        if before:
            crash_at(user, crash_driver, before, backend)
        crash_at(user, crash_driver, point, backend)
        after_crash = named_jobs("beta", user.name)
        # A fresh daemon recovers; a second cycle changes nothing more.
        user.once()
        user.once()
        tracked = user.tracked()
        attempts = tracked["attempts"]
        assert [a["number"] for a in attempts] == [1, 2], attempts
        jobs = named_jobs("beta", user.name)
        tokens = [c for _, c, _ in jobs]
        # Exactly two jobs: the failed one and one restart, each with its attempt's token once.
        assert sorted(tokens) == sorted("slurmkit:" + a["token"] for a in attempts), jobs
        restart = [j for j in jobs if j[1] == "slurmkit:" + attempts[1]["token"]]
        assert len(restart) == 1 and attempts[1]["job_id"] == restart[0][0], (jobs, attempts)
        assert attempts[0]["cause"] == "transient_exit"
        print("\n%s: %d job(s) right after the crash, %s after recovery" % (point, len(after_crash), jobs))
        # The restart runs to its end, and the daemon sees it complete.
        user.ended(restart[0][0], timeout=120)
        assert user.finish(timeout=60)["state"] == "completed"
        assert "attempt 2" in user.output(restart[0][0])
    finally:
        user.cleanup()


# --------------------------------------------------------------------------
# the srun template: one task's transient exit is the job's
# --------------------------------------------------------------------------

@pytest.mark.slow
def test_a_transient_exit_of_one_srun_task_is_the_jobs_and_restarts(devcluster, tmp_path):
    user = User(tmp_path, "srun", "gamma")
    try:
        # Two tasks; on the first attempt task 1 exits 42 and task 0 would sleep a minute, until
        # srun --kill-on-bad-exit ends it (srun then returns the highest status of its tasks).
        first = user.submit("-T", "srun", "-N", 1, "--gpus-per-node", 2, "-t", 2, command=[
            "bash", "-c", 'echo "task $SLURM_PROCID attempt $SLURMKIT_ATTEMPT"; [ "$SLURMKIT_ATTEMPT" = 1 ] || exit 0; '
                          '[ "$SLURM_PROCID" != 1 ] || exit %d; exec sleep 60' % TRANSIENT])
        assert user.ended(first["job_id"], timeout=120) == "FAILED"
        text = user.output(first["job_id"])
        found = re.search(r"^slurmkit: the step ended with status (\d+); the first worker to fail \(rank 1 on \S+\) "
                          r"exited 42: the job exits 42$", text, re.M)
        assert found and found.group(1) != "42", text
        report = user.once()
        assert len(report["restarted"]) == 1, report
        first_attempt = user.attempt(1)
        assert first_attempt["exit_code"] == TRANSIENT and first_attempt["cause"] == "transient_exit", first_attempt
        restart = user.attempt(2)["job_id"]
        assert user.ended(restart, timeout=120) == "COMPLETED"
        assert user.finish(timeout=60)["state"] == "completed"
        assert sorted(re.findall(r"^task (\d) attempt 2$", user.output(restart), re.M)) == ["0", "1"]
    finally:
        user.cleanup()


# --------------------------------------------------------------------------
# after a crash: a restart that ran and ended while no daemon was up, found in accounting
# --------------------------------------------------------------------------

# `slurmkit daemon once` whose backends see no job in squeue, as after MinJobAge (an hour on
# alpha, which cannot be shortened here): every answer must come from alpha's real slurmdbd.
# Each Slurm command it runs is logged to stderr.
FORGETFUL_DRIVER = r'''
import sys

from slurmkit import session

make_backend = session.make_backend


def forgetful(cluster, *args, **kwargs):
    backend = make_backend(cluster, *args, **kwargs)
    backend.jobs = lambda job_ids=None, user=None: []
    run = backend._run

    def logged(argv, *a, **k):
        sys.stderr.write("slurmkit-test: ran %s\n" % " ".join(argv))
        return run(argv, *a, **k)
    backend._run = logged
    return backend


session.make_backend = forgetful
from slurmkit.cli import main

sys.exit(main(["daemon", "once", "--json"]))
'''


@pytest.mark.slow
def test_a_restart_squeue_forgot_is_found_by_its_token_in_accounting(devcluster, tmp_path, crash_driver):
    user = User(tmp_path, "acct", "alpha")
    driver = tmp_path / "forgetful_driver.py"
    driver.write_text(FORGETFUL_DRIVER)

    def forgetful_once():
        proc = subprocess.run([sys.executable, str(driver)], env=user.env, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        user.note("forgetful daemon once: %s" % json.loads(proc.stdout))
        return [line for line in proc.stderr.splitlines() if line.startswith("slurmkit-test: ran sacct")]

    try:
        first = user.submit("-T", "single", "-p", "cpu", "-t", 2, command=[
            "bash", "-c", 'echo "attempt $SLURMKIT_ATTEMPT"; [ "$SLURMKIT_ATTEMPT" != 1 ] || exit %d' % TRANSIENT])
        assert user.ended(first["job_id"], timeout=120) == "FAILED"
        # The daemon dies right after sbatch: the restart exists in Slurm, its id not in the journal.
        crash_at(user, crash_driver, "after_sbatch")
        intent = user.attempt(2)
        assert intent["phase"] == "intent" and intent["job_id"] is None
        token = "slurmkit:" + intent["token"]
        (restart,) = [j for j, comment, _ in named_jobs("alpha", user.name) if comment == token]
        user.ended(restart, timeout=120)
        # Accounting lists a job by time (what the daemon asks) a second or two after it lists it by
        # id: wait for the former, as a daemon that comes back after MinJobAge finds it.
        wait_until(lambda: "%s|%s" % (restart, token) in slurm(
                   "alpha", "sacct", "--noheader", "--parsable2", "--allocations", "--starttime=now-3600",
                   "--format=JobIDRaw,Comment").stdout, 60, interval=1.0,
                   what="alpha's accounting to list job %s with its token" % restart)
        # A daemon that sees nothing in squeue finds the token with one sacct of the user's jobs ...
        lookups = forgetful_once()
        by_time = [line for line in lookups if "--starttime=now-" in line]
        print("\nSlurm commands of the forgetful daemon's lookup: %s" % lookups)
        assert len(by_time) == 1 and "--user=" in by_time[0], lookups
        assert user.attempt(2)["job_id"] == restart and user.attempt(2)["phase"] == "submitted"
        # ... and the next cycle reads the attempt's end from accounting too (by id): completed.
        forgetful_once()
        tracked = user.tracked()
        assert tracked["state"] == "completed" and len(tracked["attempts"]) == 2, tracked
        assert tracked["attempts"][1]["state"] == "COMPLETED" and tracked["attempts"][1]["exit_code"] == 0
        # Nothing was submitted twice: the failed job and its one restart.
        jobs = named_jobs("alpha", user.name)
        assert sorted(c for _, c, _ in jobs) == sorted("slurmkit:" + a["token"] for a in tracked["attempts"]), jobs
        assert "attempt 2" in user.output(restart)
    finally:
        user.cleanup()


# --------------------------------------------------------------------------
# a crash loop, under `slurmkit daemon run`
# --------------------------------------------------------------------------

@contextlib.contextmanager
def daemon_run(user, *args):
    """`slurmkit daemon run` in the background; stopped with SIGTERM.  Yields (process, log path)."""
    log = user.dir / "daemon.log"
    with open(str(log), "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "slurmkit", "daemon", "run", *map(str, args)], env=user.env,
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc, log
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.mark.slow
def test_a_crash_loop_is_stopped_within_its_budget(devcluster, tmp_path, beta_to_itself):
    user = User(tmp_path, "loop", "beta")
    try:
        # Fails at once, every time, with an exit code this job declares transient.
        first = user.submit("-T", "single", "--gpus-per-node", 1, "-t", 2, "--transient-exit", 43,
                            command=["bash", "-c", 'echo "attempt $SLURMKIT_ATTEMPT"; exit 43'])
        with daemon_run(user, "--interval", 2, "--max-interval", 4) as (proc, log):
            wait_until(lambda: len(user.tracked()["attempts"]) >= 2, 60, interval=1.0,
                       what="the daemon to restart the job")
            proc.send_signal(signal.SIGHUP)             # what systemctl reload sends: it keeps going
            tracked = wait_until(lambda: (lambda t: t["state"] != "active" and t)(user.tracked()), 180, interval=1.0,
                                 what="the crash loop to be stopped")
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0           # SIGTERM: a clean stop after the current step
        text = log.read_text()
        assert "site configs reloaded (SIGHUP)" in text and "slurmkit daemon stopped" in text, text
        attempts = tracked["attempts"]
        # The transient budget allows 3; the crash-loop rule stops it at the third quick failure.
        assert tracked["state"] == "stopped" and "crash loop" in tracked["reason"], tracked
        assert len(attempts) == 3 and all(a["exit_code"] == 43 and a["state"] == "FAILED" for a in attempts)
        assert len(named_jobs("beta", user.name)) == 3
        # The first restart at once, the second after the backoff (30 s).
        assert attempts[1]["not_before"] - attempts[0]["updated"] < 5
        assert attempts[2]["not_before"] - attempts[1]["updated"] >= 29
        assert first["job_id"] == attempts[0]["job_id"]
    finally:
        user.cleanup()


# --------------------------------------------------------------------------
# the systemd units
# --------------------------------------------------------------------------

def unit(name):
    """{key: [values]} of a unit file's [Service] and [Install] sections."""
    keys = {}
    for line in (ROOT / "systemd" / name).read_text().splitlines():
        if line and not line.startswith(("#", "[")) and "=" in line:
            key, _, value = line.partition("=")
            keys.setdefault(key, []).append(value)
    return keys


@pytest.mark.parametrize("name,wanted_by", [("slurmkit-requeue.service", "default.target"),
                                            ("slurmkit-requeue@.service", "multi-user.target")])
def test_the_systemd_units_run_reload_and_stop_the_daemon(tmp_path, name, wanted_by):
    keys = unit(name)
    assert keys["Restart"] == ["on-failure"] and keys["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert keys["WantedBy"] == [wanted_by]
    if name.endswith("@.service"):
        assert keys["User"] == ["%i"]
    program, *args = keys["ExecStart"][0].split()
    assert program.endswith("/slurmkit") and args[:2] == ["daemon", "run"]
    # What systemd would run, with this checkout's slurmkit: it starts, reloads on SIGHUP and
    # stops cleanly (exit 0: no restart) on SIGTERM.
    user = User(tmp_path, "unit", "alpha")
    log = user.dir / "daemon.log"
    with open(str(log), "w") as out:
        proc = subprocess.Popen([str(Path(sys.executable).parent / "slurmkit"), *args], env=user.env, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: "slurmkit daemon started" in log.read_text(), 30, interval=0.2, what="the daemon to start")
        proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "site configs reloaded (SIGHUP)" in log.read_text(), 30, interval=0.2, what="the reload")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    systemd_analyze = "/usr/bin/systemd-analyze"
    if os.path.exists(systemd_analyze):
        # The unit as systemd reads it, with a slurmkit that exists here.
        text = (ROOT / "systemd" / name).read_text().replace(program, str(Path(sys.executable).parent / "slurmkit"))
        copy = tmp_path / (name.replace("@.", "@%s." % os.environ.get("USER", "root")))
        copy.write_text(text)
        proc = subprocess.run([systemd_analyze, "verify", str(copy)], capture_output=True, text=True, timeout=60)
        problems = [l for l in (proc.stdout + proc.stderr).splitlines() if copy.name in l]
        assert not problems, proc.stdout + proc.stderr


# --------------------------------------------------------------------------
# the five failures: what their threads found
# --------------------------------------------------------------------------

def check_node_failure(scenario):
    result = scenario.outcome()
    check_restart(result, scenario.user, "node_fail", steps=60, world=2)
    # Kept off the failed attempt's nodes (the failed one is up again by then: ReturnToService), as far as
    # the partition leaves the 2-node job room (tracking.attempt_spec): both of them on alpha's 4 nodes, the
    # newer one on beta's 3.  Recorded, passed to Slurm, and where it ran.
    excluded = result["tracked"]["excluded"]
    assert result["victim"] in excluded and len(result["second_nodes"]) == 2
    room = NODE_FAIL_PLACES[scenario.user.cluster][1] - 2
    kept = excluded[len(excluded) - room:]
    assert kept and not set(kept) & set(result["second_nodes"]), (excluded, result["second_nodes"])
    if room >= len(excluded):
        assert result["victim"] not in result["second_nodes"]
    assert result["found"].step >= 20
    return result


@scenario_test("node_fail")
def test_node_failure_restarts_from_the_latest_checkpoint_on_other_nodes(scenarios):
    check_node_failure(scenarios["node_fail"])


@needs_image
@scenario_test("node_fail_image")
def test_a_job_in_an_image_restarts_after_a_node_failure_from_the_checkpoint_it_wrote_inside(scenarios):
    # Its program is the image's Python (a path this machine lacks): every attempt ran in the image.
    result = check_node_failure(scenarios["node_fail_image"])
    assert result["first"]["runtime"] == "charliecloud" and result["first"]["image"].endswith("/%s/rootfs" % IMAGE)


@scenario_test("preempt")
def test_preemption_restarts_from_the_latest_checkpoint(scenarios):
    scenario = scenarios["preempt"]
    result = scenario.outcome()
    check_restart(result, scenario.user, "preempted", steps=60, world=2)
    assert result["found"].step >= 20


def check_time_limit(scenario):
    result = scenario.outcome()
    user = scenario.user
    first = result["final"]["attempts"][0]
    # Slurm's USR1 reached both workers through the batch shell and torchrun: each saved at the
    # same step, and the job said "saved, resume me" (75) instead of dying at the limit.
    text = user.output(result["first"]["job_id"])
    stops = re.findall(r"^stop rank=(\d) step=(\d+): SIGUSR1 \(saved step \d+\); exit 75", text, re.M)
    assert sorted(r for r, _ in stops) == ["0", "1"] and len({s for _, s in stops}) == 1, text[-3000:]
    assert result["first_state"] == "FAILED" and first["exit_code"] == 75, first
    assert result["found"].step == int(stops[0][1])          # the checkpoint it wrote on USR1
    assert "time limit with a newer checkpoint" in first["decision"]
    check_restart(result, user, "timeout", steps=200, world=2)
    return result


@scenario_test("timeout")
def test_time_limit_saves_on_usr1_and_restarts_from_that_checkpoint(scenarios):
    check_time_limit(scenarios["timeout"])


@needs_image
@scenario_test("timeout_image")
def test_a_job_in_an_image_saves_on_usr1_and_restarts_from_that_checkpoint(scenarios):
    # USR1 went from the batch shell on the host through srun and ch-run to both workers in the image.
    result = check_time_limit(scenarios["timeout_image"])
    assert result["first"]["runtime"] == "charliecloud"


@needs_image
@needs_runc
@scenario_test("timeout_oci")
def test_a_job_in_an_oci_bundle_saves_on_usr1_and_restarts_from_that_checkpoint(scenarios):
    # USR1 went from the batch shell through srun --container and runc to both workers in the bundle.
    result = check_time_limit(scenarios["timeout_oci"])
    assert result["first"]["runtime"] == "oci" and result["first"]["image"].endswith("/%s-with-repo" % IMAGE)


@needs_image
@needs_apptainer
@scenario_test("timeout_apptainer")
def test_a_job_in_apptainer_saves_on_usr1_and_restarts_from_that_checkpoint(scenarios):
    result = check_time_limit(scenarios["timeout_apptainer"])
    assert result["first"]["runtime"] == "apptainer"


@needs_image
@needs_apptainer
@scenario_test("node_fail_apptainer")
def test_a_job_in_apptainer_restarts_after_a_node_failure_from_the_checkpoint_it_wrote_inside(scenarios):
    # Both workers in Apptainer on alpha's cpu nodes; the first node set DOWN (NODE_FAIL); the daemon on the
    # host restarts it on the nodes left, in the image again, from the checkpoint written inside.
    result = check_node_failure(scenarios["node_fail_apptainer"])
    assert result["first"]["runtime"] == "apptainer" and result["second"]["number"] == 2


@needs_image
@needs_runc
@scenario_test("node_fail_oci")
def test_a_job_in_an_oci_bundle_restarts_after_a_node_failure_from_the_checkpoint_it_wrote_inside(scenarios):
    # One worker on each of two beta nodes, each in its own runc container; the first node set DOWN.
    if "node_fail_oci" not in scenarios:
        pytest.skip("Slurm 22.05's --container passes only srun's variables: the two tasks of the step stop with "
                    "one line (test_container_jobs.py)")
    result = check_node_failure(scenarios["node_fail_oci"])
    assert result["first"]["runtime"] == "oci" and result["first"]["image"].endswith("/%s-with-repo" % IMAGE)


@scenario_test("hang")
def test_a_job_that_stops_making_progress_is_ended_and_restarted_from_its_checkpoint(scenarios):
    scenario = scenarios["hang"]
    result = scenario.outcome()
    first = result["final"]["attempts"][0]
    assert result["first_state"] == "CANCELLED"
    assert first["ended_by"].startswith("hung: no progress for ") and "the hang timeout is 20 s)" in first["ended_by"]
    assert first["decision"].startswith("ended by the daemon: no progress for ")
    # The heartbeat is written every 5 s at most, so the last one came 0-5 s before the hang: ended
    # 20 s after it, plus a cycle of cron's `daemon once` (every 2 s here) and a loaded machine's lag.
    assert 12 <= result["detected"] <= 60, result["detected"]
    assert result["found"].step == 20
    check_restart(result, scenario.user, "hung", steps=60, world=1)


@scenario_test("transient")
def test_transient_exit_code_restarts_from_the_latest_checkpoint(scenarios):
    scenario = scenarios["transient"]
    result = scenario.outcome()
    first = result["final"]["attempts"][0]
    assert result["first_state"] == "FAILED" and first["exit_code"] == TRANSIENT, first
    assert "exit rank=0 step=30: --first-attempt-exit, status 42" in scenario.user.output(result["first"]["job_id"])
    assert result["found"].step == 30
    check_restart(result, scenario.user, "transient_exit", steps=60, world=1)


@scenario_test("other_exit")
def test_a_non_transient_exit_code_is_not_restarted(scenarios):
    scenario = scenarios["other_exit"]
    result = scenario.outcome()
    user, tracked = scenario.user, result["tracked"]
    assert result["first_state"] == "FAILED"
    assert tracked["state"] == "stopped" and len(tracked["attempts"]) == 1, tracked
    first = tracked["attempts"][0]
    assert first["exit_code"] == 3 and first["cause"] == "failed"
    assert "exit code 3" in tracked["reason"] and "not a transient failure" in tracked["reason"]
    assert [s[0] for s in result["report"]["stopped"]] == [result["first"]["tracked_id"]]
    assert result["again"]["restarted"] == [] and result["again"]["polled"] == {}
    assert len(named_jobs(user.cluster, user.name)) == 1
    assert "exit rank=0 step=30: --first-attempt-exit, status 3" in user.output(result["first"]["job_id"])


@scenario_test("transient_rank")
def test_a_transient_exit_of_one_torchrun_worker_is_the_jobs_and_restarts(scenarios):
    scenario = scenarios["transient_rank"]
    result = scenario.outcome()
    user = scenario.user
    first = result["final"]["attempts"][0]
    text = user.output(result["first"]["job_id"])
    assert "exit rank=1 step=30: --first-attempt-exit, status 42" in text
    assert "exit rank=0 step=30" not in text, text[-3000:]
    # The launchers said something else (torchrun 1; srun 143, or 137 when a node's torchrun
    # outlived KillWait on a loaded machine); the job script said 42, and the daemon recorded it
    # (slurmkit daemon jobs --json).
    found = re.search(r"^slurmkit: the step ended with status (\d+); the first worker to fail \(rank 1 on \S+\) "
                      r"exited 42: the job exits 42$", text, re.M)
    assert found and found.group(1) != "42", text[-3000:]
    assert result["first_state"] == "FAILED" and first["exit_code"] == TRANSIENT and first["signal"] in (None, 0)
    print("\nattempt 1 as `slurmkit daemon jobs --json` shows it: %s" % json.dumps(
        {k: first[k] for k in ("state", "exit_code", "signal", "cause", "decision")}))
    assert result["found"].step == 30
    check_restart(result, user, "transient_exit", steps=60, world=2)


@scenario_test("other_rank")
def test_a_non_transient_exit_of_one_torchrun_worker_is_not_restarted(scenarios):
    scenario = scenarios["other_rank"]
    result = scenario.outcome()
    user, tracked = scenario.user, result["tracked"]
    text = user.output(result["first"]["job_id"])
    assert "exit rank=1 step=30: --first-attempt-exit, status 3" in text
    assert result["first_state"] == "FAILED"
    assert tracked["state"] == "stopped" and len(tracked["attempts"]) == 1, tracked
    first = tracked["attempts"][0]
    print("\nattempt 1 as `slurmkit daemon jobs --json` shows it: %s" % json.dumps(
        {k: first[k] for k in ("state", "exit_code", "signal", "cause", "decision")}))
    assert first["exit_code"] == 3 and first["cause"] == "failed", first
    assert "exit code 3" in tracked["reason"] and "not a transient failure" in tracked["reason"]
    assert len(named_jobs(user.cluster, user.name)) == 1
