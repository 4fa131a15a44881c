"""The backend calls of requeue and health against the real local clusters.

- drain / down / resume with a reason, read back with who set it and when (and no node left drained);
- jobs_by_id: finished jobs from squeue within MinJobAge on clusters without accounting (beta, gamma),
  and from sacct on alpha (slurmdbd) for the ids squeue no longer lists, in at most two commands;
- jobs.wait running out of time is a WaitTimeoutError, not a connection error.
"""

import getpass
import os
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from conftest import node_lock as nodes_locked
from conftest import rpc_count, sbatch, slurm, wait_job_state
from slurmkit import jobs
from slurmkit.errors import ConnectTimeoutError, SlurmCommandError, WaitTimeoutError
from slurmkit.session import Session
from slurmkit.site import load_site
from slurmkit.slurm import commands
from slurmkit.slurm.backend import CommandBackend
from slurmkit.slurm.runner import LocalRunner

ROOT = Path(__file__).resolve().parents[2]


class CountingRunner(LocalRunner):
    """A LocalRunner that remembers every argv; ``hide`` drops job ids from squeue's answers,
    as squeue does once MinJobAge has passed (sacct still has them)."""

    def __init__(self, extra_env, hide=()):
        super().__init__(extra_env)
        self.argvs = []
        self.hide = set(hide)

    def run(self, argv, stdin=None, timeout=None):
        self.argvs.append(tuple(argv))
        result = super().run(argv, stdin=stdin, timeout=timeout)
        if argv[0] == "squeue" and "--local" in argv and self.hide and result.ok:
            # one job by id (commands.squeue_format): a forgotten one is "Invalid job id", as squeue says
            lines = [line for line in result.stdout.splitlines()
                     if line.split(commands.SQUEUE_DELIMITER)[0] not in self.hide]
            if not lines:
                return result._replace(returncode=1, stdout="",
                                       stderr="slurm_load_jobs error: Invalid job id specified\n")
            result = result._replace(stdout="".join(line + "\n" for line in lines))
        if argv[0] == "squeue" and "--json" in argv and self.hide:
            import json

            data = json.loads(result.stdout)
            data["jobs"] = [j for j in data["jobs"] if str(j["job_id"]) not in self.hide]
            result = result._replace(stdout=json.dumps(data))
        return result


def backend(devcluster, name, hide=()):
    runner = CountingRunner({"SLURM_CONF": devcluster[name].slurm_conf}, hide)
    return CommandBackend(runner, name), runner


def finished_jobs(cluster):
    """A completed, a failed (exit 3) and a cancelled-while-pending job, ended: {role: id}."""
    common = ["-o", "/dev/null", "-t", "2"]
    ids = {"ok": sbatch(cluster, "-J", "skt-ok", *common, "--wrap", "true"),
           "failed": sbatch(cluster, "-J", "skt-failed", *common, "--wrap", "exit 3"),
           "cancelled": sbatch(cluster, "-J", "skt-cancelled", "--hold", *common, "--wrap", "true")}
    slurm(cluster, "scancel", ids["cancelled"])
    wait_job_state(cluster, ids["ok"], {"COMPLETED"}, timeout=60)
    wait_job_state(cluster, ids["failed"], {"FAILED"}, timeout=60)
    wait_job_state(cluster, ids["cancelled"], {"CANCELLED"}, timeout=60)
    return ids


def check_finished(found, ids):
    assert found[ids["ok"]].state == "COMPLETED" and found[ids["ok"]].exit_code == 0
    assert found[ids["failed"]].state == "FAILED" and found[ids["failed"]].exit_code == 3
    assert found[ids["cancelled"]].state == "CANCELLED" and found[ids["cancelled"]].nodelist == ""
    assert found[ids["ok"]].nodelist and found[ids["ok"]].name == "skt-ok"


# ------------------------------------------------------------------ jobs_by_id

@pytest.mark.parametrize("cluster", ["beta", "gamma"])
def test_jobs_by_id_without_accounting_finds_finished_jobs_in_one_squeue(devcluster, cluster):
    ids = finished_jobs(cluster)
    be, runner = backend(devcluster, cluster)
    assert be.has_accounting() is False
    runner.argvs.clear()
    found = be.jobs_by_id(list(ids.values()) + ["999999"])
    assert set(found) == set(ids.values())                        # the unknown id is simply absent
    check_finished(found, ids)
    assert [a[0] for a in runner.argvs] == ["squeue"]              # one command for all of them


def test_jobs_by_id_on_alpha_asks_sacct_for_what_squeue_no_longer_lists(devcluster):
    ids = finished_jobs("alpha")
    forgotten = [ids["failed"], ids["cancelled"]]
    be, runner = backend(devcluster, "alpha", hide=forgotten)
    assert be.has_accounting() is True
    # slurmdbd hears of jobs asynchronously: for a moment after a job ends sacct shows a half-written
    # record (name "allocation", no partition).  Poll as a daemon would until it has caught up.
    deadline = time.monotonic() + 30
    while True:
        runner.argvs.clear()
        found = be.jobs_by_id(list(ids.values()) + ["999999"])
        complete = set(found) == set(ids.values()) and all(j.name.startswith("skt-") for j in found.values())
        if complete or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert [a[0] for a in runner.argvs] == ["squeue", "sacct"]     # two commands, whatever the count
    sacct = runner.argvs[1]
    assert sacct == tuple(commands.sacct(forgotten + ["999999"]))  # only the ids squeue did not list
    check_finished(found, ids)
    # the same jobs, straight from squeue, read the same
    direct, _ = backend(devcluster, "alpha")
    from_squeue = direct.jobs_by_id(forgotten)
    for job_id in forgotten:
        a, b = found[job_id], from_squeue[job_id]
        assert (a.state, a.exit_code, a.signal, a.nodelist, a.partition, a.name, a.user) == \
               (b.state, b.exit_code, b.signal, b.nodelist, b.partition, b.name, b.user)


@pytest.mark.slow
@pytest.mark.parametrize("cluster", ["alpha", "beta"])
def test_jobs_by_id_or_user_read_as_the_whole_list_reads_them(devcluster, cluster, tmp_path):
    """squeue --Format, filtered by squeue (one id: that job alone, REQUEST_JOB_INFO_SINGLE in slurmctld,
    not every job of the cluster); field by field the same JobInfo as squeue --json's list, for jobs that ended every
    way, one still pending, and names, comments and output patterns with spaces, '|' and %x/%j/%u."""
    common = ["-t", "2", "-o", str(tmp_path / "%x-%j-%u.out")]
    ids = finished_jobs(cluster)
    ids["killed"] = sbatch(cluster, "-J", "skt killed", *common, "--comment", "slurmkit:a|b c",
                           "--wrap", "kill -9 $$")
    ids["cancelled_running"] = sbatch(cluster, "-J", "skt-cr", *common, "--wrap", "sleep 60")
    ids["pending"] = sbatch(cluster, "-J", "skt-held", "--hold", *common, "--wrap", "true")
    ids["default_out"] = sbatch(cluster, "-J", "skt-default", "-t", "2", "-D", str(tmp_path), "--wrap", "exit 0")
    # an #SBATCH --output relative to the working directory, as slurmkit's templates write it
    ids["relative_out"] = slurm(cluster, "sbatch", "--parsable", cwd=str(tmp_path), input=(
        "#!/bin/sh\n#SBATCH -J skt-rel\n#SBATCH -t 2\n#SBATCH -o rel-%x-%j.out\ntrue\n")).stdout.split(";")[0].strip()
    wait_job_state(cluster, ids["cancelled_running"], {"RUNNING"}, timeout=60)
    slurm(cluster, "scancel", ids["cancelled_running"])
    for role in ("killed", "cancelled_running", "default_out", "relative_out"):
        wait_job_state(cluster, ids[role], {"FAILED", "CANCELLED", "COMPLETED"}, timeout=60)
    try:
        be, runner = backend(devcluster, cluster)
        everything = {j.job_id: j for j in be.jobs()}
        for role, job_id in ids.items():
            runner.argvs.clear()
            one = be.jobs([job_id])
            assert runner.argvs == [tuple(commands.squeue_format([job_id]))], role
            assert one == [everything[job_id]], (role, one, everything[job_id])
        # several ids, and a user's jobs: squeue filters (still one listing in slurmctld), the same reading
        runner.argvs.clear()
        several = {j.job_id: j for j in be.jobs(list(ids.values()))}
        assert runner.argvs == [tuple(commands.squeue_format(list(ids.values())))]
        assert several == {i: everything[i] for i in ids.values()}
        user = getpass.getuser()
        mine = {j.job_id: j for j in be.jobs(user=user)}
        assert all(j.user == user for j in mine.values())
        assert {i: mine[i] for i in ids.values()} == several
        assert everything[ids["killed"]].signal == 9 and everything[ids["killed"]].comment == "slurmkit:a|b c"
        assert everything[ids["default_out"]].stdout == str(tmp_path / ("slurm-%s.out" % ids["default_out"]))
        assert everything[ids["relative_out"]].stdout == str(tmp_path / ("rel-skt-rel-%s.out" % ids["relative_out"]))
        assert be.jobs(["999999"]) == []
        before = slurm(cluster, "sdiag").stdout
        be.jobs([ids["ok"]])
        after = slurm(cluster, "sdiag").stdout
        assert rpc_count(after, "REQUEST_JOB_INFO_SINGLE") == rpc_count(before, "REQUEST_JOB_INFO_SINGLE") + 1
        assert rpc_count(after, "REQUEST_JOB_INFO") == rpc_count(before, "REQUEST_JOB_INFO")
    finally:
        slurm(cluster, "scancel", ids["pending"])


# ------------------------------------------------------------------ drain / down / resume

def _usable_node(be, candidates):
    states = {n.name: n for n in be.node_states(candidates)}
    for name in reversed(candidates):
        if states[name].usable and not states[name].reason:
            return name
    pytest.skip("no idle node without a reason on this cluster right now (another test drained them)")


@pytest.fixture
def node_lock(devcluster):
    """Serialise the tests that change node states, across processes (conftest.node_lock)."""
    with nodes_locked(devcluster):
        yield


@pytest.mark.parametrize("cluster", ["beta", "gamma"])
def test_drain_down_resume_with_reason(devcluster, node_lock, cluster):
    be, runner = backend(devcluster, cluster)
    node = _usable_node(be, devcluster[cluster].nodes)
    reason = "slurmkit-test: drain %d-%d" % (os.getpid(), time.time())
    before = datetime.now().replace(microsecond=0)
    try:
        be.drain([node], reason)
        got = be.node_states([node])
        assert [n.name for n in got] == [node]
        assert "DRAIN" in got[0].state and not got[0].usable
        assert got[0].reason == reason and got[0].reason_user == getpass.getuser()
        assert before - timedelta(seconds=5) <= got[0].reason_time <= datetime.now() + timedelta(seconds=5)
        be.down([node], reason + " (down)")
        got = be.node_states([node])[0]
        assert got.state.startswith("DOWN") and got.reason == reason + " (down)"
        be.resume([node])
        got = be.node_states([node])[0]
        assert got.reason == "" and got.reason_user == "" and "DRAIN" not in got.state
        # A node resumed from DOWN is IDLE+NOT_RESPONDING until its slurmd registers again.
        deadline = time.monotonic() + 30
        while not got.usable and time.monotonic() < deadline:
            time.sleep(0.5)
            got = be.node_states([node])[0]
        assert got.usable, got
        assert ("scontrol", "update", "NodeName=" + node, "State=RESUME") in runner.argvs
    finally:
        # Leave nothing drained, and resume only what this test drained.
        now = be.node_states([node])[0]
        if now.reason.startswith(reason):
            be.resume([node])
    with pytest.raises(SlurmCommandError, match="Invalid node name specified"):
        be.drain(["nosuchnode"], reason)


def test_requeue_hold_release_on_a_real_job(devcluster):
    be, _ = backend(devcluster, "gamma")
    job = sbatch("gamma", "-J", "skt-hold", "--hold", "-o", "/dev/null", "-t", "2", "--wrap", "true")
    try:
        assert be.jobs_by_id([job])[job].reason == "JobHeldUser"
        be.release([job])
        be.hold([job])
        state = be.jobs_by_id([job])[job]
        assert state.state in ("PENDING", "RUNNING", "COMPLETED", "COMPLETING")
    finally:
        slurm("gamma", "scancel", job, check=False)
    with pytest.raises(SlurmCommandError, match="Invalid job id specified"):
        be.hold(["999999"])


# ------------------------------------------------------------------ wait

def test_a_wait_that_runs_out_of_time_is_not_a_connection_error(devcluster):
    job = sbatch("gamma", "-J", "skt-wait", "-o", "/dev/null", "-t", "2", "--wrap", "sleep 60")
    try:
        with Session(load_site(str(ROOT / "site_configs" / "local.yaml"))) as session:
            started = time.monotonic()
            with pytest.raises(WaitTimeoutError) as caught:
                jobs.wait(session, jobs.JobRef("gamma", job), timeout=3)
        assert not isinstance(caught.value, ConnectTimeoutError)
        assert caught.value.job.job_id == job and caught.value.job.state in ("PENDING", "RUNNING")
        assert time.monotonic() - started < 10
    finally:
        slurm("gamma", "scancel", job, check=False)
