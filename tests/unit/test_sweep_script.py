"""Array job scripts, run for real: each task is started with bash as slurmd would start it
(SLURM_ARRAY_TASK_ID ...), runs to its end, and what it printed is checked: hostile values reach
the program literally, the task ends as the program did, the canary holds or widens."""

import json
import os
import stat
import subprocess
import sys

import pytest

from harness import default_interrupts
from slurmkit.errors import ConfigError
from slurmkit.script.render import JobSpec
from slurmkit.slurm import commands
from slurmkit.slurm.commands import SCRIPT_TRAILER
from slurmkit.sweep import submission
from slurmkit.sweep import state
from slurmkit.sweep import script as sweep_script
from slurmkit.sweep.journal import Journal
from slurmkit.sweep.script import table_rows
from slurmkit.testing import FakeArraySlurm
from slurmkit.testing import fake_session

PRINT_ARGV = ("import json, os, sys; print(json.dumps({'argv': sys.argv[1:], "
              "'env': {k: v for k, v in os.environ.items() if k.startswith('SLURMKIT_')}}))")
HOSTILE = ["it's", '"dq"', "$(touch {marker})", "`touch {marker}`", "a b  c", "*", "line1\nline2", "-x",
           "back\\slash", "ünï", "tab\there", ""]


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMKIT_CACHE_DIR", str(tmp_path / "cache"))
    journal = Journal(str(tmp_path / "state" / "sweeps.db"))
    yield tmp_path, journal
    journal.close()


def submit(tmp_path, journal, command, *, grid=(), points_file=None, config=None, site=None, **kw):
    alpha = FakeArraySlurm("alpha", config=config or {})
    spec = JobSpec(command=tuple(command), template="single", gpus_per_node=0, time="00:05:00")
    report = submission.submit(fake_session(site, alpha=alpha), submission.SweepRequest(
        spec=spec, grid=list(grid), points_file=points_file, sweep_dir=str(tmp_path / "sweep"), **kw), journal)
    return alpha, report


def run_task(tmp_path, script, index, array_id, restart=None, fake_bin=None, inherited=None):
    """Start one task of an array as slurmd does: the script file, bash, the task's variables (and
    ``inherited``, what the submitting environment handed on)."""
    path = tmp_path / ("job-%s-%d.sh" % (array_id, index))
    path.write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "SBATCH"))}
    env.update(SLURM_ARRAY_TASK_ID=str(index), SLURM_ARRAY_JOB_ID=array_id, SLURM_JOB_ID=str(9000 + index),
               SLURMD_NODENAME="an1")
    if restart is not None:
        env["SLURM_RESTART_COUNT"] = str(restart)
    if fake_bin is not None:
        env["PATH"] = "%s:%s" % (fake_bin, env["PATH"])
    env.update(inherited or {})
    return subprocess.run(["bash", str(path)], env=env, cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=60)


def point_dir(tmp_path, script, index):
    return tmp_path / "sweep" / "points" / table_rows(script)[index][0]


def last_json(text):
    return json.loads([ln for ln in text.splitlines() if ln.startswith("{")][-1])


def test_hostile_values_reach_the_program_literally_as_arguments_and_variables(env):
    tmp_path, journal = env
    marker = tmp_path / "pwned"
    values = [v.format(marker=marker) for v in HOSTILE]
    points = tmp_path / "points.jsonl"
    points.write_text("".join(json.dumps({"a": v, "n": str(i)}) + "\n" for i, v in enumerate(values)))
    alpha, report = submit(tmp_path, journal, [sys.executable, "-c", PRINT_ARGV, "{a}", "--b={a}", "{n}{a}"],
                           points_file=str(points))
    (array,) = alpha.arrays.values()
    for index, value in enumerate(values):
        done = run_task(tmp_path, array.script, index, array.job_id)
        assert done.returncode == 0, done.stderr
        directory = point_dir(tmp_path, array.script, index)
        printed = last_json((directory / "output.log").read_text())
        assert printed["argv"] == [value, "--b=" + value, str(index) + value]
        assert printed["env"]["SLURMKIT_SWEEP_A"] == value and printed["env"]["SLURMKIT_SWEEP_N"] == str(index)
        assert printed["env"]["SLURMKIT_SWEEP_ID"] == report.sweep_id
        assert printed["env"]["SLURMKIT_SWEEP_POINT_DIR"] == str(directory)
        assert printed["env"]["SLURMKIT_CHECKPOINT_DIR"] == str(directory / "checkpoint")
        assert (directory / "checkpoint").is_dir()
        assert (directory / "exit.status").read_text() == "0 %s_%d 0\n" % (array.job_id, index)
    assert not marker.exists()


def test_a_placeholder_in_shell_code_is_one_literal_word(env):
    tmp_path, journal = env
    marker = tmp_path / "pwned"
    values = ["$(touch %s)" % marker, "a b", "it's", "*"]
    points = tmp_path / "p.jsonl"
    points.write_text("".join(json.dumps({"v": v}) + "\n" for v in values))
    alpha, _ = submit(tmp_path, journal, ["bash", "-c", 'printf "<%s>" {v} "$SLURMKIT_SWEEP_V"; echo'],
                      points_file=str(points))
    (array,) = alpha.arrays.values()
    for index, value in enumerate(values):
        assert run_task(tmp_path, array.script, index, array.job_id).returncode == 0
        out = (point_dir(tmp_path, array.script, index) / "output.log").read_text().splitlines()[-1]
        assert out == "<%s><%s>" % (value, value)
    assert not marker.exists()


def test_a_task_ends_as_its_program_did_and_every_attempt_is_appended(env):
    tmp_path, journal = env
    alpha, _ = submit(tmp_path, journal, ["bash", "-c", 'echo "out {mode}"; echo "err {mode}" >&2; case {mode} in '
                                                        'ok) ;; three) exit 3;; term) kill -TERM $$;; esac'],
                      grid=["mode=ok,three,term"])
    (array,) = alpha.arrays.values()
    # What slurmstepd opened as the task's --output before the script ran: kept only when something is in it.
    slurm_out = tmp_path / "sweep" / "slurm"
    (slurm_out / ("%s_0.out" % array.job_id)).write_text("")
    (slurm_out / ("%s_1.out" % array.job_id)).write_text("slurmstepd: error: early trouble\n")
    codes = [run_task(tmp_path, array.script, i, array.job_id).returncode for i in range(3)]
    assert sorted(p.name for p in slurm_out.iterdir()) == ["%s_1.out" % array.job_id]
    assert codes == [0, 3, -15]                        # the same exit status, or killed by the same signal
    statuses = [(point_dir(tmp_path, array.script, i) / "exit.status").read_text().split()[0] for i in range(3)]
    assert statuses == ["0", "3", "143"]
    run_task(tmp_path, array.script, 1, array.job_id, restart=1)
    directory = point_dir(tmp_path, array.script, 1)
    errors = (directory / "error.log").read_text().splitlines()
    assert [ln for ln in errors if not ln.startswith("==")] == ["err three", "err three"]
    headers = [ln for ln in errors if ln.startswith("== slurmkit sweep")]
    assert len(headers) == 2 and "restart 0" in headers[0] and "restart 1" in headers[1]
    assert state.last_attempt_tail("\n".join(errors)) == "err three"


def test_a_sweep_submitted_from_inside_another_sweeps_task_is_still_supervised(env):
    # sbatch hands the submitting environment to the job: nothing the outer task's shell set may turn the
    # inner one's supervision off (it used to export SLURMKIT_SWEEP_STAGE=task to its child).
    tmp_path, journal = env
    alpha, _ = submit(tmp_path, journal, ["bash", "-c", 'echo "inner {s} $SLURMKIT_SWEEP_S"; exit 4'],
                      grid=["s=a,b"])
    (array,) = alpha.arrays.values()
    outer = {"SLURMKIT_SWEEP_STAGE": "task", "SLURMKIT_SWEEP_ID": "outer-1", "SLURMKIT_SWEEP_POINT": "0123",
             "SLURMKIT_SWEEP_S": "outer"}
    done = run_task(tmp_path, array.script, 1, array.job_id, inherited=outer)
    assert done.returncode == 4
    directory = point_dir(tmp_path, array.script, 1)
    assert (directory / "exit.status").read_text() == "4 %s_1 0\n" % array.job_id
    assert (directory / "output.log").read_text().splitlines()[-1] == "inner b b"


def test_a_task_without_a_row_fails_saying_so(env):
    tmp_path, journal = env
    alpha, _ = submit(tmp_path, journal, ["true", "{s}"], grid=["s=0..1"])
    (array,) = alpha.arrays.values()
    done = run_task(tmp_path, array.script, 7, array.job_id)
    assert done.returncode == 1 and "task 7 has no row in the points table" in done.stderr


def test_a_large_table_is_a_checked_file_next_to_the_script(env, monkeypatch):
    tmp_path, journal = env
    monkeypatch.setattr(sweep_script, "INLINE_TABLE_LIMIT", 100)
    alpha, _ = submit(tmp_path, journal, [sys.executable, "-c", PRINT_ARGV, "{s}"], grid=["s=0..9"])
    (array,) = alpha.arrays.values()
    assert not table_rows(array.script) and "sha256sum --check" in array.script
    tables = list((tmp_path / "sweep" / "tables").iterdir())
    assert len(tables) == 1 and sorted(table_rows(tables[0].read_text())) == list(range(10))
    done = run_task(tmp_path, array.script, 4, array.job_id)
    assert done.returncode == 0, done.stderr
    out = sorted((tmp_path / "sweep" / "points").glob("*/output.log"))
    assert len(out) == 1 and last_json(out[0].read_text())["argv"] == ["4"]
    tables[0].write_text(tables[0].read_text().replace("'4'", "'5'").replace("(4)", "(5)") + "\n# changed\n")
    done = run_task(tmp_path, array.script, 4, array.job_id)
    assert done.returncode == 1 and "missing or changed" in done.stderr


@pytest.mark.parametrize("limit", [sweep_script.INLINE_TABLE_LIMIT, 100])
def test_the_script_ends_with_the_trailer_after_its_table_so_a_truncated_one_is_refused(env, monkeypatch, limit):
    tmp_path, journal = env
    monkeypatch.setattr(sweep_script, "INLINE_TABLE_LIMIT", limit)
    alpha, _ = submit(tmp_path, journal, ["echo", "{s}", "{t}"], grid=["s=0..9", "t=line1\\nline2,x"])
    (array,) = alpha.arrays.values()
    assert array.script.endswith("\n" + SCRIPT_TRAILER + "\n") and array.script.count(SCRIPT_TRAILER) == 1
    # The login node's submit-once wrapper, run for real (scontrol, squeue and sbatch stand-ins on PATH).
    fake_bin = tmp_path / "wrapper-bin"
    fake_bin.mkdir()
    for tool, body in (("scontrol", "exit 0"), ("squeue", "exit 0"), ("sbatch", "echo 4242")):
        (fake_bin / tool).write_text("#!/bin/sh\n%s\n" % body)
        (fake_bin / tool).chmod(0o755)
    wrapper_env = dict(os.environ, PATH="%s:%s" % (fake_bin, os.environ["PATH"]), TMPDIR=str(tmp_path))
    for script, code in ((array.script, 0), (array.script[:-40], 3)):
        done = subprocess.run(commands.sbatch_once("sw-t%d" % code), input=script, env=wrapper_env,
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == code, done.stderr
        assert (done.stdout.split()[-1:] == ["4242"]) == (code == 0)
    assert done.stderr.strip().endswith("the job script arrived incomplete; nothing was submitted")


def _fake_scontrol(tmp_path):
    directory = tmp_path / "bin"
    directory.mkdir()
    log = tmp_path / "scontrol.log"
    tool = directory / "scontrol"
    tool.write_text("#!/bin/sh\necho \"$*\" >> %s\n" % log)
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return directory, log


def test_canary_holds_the_rest_after_k_failures_with_one_exit_status(env):
    tmp_path, journal = env
    fake_bin, log = _fake_scontrol(tmp_path)
    alpha, report = submit(tmp_path, journal, ["bash", "-c", "exit 5", "{s}"], grid=["s=0..5"],
                           config={"MaxArraySize": "3"}, canary=2)
    first, second = alpha.arrays.values()
    assert run_task(tmp_path, first.script, 0, first.job_id, fake_bin=fake_bin).returncode == 5
    assert not log.exists()                               # one failure: keep going, one at a time
    assert run_task(tmp_path, first.script, 1, first.job_id, fake_bin=fake_bin).returncode == 5
    assert log.read_text().splitlines() == ["hold %s" % first.job_id]
    token = first.comment.split(":")[1]
    stopped = (tmp_path / "sweep" / "canary" / token / "stopped").read_text()
    assert "the first 2 tasks failed with exit status 5" in stopped and report.sweep_id in stopped
    assert second.tasks[0].reason == "JobHeldUser"


def test_canary_keeps_one_at_a_time_while_failures_differ_and_widens_on_a_pass(env):
    tmp_path, journal = env
    fake_bin, log = _fake_scontrol(tmp_path)
    # Each task fails with its code on a first attempt and passes when restarted.
    alpha, _ = submit(tmp_path, journal, ["bash", "-c", "[ ${SLURM_RESTART_COUNT:-0} -gt 0 ] || exit {code}"],
                      grid=["code=1,2,3"], config={"MaxArraySize": "2"}, canary=2, max_running=4)
    first, second = alpha.arrays.values()
    assert "slurmkit_sweep_canary" not in second.script and "#SBATCH --hold" in second.script
    assert run_task(tmp_path, first.script, 0, first.job_id, fake_bin=fake_bin).returncode == 1
    assert run_task(tmp_path, first.script, 1, first.job_id, fake_bin=fake_bin).returncode == 2
    assert not log.exists()                              # 1 and 2: no shared cause, no hold
    assert run_task(tmp_path, first.script, 0, first.job_id, restart=1, fake_bin=fake_bin).returncode == 0
    assert log.read_text().splitlines() == ["update JobId=%s ArrayTaskThrottle=4" % first.job_id,
                                            "release %s" % second.job_id]
    # Decided once: a later failure changes nothing.
    assert run_task(tmp_path, first.script, 1, first.job_id, restart=0, fake_bin=fake_bin).returncode == 2
    assert len(log.read_text().splitlines()) == 2


def test_a_signal_to_the_tasks_shell_reaches_the_program_which_ends_the_task(env):
    # scancel --batch and the time limit's --signal=B:USR1 signal only the batch shell: the supervisor
    # passes TERM, INT and USR1 on.  The program must not inherit an ignored SIGINT (what bash gives a
    # command it starts with & in a script), or a Python program never sees Ctrl-C's signal.
    import signal
    import time

    tmp_path, journal = env
    program = ("import signal, sys, time\n"
               "print('ignored' if signal.getsignal(signal.SIGINT) is signal.SIG_IGN else 'handled', flush=True)\n"
               "signal.signal(signal.SIGINT, lambda *a: sys.exit(7))\n"
               "print('ready', flush=True)\n"
               "time.sleep(60)\n")
    alpha, _ = submit(tmp_path, journal, [sys.executable, "-c", program, "{n}"], grid=["n=0"])
    (array,) = alpha.arrays.values()
    path = tmp_path / "job.sh"
    path.write_text(array.script)
    env_ = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "SBATCH"))}
    env_.update(SLURM_ARRAY_TASK_ID="0", SLURM_ARRAY_JOB_ID=array.job_id, SLURM_JOB_ID="9000")
    # As slurmstepd starts a batch script: default dispositions (harness.default_interrupts).
    proc = subprocess.Popen(["bash", str(path)], env=env_, cwd=str(tmp_path), start_new_session=True,
                            preexec_fn=default_interrupts)
    output = point_dir(tmp_path, array.script, 0) / "output.log"
    deadline = time.monotonic() + 30
    while not (output.exists() and "ready" in output.read_text()):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGINT)                   # the task's shell only, not its process group
    assert proc.wait(timeout=30) == 7
    assert output.read_text().splitlines()[1:] == ["handled", "ready"]
    assert (output.parent / "exit.status").read_text().split()[0] == "7"


def test_the_supervise_loop_is_written_once_and_every_script_runs_that_one():
    from pathlib import Path

    from slurmkit.script import render, templates
    from slurmkit.site.loader import load_site

    root = Path(__file__).resolve().parents[2]
    sources = sorted(root.glob("templates/*.j2")) + sorted((root / "slurmkit").rglob("*.py"))
    loops = [p.relative_to(root) for p in sources if 'wait "$' in p.read_text(encoding="utf-8")]
    assert [str(p) for p in loops] == ["templates/_supervise.sh.j2"]
    part = templates.script_part("_supervise.sh.j2")
    assert part.startswith("# slurmkit_supervise ") and "{#" not in part and part.count("slurmkit_supervise() {") == 1
    site = load_site(str(root / "site_configs" / "local.yaml"))
    cluster = site.cluster()
    spec = render.JobSpec(command=("true",), template="single", time="5", token="t", checkpoint_dir="/c", attempt=1)
    assert render.render(site, cluster, site.partition(cluster, "cpu"), spec).script.count(part) == 1   # Jinja's
    assert "slurmkit_supervise" not in render.render(site, cluster, site.partition(cluster, "cpu"),
                                                     spec._replace(checkpoint_dir=None, attempt=None)).script


def test_a_sites_own_supervise_loop_is_the_one_its_sweep_tasks_run(env):
    # Jinja's include finds a site's _supervise.sh.j2 before the built-in one: the array script,
    # which reads the part without Jinja, must find the same file, or a site's change (here: a
    # line that records each supervised start) reaches its jobs but not its sweeps.
    from slurmkit.script import templates
    from slurmkit.testing import fake_site

    tmp_path, journal = env
    own = tmp_path / "site-templates"
    own.mkdir()
    with open(os.path.join(templates.BUILTIN_TEMPLATES, "_supervise.sh.j2"), encoding="utf-8") as f:
        builtin = f.read()
    marker = tmp_path / "supervised"
    (own / "_supervise.sh.j2").write_text(builtin.replace(
        "slurmkit_supervise() {\n", "slurmkit_supervise() {\n    echo \"site loop: $3\" >>%s\n" % marker, 1))
    site = fake_site("alpha")._replace(template_dirs=(str(own),))
    alpha, _ = submit(tmp_path, journal, ["echo", "{x}"], grid=["x=1,2"], site=site)
    (array,) = alpha.arrays.values()
    assert [run_task(tmp_path, array.script, i, array.job_id).returncode for i in range(2)] == [0, 0]
    assert marker.read_text().splitlines() == ["site loop: slurmkit_sweep_task"] * 2
    assert (point_dir(tmp_path, array.script, 1) / "output.log").read_text().splitlines()[-1] == "2"

    (own / "_supervise.sh.j2").write_text("{# a part #}\nslurmkit_supervise() { {{ oops }}; }\n")
    with pytest.raises(ConfigError, match="_supervise.sh.j2 holds Jinja beyond its first comment; it must be plain"):
        submit(tmp_path, journal, ["echo", "{x}"], grid=["x=3"], site=site, name="other")
