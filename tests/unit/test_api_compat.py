"""slurmkit.compat as submitit: its names are slurmkit.api's, laid out as submitit lays them out, and
``python -m slurmkit.compat`` runs an unchanged submitit script with ``import submitit`` resolving to it;
submitit's helpers (Checkpointable, DelayedSubmission) as plain classes."""

import subprocess
import sys

import pytest

import slurmkit.compat as submitit
from slurmkit import errors, helpers
from slurmkit.api import executor, job


def test_submitits_names_are_slurmkits_own_objects():
    assert submitit.AutoExecutor is executor.AutoExecutor and submitit.SlurmExecutor is executor.SlurmExecutor
    assert submitit.Job is job.Job and submitit.SlurmJob is job.Job and submitit.Executor is executor.Executor
    assert submitit.helpers.Checkpointable is helpers.Checkpointable
    assert submitit.helpers.DelayedSubmission is helpers.DelayedSubmission
    assert submitit.core.utils.FailedJobError is errors.FailedJobError
    assert submitit.core.utils.UncompletedJobError is errors.UncompletedJobError
    assert submitit.core.utils.DelayedSubmission is helpers.DelayedSubmission
    assert submitit.core.core.Job is job.Job
    assert issubclass(submitit.core.utils.FailedJobError, errors.SlurmkitError)


SCRIPT = '''
import sys
import submitit
import submitit.helpers
from submitit.core.utils import FailedJobError, UncompletedJobError
from submitit.helpers import Checkpointable, DelayedSubmission
import slurmkit.api.executor, slurmkit.helpers
assert submitit.AutoExecutor is slurmkit.api.executor.AutoExecutor
assert Checkpointable is slurmkit.helpers.Checkpointable and submitit.helpers is sys.modules["slurmkit.compat.helpers"]
print(__name__, sys.argv)
'''


def _run(args, cwd):
    return subprocess.run([sys.executable, "-m", "slurmkit.compat"] + args, cwd=str(cwd), capture_output=True,
                          text=True, timeout=60)


def test_python_m_slurmkit_compat_runs_a_script_whose_submitit_is_slurmkit(tmp_path):
    (tmp_path / "script.py").write_text(SCRIPT)
    proc = _run(["script.py", "--lr", "3e-4"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "__main__ ['script.py', '--lr', '3e-4']"


def test_python_m_slurmkit_compat_runs_a_module_too(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "driver.py").write_text(SCRIPT)
    proc = _run(["-m", "pkg.driver", "x"], tmp_path)      # found as `python -m` finds it: from the directory
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("__main__ [") and proc.stdout.strip().endswith("driver.py', 'x']")


def test_no_script_is_a_usage_line_and_a_missing_one_says_so(tmp_path):
    proc = _run([], tmp_path)
    assert proc.returncode == 2 and "usage: python -m slurmkit.compat SCRIPT" in proc.stderr
    proc = _run(["nowhere.py"], tmp_path)
    assert proc.returncode == 2 and "no script nowhere.py" in proc.stderr


def test_a_real_submitit_already_imported_is_refused_not_mixed():
    code = ("import sys, types\nsys.modules['submitit'] = types.ModuleType('submitit')\n"
            "import slurmkit.compat\ntry:\n    slurmkit.compat.install()\nexcept Exception as e:\n"
            "    print(type(e).__name__, e)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.startswith("UsageError submitit is already imported here"), proc.stderr
    assert "install slurmkit.compat before anything imports it" in proc.stdout


# ---------------------------------------------------------------------------
# helpers

def test_checkpointable_resubmits_itself_as_it_is_with_the_same_arguments():
    class Count(helpers.Checkpointable):
        def __init__(self):
            self.step = 0

        def __call__(self, total, scale=1):
            return self.step * scale

    count = Count()
    count.step = 7
    again = count.checkpoint(10, scale=2)
    assert isinstance(again, helpers.DelayedSubmission)
    assert again.function is count and again.args == (10,) and again.kwargs == {"scale": 2}
    assert not again.done() and again.result() == 14 and again.done()


def test_a_checkpointable_without_a_call_says_what_to_add():
    class NoCall(helpers.Checkpointable):
        pass

    with pytest.raises(TypeError) as err:
        NoCall()
    assert "NoCall is Checkpointable but has no __call__ method" in str(err.value)


def test_a_delayed_submission_calls_once_and_keeps_the_value():
    calls = []

    def f(x):
        calls.append(x)
        return x + 1

    delayed = helpers.DelayedSubmission(f, 1)
    assert delayed.result() == 2 and delayed.result() == 2 and calls == [1]
    with pytest.raises(TypeError):
        helpers.DelayedSubmission(3)
