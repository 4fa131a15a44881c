"""The sweep commands through the CLI's one error boundary, on fake clusters that run arrays:
what goes to stdout and stderr, exit codes, one-line errors."""

import json

import pytest

from slurmkit.testing import FakeArraySlurm

from harness import one_error_line, run_main


@pytest.fixture
def clusters(tmp_path, monkeypatch):
    """alpha and beta of site_configs/local.yaml, served by FakeArraySlurm; state in tmp_path."""
    import slurmkit.session

    fakes = {"alpha": FakeArraySlurm("alpha", partitions=("gpu", "cpu"), accounting=True,
                                     config={"MaxArraySize": "5"}),
             "beta": FakeArraySlurm("beta", partitions=("gpu", "urgent")),
             "gamma": FakeArraySlurm("gamma", partitions=("npu",))}
    monkeypatch.setattr(slurmkit.session, "make_backend", lambda cluster, **kw: fakes[cluster.name])
    monkeypatch.setenv("SLURMKIT_VIA", "local")
    monkeypatch.setenv("SLURMKIT_SITE", "local")
    monkeypatch.setenv("SLURMKIT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SLURMKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return fakes


SUBMIT = ("submit", "--sweep", "lr=1e-3,3e-4", "--sweep", "seed=0..3", "-M", "alpha", "-p", "cpu", "-T", "single",
          "--", "python3", "train.py", "--lr", "{lr}", "--seed", "{seed}")


def test_submit_sweep_prints_only_the_sweep_id_on_stdout(clusters, capsys, tmp_path):
    code, out, err = run_main(capsys, *SUBMIT)
    assert code == 0
    sweep_id = out.strip()
    assert out == sweep_id + "\n" and sweep_id.startswith("train-")
    arrays = clusters["alpha"].arrays
    assert len(arrays) == 2 and [len(a.tasks) for a in arrays.values()] == [4, 4]
    assert err.count("submitted alpha:") == 2 and "8 point(s), 8 submitted" in err
    assert str(tmp_path / "slurmkit-sweeps" / sweep_id) in err     # the default directory, absolute


def test_sweep_submit_json_and_status_json(clusters, capsys):
    code, out, _ = run_main(capsys, "sweep", "submit", "--json", *SUBMIT[1:])
    report = json.loads(out)
    assert code == 0 and report["tasks_submitted"] == 8 and report["skipped"] == {"completed": 0, "queued": 0}
    alpha = clusters["alpha"]
    first = report["submitted"][0]["job_id"]
    alpha.run(first, {2: 3})
    code, out, _ = run_main(capsys, "sweep", "status", report["sweep"], "--json")
    data = json.loads(out)
    assert code == 0 and data["counts"] == {"COMPLETED": 3, "FAILED": 1, "PENDING": 4} and data["total"] == 8
    failed = [p for p in data["points"] if p["state"] == "FAILED"]
    assert failed[0]["exit_code"] == 3 and failed[0]["task"] == "alpha:%s_2" % first


def test_status_text_lists_failed_points_with_their_values(clusters, capsys, tmp_path):
    _, out, _ = run_main(capsys, *SUBMIT)
    sweep_id = out.strip()
    alpha = clusters["alpha"]
    for array in list(alpha.arrays):
        alpha.run(array, {0: 2})
    code, out, err = run_main(capsys, "sweep", "status", sweep_id)
    assert code == 0 and err == ""
    assert "COMPLETED 6  FAILED 2" in out and "ended without completing: 2 point(s)" in out
    assert "lr=1e-3 seed=0  FAILED exit 2" in out and "rerun them: slurmkit sweep rerun %s" % sweep_id in out
    code, out, err = run_main(capsys, "sweep", "status", sweep_id[:10], "--failed", "--output", "failed.jsonl")
    assert code == 0 and "wrote 2 failed point(s) to failed.jsonl" in err
    rows = [json.loads(ln) for ln in (tmp_path / "failed.jsonl").read_text().splitlines()]
    assert sorted(r["seed"] for r in rows) == ["0", "0"]


def test_rerun_and_cancel_say_what_they_did(clusters, capsys):
    _, out, _ = run_main(capsys, *SUBMIT)
    sweep_id = out.strip()
    alpha = clusters["alpha"]
    first, second = list(alpha.arrays)
    alpha.run(first, {1: 1})
    code, out, _ = run_main(capsys, "sweep", "rerun", sweep_id)
    assert code == 0 and out == "requeued alpha:%s: 1 task(s), array 1\n" % first
    code, out, _ = run_main(capsys, "sweep", "cancel", sweep_id)
    assert code == 0 and out == "cancelled 5 task(s) of sweep %s: alpha:%s, alpha:%s\n" % (sweep_id, first, second)
    code, out, err = run_main(capsys, "sweep", "cancel", sweep_id)
    assert code == 0 and out == "" and "has no queued or running tasks" in err


def test_sweep_list_shows_the_journal(clusters, capsys):
    _, out, _ = run_main(capsys, *SUBMIT)
    code, listed, _ = run_main(capsys, "sweep", "list", "--json")
    (entry,) = json.loads(listed)
    assert code == 0 and entry["sweep"] == out.strip() and entry["points"] == 8 and entry["parameters"] == ["lr", "seed"]


@pytest.mark.parametrize("args,message", [
    (("submit", "--max-running", "4", "--", "true"), "--max-running applies to sweeps"),
    (("submit", "--sweep", "lr=1", "--auto-requeue", "--checkpoint-dir", "/c", "-M", "alpha", "--", "true", "{lr}"),
     "--checkpoint-dir does not apply to a sweep: each point checkpoints into its own directory"),
    (("submit", "--sweep", "lr=1", "--max-restarts", "2", "-M", "alpha", "--", "true", "{lr}"),
     "--max-restarts, --checkpoint-convention, --transient-exit, --hang-timeout and --hang-startup need --auto-requeue"),
    (("sweep", "submit", "--sweep", "lr=1", "--transient-exit", "3", "-M", "alpha", "--", "true", "{lr}"),
     "--max-restarts, --checkpoint-convention, --transient-exit, --hang-timeout and --hang-startup need --auto-requeue"),
    (("sweep", "submit", "--sweep", "lr=1", "--hang-timeout", "10", "-M", "alpha", "--", "true", "{lr}"),
     "--max-restarts, --checkpoint-convention, --transient-exit, --hang-timeout and --hang-startup need --auto-requeue"),
    (("submit", "--auto-requeue", "--hang-timeout", "soon", "-M", "alpha", "--", "true"),
     "--hang-timeout soon: give a time as for --time ([D-]HH:MM:SS, MM:SS, MM, D-HH, D-HH:MM; 0: never)"),
    (("submit", "--auto-requeue", "--hang-timeout", "unlimited", "-M", "alpha", "--", "true"),
     "--hang-timeout unlimited: give a time as for --time"),
    (("submit", "--auto-requeue", "--hang-startup", "-5", "-M", "alpha", "--", "true"),
     "--hang-startup -5: give a time as for --time ([D-]HH:MM:SS, MM:SS, MM, D-HH, D-HH:MM; 0: the hang timeout)"),
    (("submit", "--hang-startup", "2", "-M", "alpha", "--", "true"),
     "--max-restarts, --checkpoint-convention, --transient-exit, --hang-timeout and --hang-startup need --auto-requeue"),
    (("submit", "--checkpoint-dir", "/c", "-M", "alpha", "--", "true"), "--checkpoint-dir needs --auto-requeue"),
    (("sweep", "submit", "--sweep", "lr=1", "--checkpoint-dir", "/c", "--", "true", "{lr}"),
     "No such option '--checkpoint-dir'"),
    (("submit", "--sweep", "lr=1", "--dry-run", "--", "true", "{lr}"), "--dry-run does not apply to a sweep"),
    (("submit", "--sweep", "lr", "--", "true"), "--sweep 'lr': write NAME=V1,V2"),
    (("submit", "--sweep", "lr=1", "--", "true", "{lrr}"), "placeholder {lrr} in the command"),
    (("submit", "--sweep", "lr=1", "--canary", "0", "--", "true"), "'--canary': 0 is below"),
    (("submit", "--sweep-file", "nope.jsonl", "--", "true"), "--sweep-file nope.jsonl: no such file"),
    (("sweep", "submit", "-M", "alpha", "--", "true"), "a sweep needs --sweep"),
])
def test_usage_errors_are_one_line_and_exit_2(clusters, capsys, args, message):
    code, out, err = run_main(capsys, *args)
    assert code == 2 and out == ""
    assert message in one_error_line(err)
    assert all(not fake.commands for fake in clusters.values())


def test_an_unknown_sweep_is_one_line_and_exit_1(clusters, capsys):
    code, out, err = run_main(capsys, "sweep", "status", "nope")
    assert code == 1 and out == "" and "no sweep 'nope'" in one_error_line(err)


def test_a_refused_submission_is_one_line_and_exit_1(clusters, capsys):
    clusters["alpha"].answer(["sbatch"], stderr="sbatch: error: Batch job submission failed: Invalid account\n",
                             returncode=1)
    code, out, err = run_main(capsys, *SUBMIT)
    assert code == 1 and out == "" and "Invalid account" in one_error_line(err)


@pytest.mark.parametrize("command", [("submit",), ("sweep", "submit")])
def test_auto_requeue_sweep_tasks_are_tracked_and_the_daemon_restarts_one(clusters, capsys, command):
    code, out, err = run_main(capsys, *command, "--auto-requeue", "--max-restarts", "2", *SUBMIT[1:])
    sweep_id = out.strip()
    assert code == 0 and "its tasks are tracked: the requeue daemon" in err
    code, listed, _ = run_main(capsys, "daemon", "jobs", "--json")
    tracked = json.loads(listed)
    assert code == 0 and len(tracked) == 8 and all(t["name"].startswith(sweep_id + "/") for t in tracked)
    # The old name still answers, the same, after one note on stderr.
    code, old_listed, err = run_main(capsys, "jobs", "--json")
    assert (code, old_listed, err) == (0, listed, "Note: 'slurmkit jobs' is now 'slurmkit daemon jobs'\n")
    assert {json.dumps(t["budget"]) for t in tracked} == {'{"max_restarts": 2}'}
    alpha = clusters["alpha"]
    first, second = list(alpha.arrays)
    alpha.run(first)
    alpha.run(second)
    alpha.finish_task(second, 1, "PREEMPTED")
    code, out, err = run_main(capsys, "daemon", "once", "--json")
    report = json.loads(out)
    assert code == 0 and len(report["finished"]) == 8 and len(report["restarted"]) == 1, (out, err)
    (restart,) = [a for a in alpha.arrays.values() if a.job_id not in (first, second)]
    assert restart.indices == [1] and "export SLURMKIT_ATTEMPT=2" in restart.script
    code, out, _ = run_main(capsys, "sweep", "status", sweep_id, "--json")
    assert json.loads(out)["counts"] == {"COMPLETED": 7, "PENDING": 1}
    code, out, err = run_main(capsys, "daemon", "jobs")                    # the human view of the same
    named = [ln for ln in out.splitlines() if ln.split()[1:2] and ln.split()[1].startswith(sweep_id + "/")]
    assert code == 0 and err == "" and len(named) == 1 and " ACTIVE " in named[0]   # the restarted point only
    code, out, err = run_main(capsys, "daemon", "once")
    assert code == 0 and err == "" and out.strip()
