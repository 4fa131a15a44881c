"""slurmkit.jobs with a fake Slurm and a fake clock: submit, wait, status, lookup.

FakeSlurm is the real command backend answered in Slurm 22.05's own output shapes, so these
tests run the argv builders and parsers too; FakeClock makes waits instant and exact.
"""

import json
from pathlib import Path

import pytest

from slurmkit import jobs
from slurmkit.errors import ConnectTimeoutError, RemoteError, SlurmkitError, WaitTimeoutError
from slurmkit.results import GroupError, GroupResult
from slurmkit.script.render import JobSpec
from slurmkit.testing import FakeClock, FakeSlurm, fake_session

ROOT = Path(__file__).resolve().parents[2]
SPEC = JobSpec(command=("python", "train.py"), nodes=1, gpus_per_node=1, time="00:10:00")


@pytest.fixture
def alpha():
    return FakeSlurm("alpha", nodes=["an1", "an2"], accounting=True)


@pytest.fixture
def beta():
    return FakeSlurm("beta", nodes=["bn1", "bn2"])


@pytest.fixture
def session(alpha, beta):
    return fake_session(alpha=alpha, beta=beta)


# ------------------------------------------------------------------ submit

def test_submit_renders_and_sends_one_sbatch(session, alpha, beta):
    sub = jobs.submit(session, SPEC)
    assert sub.ref == jobs.JobRef("alpha", "1000") and not sub.existed
    assert alpha.methods_called() == ["submit"] and beta.calls == []
    script, token = alpha.calls[0].args
    assert script == sub.rendered.script and token == sub.token
    assert alpha.table["1000"].comment == "slurmkit:" + sub.token      # the token travels in --comment
    assert jobs.submit(session, SPEC, cluster="beta").ref == jobs.JobRef("beta", "1000")


def test_a_callers_token_never_makes_a_second_job(session, alpha):
    first = jobs.submit(session, SPEC._replace(token="run-7"))
    again = jobs.submit(session, SPEC._replace(token="run-7"))
    assert again.ref == first.ref and again.existed
    assert alpha.methods_called() == ["find_by_token", "submit", "find_by_token"]
    assert len(alpha.table) == 1


def test_a_token_the_caller_has_just_made_is_submitted_without_a_look_for_its_job(session, alpha):
    # The Python API names a call's files by a token it makes before sbatch: no job can carry it yet.
    token = jobs.new_token()
    sub = jobs.submit(session, SPEC._replace(token=token), fresh_token=True)
    assert alpha.methods_called() == ["submit"] and alpha.calls[0].args[1] == token == sub.token
    assert alpha.table[sub.ref.job_id].comment == "slurmkit:" + token


def test_a_lost_answer_then_the_same_token_reports_the_job(session, alpha):
    alpha.fail_next("submit", ConnectTimeoutError("no answer within 60s").outcome_unknown())
    with pytest.raises(ConnectTimeoutError) as caught:
        jobs.submit(session, SPEC._replace(token="lost-1"))
    assert caught.value.may_have_run
    assert list(alpha.table) == ["1000"]                 # sbatch did run: the job exists
    again = jobs.submit(session, SPEC._replace(token="lost-1"))
    assert again.existed and again.ref.job_id == "1000" and len(alpha.table) == 1


def test_a_refused_submission_keeps_sbatchs_message(session, alpha):
    alpha.answer(["sbatch"], returncode=1, stderr="sbatch: error: Batch job submission failed: "
                                                  "Requested node configuration is not available\n")
    with pytest.raises(SlurmkitError, match="sbatch failed on cluster alpha: Batch job submission failed: "
                                            "Requested node configuration is not available") as caught:
        jobs.submit(session, SPEC)
    assert not caught.value.may_have_run and alpha.table == {}


# ------------------------------------------------------------------ wait

def test_wait_follows_the_job_with_backoff_and_one_rpc_per_poll(session, alpha):
    clock = FakeClock()
    job = alpha.add_job()
    clock.call_at(clock.monotonic() + 3, lambda: alpha.set_state(job, "RUNNING"))
    clock.call_at(clock.monotonic() + 40, lambda: alpha.finish(job, "COMPLETED"))
    seen = []
    final = jobs.wait(session, jobs.JobRef("alpha", job), clock=clock,
                      on_change=lambda j: seen.append(j.state))
    assert final.state == "COMPLETED" and final.nodelist == "an1"
    assert seen == ["PENDING", "RUNNING", "COMPLETED"]
    assert clock.sleeps[:6] == [1.0, 1.5, 2.25, 3.375, 5.0625, 7.59375] and max(clock.sleeps) == 10.0
    polls = len(clock.sleeps) + 1
    assert alpha.commands.count(alpha.commands[0]) == polls and len(alpha.commands) == polls  # one squeue each


def test_wait_gives_up_on_a_job_whose_dependency_can_never_be_met(session, alpha):
    clock = FakeClock()
    job = alpha.add_job()
    clock.call_at(clock.monotonic() + 5, lambda: alpha.set_state(job, "PENDING", reason="DependencyNeverSatisfied"))
    with pytest.raises(SlurmkitError, match="^job alpha:%s can never start: its --dependency can never be met" % job):
        jobs.wait(session, jobs.JobRef("alpha", job), clock=clock)
    assert clock.monotonic() - 1000.0 < 10                        # at the first poll that saw it, not at a timeout


def test_wait_timeout_is_not_a_connection_error(session, alpha):
    clock = FakeClock()
    job = alpha.add_job("RUNNING")
    with pytest.raises(WaitTimeoutError) as caught:
        jobs.wait(session, jobs.JobRef("alpha", job), timeout=30, clock=clock)
    error = caught.value
    assert not isinstance(error, ConnectTimeoutError) and error.exit_code == 1 and not error.may_have_run
    assert error.job.state == "RUNNING" and error.job.job_id == job
    assert str(error) == "job alpha:%s is still RUNNING after 30s" % job
    assert clock.monotonic() - 1000.0 <= 30                       # gave up without sleeping past the deadline


def test_wait_finds_a_job_that_ended_and_was_forgotten_during_a_pause(session, alpha):
    clock = FakeClock()
    job = alpha.add_job("RUNNING")

    def ended_long_ago():
        alpha.finish(job, "FAILED", exit_code=3)
        alpha.forget(job)                                         # only sacct still knows it

    clock.call_at(clock.monotonic() + 2, ended_long_ago)
    final = jobs.wait(session, jobs.JobRef("alpha", job), clock=clock)
    assert (final.state, final.nodelist) == ("FAILED", "an1")
    assert alpha.commands[-1][0] == "sacct"


def test_wait_for_an_unknown_job(session):
    with pytest.raises(SlurmkitError, match="job beta:42 is not known to cluster beta"):
        jobs.wait(session, jobs.JobRef("beta", "42"), clock=FakeClock())


# ------------------------------------------------------------------ status and lookup

def test_status_of_refs_is_one_lookup_per_cluster(session, alpha, beta):
    a = [alpha.add_job() for _ in range(3)]
    b = beta.add_job("RUNNING")
    alpha.finish(a[0], "COMPLETED")
    alpha.forget(a[0])                                            # accounting still has it
    refs = [jobs.JobRef("alpha", i) for i in a] + [jobs.JobRef("beta", b), jobs.JobRef("beta", "777")]
    found, missing, clusters = jobs.status(session, refs)
    assert [(str(ref), job.state) for ref, job in found] == [
        ("alpha:%s" % a[0], "COMPLETED"), ("alpha:%s" % a[1], "PENDING"), ("alpha:%s" % a[2], "PENDING"),
        ("beta:%s" % b, "RUNNING")]
    assert missing == [jobs.JobRef("beta", "777")]
    assert clusters.ok and set(clusters) == {"alpha", "beta"}
    assert alpha.methods_called() == ["jobs_by_id"] and beta.methods_called() == ["jobs_by_id"]
    assert alpha.calls[0].args == (a,)


def test_lookup_keeps_every_cluster_apart(session, alpha, beta):
    job = alpha.add_job()
    beta.fail_next("jobs_by_id", RemoteError("cannot reach login node of beta: Connection refused"))
    result = jobs.lookup(session, [jobs.JobRef("alpha", job), jobs.JobRef("beta", "5")])
    assert isinstance(result, GroupResult)
    assert list(result.succeeded) == ["alpha"] and result["alpha"][job].state == "PENDING"
    assert str(result.failed["beta"]) == "cannot reach login node of beta: Connection refused"


def test_status_of_refs_raises_a_clusters_error_as_itself(session, alpha, beta):
    beta.fail_next("jobs_by_id", RemoteError("cannot reach login node of beta"))
    with pytest.raises(RemoteError, match="cannot reach login node of beta"):
        jobs.status(session, [jobs.JobRef("alpha", "1"), jobs.JobRef("beta", "2")])
    alpha.fail_next("jobs_by_id", RemoteError("alpha down"))
    beta.fail_next("jobs_by_id", RemoteError("beta down"))
    with pytest.raises(GroupError) as caught:
        jobs.status(session, [jobs.JobRef("alpha", "1"), jobs.JobRef("beta", "2")])
    assert str(caught.value) == "jobs could not be looked up: alpha: alpha down; beta: beta down"


def test_status_without_refs_lists_my_slurmkit_jobs_and_the_clusters_not_reached(session, alpha, beta):
    mine = jobs.submit(session, SPEC).ref
    alpha.add_job(name="not-slurmkit")                            # no slurmkit: comment
    alpha.add_job(comment="slurmkit:x", user="someone-else")
    beta.fail_next("jobs", RemoteError("cannot reach login node of beta"))
    found, missing, clusters = jobs.status(session)
    assert [ref for ref, _ in found] == [mine] and missing == []
    assert list(clusters.failed) == ["beta"] and list(clusters.succeeded) == ["alpha"]


def _cli(fakes, monkeypatch, capsys, *args):
    from slurmkit import session as session_module
    from slurmkit.cli import main

    monkeypatch.setattr(session_module, "make_backend", lambda cluster: fakes[cluster.name])
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_status_cli_output_is_unchanged(monkeypatch, capsys, alpha, beta):
    gamma = FakeSlurm("gamma", nodes=["gn1"])
    fakes = {"alpha": alpha, "beta": beta, "gamma": gamma}
    job = alpha.add_job(name="train", comment="slurmkit:abc")
    site = str(ROOT / "site_configs" / "local.yaml")
    why = "cannot reach login node 127.0.3.2:2222 of cluster gamma"
    gamma.fail_next("jobs", RemoteError(why))
    code, out, err = _cli(fakes, monkeypatch, capsys, "status", "--site", site)
    assert code == 0 and err == "Warning: cluster gamma not reachable: %s\n" % why
    assert out.splitlines()[0].split() == ["ID", "NAME", "STATE", "PARTITION", "NODES", "NODELIST(REASON)", "START"]
    assert out.splitlines()[1].split() == ["alpha:%s" % job, "train", "PENDING", "gpu", "1", "(None)", "-"]
    gamma.fail_next("jobs", RemoteError(why))
    code, out, err = _cli(fakes, monkeypatch, capsys, "status", "--site", site, "--json")
    data = json.loads(out)
    assert data["unreachable"] == [{"cluster": "gamma", "reason": why}]
    assert [j["id"] for j in data["jobs"]] == ["alpha:%s" % job] and data["missing"] == []
    code, out, err = _cli(fakes, monkeypatch, capsys, "status", "--site", site, "alpha:%s" % job, "alpha:999")
    assert code == 1 and "alpha:%s" % job in out and "alpha:999" in err


def test_summary_says_when_the_output_file_is_missing(session, alpha, tmp_path, monkeypatch):
    # fake_session's clusters have no login node: they are used locally, so the path is looked up here.
    job_id = alpha.add_job("RUNNING", name="exp/lr3e-4")
    alpha.table[job_id].stdout = str(tmp_path / "no-such-dir" / "out.txt")
    alpha.finish(job_id, "FAILED", exit_code=1)
    ref = jobs.JobRef("alpha", job_id)
    job = alpha.jobs_by_id([job_id])[job_id]
    summary = jobs.summary(session, ref, job)
    assert "its directory %s does not exist" % (tmp_path / "no-such-dir") in summary["output_note"]
    assert jobs.output_notes(session, [(ref, job)]) == ["alpha:%s: %s" % (job_id, summary["output_note"])]
    (tmp_path / "no-such-dir").mkdir()
    (tmp_path / "no-such-dir" / "out.txt").write_text("done\n")
    assert jobs.summary(session, ref, job)["output_note"] is None
    assert jobs.output_notes(session, [(ref, job)]) == []


def test_how_a_job_ended_is_said_with_its_reason():
    from slurmkit.cli.display import how_it_ended

    assert how_it_ended({"state": "COMPLETED", "exit_code": 0, "signal": None, "reason": "None"}) == "COMPLETED"
    assert how_it_ended({"state": "FAILED", "exit_code": 3, "signal": None, "reason": "NonZeroExitCode"}) == \
        "FAILED (exit code 3)"
    assert how_it_ended({"state": "CANCELLED", "exit_code": None, "signal": 15, "reason": "None"}) == \
        "CANCELLED (signal 15)"
    assert how_it_ended({"state": "FAILED", "exit_code": 1, "signal": None, "reason": "JobLaunchFailure"}) == \
        "FAILED (exit code 1, reason JobLaunchFailure)"
    assert how_it_ended({"state": "NODE_FAIL", "exit_code": None, "signal": None, "reason": "NodeDown"}) == \
        "NODE_FAIL (reason NodeDown)"


def test_a_local_cluster_whose_slurm_conf_is_missing_fails_at_once(tmp_path):
    """Without the check every Slurm command retries for about a minute before failing."""
    from slurmkit.errors import SlurmUnavailableError
    from slurmkit.session import make_backend
    from slurmkit.site.model import Cluster

    with pytest.raises(SlurmUnavailableError, match="slurm_conf %s/gone.conf of cluster c does not exist" % tmp_path):
        make_backend(Cluster(name="c", partitions={}, slurm_conf=str(tmp_path / "gone.conf")))
