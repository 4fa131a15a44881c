"""The pure rules of federation: eligibility, prices, ranking, cool-down."""

from datetime import datetime
from pathlib import Path

import pytest

from slurmkit.federation import planner
from slurmkit.federation.cooldown import Cooldown
from slurmkit.script.render import JobSpec
from slurmkit.site import load_site

ROOT = Path(__file__).resolve().parents[2]
SITE = load_site(str(ROOT / "site_configs" / "local.yaml"))
SPEC = JobSpec(command=("true",), nodes=1, gpus_per_node=1, time="00:10:00")


def test_parse_accel():
    assert planner.parse_accel(" H100, a100 ,") == ("h100", "a100")
    assert planner.parse_accel(None) == ()


@pytest.mark.parametrize("cluster,partition,accel,expected", [
    ("alpha", "gpu", ("h100",), True), ("alpha", "gpu", ("a100",), False), ("alpha", "gpu", ("nvidia",), True),
    ("gamma", "npu", ("ascend910b",), True), ("gamma", "npu", ("npu",), True), ("gamma", "npu", ("nvidia",), False),
    ("alpha", "cpu", ("none",), True), ("alpha", "cpu", ("cpu",), True), ("alpha", "cpu", ("h100",), False),
    ("alpha", "gpu", (), True)])
def test_accel_matches(cluster, partition, accel, expected):
    assert planner.accel_matches(SITE.clusters[cluster].partitions[partition], accel) is expected


def _choices(cluster, spec=SPEC, partition=None, accel=()):
    parts, why = planner.partition_choices(SITE, SITE.clusters[cluster], spec, partition, accel)
    return [p.name for p in parts], why


def test_default_partition_only_without_accel():
    assert _choices("alpha") == (["gpu"], None)
    assert _choices("gamma") == (["npu"], None)


def test_accel_searches_every_partition():
    assert _choices("alpha", JobSpec(command=("x",), gpus_per_node=0), accel=("none",)) == (["cpu"], None)


def test_ineligible_reasons_name_the_limit():
    parts, why = _choices("beta", JobSpec(command=("x",), nodes=1, gpus_per_node=6))
    assert parts == [] and "asks for 6 gpu per node" in why and "has 4 per node" in why
    parts, why = _choices("gamma", JobSpec(command=("x",), nodes=3, gpus_per_node=1))
    assert parts == [] and "3 nodes" in why
    parts, why = _choices("alpha", partition="nope")
    assert parts == [] and "no partition 'nope'" in why


def test_only_partitions_that_can_run_the_image_are_candidates():
    site = load_site(str(ROOT / "site_configs" / "example-roce.yaml"))     # apptainer, one named image
    ampere = site.clusters["ampere"]
    spec = JobSpec(command=("x",), nodes=1, image="pytorch")
    assert planner.partition_choices(site, ampere, spec, None, ())[0] == [ampere.partitions["a100"]]
    parts, why = planner.partition_choices(site, ampere, spec._replace(image="pytorhc"), None, ())
    assert parts == [] and why == "image 'pytorhc' is not defined on cluster ampere (it has: pytorch); give its " \
        "path or registry reference instead"
    # A reference apptainer pulls itself is fine there; a path-only runtime (charliecloud) refuses one.
    assert planner.partition_choices(site, ampere, spec._replace(image="docker://x/y:1"), None, ())[0]
    parts, why = _choices("alpha", JobSpec(command=("x",), gpus_per_node=1, image="docker://x/y:1"))
    assert parts == [] and "runtime charliecloud on cluster alpha starts an image directory" in why


def test_price_windows_wrap_midnight():
    beta = SITE.clusters["beta"]   # 08-20: 3.0, 20-08: 1.2
    assert planner.price_at(beta, datetime(2026, 1, 1, 12)) == 3.0
    assert planner.price_at(beta, datetime(2026, 1, 1, 20)) == 1.2
    assert planner.price_at(beta, datetime(2026, 1, 1, 3)) == 1.2
    assert planner.price_at(SITE.clusters["alpha"], datetime(2026, 1, 1, 3)) == 4.0


def _cand(cluster, order, start, price):
    return planner.Candidate(cluster, "gpu", order, estimate=start, price=price)


def test_ranking_start_then_price_then_site_order():
    t = datetime(2026, 1, 1, 12, 0, 0)
    later = datetime(2026, 1, 1, 12, 5, 0)
    same_minute = datetime(2026, 1, 1, 12, 0, 40)
    ranked = sorted([_cand("a", 0, later, 0.5), _cand("b", 1, same_minute, 2.0), _cand("c", 2, t, 2.0),
                     _cand("d", 3, t, 1.0), _cand("e", 4, t, None)], key=planner.Candidate.rank_key)
    # d: cheapest now; b and c equal in start (same minute) and price -> site order; e has no price;
    # a is cheapest of all but starts five minutes later.
    assert [c.cluster for c in ranked] == ["d", "b", "c", "e", "a"]


def test_cooldown_after_repeated_failures(tmp_path):
    clock = FakeClock()
    cd = Cooldown(tmp_path / "cd.json", clock=clock, threshold=2, base=60, cap=200)
    cd.failure("alpha", "Connection refused")
    assert cd.check("alpha") is None                   # one failure is not a pattern
    cd.failure("alpha", "Connection refused")
    assert "after 2 failures in a row (last: Connection refused)" in cd.check("alpha")
    clock.advance(61)
    assert cd.check("alpha") is None                   # cooled down: try again
    cd.failure("alpha", "timeout")
    clock.advance(100)
    assert cd.check("alpha") is not None               # the 3rd failure doubles the pause (120 s)
    for _ in range(5):
        cd.failure("alpha", "x")
    clock.advance(201)
    assert cd.check("alpha") is None                   # capped at 200 s
    cd.failure("alpha", "x")
    cd.success("alpha")
    assert cd.check("alpha") is None                   # a success clears it
    other = Cooldown(tmp_path / "cd.json", clock=clock, threshold=1)
    other.failure("beta", "down")
    assert Cooldown(tmp_path / "cd.json", clock=clock).check("beta") is not None  # shared on disk


def test_cooldown_is_off_when_the_state_dir_is_not_private(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMKIT_CACHE_DIR", str(tmp_path))
    (tmp_path / "state").mkdir(mode=0o777)
    (tmp_path / "state").chmod(0o777)   # writable by others: its files cannot be trusted
    cd = Cooldown(threshold=1)
    assert cd.path is None
    cd.failure("alpha", "x")
    assert cd.check("alpha") is None


# ------------------------------------------------------------------ submitting, with a fake Slurm per cluster
#
# The rule that matters most: once an answer is lost after sbatch may have run, the job may exist
# on that cluster, so slurmkit retries *that* cluster with the same token and never fails over
# (which could start the job twice).  Failing over is only for errors that prove nothing ran.

from slurmkit.errors import ConnectTimeoutError, RemoteError, SlurmkitError  # noqa: E402
from slurmkit.results import GroupError  # noqa: E402
from slurmkit.slurm import commands  # noqa: E402
from slurmkit.testing import FakeClock, FakeSlurm, fake_session  # noqa: E402

FED_SPEC = JobSpec(command=("python", "train.py"), nodes=1, gpus_per_node=1, time="00:10:00")


def _federation(tmp_path, submit_once=True):
    clusters = {name: FakeSlurm(name, nodes=[name[0] + "n1"], submit_once=submit_once) for name in ("alpha", "beta")}
    return clusters, fake_session(**clusters), Cooldown(tmp_path / "cd.json", threshold=1), FakeClock()


def lost():
    return ConnectTimeoutError("the login node of alpha did not answer within 60s").outcome_unknown()


@pytest.mark.parametrize("submit_once", [True, False])
def test_a_lost_answer_is_retried_on_the_same_cluster_only(tmp_path, submit_once):
    (fakes, session, cooldown, clock) = _federation(tmp_path, submit_once)
    fakes["alpha"].fail_next("submit", lost())            # sbatch ran; its answer never came back
    placement = planner.submit_best(session, FED_SPEC, cooldown=cooldown, clock=clock)
    assert placement.submission.ref == planner.JobRef("alpha", "1000")
    assert placement.failovers == ()
    assert list(fakes["alpha"].table) == ["1000"]          # one job, not two
    assert "submit" not in fakes["beta"].methods_called()  # never failed over
    assert clock.sleeps == [2.0]
    if submit_once:   # the cluster-side wrapper reports the job that carries the token
        assert fakes["alpha"].methods_called() == ["estimate_start", "submit", "submit"]
        assert not placement.submission.existed
    else:             # without it, slurmkit looks for the token itself before submitting again
        assert fakes["alpha"].methods_called() == ["estimate_start", "submit", "find_by_token"]
        assert placement.submission.existed


def test_answers_lost_every_time_stop_without_failing_over(tmp_path):
    fakes, session, cooldown, clock = _federation(tmp_path)
    for _ in range(planner.SUBMIT_ATTEMPTS):
        fakes["alpha"].fail_next("submit", lost())
    with pytest.raises(SlurmkitError) as caught:
        planner.submit_best(session, FED_SPEC, cooldown=cooldown, clock=clock)
    error = caught.value
    assert error.may_have_run
    token = fakes["alpha"].table["1000"].comment.split(":", 1)[1]
    assert "may have been created on cluster alpha" in str(error) and "--token %s --cluster alpha" % token in str(error)
    assert fakes["alpha"].methods_called().count("submit") == planner.SUBMIT_ATTEMPTS
    assert fakes["beta"].methods_called() == ["estimate_start"]
    assert list(fakes["alpha"].table) == ["1000"]          # the wrapper never made a second job
    assert clock.sleeps == [2.0, 4.0]


@pytest.mark.parametrize("submit_once", [True, False])
def test_with_the_callers_token_a_lost_answer_is_found_by_the_next_look(tmp_path, submit_once):
    # The caller's token may already have a job (a rerun, a parallel twin): every attempt looks first,
    # so after a lost answer the job sbatch did create is reported, not submitted again.
    fakes, session, cooldown, clock = _federation(tmp_path, submit_once)
    fakes["alpha"].fail_next("submit", lost())
    placement = planner.submit_best(session, FED_SPEC._replace(token="t-2"), cooldown=cooldown, clock=clock)
    assert placement.submission.ref == planner.JobRef("alpha", "1000") and placement.submission.existed
    # A look on every cluster first, then the plan, then the look-and-submit of the chosen one.
    assert fakes["alpha"].methods_called() == ["find_by_token", "estimate_start", "find_by_token", "submit",
                                               "find_by_token"]
    assert list(fakes["alpha"].table) == ["1000"] and "submit" not in fakes["beta"].methods_called()


def test_a_rerun_with_the_callers_token_finds_its_job_on_another_cluster(tmp_path):
    # Yesterday the job went to beta; today alpha would start it first. The token is looked for everywhere.
    fakes, session, cooldown, clock = _federation(tmp_path)
    earlier = fakes["beta"].add_job(state="RUNNING", comment="slurmkit:t-3")
    placement = planner.submit_best(session, FED_SPEC._replace(token="t-3"), cooldown=cooldown, clock=clock)
    assert placement.submission.ref == planner.JobRef("beta", earlier) and placement.submission.existed
    assert "submit" not in fakes["alpha"].methods_called() + fakes["beta"].methods_called()
    assert "estimate_start" not in fakes["alpha"].methods_called()      # nothing planned: nothing to place
    assert "exists already" in placement.submission.rendered.warnings[0]


def test_a_cluster_that_cannot_be_asked_for_the_token_does_not_stop_the_submission(tmp_path):
    fakes, session, cooldown, clock = _federation(tmp_path)
    fakes["beta"].fail_next("find_by_token", RemoteError("beta: Connection refused"))
    placement = planner.submit_best(session, FED_SPEC._replace(token="t-4"), cooldown=cooldown, clock=clock)
    assert placement.submission is not None and not placement.submission.existed
    assert sum(len(f.table) for f in fakes.values()) == 1


def test_an_error_that_proves_nothing_ran_fails_over(tmp_path):
    fakes, session, cooldown, clock = _federation(tmp_path)
    fakes["alpha"].fail_next("submit", RemoteError("cannot reach login node of alpha: Connection refused"))
    placement = planner.submit_best(session, FED_SPEC, cooldown=cooldown, clock=clock)
    assert placement.submission.ref.cluster == "beta"
    assert placement.failovers == (("alpha", "cannot reach login node of alpha: Connection refused"),)
    assert fakes["alpha"].table == {} and list(fakes["beta"].table) == ["1000"]
    assert cooldown.check("alpha") is not None             # a cluster that keeps failing is skipped for a while
    assert clock.sleeps == []


def test_no_cluster_taking_the_job_is_one_error_naming_each(tmp_path):
    fakes, session, cooldown, clock = _federation(tmp_path)
    fakes["alpha"].fail_next("submit", RemoteError("alpha: Connection refused"))
    fakes["beta"].answer(["sh", "-c", commands.SUBMIT_ONCE_SCRIPT], returncode=1,
                         stderr="sbatch: error: Batch job submission failed: "
                                "Invalid account or account/partition combination\n")
    with pytest.raises(GroupError) as caught:
        planner.submit_best(session, FED_SPEC, cooldown=cooldown, clock=clock)
    assert str(caught.value) == ("no cluster took the job: alpha: alpha: Connection refused; beta: sbatch failed on "
                                 "cluster beta: Batch job submission failed: Invalid account or account/partition "
                                 "combination")
    assert caught.value.exit_code == 1 and not caught.value.may_have_run
    assert set(caught.value.errors) == {"alpha", "beta"}


def test_an_unreachable_cluster_is_a_skipped_candidate_with_its_reason(tmp_path):
    fakes, session, cooldown, clock = _federation(tmp_path)
    fakes["alpha"].answer(["sh", "-c"], error=RemoteError("cannot reach login node of alpha"))
    candidates = planner.plan(session, FED_SPEC._replace(token="t"), cooldown=cooldown)
    assert [(c.cluster, c.skip, c.reason) for c in candidates] == [
        ("beta", None, None), ("alpha", "unreachable", "cannot reach login node of alpha")]
    estimates = planner.estimates(session, FED_SPEC._replace(token="t"),
                                  [(session.site.clusters["alpha"], 0, list(session.site.clusters["alpha"]
                                                                           .partitions.values()))], cooldown)
    assert list(estimates.failed) == ["alpha"]
