"""Runners: the one place where a Slurm command is actually executed.

Everything else in ``slurmkit.slurm`` is pure (argv builders, output
parsers).  A runner takes an argument list, never a shell string, and returns
a :class:`CommandResult`.  :class:`LocalRunner` uses ``subprocess``; the SSH
runner in ``slurmkit.remote.ssh`` runs the same argv on a login node, so every
backend works unchanged across clusters.
"""

import os
import subprocess
from typing import Mapping, NamedTuple, Optional, Sequence, Tuple

from slurmkit.errors import ConnectTimeoutError, SlurmUnavailableError


class CommandResult(NamedTuple):
    argv: Tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self):
        return self.returncode == 0


class Runner:
    """Interface: run an argument list somewhere, return its result.

    Implementations raise :class:`SlurmUnavailableError` when the program
    does not exist there, :class:`ConnectTimeoutError` when it does not
    finish within ``timeout`` seconds, and a :class:`RemoteError` subclass
    when the place itself cannot be reached.  A non-zero exit status is *not*
    an exception: parsers decide what it means.
    """

    def run(self, argv: Sequence[str], stdin: Optional[str] = None,
            timeout: Optional[float] = None) -> CommandResult:
        raise NotImplementedError

    def describe(self) -> str:
        """Where commands run, for messages: 'local' or 'ssh user@host:port'."""
        raise NotImplementedError

    def close(self):
        """Release connections; running again reopens them."""


class LocalRunner(Runner):
    """Runs commands on this machine, with ``extra_env`` (e.g. SLURM_CONF) added."""

    def __init__(self, extra_env: Optional[Mapping[str, str]] = None, default_timeout: float = 120.0):
        self.extra_env = dict(extra_env or {})
        self.default_timeout = default_timeout

    def run(self, argv, stdin=None, timeout=None):
        argv = tuple(str(a) for a in argv)
        env = dict(os.environ, **self.extra_env) if self.extra_env else None
        try:
            # Decoded as the SSH runner decodes: a byte that is not UTF-8 (a job's log cut mid-character,
            # a node name in another encoding) is a replacement character, never an exception.
            proc = subprocess.run(argv, input=stdin, capture_output=True, encoding="utf-8", errors="replace", env=env,
                                  timeout=timeout or self.default_timeout)
        except FileNotFoundError:
            raise SlurmUnavailableError(
                "%s is not installed or not on PATH; run slurmkit on a login node of the cluster" % argv[0]) from None
        except subprocess.TimeoutExpired:
            raise ConnectTimeoutError("%s did not answer within %ss; slurmctld may be overloaded or down"
                                      % (argv[0], timeout or self.default_timeout)).outcome_unknown() from None
        return CommandResult(argv, proc.returncode, proc.stdout, proc.stderr)

    def describe(self):
        conf = self.extra_env.get("SLURM_CONF")
        return "local (SLURM_CONF=%s)" % conf if conf else "local"
