"""submitit's own documented examples run unchanged through slurmkit.compat, and print what submitit itself
prints for them, on the same cluster (alpha, locally; its shared filesystem is this machine's).

Each example is a file under data/submitit_examples (what differs from submitit's docs is said at its top),
run twice, as separate processes in directories of their own: ``python EXAMPLE`` with submitit 1.5.4 (the
bench extra) and ``python -m slurmkit.compat EXAMPLE`` with ``SLURMKIT_SITE``.  All of them start together
(the checkpointing example waits out Slurm's 30 s hold of a requeued job, once for both tools); each test
then compares one example's two outputs, job ids aside (``1234`` for submitit is ``alpha:1234`` here), and
checks what they must say.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import _info

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE / "data" / "submitit_examples"
SITE = str(HERE.parents[1] / "site_configs" / "local.yaml")
NAMES = ("add", "map_array", "batch", "errors", "multitask", "checkpoint")

pytestmark = pytest.mark.slow


def _submitit_missing():
    try:
        import submitit  # noqa: F401
    except ImportError as exc:
        return str(exc)
    return None


def _scontrol_outliving_sigterm(base, env):
    """A directory whose ``scontrol`` is the real one started with SIGTERM ignored, for submitit's run alone.

    submitit 1.5.4 requeues a checkpointed job from inside it (``subprocess.check_call(["scontrol",
    "requeue", id])``), and Slurm's requeue sends SIGTERM to the job's processes, that scontrol among them,
    sometimes before scontrol has read the controller's answer: submitit then takes the accepted requeue
    for a failed one and the job fails (seen in CI: "Command '['scontrol', 'requeue', '35']' died with
    SIGTERM").  That race is submitit's own, and what this module compares is the example's output, so the
    reference's scontrol outlives the SIGTERM (Slurm's SIGKILL after KillWait still ends it).  slurmkit's
    task takes an scontrol ended by that SIGTERM for the requeue it is, and keeps the real scontrol."""
    import shutil

    real = shutil.which("scontrol", path=env.get("PATH") or os.defpath)
    assert real, "no scontrol on PATH"
    shim = base / "reference-bin"
    shim.mkdir()
    (shim / "scontrol").write_text("#!/bin/sh\ntrap '' TERM\nexec %s \"$@\"\n" % real)
    (shim / "scontrol").chmod(0o755)
    return shim


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    missing = _submitit_missing()
    if missing:
        pytest.skip("submitit is not installed here (make venv installs it with the bench extras): %s" % missing)
    base = tmp_path_factory.mktemp("submitit-examples")
    env = {k: v for k, v in _info("alpha").env.items() if not k.startswith("SLURMKIT_")}
    reference_env = dict(env, PATH="%s:%s" % (_scontrol_outliving_sigterm(base, env), env.get("PATH", "")))
    runs = {}
    for name in NAMES:
        for tool in ("submitit", "slurmkit"):
            where = base / tool / name
            where.mkdir(parents=True)
            script = str(EXAMPLES / (name + ".py"))
            if tool == "submitit":
                argv, tool_env = [sys.executable, script], reference_env
            else:
                argv, tool_env = [sys.executable, "-m", "slurmkit.compat", script], dict(env, SLURMKIT_SITE=SITE)
            runs[(name, tool)] = subprocess.Popen(argv, cwd=str(where), env=tool_env, stdout=subprocess.PIPE,
                                                  stderr=subprocess.PIPE, universal_newlines=True)
    done = {}
    try:
        for key, proc in runs.items():
            out, err = proc.communicate(timeout=300)
            done[key] = (proc.returncode, out, err)
    finally:
        for proc in runs.values():
            if proc.poll() is None:
                proc.kill()
    return done


def _same(outputs, name):
    """The example's output lines (slurmkit's), once both tools exited 0 and said the same: line by line, equal
    but for job ids, where submitit's ``1234`` (``1234_5``) is slurmkit's ``alpha:1234`` (``alpha:1234_5``)."""
    got = {}
    for tool in ("submitit", "slurmkit"):
        code, out, err = outputs[(name, tool)]
        assert code == 0, "%s with %s exited %d:\n%s" % (name, tool, code, err[-3000:])
        got[tool] = out.splitlines()
    assert len(got["slurmkit"]) == len(got["submitit"]), got
    for mine, theirs in zip(got["slurmkit"], got["submitit"]):
        pattern = "[0-9]+".join(re.escape(piece) for piece in re.split(r"alpha:[0-9]+", mine))
        assert re.fullmatch(pattern, theirs), (mine, theirs, got)
    return [re.sub(r"alpha:[0-9]+", "<job>", line) for line in got["slurmkit"]]


def test_readme_add(outputs):
    assert _same(outputs, "add") == ["<job>", "12"]


def test_map_array_with_array_parallelism(outputs):
    assert _same(outputs, "map_array") == ["['<job>_0', '<job>_1', '<job>_2', '<job>_3']", "[11, 22, 33, 44]"]
    ids = re.findall(r"alpha:([0-9]+)_", outputs[("map_array", "slurmkit")][1])
    assert len(set(ids)) == 1                     # one array, as submitit makes it


def test_batch_context_manager(outputs):
    assert _same(outputs, "batch") == ["['<job>_0', '<job>_1', '<job>_2']", "[9, 16, 25]"]


def test_errors_come_back_as_failed_job_error_with_the_trace(outputs):
    assert _same(outputs, "errors") == ["FailedJobError True True", "True"]


def test_multi_task_jobs_and_job_environment(outputs):
    lines = _same(outputs, "multitask")
    assert lines[:2] == ["12", "[12, 12, 12, 12, 12, 12]"]
    assert lines[2] == repr([(r, r % 3, r // 3, 6, 4 * r + 1) for r in range(6)])


def test_checkpointing_a_training_after_an_interruption(outputs):
    assert _same(outputs, "checkpoint") == ["{'step': 20, 'starts': [0, 7]}"]
