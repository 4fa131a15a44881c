"""slurmkit.testing itself: FakeSlurm speaks what the recorded Slurm 22.05 says, FakeClock keeps virtual time.

If Slurm's output shapes in tests/unit/data/slurm are recorded again and change, these tests say
where FakeSlurm must follow, so the tests that use it keep running the parsers on real shapes.
"""

import json
from pathlib import Path

import pytest

from slurmkit.errors import ConnectTimeoutError, RemoteError
from slurmkit.slurm import commands, parsers
from slurmkit.testing import SQUEUE_JOB_2205, Call, FakeClock, FakeSlurm, fake_session, fake_site

DATA = Path(__file__).parent / "data" / "slurm"
SCRIPT = "#!/bin/sh\n#SBATCH --job-name=rec\n#SBATCH --time=5\n#SBATCH --comment=slurmkit:t\ntrue\n"


def recorded(cluster, what):
    return json.loads((DATA / ("%s-%s-22.05.json" % (cluster, what))).read_text())


def _roles(slurm):
    """The five jobs record.py makes, made again in the fake."""
    ids = {role: slurm.submit(SCRIPT) for role in ("ok", "failed", "cancelled", "running", "held")}
    slurm.finish(ids["ok"], "COMPLETED")
    slurm.finish(ids["failed"], "FAILED", exit_code=3)
    slurm.set_state(ids["cancelled"], "CANCELLED", reason="JobHeldUser")
    slurm.set_state(ids["running"], "RUNNING")
    slurm.hold([ids["held"]])
    return ids


def _comparable(job):
    return (job.state, job.reason, job.exit_code, job.signal, bool(job.nodelist), job.start_time is None,
            job.time_limit, job.comment.startswith("slurmkit:"))


@pytest.mark.parametrize("cluster", ["alpha", "beta"])
def test_the_squeue_record_has_every_key_slurm_sends(cluster):
    r = recorded(cluster, "squeue-json")
    for job in json.loads(r["stdout"])["jobs"]:
        # a job that got nodes also carries its allocation
        assert set(job) == set(SQUEUE_JOB_2205) | ({"job_resources"} if "job_resources" in job else set())
        assert ("job_resources" in job) == bool(job["nodes"])
    slurm = FakeSlurm(cluster)
    job = slurm.submit(SCRIPT)
    slurm.set_state(job, "RUNNING")
    fake = json.loads(slurm.runner.run(commands.squeue_json()).stdout)["jobs"][0]
    real = next(j for j in json.loads(r["stdout"])["jobs"] if str(j["job_id"]) == r["jobs"]["running"])
    assert set(fake) == set(real) and set(fake["job_resources"]) == set(real["job_resources"])


def test_fake_squeue_reads_like_the_recorded_one():
    r = recorded("alpha", "squeue-json")
    real = {j.job_id: j for j in parsers.parse_squeue_json(r["stdout"])}
    slurm = FakeSlurm("alpha")
    fake = _roles(slurm)
    found = slurm.jobs_by_id(list(fake.values()))
    for role, job_id in r["jobs"].items():
        if role == "held":
            continue   # record.py's hold is by root, an admin hold; the fake holds as the user
        assert _comparable(found[fake[role]]) == _comparable(real[job_id]), role
    assert found[fake["held"]].reason == "JobHeldUser" and real[r["jobs"]["held"]].reason == "JobHeldUser"


def test_the_fake_answers_squeue_format_and_json_alike():
    slurm = FakeSlurm("alpha")
    fake = _roles(slurm)
    listed = {j.job_id: j for j in parsers.parse_squeue_json(slurm.runner.run(commands.squeue_json()).stdout)}
    formatted = parsers.parse_squeue_format(slurm.runner.run(commands.squeue_format(list(fake.values()))).stdout)
    assert {j.job_id: j for j in formatted} == {i: listed[i] for i in fake.values()}
    one = parsers.parse_squeue_format(slurm.runner.run(commands.squeue_format([fake["failed"]])).stdout)
    assert one == [listed[fake["failed"]]]
    mine = slurm.runner.run(commands.squeue_format(user=slurm.user)).stdout
    assert {j.job_id for j in parsers.parse_squeue_format(mine)} == {j for j in listed if listed[j].user == slurm.user}
    unknown = slurm.runner.run(commands.squeue_format(["424242"]))
    assert unknown.returncode == 1 and "Invalid job id" in unknown.stderr


def test_fake_sacct_reads_like_the_recorded_one():
    r = recorded("alpha", "sacct")
    real = {j.job_id: j for j in parsers.parse_sacct(r["stdout"])}
    slurm = FakeSlurm("alpha", accounting=True)
    fake = _roles(slurm)
    found = {j.job_id: j for j in slurm.accounting(list(fake.values()))}
    for role, job_id in r["jobs"].items():
        if role == "held":
            continue
        a, b = found[fake[role]], real[job_id]
        assert (a.state, a.exit_code, a.signal, bool(a.nodelist), a.time_limit) == \
               (b.state, b.exit_code, b.signal, bool(b.nodelist), b.time_limit), role
    # the same rows: each job, and a batch step for those that ran
    fake_rows = slurm.runner.run(commands.sacct(list(fake.values()))).stdout.splitlines()
    assert [row.split("|")[0].replace(fake["ok"], "J") for row in fake_rows][:2] == ["J", "J.batch"]
    assert [row.split("|")[0] for row in r["stdout"].splitlines()][:2] == [r["jobs"]["ok"], r["jobs"]["ok"] + ".batch"]


def test_fake_nodes_read_like_the_recorded_ones():
    r = recorded("alpha", "nodes-drained")
    real = parsers.parse_nodes(r["stdout"])
    slurm = FakeSlurm("alpha", nodes=["an1", "an2", "an3"], partitions=("gpu", "cpu"), user="root")
    job = slurm.submit(SCRIPT)
    slurm.set_state(job, "RUNNING")
    slurm.drain(["an1", "an2"], "slurmkit: recorded drain")
    slurm.down(["an3"], "recorded down by an admin")
    fake = slurm.node_states()
    assert sorted(set(parsers.parse_key_values(slurm.runner.run(commands.show_nodes()).stdout.splitlines()[0]))) == \
        sorted(set(parsers.parse_key_values(r["stdout"].splitlines()[0])))
    assert {(n.state, n.reason, n.reason_user) for n in fake} <= {(n.state, n.reason, n.reason_user) for n in real}
    assert all(n.reason_time is not None for n in fake)


def test_fake_config_and_refusals_read_like_the_recorded_ones():
    for cluster, accounting in (("alpha", True), ("beta", False)):
        real = parsers.parse_config(recorded(cluster, "config")["stdout"])
        fake = FakeSlurm(cluster, accounting=accounting).config()
        assert fake["AccountingStorageType"] == real["AccountingStorageType"]
        assert fake["MinJobAge"] == real["MinJobAge"]
    slurm = FakeSlurm("beta")
    assert slurm.runner.run(commands.sacct(["1"])).stderr == recorded("beta", "sacct")["stderr"]
    assert slurm.runner.run(commands.hold(["999999"])).stderr == recorded("beta", "hold-unknown")["stderr"]
    assert slurm.runner.run(commands.update_nodes(["nosuchnode"], "DRAIN", "x")).stderr == \
        recorded("beta", "drain-unknown")["stderr"]


# ------------------------------------------------------------------ the controls

def test_calls_record_what_the_caller_called_not_the_inner_calls():
    slurm = FakeSlurm(accounting=True)
    job = slurm.submit(SCRIPT, "t")
    slurm.jobs_by_id([job])
    assert slurm.calls == [Call("submit", (SCRIPT, "t")), Call("jobs_by_id", ([job],))]
    assert slurm.methods_called() == ["submit", "jobs_by_id"]          # not jobs/has_accounting/config inside


def test_fail_next_before_or_after_the_effect():
    slurm = FakeSlurm()
    slurm.fail_next("submit", RemoteError("refused"))                  # nothing ran
    slurm.fail_next("submit", ConnectTimeoutError("lost").outcome_unknown())   # ran, answer lost
    with pytest.raises(RemoteError):
        slurm.submit(SCRIPT)
    assert slurm.table == {}
    with pytest.raises(ConnectTimeoutError):
        slurm.submit(SCRIPT)
    assert list(slurm.table) == ["1000"]
    assert slurm.submit(SCRIPT) == "1001"                               # failures are used up in order


def test_steps_move_a_job_once_per_squeue():
    slurm = FakeSlurm()
    job = slurm.submit(SCRIPT)
    slurm.steps(job, "RUNNING", "COMPLETED")
    assert [slurm.jobs_by_id([job])[job].state for _ in range(3)] == ["RUNNING", "COMPLETED", "COMPLETED"]


def test_submit_once_reports_the_job_that_carries_the_token():
    slurm = FakeSlurm(submit_once=True)
    script = SCRIPT.replace("slurmkit:t", "slurmkit:tok") + commands.SCRIPT_TRAILER + "\n"
    first = slurm.submit(script, "tok")
    assert slurm.submit(script, "tok") == first and len(slurm.table) == 1
    with pytest.raises(Exception, match="arrived incomplete"):
        slurm.submit(SCRIPT, "other")                                     # cut off: no trailer


def test_answer_overrides_and_runs_out():
    slurm = FakeSlurm()
    slurm.answer(["squeue"], stderr="squeue: error: Unable to contact slurm controller\n", returncode=1, times=1)
    with pytest.raises(Exception, match="does not answer"):
        slurm.jobs()
    assert slurm.jobs() == []                                           # the override was used up


def test_fake_clock():
    clock = FakeClock(start=0.0, epoch=1_800_000_000.0)
    fired = []
    clock.call_at(5.0, lambda: fired.append(clock.monotonic()))
    clock.call_after(2.0, lambda: fired.append(clock.monotonic()))
    clock.sleep(3.0)
    assert fired == [2.0] and clock.monotonic() == 3.0 and clock.time() == 1_800_000_003.0
    clock.sleep(10.0)
    assert fired == [2.0, 5.0] and clock.monotonic() == 13.0
    assert clock.sleeps == [3.0, 10.0]
    with pytest.raises(ValueError):
        clock.sleep(-1)


def test_fake_session_serves_its_backends():
    alpha = FakeSlurm("alpha")
    session = fake_session(alpha=alpha, beta=FakeSlurm("beta"))
    assert session.backend("alpha") is alpha
    assert list(session.site.clusters) == ["alpha", "beta"] and session.site.defaults.cluster == "alpha"
    assert list(fake_site("x").clusters) == ["x"]
