"""What submitit's documented examples use besides the executor's parameters: its executor arguments
(slurm_max_num_timeout, slurm_python), slurm_array_parallelism, the helpers (FunctionSequence,
CommandFunction, as_completed), FailedJobError as an UncompletedJobError, and max_num_timeout in the task."""

import json
import os
import sys

import pytest

import slurmkit.compat as submitit
from slurmkit import errors, helpers
from slurmkit.api import params, payload
from slurmkit.api.executor import AutoExecutor, SlurmExecutor
from slurmkit.errors import UsageError
from slurmkit.testing import FakeSlurm, fake_session

from test_api_rules import _counter_class, _run_until_paused_then_usr1, _stand_in_scontrol


def test_submitits_executor_arguments_are_taken_and_other_executors_ignored(tmp_path):
    session = fake_session(alpha=FakeSlurm("alpha"))
    ex = AutoExecutor(tmp_path / "a", site=session, slurm_max_num_timeout=1, slurm_python=sys.executable,
                      slurm_max_pickle_size_gb=2.0, local_python="python3", debug_blocking=True)
    assert (ex.max_num_timeout, ex.python) == (1, sys.executable)
    assert AutoExecutor(tmp_path / "b", site=session).max_num_timeout == 3            # submitit's default
    assert SlurmExecutor(tmp_path / "c", 2, site=session).max_num_timeout == 2
    with pytest.raises(UsageError, match="slurm_max_num_timeout, slurm_python"):
        AutoExecutor(tmp_path / "d", site=session, slurm_array_parallelism=2)        # a parameter, not an argument
    with pytest.raises(UsageError, match="give the path of the Python on the nodes"):
        AutoExecutor(tmp_path / "e", site=session, slurm_python="singularity exec img.sif python")
    with pytest.raises(UsageError, match="max_num_timeout=-1"):
        SlurmExecutor(tmp_path / "f", max_num_timeout=-1, site=session)


def test_array_parallelism_is_a_parameter_of_both_vocabularies():
    assert params.request({"slurm_array_parallelism": 2}, True).fields == {"array_parallelism": 2}
    assert params.request({"array_parallelism": 16}, False).fields == {"array_parallelism": 16}
    with pytest.raises(UsageError, match="array_parallelism=0"):
        params.request({"slurm_array_parallelism": 0}, True)


def test_map_array_throttles_each_array_it_queues(tmp_path):
    from slurmkit.testing import FakeArraySlurm

    fake = FakeArraySlurm("alpha")
    ex = AutoExecutor(tmp_path / "jobs", site=fake_session(alpha=fake), python=sys.executable)
    ex.update_parameters(slurm_array_parallelism=2)
    jobs = ex.map_array(int, range(4))
    array = jobs[0].job_id.split(":")[1].split("_")[0]
    assert fake.arrays[array].throttle == 2 and len(jobs) == 4
    fake.commands.clear()
    ex.map_array(int, range(2))                     # no more tasks than the throttle: nothing to ask
    assert not [c for c in fake.commands if "ArrayTaskThrottle=2" in c]


def test_failed_is_uncompleted_as_in_submitit():
    assert issubclass(errors.FailedJobError, errors.UncompletedJobError)
    assert submitit.core.utils.FailedJobError is errors.FailedJobError


def test_function_sequence_keeps_the_values_made_before_a_checkpoint():
    made = []

    def note(x):
        made.append(x)
        return x * 2

    seq = helpers.FunctionSequence()
    seq.add(note, 1)
    seq.add(note, 2)
    next(iter(seq)).result()                       # made before a checkpoint
    restored = seq.checkpoint().function           # the same object, as the restart gets it
    assert restored() == [2, 4] and made == [1, 2] and len(restored) == 2
    assert submitit.helpers.FunctionSequence is helpers.FunctionSequence


def test_command_function_returns_stdout_and_a_failure_raises_with_stderr(capsys):
    fn = submitit.helpers.CommandFunction([sys.executable, "-c", "import sys; print(sys.argv[1:])"], verbose=False)
    assert fn("a", 1, lr=3) == "['a', '1', '--lr=3']"
    with pytest.raises(RuntimeError, match="boom") as err:
        helpers.CommandFunction([sys.executable, "-c", "import sys; sys.exit('boom')"], verbose=False)()
    assert err.value.__cause__.returncode == 1
    with pytest.raises(TypeError, match="as a list"):
        helpers.CommandFunction("ls -l")


def test_as_completed_yields_jobs_as_they_end():
    class Job:
        def __init__(self, after):
            self.after, self.asked = after, 0

        def done(self):
            self.asked += 1
            return self.asked > self.after

    jobs = [Job(2), Job(0), Job(1)]
    assert list(submitit.helpers.as_completed(jobs, poll_frequency=0)) == [jobs[1], jobs[2], jobs[0]]
    with pytest.raises(TimeoutError):
        list(helpers.as_completed([Job(10 ** 9)], timeout=0.05, poll_frequency=0.01))


def _bootstrap_argv(tmp_path, given):
    return [sys.executable, "-c", payload.BOOTSTRAP, str(tmp_path / "call.txt"), str(tmp_path / "r_%t.txt"),
            str(tmp_path / "ckpt.txt"), json.dumps(given)]


def test_a_usr1_near_the_time_limit_is_counted_and_past_max_num_timeout_the_job_ends(tmp_path):
    env = _stand_in_scontrol(tmp_path)
    (tmp_path / "call.txt").write_text(payload.dump_call(_counter_class()(), (10, 4), {}))
    # A limit of 0 s: any USR1 is the time limit's.  The first one is saved, counted in the saved call.
    near = {"time_limit_s": 0, "signal_s": 90, "max_num_timeout": 1}
    code, err = _run_until_paused_then_usr1(_bootstrap_argv(tmp_path, near), env)
    assert code == 75 and "its time limit is near" in err, err
    assert json.loads((tmp_path / "ckpt.txt").read_text().split("\n")[0])["timeouts"] == 1
    # Sent by hand long before the limit: not counted.
    (tmp_path / "ckpt.txt").unlink()
    code, err = _run_until_paused_then_usr1(_bootstrap_argv(tmp_path, dict(near, time_limit_s=3600)), env)
    assert code == 75 and "a preemption, or sent by hand" in err
    assert json.loads((tmp_path / "ckpt.txt").read_text().split("\n")[0])["timeouts"] == 0


def test_past_max_num_timeout_the_call_ends_uncompleted_and_is_not_requeued(tmp_path):
    env = _stand_in_scontrol(tmp_path)
    saved = payload.dump_call(_counter_class()(), (10, 4), {})
    head, _, body = saved.partition("\n")
    (tmp_path / "call.txt").write_text(json.dumps(dict(json.loads(head), timeouts=1)) + "\n" + body)
    code, err = _run_until_paused_then_usr1(
        _bootstrap_argv(tmp_path, {"time_limit_s": 0, "signal_s": 90, "max_num_timeout": 1}), env)
    assert code == 1 and not (tmp_path / "scontrol.log").exists() and not (tmp_path / "ckpt.txt").exists()
    outcome = payload.load_outcome((tmp_path / "r_0.txt").read_text())
    assert (outcome.type, outcome.message) == (
        "UncompletedJobError", "Job not requeued because: timed-out too many times (2; max_num_timeout=1).")
    assert os.environ.get("SLURMKIT_JOB") is None           # the bootstrap's own, never this process's


def test_a_folder_naming_the_job_keeps_its_records_above_the_first_part_that_does(tmp_path):
    from slurmkit.api.executor import id_independent

    assert id_independent(tmp_path / "log_test" / "%j") == tmp_path / "log_test"
    assert id_independent(tmp_path / "a" / "run_%A_%a" / "x") == tmp_path / "a"
    assert id_independent(str(tmp_path / "plain")) == tmp_path / "plain"
    ex = AutoExecutor(tmp_path / "log_test" / "%j", site=fake_session(alpha=FakeSlurm("alpha")))
    assert ex.folder == tmp_path / "log_test" and not (tmp_path / "log_test" / "%j").exists()
