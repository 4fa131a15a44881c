"""The job script of a tracked job runs its program through ``slurmkit_run_step``: the exit status it reports.

The daemon decides from that status (a transient code is restarted, another
failure is not, 75 after SIGUSR1 is "saved, resume me"), so it must be the
program's, however fast the program ends.  The function is taken from a real
rendered script and run in bash.
"""

import signal
import subprocess
import time
from pathlib import Path

import pytest

from slurmkit.script import render
from slurmkit.site import load_site

ROOT = Path(__file__).resolve().parents[2]


def _run_step_function():
    site = load_site(str(ROOT / "site_configs" / "local.yaml"))
    cluster = site.cluster()
    spec = render.JobSpec(command=("true",), nodes=1, template="single", time="5", token="t",
                          checkpoint_dir="/ckpt", attempt=1)
    script = render.render(site, cluster, site.partition(cluster, "cpu"), spec).script
    start = script.index("slurmkit_run_step() {")
    return script[start:script.index("\n}\n", start) + 3]


# A `kill` that takes its time before doing its job: the step has ended and been reaped by
# bash before the function can look at it with `kill -0` (what a loaded node does to a program
# that fails at once).  The function must not need kill to learn the status.
SLOW_KILL = 'kill() { sleep 0.3; builtin kill "$@"; }\n'


def _bash(body, *argv, slow_kill=False):
    script = "set -euo pipefail\n" + (SLOW_KILL if slow_kill else "") + _run_step_function() + body
    return subprocess.Popen(["bash", "-c", script, "step", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("slow_kill", [False, True])
@pytest.mark.parametrize("code", [0, 3, 42])
def test_the_programs_exit_status_even_when_it_ends_at_once(code, slow_kill):
    proc = _bash('slurmkit_run_step "$@"\n', "sh", "-c", "exit %d" % code, slow_kill=slow_kill)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err


def _started(proc, marker="ready"):
    line = proc.stdout.readline()
    assert line.strip() == marker, proc.stderr.read()


@pytest.mark.parametrize("program,expected", [
    # saves on SIGUSR1 and asks to be resumed
    ("trap 'echo saved; exit 75' USR1; echo ready; while :; do sleep 0.05; done", 75),
    # no handler: killed by SIGUSR1 itself; the script still says "resume me" (75)
    ("echo ready; exec sleep 30", 75),
    # handles the signal and finishes normally: a success stays a success
    ("trap 'echo done; exit 0' USR1; echo ready; while :; do sleep 0.05; done", 0),
])
def test_sigusr1_reaches_the_program_and_the_status_says_resume_me(program, expected):
    proc = _bash('slurmkit_run_step "$@"\n', "bash", "-c", program)
    _started(proc)
    started = time.monotonic()
    proc.send_signal(signal.SIGUSR1)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == expected, err
    assert time.monotonic() - started < 10       # it did not sit out the program's sleep
    if expected == 75:
        assert "exit 75 so the daemon resumes it" in err
