"""Sweeps against fake clusters that run job arrays (slurmkit.testing.FakeArraySlurm):
splitting within the limits, one query per cluster, reruns that never renumber, resubmission of an
edited grid, cancel, throttle, several clusters, canary, lost answers."""

import hashlib
import json
import re

import pytest

from slurmkit.errors import ConnectTimeoutError, SlurmkitError, UsageError
from slurmkit.script.render import JobSpec
from slurmkit.sweep import actions, submission
from slurmkit.sweep import state
from slurmkit.sweep.journal import Journal
from slurmkit.sweep.script import table_rows
from slurmkit.testing import FakeArraySlurm, tasks_by_index
from slurmkit.testing import fake_session, fake_site

COMMAND = ("python3", "train.py", "--seed", "{seed}")
LR_COMMAND = ("python3", "train.py", "--lr={lr}", "--seed", "{seed}")


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SLURMKIT_VIA", raising=False)
    journal = Journal(str(tmp_path / "state" / "sweeps.db"))
    yield tmp_path, journal
    journal.close()


def request(tmp_path, grid, command=None, **kw):
    if command is None:
        command = LR_COMMAND if any(g.startswith("lr=") for g in grid) else COMMAND
    spec = JobSpec(command=command, template="single", gpus_per_node=0, time=kw.pop("time", "00:05:00"))
    kw.setdefault("sweep_dir", str(tmp_path / "sweep"))
    if "sweep_name" in kw:
        kw["name"] = kw.pop("sweep_name")
    return submission.SweepRequest(spec=spec, grid=grid, **kw)


def sbatches(slurm):
    return [c for c in slurm.commands if c[0] == "sbatch"]


def rows_of(script):
    """{index: (point id, SLURMKIT_SWEEP_SEED)} from an array script's table."""
    return {index: (point, re.search(r"SLURMKIT_SWEEP_SEED=(\S+);", rest).group(1))
            for index, (point, rest) in table_rows(script).items()}


def array_line(script):
    return re.search(r"(?m)^#SBATCH --array=(\S+)$", script).group(1)


def test_a_sweep_is_cut_into_arrays_within_max_array_size_indexed_from_zero(env):
    tmp_path, journal = env
    alpha = FakeArraySlurm("alpha", config={"MaxArraySize": "4"})
    report = submission.submit(fake_session(alpha=alpha), request(tmp_path, ["lr=1e-3,3e-4", "seed=0..4"]), journal)
    assert [a.tasks for a in report.arrays] == [4, 3, 3] and len(sbatches(alpha)) == 3
    specs = [array_line(a.script) for a in alpha.arrays.values()]
    assert specs == ["0-3", "0-2", "0-2"]
    seen = [pid for a in alpha.arrays.values() for pid, _ in rows_of(a.script).values()]
    assert len(seen) == 10 and len(set(seen)) == 10            # every point once
    assert {p.point_id for p in journal.points(report.sweep_id)} == set(seen)


def test_max_array_tasks_caps_arrays_below_max_array_size(env):
    tmp_path, journal = env
    alpha = FakeArraySlurm("alpha", config={"SchedulerParameters": "bf_interval=5,max_array_tasks=3"})
    report = submission.submit(fake_session(alpha=alpha), request(tmp_path, ["lr=a,b", "seed=0..3"]), journal)
    assert sorted(a.tasks for a in report.arrays) == [2, 3, 3]
    assert all(len(a.tasks) <= 3 and max(a.tasks) < 3 for a in alpha.arrays.values())


def test_more_points_than_the_default_max_array_size_never_make_an_invalid_array(env):
    tmp_path, journal = env
    alpha = FakeArraySlurm("alpha")                          # MaxArraySize=1001, as the dev clusters
    report = submission.submit(fake_session(alpha=alpha),
                               request(tmp_path, ["seed=0..2099"], command=("true", "{seed}")),
                               journal)
    assert [a.tasks for a in report.arrays] == [700, 700, 700]
    assert all(a.indices == "0-699" for a in report.arrays)


def test_status_asks_each_cluster_once_and_finished_arrays_never_again(env):
    tmp_path, journal = env
    alpha = FakeArraySlurm("alpha", config={"MaxArraySize": "4"})
    session = fake_session(alpha=alpha)
    report = submission.submit(session, request(tmp_path, ["lr=1e-3,3e-4", "seed=0..4"]), journal)
    for array in list(alpha.arrays):
        alpha.run(array, {1: 3})                              # index 1 of every array fails with exit 3
    alpha.commands.clear()
    status = state.status(session, report.sweep_id, journal)
    assert [c[0] for c in alpha.commands] == ["squeue"] and status.queries == {"alpha": 1}
    assert status.counts() == {"COMPLETED": 7, "FAILED": 3}
    failed = [p for p in status.points if p.state == "FAILED"]
    assert {p.exit_code for p in failed} == {3} and {p.idx for p in failed} == {1}
    alpha.commands.clear()
    assert state.status(session, report.sweep_id, journal).counts() == {"COMPLETED": 7, "FAILED": 3}
    assert alpha.commands == []                               # everything final: nothing to ask


def test_forgotten_tasks_come_from_sacct_or_are_unknown_without_accounting(env):
    tmp_path, journal = env
    alpha = FakeArraySlurm("alpha", accounting=True)
    beta = FakeArraySlurm("beta", accounting=False)
    session = fake_session(alpha=alpha, beta=beta)
    a = submission.submit(session, request(tmp_path, ["seed=0..2"], cluster="alpha", sweep_name="a"), journal)
    b = submission.submit(session, request(tmp_path, ["seed=0..2"], cluster="beta", sweep_name="b",
                                           sweep_dir=str(tmp_path / "b")), journal)
    for slurm in (alpha, beta):
        array = next(iter(slurm.arrays))
        slurm.run(array, {2: 1})
        slurm.forget_array(array)
        slurm.commands.clear()
    status_a = state.status(session, a.sweep_id, journal)
    assert [c[0] for c in alpha.commands] == ["squeue", "sacct"]
    assert status_a.counts() == {"COMPLETED": 2, "FAILED": 1}
    status_b = state.status(session, b.sweep_id, journal)
    assert [c[0] for c in beta.commands] == ["squeue"]
    assert status_b.counts() == {"UNKNOWN": 3}
    assert "keeps no accounting" in status_b.points[0].reason


def test_a_task_record_written_by_the_job_stands_in_for_a_forgotten_one(env):
    tmp_path, journal = env
    beta = FakeArraySlurm("beta")
    session = fake_session(beta=beta)
    report = submission.submit(session, request(tmp_path, ["seed=0..1"]), journal)
    array = next(iter(beta.arrays))
    rows = rows_of(beta.arrays[array].script)
    beta.run(array, {1: 4})
    beta.forget_array(array)
    for index, code in ((0, 0), (1, 4)):
        directory = tmp_path / "sweep" / "points" / rows[index][0]
        directory.mkdir(parents=True)
        (directory / "exit.status").write_text("%d %s_%d 0\n" % (code, array, index))
    counts = state.status(session, report.sweep_id, journal)
    assert counts.counts() == {"COMPLETED": 1, "FAILED": 1}
    assert next(p for p in counts.points if p.state == "FAILED").exit_code == 4


def test_rerun_requeues_tasks_slurm_still_has_without_renumbering(env):
    tmp_path, journal = env
    alpha = FakeArraySlurm("alpha")
    session = fake_session(alpha=alpha)
    report = submission.submit(session, request(tmp_path, ["seed=0..5"]), journal)
    array = next(iter(alpha.arrays))
    alpha.run(array, {1: 3, 4: 3})
    alpha.commands.clear()
    rerun = actions.rerun(session, report.sweep_id, journal=journal)
    assert ("scontrol", "requeue", "%s_1,%s_4" % (array, array)) in alpha.commands
    assert ("scontrol", "update", "JobId=%s_1,%s_4" % (array, array), "StartTime=now") in alpha.commands
    assert sbatches(alpha) == [] and [a.kind for a in rerun.arrays] == ["requeue"]
    assert alpha.task(array, 1).state == "PENDING" and alpha.task(array, 1).restarts == 1
    assert alpha.task(array, 1).reason == "None"                  # StartTime=now: no two-minute wait
    alpha.run(array)
    status = state.status(session, report.sweep_id, journal)
    assert status.counts() == {"COMPLETED": 6}
    assert {p.idx for p in status.points if p.restarts} == {1, 4}


def test_rerun_after_slurm_forgot_is_a_sparse_array_of_the_same_table(env):
    tmp_path, journal = env
    alpha = FakeArraySlurm("alpha", accounting=True)
    session = fake_session(alpha=alpha)
    report = submission.submit(session, request(tmp_path, ["seed=0..5"]), journal)
    first = next(iter(alpha.arrays))
    before = rows_of(alpha.arrays[first].script)
    alpha.run(first, {1: 3, 4: 3})
    alpha.forget_array(first)
    rerun = actions.rerun(session, report.sweep_id, journal=journal)
    assert [a.kind for a in rerun.arrays] == ["rerun"] and rerun.arrays[0].indices == "1,4"
    second = rerun.arrays[0].job_id
    script = alpha.arrays[second].script
    assert array_line(script) == "1,4"
    assert rows_of(script) == {1: before[1], 4: before[4]}    # same index, same point
    alpha.run(second)
    status = state.status(session, report.sweep_id, journal)
    assert status.counts() == {"COMPLETED": 6}
    assert {status.task_name(p) for p in status.points if p.idx in (1, 4)} == \
        {"alpha:%s_1" % second, "alpha:%s_4" % second}


def test_rerun_of_chosen_points_and_live_points_left_alone(env):
    tmp_path, journal = env
    alpha = FakeArraySlurm("alpha")
    session = fake_session(alpha=alpha)
    report = submission.submit(session, request(tmp_path, ["seed=0..2"]), journal)
    array = next(iter(alpha.arrays))
    alpha.finish_task(array, 0)
    points = {p.idx: p.point_id for p in journal.points(report.sweep_id)}
    rerun = actions.rerun(session, report.sweep_id, point_ids=[points[0][:6], points[1]], journal=journal)
    assert rerun.points == [points[0]] and rerun.skipped_live == [points[1]]
    with pytest.raises(UsageError, match="no point of sweep"):
        actions.rerun(session, report.sweep_id, point_ids=["zzz"], journal=journal)


def test_resubmitting_an_edited_grid_skips_completed_and_queued_points(env):
    tmp_path, journal = env
    alpha = FakeArraySlurm("alpha")
    session = fake_session(alpha=alpha)
    first = submission.submit(session, request(tmp_path, ["seed=0..3"]), journal)
    array = next(iter(alpha.arrays))
    alpha.run(array, {1: 3})
    alpha.commands.clear()
    again = submission.submit(session, request(tmp_path, ["seed=0..5"]), journal)
    assert again.sweep_id == first.sweep_id and (again.completed, again.queued) == (3, 0)
    kinds = {a.kind: a for a in again.arrays}
    assert set(kinds) == {"requeue", "new"} and kinds["requeue"].indices == "1"   # same job: Slurm's requeue
    assert kinds["new"].indices == "0-1" and kinds["new"].tasks == 2
    assert sorted(v for _, v in rows_of(alpha.arrays[kinds["new"].job_id].script).values()) == ["4", "5"]
    # Submitted at once again: everything is queued or completed, nothing is submitted twice.
    third = submission.submit(session, request(tmp_path, ["seed=0..5"]), journal)
    assert third.arrays == [] and (third.completed, third.queued) == (3, 3)


def test_a_changed_job_reruns_failed_points_as_sparse_arrays_with_the_new_options(env):
    tmp_path, journal = env
    alpha = FakeArraySlurm("alpha")
    session = fake_session(alpha=alpha)
    submission.submit(session, request(tmp_path, ["seed=0..3"]), journal)
    array = next(iter(alpha.arrays))
    alpha.run(array, {2: 1})
    again = submission.submit(session, request(tmp_path, ["seed=0..3"], time="00:30:00"), journal)
    assert [a.kind for a in again.arrays] == ["rerun"] and again.arrays[0].indices == "2"
    script = alpha.arrays[again.arrays[0].job_id].script
    assert "#SBATCH --time=00:30:00" in script and rows_of(script)[2][1] == "2"


def test_cancel_is_one_scancel_of_the_live_arrays_per_cluster(env):
    tmp_path, journal = env
    alpha = FakeArraySlurm("alpha", config={"MaxArraySize": "3"})
    session = fake_session(alpha=alpha)
    report = submission.submit(session, request(tmp_path, ["seed=0..5"]), journal)
    done, live = list(alpha.arrays)
    alpha.run(done)
    alpha.commands.clear()
    result = actions.cancel(session, report.sweep_id, journal=journal)
    assert [c for c in alpha.commands if c[0] == "scancel"] == [("scancel", live)]
    assert result.cancelled == ["alpha:%s" % live] and result.tasks == 3
    assert state.status(session, report.sweep_id, journal).counts() == {"CANCELLED": 3, "COMPLETED": 3}


def test_throttle_updates_each_live_array(env):
    tmp_path, journal = env
    alpha = FakeArraySlurm("alpha", config={"MaxArraySize": "3"})
    session = fake_session(alpha=alpha)
    report = submission.submit(session, request(tmp_path, ["seed=0..5"]), journal)
    shares = actions.throttle(session, report.sweep_id, 4, journal=journal)
    assert sorted(shares.values()) == [2, 2]
    assert [a.throttle for a in alpha.arrays.values()] == [2, 2]


def test_max_running_throttles_and_chains_the_arrays_of_a_cluster(env):
    tmp_path, journal = env
    alpha = FakeArraySlurm("alpha", config={"MaxArraySize": "4"})
    submission.submit(fake_session(alpha=alpha), request(tmp_path, ["seed=0..9"], max_running=2), journal)
    scripts = [a.script for a in alpha.arrays.values()]
    ids = list(alpha.arrays)
    assert [array_line(s) for s in scripts] == ["0-3%2", "0-2%2", "0-2%2"]
    assert "--dependency" not in scripts[0]
    assert "#SBATCH --dependency=afterany:%s" % ids[0] in scripts[1]
    assert "#SBATCH --dependency=afterany:%s" % ids[1] in scripts[2]


def _two_cluster_session(alpha, beta, alpha_nodes=4, beta_nodes=2):
    site = fake_site("alpha", "beta")
    for name, nodes in (("alpha", alpha_nodes), ("beta", beta_nodes)):
        cluster = site.clusters[name]
        part = cluster.partitions["gpu"]._replace(max_nodes=nodes, cpus_per_node=4)
        site.clusters[name] = cluster._replace(partitions={"gpu": part})
    return fake_session(site, alpha=alpha, beta=beta)


def test_several_clusters_split_the_points_by_what_each_runs_at_once(env):
    tmp_path, journal = env
    alpha, beta = FakeArraySlurm("alpha"), FakeArraySlurm("beta")
    session = _two_cluster_session(alpha, beta)           # 16 tasks at once on alpha, 8 on beta
    report = submission.submit(session, request(tmp_path, ["lr=a,b,c", "seed=0..39"], cluster="auto"), journal)
    by_cluster = {a.cluster: a.tasks for a in report.arrays}
    assert by_cluster == {"alpha": 80, "beta": 40} and len(report.arrays) == 2
    points = [pid for s in (alpha, beta) for a in s.arrays.values() for pid, _ in rows_of(a.script).values()]
    assert len(points) == 120 and len(set(points)) == 120  # no point on both clusters
    assert "cluster alpha" in next(iter(alpha.arrays.values())).script
    assert "cluster beta" in next(iter(beta.arrays.values())).script


def test_max_running_is_split_between_clusters(env):
    tmp_path, journal = env
    alpha, beta = FakeArraySlurm("alpha"), FakeArraySlurm("beta")
    session = _two_cluster_session(alpha, beta)
    report = submission.submit(session, request(tmp_path, ["seed=0..29"], cluster="alpha,beta", max_running=6), journal)
    throttles = {a.cluster: array_line(s.arrays[a.job_id].script) for a, s in
                 zip(report.arrays, (alpha, beta))}
    assert throttles["alpha"].endswith("%4") and throttles["beta"].endswith("%2")
    assert sum(a.tasks for a in report.arrays) == 30


def test_canary_starts_one_at_a_time_and_holds_the_other_arrays(env):
    tmp_path, journal = env
    alpha = FakeArraySlurm("alpha", config={"MaxArraySize": "4"})
    report = submission.submit(fake_session(alpha=alpha), request(tmp_path, ["seed=0..9"], canary=3), journal)
    first, *rest = alpha.arrays.values()
    assert array_line(first.script) == "0-3%1" and "slurmkit_sweep_canary" in first.script
    assert all("#SBATCH --hold" in a.script and "slurmkit_sweep_canary" not in a.script for a in rest)
    assert all(t.reason == "JobHeldUser" for a in rest for t in a.tasks.values())
    token = alpha.arrays[first.job_id].comment.split(":")[1]
    held = tmp_path / "sweep" / "canary" / token / "held"
    assert held.read_text() == ",".join(a.job_id for a in rest)
    assert report.arrays[0].indices == "0-3%1"


def test_a_canary_that_passed_before_the_held_list_was_written_gets_the_arrays_released(env, monkeypatch):
    tmp_path, journal = env
    alpha = FakeArraySlurm("alpha", config={"MaxArraySize": "2"})
    from slurmkit.clusterfiles import ClusterFiles

    real_write = ClusterFiles.write

    def write_and_pass(files, path, text):
        real_write(files, path, text)
        if path.endswith("/held"):      # the canary task ends right after the list is written
            real_write(files, path[:-len("held")] + "passed", "")

    monkeypatch.setattr(ClusterFiles, "write", write_and_pass)
    submission.submit(fake_session(alpha=alpha), request(tmp_path, ["seed=0..3"], canary=1), journal)
    second = list(alpha.arrays)[1]
    assert ("scontrol", "release", second) in alpha.commands
    assert all(t.reason == "None" for t in alpha.arrays[second].tasks.values())


def test_a_lost_sbatch_answer_is_found_again_by_its_token(env):
    tmp_path, journal = env
    alpha = FakeArraySlurm("alpha")
    session = fake_session(alpha=alpha)
    alpha.fail_next("submit", ConnectTimeoutError("answer lost").outcome_unknown())
    with pytest.raises(SlurmkitError) as err:
        submission.submit(session, request(tmp_path, ["seed=0..2"]), journal)
    assert err.value.may_have_run
    sweep_id = journal.sweeps()[0].id
    assert [a.phase for a in journal.arrays(sweep_id)] == ["intent"]
    status = state.status(session, sweep_id, journal)
    assert [a.phase for a in status.arrays] == ["submitted"] and status.arrays[0].job_id in alpha.arrays
    assert status.counts() == {"PENDING": 3}
    assert submission.submit(session, request(tmp_path, ["seed=0..2"]), journal).arrays == []   # never twice


def test_a_refused_array_says_what_was_submitted_and_a_resubmission_adds_only_the_rest(env):
    tmp_path, journal = env
    alpha = FakeArraySlurm("alpha", config={"MaxArraySize": "2"})
    session = fake_session(alpha=alpha)
    real = alpha._sbatch
    calls = []

    def second_refused(script):
        calls.append(script)
        if len(calls) == 2:
            return 1, "", "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy\n"
        return real(script)

    alpha._sbatch = second_refused
    with pytest.raises(SlurmkitError) as err:
        submission.submit(session, request(tmp_path, ["seed=0..3"]), journal)
    first = next(iter(alpha.arrays))
    assert "QOS policy" in str(err.value) and "already submitted: alpha:%s (0-1)" % first in str(err.value)
    sweep_id = journal.sweeps()[0].id
    assert [a.phase for a in journal.arrays(sweep_id)] == ["submitted", "refused"]
    report = submission.submit(session, request(tmp_path, ["seed=0..3"]), journal)
    assert [a.tasks for a in report.arrays] == [2] and report.queued == 2 and len(alpha.arrays) == 2
    assert sorted(p.state for p in journal.points(sweep_id)) == ["PENDING"] * 4


def test_usage_errors_come_before_anything_is_submitted(env):
    tmp_path, journal = env
    alpha = FakeArraySlurm("alpha")
    session = fake_session(alpha=alpha)
    with pytest.raises(UsageError, match="placeholder .lrr."):
        submission.submit(session, request(tmp_path, ["lr=1"], command=("python3", "t.py", "{lrr}")), journal)
    spec = JobSpec(command=("true",), template="single", gpus_per_node=0, env={"SLURMKIT_SWEEP_LR": "1"})
    with pytest.raises(UsageError, match="--env SLURMKIT_SWEEP_LR"):
        submission.submit(session, submission.SweepRequest(spec=spec, grid=["lr=1"]), journal)
    assert alpha.commands == [] and journal.sweeps() == []


def test_the_sweep_id_names_the_experiment_not_the_grid():
    a = submission.sweep_id_for("train", COMMAND, {})
    assert a == submission.sweep_id_for("train", COMMAND, {}) and a.startswith("train-")
    assert a != submission.sweep_id_for("train", COMMAND + ("--steps", "10"), {})
    assert a != submission.sweep_id_for("train", COMMAND, {"X": "1"})
    assert submission.sweep_id_for("exp/lr 1", COMMAND, {}).startswith("exp_lr_1-")
    # The image is part of the experiment; a sweep without one keeps the id it always had.
    assert a == "train-" + hashlib.sha256(
        json.dumps(["train", list(COMMAND), []], separators=(",", ":")).encode()).hexdigest()[:8]
    in_image = submission.sweep_id_for("train", COMMAND, {}, "pytorch-25.01")
    assert in_image != a and in_image != submission.sweep_id_for("train", COMMAND, {}, "pytorch-25.02")
    assert in_image != submission.sweep_id_for("train", COMMAND, {}, "pytorch-25.01", ("/data",))


def test_failed_points_are_written_as_a_points_file_that_reads_back(env):
    from slurmkit.sweep import points as pts

    tmp_path, journal = env
    alpha = FakeArraySlurm("alpha")
    session = fake_session(alpha=alpha)
    report = submission.submit(session, request(tmp_path, ["lr=it's,a b", "seed=0..1"]), journal)
    alpha.run(next(iter(alpha.arrays)), {0: 1, 3: 2})
    status = state.status(session, report.sweep_id, journal)
    failed = [p for p in status.points if p.state in state.FAILED_STATES]
    path = tmp_path / "failed.jsonl"
    assert actions.write_points_file(str(path), failed) == 2
    names, rows = pts.read_points_file(str(path))
    assert names == ["lr", "seed"] and sorted(dict(r)["lr"] for r in rows) == ["a b", "it's"]


def test_journal_finds_sweeps_by_unique_prefix(env):
    tmp_path, journal = env
    alpha = FakeArraySlurm("alpha")
    session = fake_session(alpha=alpha)
    report = submission.submit(session, request(tmp_path, ["seed=0"], sweep_name="alpha1"), journal)
    submission.submit(session, request(tmp_path, ["seed=0"], sweep_name="alpha2", sweep_dir=str(tmp_path / "x")),
                      journal)
    assert journal.find(report.sweep_id).id == report.sweep_id
    assert journal.find("alpha1").id == report.sweep_id
    with pytest.raises(SlurmkitError, match="ambiguous"):
        journal.find("alpha")
    with pytest.raises(SlurmkitError, match="no sweep 'nope'"):
        journal.find("nope")


def test_fake_tasks_by_index_helper_reports_states(env):
    tmp_path, journal = env
    alpha = FakeArraySlurm("alpha")
    submission.submit(fake_session(alpha=alpha), request(tmp_path, ["seed=0..1"]), journal)
    array = next(iter(alpha.arrays))
    alpha.finish_task(array, 1, "FAILED", 2)
    assert tasks_by_index(alpha, array) == [(0, "PENDING"), (1, "FAILED")]


def test_status_during_a_submission_leaves_its_intents_alone(env):
    tmp_path, journal = env
    alpha = FakeArraySlurm("alpha")
    session = fake_session(alpha=alpha)
    alpha.fail_next("submit", ConnectTimeoutError("answer lost").outcome_unknown())
    with pytest.raises(SlurmkitError):
        submission.submit(session, request(tmp_path, ["seed=0..1"]), journal)
    sweep_id = journal.sweeps()[0].id
    with journal.locked(sweep_id):            # as a submission in progress would
        other = Journal(journal.path)
        try:
            status = state.status(session, sweep_id, other)
        finally:
            other.close()
    assert [a.phase for a in status.arrays] == ["intent"]
    assert [c for c in alpha.commands if c[0] == "squeue" and "--user=" in " ".join(c)] == []


def test_max_running_below_the_number_of_clusters_uses_the_soonest_only(env):
    tmp_path, journal = env
    alpha, beta = FakeArraySlurm("alpha"), FakeArraySlurm("beta")
    session = _two_cluster_session(alpha, beta)
    report = submission.submit(session, request(tmp_path, ["seed=0..9"], cluster="auto", max_running=1), journal)
    assert [(a.cluster, a.tasks, a.indices) for a in report.arrays] == [("alpha", 10, "0-9%1")]
    assert beta.arrays == {}


def test_a_cluster_that_cannot_take_the_job_is_left_out_with_a_warning(env):
    tmp_path, journal = env
    alpha, beta = FakeArraySlurm("alpha"), FakeArraySlurm("beta")
    session = _two_cluster_session(alpha, beta, alpha_nodes=4, beta_nodes=1)
    spec = JobSpec(command=COMMAND, template="srun", nodes=2, gpus_per_node=0, time="00:05:00")
    report = submission.submit(session, submission.SweepRequest(spec=spec, grid=["seed=0..3"], cluster="alpha,beta",
                                                                sweep_dir=str(tmp_path / "s")), journal)
    assert {a.cluster for a in report.arrays} == {"alpha"}
    assert any(w.startswith("cluster beta not used: ") and "2 nodes" in w for w in report.warnings)


def test_a_share_the_controller_can_never_hold_is_refused_and_half_of_it_warned(env):
    tmp_path, journal = env
    alpha = FakeArraySlurm("alpha", config={"MaxJobCount": "100", "MaxArraySize": "50"})
    session = fake_session(alpha=alpha)
    with pytest.raises(UsageError, match="cluster alpha holds at most 100 jobs .MaxJobCount. and each of the "
                                         "sweep's 101 tasks"):
        submission.submit(session, request(tmp_path, ["seed=0..100"]), journal)
    assert sbatches(alpha) == []
    report = submission.submit(session, request(tmp_path, ["seed=0..59"]), journal)
    assert any("this sweep puts 60 tasks there" in w for w in report.warnings) and len(report.arrays) == 2


def test_pending_points_move_off_a_blocked_cluster_and_never_run_twice(env):
    tmp_path, journal = env
    alpha, beta = FakeArraySlurm("alpha"), FakeArraySlurm("beta")
    session = _two_cluster_session(alpha, beta)
    report = submission.submit(session, request(tmp_path, ["seed=0..35"], cluster="auto"), journal)
    (on_beta,) = [a for a in report.arrays if a.cluster == "beta"]
    assert on_beta.tasks == 8
    started = beta.task(on_beta.job_id, 0)
    beta.set_state(started.job_id, "RUNNING")              # one task of beta got going
    beta.finish_task(on_beta.job_id, 1)                    # one already ended
    beta.commands.clear()
    moved = actions.move(session, report.sweep_id, "beta", journal=journal)
    names = ["%s_%d" % (on_beta.job_id, i) for i in range(2, on_beta.tasks)]
    assert ("scancel", *names) in beta.commands
    assert len(moved.moved) == on_beta.tasks - 2 and moved.not_moved == []
    assert [a.cluster for a in moved.arrays] == ["alpha"] and moved.arrays[0].indices == "0-%d" % (on_beta.tasks - 3)
    status = state.status(session, report.sweep_id, journal)
    assert status.counts() == {"COMPLETED": 1, "PENDING": 36 - 2, "RUNNING": 1}
    on_alpha = {p.point_id for p in status.points if status.array_of(p).cluster == "alpha"}
    assert set(moved.moved) <= on_alpha and started.state == "RUNNING"
    with pytest.raises(UsageError, match="no pending tasks"):
        actions.move(session, report.sweep_id, "beta", journal=journal)


def test_a_task_that_did_not_take_the_cancel_is_not_moved(env):
    tmp_path, journal = env
    alpha, beta = FakeArraySlurm("alpha"), FakeArraySlurm("beta")
    session = _two_cluster_session(alpha, beta)
    report = submission.submit(session, request(tmp_path, ["seed=0..35"], cluster="auto"), journal)
    (on_beta,) = [a for a in report.arrays if a.cluster == "beta"]
    real = beta._scancel
    beta._scancel = lambda ids: real([i for i in ids if not i.endswith("_3")])   # one task keeps pending
    moved = actions.move(session, report.sweep_id, "beta", "alpha", journal=journal)
    stuck = next(p.point_id for p in journal.points(report.sweep_id)
                 if p.array_id is not None and p.idx == 3 and p.state == "PENDING" and
                 next(a for a in journal.arrays(report.sweep_id) if a.id == p.array_id).cluster == "beta")
    assert moved.not_moved == [stuck] and stuck not in moved.moved and len(moved.moved) == 7
    assert any("1 task(s) on cluster beta started or did not take the cancel" in w for w in moved.warnings)


def test_an_ended_task_without_an_exit_from_slurm_takes_the_one_it_recorded(env):
    tmp_path, journal = env
    alpha = FakeArraySlurm("alpha")
    session = fake_session(alpha=alpha)
    report = submission.submit(session, request(tmp_path, ["seed=0..1"]), journal)
    array = next(iter(alpha.arrays))
    rows = rows_of(alpha.arrays[array].script)
    alpha.run(array, {1: 7})
    real = alpha._squeue_tasks

    def no_exit(rest):           # a release whose squeue says nothing of how a task ended
        code, out, err = real(rest)
        return code, "".join("\x1f".join(f if i != 5 else "N/A" for i, f in enumerate(ln.split("\x1f"))) + "\n"
                             for ln in out.splitlines()), err

    alpha._squeue_tasks = no_exit
    directory = tmp_path / "sweep" / "points" / rows[1][0]
    directory.mkdir(parents=True)
    (directory / "exit.status").write_text("7 %s_1 0\n" % array)
    status = state.status(session, report.sweep_id, journal)
    failed = [p for p in status.points if p.state == "FAILED"]
    assert [(p.idx, p.exit_code, p.signal) for p in failed] == [(1, 7, None)]



@pytest.mark.parametrize("accounting", [False, True])
def test_pending_tasks_cancelled_in_their_array_record_end_at_once(env, accounting):
    """Without accounting squeue's array line is the only word on them; with it, slurmdbd may not have the
    cancel yet when sacct is asked: either way they are CANCELLED now, not UNKNOWN (and never moved)."""
    tmp_path, journal = env
    alpha = FakeArraySlurm("alpha", accounting=accounting)
    session = fake_session(alpha=alpha)
    report = submission.submit(session, request(tmp_path, ["seed=0..3"], max_running=1), journal)
    (array,) = report.arrays
    alpha.set_state(alpha.task(array.job_id, 0).job_id, "RUNNING")
    alpha._sacct_tasks = lambda ids: (0, "", "")          # slurmdbd has not recorded the cancel yet
    state.status(session, report.sweep_id, journal)
    alpha._scancel(["%s_%d" % (array.job_id, i) for i in (1, 2, 3)])
    status = state.status(session, report.sweep_id, journal)
    assert status.counts() == {"CANCELLED": 3, "RUNNING": 1}
    assert {p.exit_code for p in status.points if p.state == "CANCELLED"} == {None}


def test_a_lost_answer_is_found_by_its_token_even_when_every_task_was_cancelled_before_starting(env):
    tmp_path, journal = env
    alpha = FakeArraySlurm("alpha")
    session = fake_session(alpha=alpha)
    alpha.fail_next("submit", ConnectTimeoutError("answer lost").outcome_unknown())
    with pytest.raises(SlurmkitError):
        submission.submit(session, request(tmp_path, ["seed=0..2"]), journal)
    (array_id,) = alpha.arrays
    alpha._scancel([array_id])                        # squeue now prints the array's record only (N/A)
    sweep_id = journal.sweeps()[0].id
    status = state.status(session, sweep_id, journal)
    assert [(a.phase, a.job_id) for a in status.arrays] == [("submitted", array_id)]
    assert status.counts() == {"CANCELLED": 3}
