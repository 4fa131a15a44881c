"""The Python API on the real clusters: submitit's executor, locally and over SSH.

Each call runs as a Slurm job to its end; the test reads what came back.  The functions are
defined inside the tests (cloudpickle carries them by value: the nodes cannot import this test
module), and over SSH the executor's folder here and its folder on the cluster are different
directories, so that nothing can pass through a shared filesystem unseen.
"""

import datetime
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import slurmkit
from slurmkit.errors import FailedJobError, UncompletedJobError, UsageError

from conftest import job_info, slurm, torch_missing

ROOT = Path(__file__).resolve().parents[2]
SITE = str(ROOT / "site_configs" / "local.yaml")
NO_TORCH = torch_missing(sys.executable)


@pytest.fixture
def executor(tmp_path):
    ex = slurmkit.AutoExecutor(tmp_path / "jobs", cluster="alpha", site=SITE)
    ex.update_parameters(timeout_min=3, slurm_partition="cpu")
    yield ex
    ex.close()


def test_a_call_returns_its_value_and_its_job_is_a_slurm_job(executor):
    def add(a, b):
        return {"sum": a + b, "job": os.environ["SLURM_JOB_ID"], "python": sys.executable}

    job = executor.submit(add, 5, 7)
    cluster, slurm_id = job.job_id.split(":")
    assert cluster == "alpha" and job.num_tasks == 1
    assert job.result() == {"sum": 12, "job": slurm_id, "python": sys.executable}
    assert job.done() and job.state == "COMPLETED" and job.exception() is None
    info = job_info("alpha", slurm_id)
    assert info["JobName"] == "add" and info["Partition"] == "cpu" and info["TimeLimit"] == "00:03:00"


def test_a_raised_exception_comes_back_with_its_traceback(executor):
    def divide(a, b):
        return a / b

    job = executor.submit(divide, 1, 0)
    with pytest.raises(FailedJobError) as err:
        job.result()
    assert isinstance(err.value.exception, ZeroDivisionError)
    assert "raised ZeroDivisionError: division by zero" in str(err.value)
    assert ", in divide\n" in err.value.remote_traceback
    assert isinstance(job.exception(), FailedJobError) and job.state == "FAILED"
    assert "ZeroDivisionError" in job.stdout()        # the traceback is in the job's log too


def test_two_tasks_on_two_nodes_each_run_the_call_and_results_are_in_rank_order(executor):
    def where():
        return (int(os.environ["SLURM_PROCID"]), os.environ["SLURMD_NODENAME"], os.environ["MASTER_ADDR"])

    executor.update_parameters(nodes=2, tasks_per_node=1)
    job = executor.submit(where)
    results = job.results()
    assert [r[0] for r in results] == [0, 1] and len({r[1] for r in results}) == 2, results
    assert len({r[2] for r in results}) == 1                        # one rendezvous for both
    assert job.result() == results[0] and job.task(1).result() == results[1]


@pytest.mark.skipif(bool(NO_TORCH), reason="PyTorch is not importable here (make venv-train): %s" % (NO_TORCH,))
def test_torch_distributed_inside_a_call_on_two_nodes(executor):
    def all_reduce():
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo", rank=int(os.environ["SLURM_PROCID"]),
                                world_size=int(os.environ["SLURM_NTASKS"]))
        value = torch.tensor([float(dist.get_rank() + 1)])
        dist.all_reduce(value)
        world = dist.get_world_size()
        dist.destroy_process_group()
        return world, value.item()

    executor.update_parameters(nodes=2, tasks_per_node=1, timeout_min=5)
    assert executor.submit(all_reduce).results() == [(2, 3.0), (2, 3.0)]


def test_a_job_ended_before_its_call_returned_is_uncompleted_with_its_log(executor):
    def sleep_forever():
        import time

        print("started", flush=True)
        time.sleep(600)

    job = executor.submit(sleep_forever)
    from harness import wait_until

    wait_until(lambda: "started" in (job.stdout() or ""), 60, what="the call to start")
    job.cancel()
    with pytest.raises(UncompletedJobError) as err:
        job.result()
    assert "ended CANCELLED without a result" in str(err.value) and "started" in str(err.value)


def test_a_call_after_another_job_waits_for_it_as_submitit_users_ask_for_it(executor, tmp_path):
    # submitit's users chain jobs with slurm_additional_parameters={"dependency": ...}.
    first = slurm("alpha", "sbatch", "--parsable", "-p", "cpu", "-t", "2", "-o", str(tmp_path / "first-%j"),
                  "--wrap", "sleep 3").stdout.strip()
    executor.update_parameters(slurm_additional_parameters={"dependency": "afterok:" + first})
    job = executor.submit(time.time)
    slurm_id = job.job_id.split(":")[1]
    assert job_info("alpha", slurm_id)["Dependency"] == "afterok:%s(unfulfilled)" % first
    started = job.result()
    ended = datetime.datetime.fromisoformat(job_info("alpha", first)["EndTime"]).timestamp()
    assert job_info("alpha", first)["JobState"] == "COMPLETED" and started >= ended


def test_job_from_id_in_another_process(executor, tmp_path):
    job = executor.submit(pow, 2, 10)
    assert job.result() == 1024
    code = ("import slurmkit; job = slurmkit.Job.from_id(%r, %r, site=%r); print(job.result(), job.state)"
            % (job.job_id, str(executor.folder), SITE))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.split() == ["1024", "COMPLETED"], proc.stderr


def test_a_python_without_cloudpickle_is_refused_before_anything_is_queued(tmp_path):
    system = "/usr/bin/python3"
    if subprocess.run([system, "-c", "import cloudpickle"], capture_output=True).returncode == 0:
        pytest.skip("this machine's system Python has cloudpickle")
    before = slurm("alpha", "squeue", "-h", "-o", "%i").stdout.split()
    ex = slurmkit.AutoExecutor(tmp_path / "jobs", cluster="alpha", site=SITE, python=system)
    ex.update_parameters(slurm_partition="cpu")
    with pytest.raises(UsageError) as err:
        ex.submit(len, [1])
    assert str(err.value).startswith("%s on this machine has no cloudpickle: install it there" % system)
    assert slurm("alpha", "squeue", "-h", "-o", "%i").stdout.split() == before
    assert list((tmp_path / "jobs").iterdir()) == []


def test_hostile_values_are_refused_or_passed_literally(executor, tmp_path):
    marker = tmp_path / "ran"
    name = "$(touch${IFS}%s);`touch${IFS}%s`" % (marker, marker)      # no blank: one word for job_info
    executor.update_parameters(name=name)
    job = executor.submit(len, "abc")
    assert job.result() == 3 and not marker.exists()
    assert job_info("alpha", job.job_id.split(":")[1])["JobName"] == name
    with pytest.raises(UsageError, match="'wrap' is not passed to sbatch"):
        executor.update_parameters(slurm_additional_parameters={"wrap": "touch %s" % marker})


def test_over_ssh_the_call_and_its_outcome_travel_on_the_connection(tmp_path, monkeypatch):
    # gamma through its login node; the folder here and the folder on the cluster are different
    # directories: the call is written, and its outcome read, through the SSH connection only.
    monkeypatch.setenv("SLURMKIT_VIA", "ssh")
    here, there = tmp_path / "here", tmp_path / "there"
    with slurmkit.AutoExecutor(here, cluster="gamma", site=SITE, python=sys.executable,
                               cluster_folder=str(there)) as ex:
        ex.update_parameters(timeout_min=3)

        def greet(name):
            return "hello %s from %s" % (name, os.environ["SLURM_CLUSTER_NAME"])

        job = ex.submit(greet, "it's $(me)")
        assert job.job_id.startswith("gamma:")
        assert job.result() == "hello it's $(me) from gamma"
    assert sorted(p.name for p in here.iterdir()) == ["gamma_%s.job.json" % job.job_id.split(":")[1]]
    assert {p.name.split("_", 1)[1] for p in there.iterdir()} == {"call.txt", "0_result.txt", "log.out"}


def test_cluster_auto_places_the_call_where_it_starts_soonest(executor, tmp_path):
    ex = slurmkit.AutoExecutor(tmp_path / "auto", cluster="auto", site=SITE)
    ex.update_parameters(timeout_min=3)
    job = ex.submit(int, "42")
    assert job.result() == 42 and job.cluster in ("alpha", "beta", "gamma")
    ex.close()


def test_map_array_of_100_on_gamma_runs_every_point_once_in_arrays_it_takes(tmp_path):
    # gamma takes arrays of indices below 50 (MaxArraySize) and of at most 20 tasks (max_array_tasks):
    # the 100 calls go as five arrays of 20, indices 0-19 each.
    config = slurm("gamma", "scontrol", "show", "config").stdout
    assert re.search(r"MaxArraySize\s*=\s*50\b", config) and "max_array_tasks=20" in config, config
    ledger = tmp_path / "ledger"
    with slurmkit.AutoExecutor(tmp_path / "jobs", cluster="gamma", site=SITE) as ex:
        ex.update_parameters(timeout_min=5)

        def square(x):
            with open(str(ledger), "a") as f:      # one line per run: a point run twice shows twice
                f.write("%d\n" % x)
            return x * x, os.environ["SLURM_ARRAY_JOB_ID"], int(os.environ["SLURM_ARRAY_TASK_ID"])

        jobs = ex.map_array(square, range(100))
        assert len(jobs) == 100 and all(j.job_id.startswith("gamma:") for j in jobs)
        results = [j.result() for j in jobs]
    assert [r[0] for r in results] == [x * x for x in range(100)]
    arrays = sorted({r[1] for r in results}, key=int)
    assert len(arrays) == 5 and [j.job_id for j in jobs[:2]] == ["gamma:%s_0" % arrays[0], "gamma:%s_1" % arrays[0]]
    assert [(r[1], r[2]) for r in results] == [(a, i) for a in arrays for i in range(20)]
    assert sorted(int(x) for x in ledger.read_text().split()) == list(range(100))
    assert all(j.state == "COMPLETED" for j in jobs)


def test_a_batch_submits_its_calls_as_one_array_when_the_block_ends(executor):
    def add(a, b):
        return a + b

    with executor.batch():
        first = executor.submit(add, 1, 2)
        second = executor.submit(pow, 3, 4)
        with pytest.raises(UsageError, match="submitted when its batch"):
            first.job_id
    assert first.result() == 3 and second.result() == 81
    array = first.job_id.rsplit("_", 1)[0]
    assert (first.job_id, second.job_id) == (array + "_0", array + "_1")
    # A block that raises submits nothing.
    before = slurm("alpha", "squeue", "-h", "-o", "%i").stdout.split()
    with pytest.raises(KeyError):
        with executor.batch():
            executor.submit(add, 1, 1)
            raise KeyError("stop")
    assert slurm("alpha", "squeue", "-h", "-o", "%i").stdout.split() == before


# submitit's README example, word for word but the partition and time limit (also run beside submitit by the
# examples' module).
SUBMITIT_README = Path(__file__).parent / "data" / "submitit_examples" / "add.py"


def test_submitits_readme_example_runs_unchanged_through_slurmkit_compat(tmp_path):
    shutil.copy(SUBMITIT_README, tmp_path / "example.py")
    proc = subprocess.run([sys.executable, "-m", "slurmkit.compat", "example.py"], cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, SLURMKIT_SITE=SITE))
    assert proc.returncode == 0, proc.stderr
    job_id, output = proc.stdout.split()
    assert re.fullmatch(r"alpha:[0-9]+", job_id), proc.stdout       # the site's default cluster, a global id
    assert output == "12"
    assert job_info("alpha", job_id.split(":")[1])["JobState"] == "COMPLETED"
    assert (tmp_path / "log_test" / ("%s.job.json" % job_id.replace(":", "_"))).exists()


def test_slurm_setup_lines_run_in_the_batch_script_before_the_call(executor, tmp_path):
    import shlex

    where = tmp_path / "a dir"
    where.mkdir()
    executor.update_parameters(slurm_setup=['export SETUP_SAW="job $SLURM_JOB_ID"', "cd %s" % shlex.quote(str(where))])

    def seen():
        return os.environ["SETUP_SAW"], os.getcwd()

    job = executor.submit(seen)
    assert job.result() == ("job %s" % job.job_id.split(":")[1], str(where))
