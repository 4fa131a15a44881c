"""The Python API's pure parts: submitit's parameters as a job request, and the call and its outcome
as files, with the task-side bootstrap run in a real Python process."""

import json
import os
import subprocess
import sys

import pytest

from slurmkit.api import params, payload
from slurmkit.errors import UsageError, WaitTimeoutError


# ---------------------------------------------------------------------------
# Parameters

def test_auto_executor_names_become_the_job_spec():
    got = params.request({"timeout_min": 90, "nodes": 2, "tasks_per_node": 4, "gpus_per_node": 8,
                          "cpus_per_task": 10, "mem_gb": 1.5, "name": "train", "slurm_partition": "gpu",
                          "slurm_additional_parameters": {"account": "proj", "exclusive": True},
                          "comm": "heavy", "image": "pytorch"}, generic=True)
    assert got.partition == "gpu"
    assert got.fields == {"time": "1:30:00", "nodes": 2, "procs_per_node": 4, "gpus_per_node": 8, "cpus_per_task": 10,
                          "mem": "1536M", "name": "train", "account": "proj", "exclusive": True, "comm": "heavy",
                          "image": "pytorch"}


def test_submitits_dependency_begin_and_reservation_go_through_additional_parameters():
    extra = {"dependency": "afterok:1234", "begin": "now+1hour", "reservation": "hero"}
    assert params.request({"slurm_additional_parameters": extra}, generic=True).fields == extra


def test_prefer_and_deadline_place_the_call_in_time_as_the_cli_does():
    import datetime

    got = params.request({"prefer": "green", "deadline": datetime.datetime(2026, 12, 6, 8, 0, 0, 500)}, True)
    assert (got.prefer, got.deadline) == ("green", "2026-12-06T08:00:00")
    assert got.fields == {"prefer": "green"}          # the site's GPU frequency for green, when it sets one
    soon = params.request({"prefer": "soon", "deadline": "+8h"}, False)
    assert (soon.prefer, soon.deadline, soon.fields) == ("soon", "+8h", {})


def test_slurm_executor_names_and_slurms_own_time():
    got = params.request({"partition": "cpu", "time": "2-00:00:00", "ntasks_per_node": 2, "mem": "16G",
                          "job_name": "x", "exclude": "n1,n2"}, generic=False)
    assert got.partition == "cpu" and got.fields == {"time": "2-00:00:00", "procs_per_node": 2, "mem": "16G",
                                                     "name": "x", "exclude": ("n1", "n2")}
    assert params.request({"time": 5}, generic=False).fields == {"time": "0:05:00"}


@pytest.mark.parametrize("parameters,generic,says", [
    ({"timeout": 5}, True, "unknown executor parameter 'timeout' (known: "),
    ({"partition": "x"}, True, "unknown executor parameter 'partition'"),          # AutoExecutor: slurm_partition
    ({"slurm_partition": "x"}, False, "unknown executor parameter 'slurm_partition'"),
    ({"timeout_min": 5, "slurm_time": 6}, True, "given twice"),
    ({"nodes": 0}, True, "nodes=0: give a whole number of at least 1"),
    ({"nodes": True}, True, "nodes=True"),
    ({"mem_gb": -1}, True, "mem_gb=-1: give a positive number of GB"),
    ({"mem": "16G; rm -rf ~"}, False, "mem='16G; rm -rf ~': give a size such as 16G"),
    ({"job_name": "a\nb"}, False, "give a non-empty string of one line"),
    ({"additional_parameters": {"wrap": "rm -rf ~"}}, False, "'wrap' is not passed to sbatch by slurmkit"),
    ({"additional_parameters": {"account": "a"}, "account": "b"}, False, "account given both"),
    ({"additional_parameters": {"dependency": "afterok:alpha:12"}}, False, "1234, not alpha:1234"),
    ({"prefer": "fast"}, True, "prefer='fast': choose one of soon, cheap, green"),
    ({"deadline": ""}, True, "deadline"),
    ({"prefer": "green", "auto_requeue": True}, True, "do not apply to auto_requeue=True yet"),
    ({"slurm_additional_parameters": {"begin": "tonight"}}, True, "--begin 'tonight'"),
    ({"env": {"A": 1}}, True, "env: give a dict of strings"),
])
def test_wrong_parameters_are_refused_by_name(parameters, generic, says):
    with pytest.raises(UsageError) as err:
        params.request(parameters, generic)
    assert says in str(err.value)


def test_slurm_setup_lines_go_to_the_job_spec_as_written_one_line_each():
    lines = ["module load cuda/12", 'export A="$(hostname)"']
    assert params.request({"slurm_setup": lines}, True).fields == {"setup": tuple(lines)}
    assert params.request({"setup": "source venv/bin/activate"}, False).fields == {
        "setup": ("source venv/bin/activate",)}
    with pytest.raises(UsageError, match="executor parameter slurm_setup: .* holds a line break"):
        params.request({"slurm_setup": ["a\nb"]}, True)
    with pytest.raises(UsageError, match="give a list of shell lines"):
        params.request({"slurm_setup": [1]}, True)


def test_a_hostile_value_that_is_a_fine_string_stays_one_value():
    # A job name with shell syntax is a value: the renderer quotes it (its own tests); nothing here runs it.
    assert params.request({"name": "$(touch /tmp/x); `id`"}, True).fields["name"] == "$(touch /tmp/x); `id`"


# ---------------------------------------------------------------------------
# The call, the bootstrap and the outcome

def _run_bootstrap(tmp_path, call_text, env=None, python=sys.executable):
    call = tmp_path / "call.txt"
    call.write_text(call_text)
    result = str(tmp_path / "out_%t_result.txt")
    proc = subprocess.run([python, "-c", payload.BOOTSTRAP, str(call), result], capture_output=True, text=True,
                          env=dict(os.environ, SLURM_PROCID="3", SLURMD_NODENAME="n9", **(env or {})), timeout=60)
    path = tmp_path / "out_3_result.txt"
    return proc, (payload.load_outcome(path.read_text()) if path.exists() else None)


def test_a_call_returns_its_value_through_a_real_bootstrap(tmp_path):
    def add(a, b, scale=1):
        return {"sum": (a + b) * scale, "rank": os.environ["SLURM_PROCID"]}

    proc, outcome = _run_bootstrap(tmp_path, payload.dump_call(add, (2, 3), {"scale": 10}))
    assert proc.returncode == 0, proc.stderr
    assert outcome.ok and outcome.value == {"sum": 50, "rank": "3"}
    assert not list(tmp_path.glob("*.tmp.*"))          # written whole, then renamed


def test_a_raised_exception_comes_back_with_the_nodes_traceback(tmp_path):
    def fail(x):
        raise KeyError("missing %s" % x)

    proc, outcome = _run_bootstrap(tmp_path, payload.dump_call(fail, ("lr",), {}))
    assert proc.returncode == 1 and "KeyError" in proc.stderr
    assert not outcome.ok and outcome.type == "KeyError" and outcome.message == "'missing lr'"
    assert ", in fail\n" in outcome.traceback and outcome.traceback.endswith("KeyError: 'missing lr'\n")
    assert isinstance(outcome.exception, KeyError)


def test_another_python_is_one_sentence_not_an_unpickling_traceback(tmp_path):
    text = payload.dump_call(len, ([1],), {})
    head, _, body = text.partition("\n")
    proc, outcome = _run_bootstrap(tmp_path, json.dumps(dict(json.loads(head), python="2.7")) + "\n" + body)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert outcome.type == "PythonVersionError"
    assert outcome.message.startswith("the call was pickled by Python 2.7 and %s on node n9 is Python %s"
                                      % (sys.executable, payload.python_version()))


def test_a_python_without_cloudpickle_says_what_to_install(tmp_path):
    # The system's Python without cloudpickle where there is one; else a Python told to find none.
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "cloudpickle.py").write_text("raise ImportError('no cloudpickle here')\n")
    proc, outcome = _run_bootstrap(tmp_path, payload.dump_call(len, ([1],), {}), env={"PYTHONPATH": str(blocker)})
    assert proc.returncode == 1 and outcome.type == "ImportError"
    assert "cloudpickle is not importable by %s on node n9: install it" % sys.executable in outcome.message


def test_an_outcome_of_another_format_is_refused():
    with pytest.raises(ValueError):
        payload.load_outcome('{"format": 99, "outcome": "success"}\n\n')
    with pytest.raises(ValueError):
        payload.load_outcome("not json\n")


# ---------------------------------------------------------------------------
# Slurm's view of many jobs: one query per cluster per interval

class _Session:
    def __init__(self, backends):
        self.backends = backends

    def backend(self, name):
        return self.backends[name]


def test_many_jobs_on_a_cluster_cost_one_query_per_interval_and_a_finished_job_none():
    from slurmkit.api.job import StateWatcher
    from slurmkit.testing import FakeClock, FakeSlurm

    clock = FakeClock()
    alpha, beta = FakeSlurm("alpha", clock=clock), FakeSlurm("beta", clock=clock)
    ids = [alpha.add_job("RUNNING") for _ in range(50)]
    other = beta.add_job("PENDING")
    watcher = StateWatcher(_Session({"alpha": alpha, "beta": beta}), interval=1.0, clock=clock)
    for job_id in ids:
        watcher.register("alpha", job_id)
    assert [watcher.info("alpha", j).state for j in ids] == ["RUNNING"] * 50
    assert watcher.info("beta", other).state == "PENDING"
    assert alpha.methods_called() == ["jobs_by_id"] and beta.methods_called() == ["jobs_by_id"]
    assert sorted(alpha.calls[0].args[0]) == sorted(ids)               # all fifty in the one query
    alpha.set_state(ids[0], "COMPLETED", exit_code=0)
    clock.sleep(1.0)
    assert watcher.info("alpha", ids[0]).state == "COMPLETED" and len(alpha.calls) == 2
    clock.sleep(1.0)
    watcher.info("alpha", ids[1])
    assert ids[0] not in alpha.calls[2].args[0] and len(alpha.calls[2].args[0]) == 49   # ended: never asked again
    assert watcher.info("alpha", ids[0]).state == "COMPLETED" and len(alpha.calls) == 3


def test_an_array_task_runs_the_call_of_its_index(tmp_path):
    calls = payload.dump_calls(lambda x, y=0: x * 10 + y, [((1,), {}), ((2,), {"y": 5}), ((3,), {})], array=True)
    call = tmp_path / "calls.txt"
    call.write_text(calls)
    proc = subprocess.run([sys.executable, "-c", payload.BOOTSTRAP, str(call), str(tmp_path / "r_%a_%t.txt")],
                          capture_output=True, text=True, env=dict(os.environ, SLURM_ARRAY_TASK_ID="1"), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert payload.load_outcome((tmp_path / "r_1_0.txt").read_text()).value == 25
    with pytest.raises(ValueError):
        payload.dump_calls(len, [((1,), {}), ((2,), {})], array=False)


def test_queueing_calls_costs_their_sbatches_alone(tmp_path):
    # The executor makes each submission's token itself: no squeue for a job that could carry it.
    from slurmkit.api import AutoExecutor
    from slurmkit.testing import FakeArraySlurm, fake_session

    alpha = FakeArraySlurm("alpha")
    ex = AutoExecutor(tmp_path / "jobs", site=fake_session(alpha=alpha), python=sys.executable)
    ex.submit(int, 0)
    ex.map_array(int, range(3))
    assert alpha.methods_called() == ["submit", "config", "submit"]     # config: the array limits, once


def test_the_tasks_of_many_arrays_cost_one_query_and_a_forgotten_array_is_read_from_accounting():
    from slurmkit.api.job import StateWatcher
    from slurmkit.testing import FakeArraySlurm, FakeClock

    clock = FakeClock()
    gamma = FakeArraySlurm("gamma", clock=clock, accounting=True)
    script = "#!/bin/bash\n#SBATCH --array=0-2\ntrue\n"
    first, second = gamma.submit(script), gamma.submit(script)
    watcher = StateWatcher(_Session({"gamma": gamma}), interval=1.0, clock=clock)
    elements = ["%s_%d" % (a, i) for a in (first, second) for i in range(3)]
    for element in elements:
        watcher.register("gamma", element)
    gamma.calls.clear()
    assert {watcher.info("gamma", e).state for e in elements} == {"PENDING"}
    assert gamma.methods_called() == ["array_tasks"]                  # both arrays, one squeue
    gamma.run(first, {1: 3})
    clock.sleep(1.0)
    assert [watcher.info("gamma", "%s_%d" % (first, i)) for i in range(3)] == [
        ("COMPLETED", True), ("FAILED", True), ("COMPLETED", True)]
    gamma.run(second)
    gamma.forget_array(second)                   # past MinJobAge: only accounting knows it
    clock.sleep(1.0)
    assert watcher.info("gamma", "%s_2" % second) == ("COMPLETED", True)
    assert gamma.methods_called()[-3:] == ["array_tasks", "has_accounting", "array_tasks_accounting"]  # (config: once)
    gamma.calls.clear()
    clock.sleep(1.0)
    assert watcher.info("gamma", "%s_0" % first).finished and gamma.calls == []   # all ended: not asked again


# ---------------------------------------------------------------------------
# Checkpointing: the real bootstrap, a stand-in scontrol that records what it was asked

def _counter_class():
    from slurmkit.helpers import Checkpointable

    class Count(Checkpointable):
        """Counts to ``total`` keeping its progress in itself; the first run waits at ``pause`` for USR1."""

        def __init__(self):
            self.step, self.starts = 0, []

        def __call__(self, total, pause):
            import time

            self.starts.append(self.step)
            while self.step < total:
                if len(self.starts) == 1 and self.step == pause:
                    print("paused", flush=True)
                    while True:
                        time.sleep(0.05)
                self.step += 1
            return {"step": self.step, "starts": self.starts, "restart": os.environ.get("SLURM_RESTART_COUNT")}

    return Count


def _stand_in_scontrol(tmp_path, status=0):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\necho \"$@\" >> %s\necho refused >&2\nexit %d\n"
                                      % (tmp_path / "scontrol.log", status))
    (bin_dir / "scontrol").chmod(0o755)
    return dict(os.environ, PATH="%s:%s" % (bin_dir, os.environ["PATH"]), SLURM_JOB_ID="4242", SLURM_PROCID="0")


def _run_until_paused_then_usr1(argv, env):
    import signal

    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline() == "paused\n"      # blocks until the call is at its pause
        proc.send_signal(signal.SIGUSR1)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, err


def test_usr1_saves_the_callables_state_requeues_the_job_and_the_restart_continues(tmp_path):
    env = _stand_in_scontrol(tmp_path)
    (tmp_path / "call.txt").write_text(payload.dump_call(_counter_class()(), (10, 4), {}))
    argv = [sys.executable, "-c", payload.BOOTSTRAP, str(tmp_path / "call.txt"), str(tmp_path / "r_%t.txt"),
            str(tmp_path / "ckpt.txt")]
    code, err = _run_until_paused_then_usr1(argv, env)
    assert code == 75 and "job 4242 requeued" in err, err
    assert (tmp_path / "scontrol.log").read_text() == "requeue 4242\n"
    assert not (tmp_path / "r_0.txt").exists()                  # no outcome: the job is not over
    assert not list(tmp_path.glob("*.tmp.*"))                   # the checkpoint was renamed into place
    # The restart (Slurm runs the same command again) runs the saved call: from step 4, not 0.
    proc = subprocess.run(argv, capture_output=True, text=True, env=dict(env, SLURM_RESTART_COUNT="1"), timeout=60)
    assert proc.returncode == 0 and "resuming from the checkpoint" in proc.stderr, proc.stderr
    outcome = payload.load_outcome((tmp_path / "r_0.txt").read_text())
    assert outcome.value == {"step": 10, "starts": [0, 4], "restart": "1"}


def test_a_refused_requeue_keeps_the_checkpoint_and_says_what_to_do(tmp_path):
    env = _stand_in_scontrol(tmp_path, status=1)
    (tmp_path / "call.txt").write_text(payload.dump_call(_counter_class()(), (10, 2), {}))
    code, err = _run_until_paused_then_usr1([sys.executable, "-c", payload.BOOTSTRAP, str(tmp_path / "call.txt"),
                                             str(tmp_path / "r_%t.txt"), str(tmp_path / "ckpt.txt")], env)
    assert code == 75 and (tmp_path / "ckpt.txt").exists()
    assert "scontrol requeue 4242 failed (refused): the job is not restarted" in err


def test_submitit_checkpoint_is_asked_before_checkpoint_and_none_means_no_restart(tmp_path):
    class Both:
        def __call__(self):
            print("paused", flush=True)
            import time
            time.sleep(1.0)
            return "ran to the end"

        def checkpoint(self):
            raise AssertionError("checkpoint() asked though __submitit_checkpoint__ exists")

        def __submitit_checkpoint__(self):
            return None

    env = _stand_in_scontrol(tmp_path)
    (tmp_path / "call.txt").write_text(payload.dump_call(Both(), (), {}))
    code, err = _run_until_paused_then_usr1([sys.executable, "-c", payload.BOOTSTRAP, str(tmp_path / "call.txt"),
                                             str(tmp_path / "r_%t.txt"), str(tmp_path / "ckpt.txt")], env)
    assert code == 0 and "checkpoint() returned None: the job is not restarted" in err, err
    assert payload.load_outcome((tmp_path / "r_0.txt").read_text()).value == "ran to the end"
    assert not (tmp_path / "scontrol.log").exists() and not (tmp_path / "ckpt.txt").exists()


def test_a_checkpointable_call_asks_for_requeue_and_usr1_and_auto_requeue_false_for_neither():
    from slurmkit.api.executor import AutoExecutor, CHECKPOINT_SIGNAL_S

    ex = AutoExecutor.__new__(AutoExecutor)          # _shape reads only the parameters
    ex.parameters = {}
    shape, _, _ = ex._shape(_counter_class()())
    assert (shape.requeue, shape.signal) == (True, "B:USR1@%d" % CHECKPOINT_SIGNAL_S)   # one task: the batch shell
    ex.parameters = {"nodes": 2}
    assert ex._shape(_counter_class()())[0].signal == "USR1@%d" % CHECKPOINT_SIGNAL_S    # srun's tasks: a step
    ex.parameters = {"auto_requeue": False}
    shape = ex._shape(_counter_class()())[0]
    assert (shape.requeue, shape.signal) == (False, None)
    ex.parameters = {}
    shape = ex._shape(len)[0]
    assert (shape.requeue, shape.signal) == (None, None)              # not checkpointable: the cluster's default
    with pytest.raises(UsageError, match="auto_requeue='yes': give True"):
        params.request({"auto_requeue": "yes"}, True)


def test_a_batch_carries_each_calls_own_function_and_a_checkpointable_one_is_checkpointed(tmp_path):
    # batch(): one array, each task's line holds its own function, so the task running a Checkpointable sees it.
    from slurmkit.api.executor import AutoExecutor, CHECKPOINT_SIGNAL_S

    count = _counter_class()()
    text = payload.dump_calls(None, [(len, ("abc",), {}), (count, (10, 4), {})], array=True)
    assert json.loads(text.split("\n")[0])["each"] is True
    call = tmp_path / "calls.txt"
    call.write_text(text)
    argv = [sys.executable, "-c", payload.BOOTSTRAP, str(call), str(tmp_path / "r_%a_%t.txt"),
            str(tmp_path / "ckpt_%a.txt")]
    env = _stand_in_scontrol(tmp_path)
    proc = subprocess.run(argv, capture_output=True, text=True, env=dict(env, SLURM_ARRAY_TASK_ID="0"), timeout=60)
    assert proc.returncode == 0 and payload.load_outcome((tmp_path / "r_0_0.txt").read_text()).value == 3
    code, err = _run_until_paused_then_usr1(argv, dict(env, SLURM_ARRAY_JOB_ID="4240", SLURM_ARRAY_TASK_ID="1"))
    assert code == 75 and (tmp_path / "scontrol.log").read_text() == "requeue 4240_1\n", err
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                          env=dict(env, SLURM_ARRAY_TASK_ID="1", SLURM_RESTART_COUNT="1"))
    assert proc.returncode == 0, proc.stderr
    assert payload.load_outcome((tmp_path / "r_1_0.txt").read_text()).value == {
        "step": 10, "starts": [0, 4], "restart": "1"}
    # The array asks for --requeue and USR1 when one of its calls is checkpointable, and is named after the first.
    ex = AutoExecutor.__new__(AutoExecutor)
    ex.parameters = {}
    shape = ex._shape(None, [len, count])[0]
    assert (shape.name, shape.requeue, shape.signal) == ("len", True, "B:USR1@%d" % CHECKPOINT_SIGNAL_S)
    assert ex._shape(None, [len, pow])[0].signal is None
    with pytest.raises(UsageError, match="is not callable"):
        ex._shape(None, [len, 3])


def test_a_calls_end_is_seen_by_its_outcome_within_a_fraction_of_a_second_at_slurms_old_query_rate(tmp_path):
    """wait() looks for the call's outcome (a file read: nothing of slurmctld) between Slurm's queries, which keep
    their back-off; once the outcome is there Slurm is asked at once, so done() and state agree with the result.
    A minute of waiting on a call that runs on costs what it did (about one query every 5 s once backed off)."""
    from slurmkit.api import AutoExecutor
    from slurmkit.api.job import SETTLE_S
    from slurmkit.testing import FakeClock, FakeSlurm, fake_session

    clock = FakeClock()
    alpha = FakeSlurm("alpha", clock=clock)
    ex = AutoExecutor(tmp_path / "jobs", site=fake_session(alpha=alpha), python=sys.executable)
    ex._watcher.clock = clock
    quick, late, slow = ex.submit(pow, 2, 5), ex.submit(pow, 2, 6), ex.submit(pow, 3, 3)
    for job in (quick, late, slow):
        alpha.set_state(job.job_id.split(":")[1], "RUNNING", nodes="an1")
    assert [j.state for j in (quick, late, slow)] == ["RUNNING"] * 3     # seen so by the watcher
    for job in (quick, late):
        files = job._record["files"]
        proc = subprocess.run([sys.executable, "-c", payload.BOOTSTRAP, files["call"], files["result"]],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
    alpha.finish(quick.job_id.split(":")[1], "COMPLETED")     # Slurm knows; the watcher has not asked yet
    asked = len(alpha.calls)
    began = clock.monotonic()
    quick.wait(clock=clock)
    assert clock.monotonic() - began < 0.2 and len(alpha.calls) - asked == 1
    assert quick.result() == 32 and quick.done() and quick.state == "COMPLETED"
    # An outcome Slurm does not follow with the job's end (a slow epilog): waited for SETTLE_S at most.
    began = clock.monotonic()
    late.wait(clock=clock)
    assert SETTLE_S <= clock.monotonic() - began <= SETTLE_S + 0.5 and late.result() == 64
    asked = len(alpha.calls)
    with pytest.raises(WaitTimeoutError):
        slow.wait(timeout=60, clock=clock)
    queries = [c for c in alpha.calls[asked:] if c.method == "jobs_by_id"]
    # The old schedule: 0.5, 0.75, 1.1, 1.7, 2.5, 3.8, 5, 5 ... s apart: 15 in a minute.
    assert 10 <= len(queries) <= 16, len(queries)
