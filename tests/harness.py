"""The suite's one way to run slurmkit as a user does, and to wait for what it started.

- :func:`run_slurmkit`: ``python -m slurmkit ARGS`` in a new process (what a
  user's shell does: the CLI's error boundary, its exit code, both outputs);
- :func:`run_main`: the same CLI in this process (``slurmkit.cli.main``, the
  output read through pytest's ``capsys``), where a test needs fakes that only
  live here;
- :func:`one_error_line`: the rule for bad input (one ``Error: ...`` line,
  never a traceback), asserted;
- :func:`wait_until`: poll a condition until a deadline, and say what was
  awaited when it passes;
- :func:`assert_golden`: a rendered script against its golden file in
  ``tests/golden/`` (``UPDATE_GOLDEN=1 make unit`` writes them anew, for a
  diff to review);
- :class:`World`: fake clusters on one FakeClock, a session over them, a
  requeue journal and a daemon, for the daemon's unit tests (plain jobs and
  sweep tasks alike).

Test modules keep thin wrappers that only add their own environment (a site,
a state directory); nothing else runs the CLI.  (``tests/`` is on
``sys.path`` through its conftest: ``from harness import ...``.)
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence, TypeVar

T = TypeVar("T")
GOLDEN = Path(__file__).resolve().parent / "golden"


def assert_golden(script: str, name: str) -> None:
    """``script`` is the golden file ``tests/golden/NAME`` (with UPDATE_GOLDEN set: becomes it)."""
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(script)
    assert script == path.read_text(), "rendered script differs from %s (UPDATE_GOLDEN=1 to accept)" % path


def site_problems(tmp_path, text: str) -> list:
    """What ``site validate`` says of a site file holding ``text`` (one string a problem)."""
    from slurmkit.site import validate_files

    path = tmp_path / "s.yaml"
    path.write_text(text)
    return [str(p) for p in validate_files([path])]


def run_slurmkit(args: Sequence[object], env: Optional[Mapping[str, str]] = None, cwd=None, check: bool = False,
                 timeout: float = 120, input: Optional[str] = None,
                 stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    """``python -m slurmkit ARGS`` (each argument as ``str``) with ``env`` as its whole environment (default:
    this process's); ``check``: a non-zero exit fails the test with the command line and both outputs."""
    argv = [str(a) for a in args]
    proc = subprocess.run([sys.executable, "-m", "slurmkit"] + argv, env=dict(os.environ if env is None else env),
                          cwd=None if cwd is None else str(cwd), input=input,
                          stdin=None if input is not None else subprocess.DEVNULL, stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError("slurmkit %s -> %d\nstdout: %s\nstderr: %s"
                             % (" ".join(argv), proc.returncode, proc.stdout, proc.stderr))
    return proc


def default_interrupts() -> None:
    """For a child's ``preexec_fn``: SIGINT and SIGQUIT as a terminal's process has them.  A suite started in
    the background (`make test &`, `nohup`, cron, a CI script's `&`) hands them down ignored, and a process
    that starts with SIGINT ignored never sees a test's Ctrl-C (Python installs no handler, bash cannot trap
    it)."""
    for number in (signal.SIGINT, signal.SIGQUIT):
        signal.signal(number, signal.SIG_DFL)


def run_main(capsys, *args: object, input: Optional[str] = None):
    """The CLI's ``main(ARGS)`` in this process: ``(exit code, stdout, stderr)``; ``input``: what the user
    types at its prompts."""
    import io

    from slurmkit.cli import main

    stdin, sys.stdin = sys.stdin, io.StringIO(input or "")
    try:
        code = main([str(a) for a in args])
    finally:
        sys.stdin = stdin
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(stderr: str) -> str:
    """The one ``Error: ...`` line a failed command printed (asserted: one line, no traceback)."""
    lines = stderr.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "Traceback" not in stderr, stderr
    return lines[0]


def wait_until(predicate: Callable[[], T], timeout: float, interval: float = 0.5, what: str = "the condition") -> T:
    """``predicate()``'s first true value, asked every ``interval`` s; AssertionError naming ``what`` (and the
    last value) once ``timeout`` s have passed."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %ss waiting for %s (last: %r)" % (timeout, what, value))
        time.sleep(interval)


class World:
    """Fake clusters on one virtual clock, a session over them, a requeue journal and a daemon over those.

    ``clusters``: {name: FakeSlurm keyword arguments}; each becomes an attribute (``world.alpha``).
    ``slurm``: the fake's class (FakeArraySlurm for sweeps), ``daemon``: the daemon's (SweepDaemon).
    A subclass says how an attempt is submitted (:meth:`submit_attempt`).
    """

    def __init__(self, tmp_path, clusters, journal_path, slurm=None, daemon=None):
        from slurmkit.requeue.daemon import Daemon
        from slurmkit.requeue.journal import Journal
        from slurmkit.testing import FakeClock, FakeSlurm, fake_session

        self.tmp = tmp_path
        self.clock = FakeClock()
        for name, options in clusters.items():
            setattr(self, name, (slurm or FakeSlurm)(name, clock=self.clock, **options))
        self.session = fake_session(**{name: getattr(self, name) for name in clusters})
        self.journal = Journal(str(journal_path), clock=self.clock)
        self.daemon = (daemon or Daemon)(self.journal, sessions=lambda site: self.session,
                                         submit_attempt=self.submit_attempt, clock=self.clock)

    def submit_attempt(self, tracked, attempt, cluster):
        raise NotImplementedError

    @staticmethod
    def save_checkpoint(root, step) -> str:
        """A complete checkpoint of ``step`` under ``root`` (the repository's helper, as a program writes one)."""
        from slurmkit import checkpoint

        os.makedirs(str(root), exist_ok=True)
        with checkpoint.checkpoint_dir(str(root), step) as tmp:
            with open(os.path.join(tmp, "state.pt"), "wb") as fh:
                fh.write(b"x" * step)
        return checkpoint.step_path(str(root), step)

    def close(self):
        self.journal.close()
