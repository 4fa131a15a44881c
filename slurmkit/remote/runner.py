"""SSHRunner: run Slurm commands on a cluster's login node over a pooled SSH connection.

Commands are sent as ``shlex.join(argv)``: every argument is quoted, so user
values (job names, paths, ``$(...)``, newlines) reach the remote program byte
for byte and nothing is interpreted by the remote shell.  (The remote login
shell must be POSIX-like; csh does not accept newlines inside quotes.)
"""

import math
import shlex
import socket
import threading
import time
from typing import Sequence

from slurmkit.errors import ConfigError, ConnectTimeoutError, RemoteError, SlurmUnavailableError, UsageError
from slurmkit.remote import pool
from slurmkit.remote.connect import close_quietly, local_user, paramiko_module, seconds_text, why
from slurmkit.slurm.runner import CommandResult, Runner

_CHUNK = 32768
_POLL_S = 0.1               # how often a waiting command re-checks its deadline


def command_not_found_message(program: str, cluster: str, where: str) -> str:
    return ("%s not found on the login node of %s (%s); install the Slurm client commands there or put "
            "them on the PATH of non-interactive SSH sessions" % (program, cluster, where))


def quote_command(argv: Sequence[str]) -> str:
    """The remote command line for ``argv``: every argument shell-quoted.

    The remote sshd hands this string to the user's login shell, so quoting
    each argument is what keeps user values from being interpreted there.
    """
    argv = [str(a) for a in argv]
    if not argv:
        raise UsageError("cannot run an empty command")
    for arg in argv:
        if "\x00" in arg:
            # No shell can carry a NUL inside an argument; refuse rather than truncate.
            raise UsageError("argument %r contains a NUL byte, which no command line can carry" % arg)
    return shlex.join(argv)


# --------------------------------------------------------------------------
class SSHRunner(Runner):
    """Runs argv on a cluster's login node over a pooled SSH connection."""

    def __init__(self, login, cluster: str):
        if login is None or not login.host:
            raise ConfigError("cluster %s has no login host to reach over SSH" % cluster)
        self.login = login
        self.cluster = cluster
        self._conn = None
        self._lock = threading.Lock()

    # -- connection handling --

    def _connection(self) -> pool.Connection:
        with self._lock:
            if self._conn is None or self._conn.retired:
                key = pool.pool_key(self.login)
                with pool.POOL_LOCK:
                    conn = pool.POOL.get(key)
                    if conn is None:
                        conn = pool.POOL[key] = pool.Connection(self.login, self.cluster)
                    conn.refs += 1
                self._conn = conn
            return self._conn

    def close(self):
        """Drop this runner's share of the pooled connection; the last one closes it."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is None:
            return
        with pool.POOL_LOCK:
            conn.refs -= 1
            last = conn.refs <= 0 and not conn.retired
            if last:
                conn.retired = True
                if pool.POOL.get(pool.pool_key(self.login)) is conn:
                    del pool.POOL[pool.pool_key(self.login)]
        if last:
            conn.close()

    def transport(self):
        """The live paramiko Transport, or None (for diagnostics and tests)."""
        conn = self._conn
        return conn.current_transport() if conn is not None else None

    def describe(self):
        user = self.login.user or local_user()
        text = "ssh %s@%s:%s" % (user, self.login.host, self.login.port)
        if self.login.proxy_jump:
            text += " via %s" % self.login.proxy_jump
        return text

    # -- running --

    def run(self, argv, stdin=None, timeout=None):
        argv = tuple(str(a) for a in argv)
        command = quote_command(argv)
        timeout = self._seconds(timeout or self.login.command_timeout)
        deadline = time.monotonic() + timeout
        conn = self._connection()
        # Bound concurrent channels below sshd's MaxSessions: threads beyond it
        # wait for a slot instead of failing with "administratively prohibited".
        if not conn.sessions.acquire(timeout=timeout):
            raise self._timeout_error(argv, timeout, started=False)
        try:
            chan = conn.open_session()
            try:
                stdout, stderr, status = self._exchange(chan, argv, command, stdin, deadline, timeout)
            finally:
                close_quietly(chan)
        finally:
            conn.sessions.release()
        if status == 127 and "not found" in stderr:
            raise SlurmUnavailableError(command_not_found_message(argv[0], self.cluster, self.describe()))
        return CommandResult(argv, status, stdout, stderr)

    def _seconds(self, value):
        """A command's time limit: a positive finite number, else ConfigError (a NaN limit would crash a
        timer thread, zero would fail every command; the site loader refuses both, this keeps any other
        caller honest)."""
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            seconds = float("nan")
        if not (math.isfinite(seconds) and seconds > 0):
            raise ConfigError("cluster %s: the command timeout must be a positive number of seconds, got %r "
                              "(login.command_timeout in the site config)" % (self.cluster, value))
        return seconds

    def _timeout_error(self, argv, timeout, started=True):
        what = "`%s`" % " ".join(argv[:3]) + (" ..." if len(argv) > 3 else "")
        if started:
            return ConnectTimeoutError(
                "%s on cluster %s (login node %s:%s) did not finish within %ss; the SSH channel was closed "
                "(the remote command may still be running); slurmctld may be overloaded or down"
                % (what, self.cluster, self.login.host, self.login.port, seconds_text(timeout))).outcome_unknown()
        return ConnectTimeoutError("%s on cluster %s (login node %s:%s) did not start within %ss: all SSH sessions "
                                   "to the login node stayed busy" % (what, self.cluster, self.login.host,
                                                                      self.login.port, seconds_text(timeout)))

    def _lost(self, argv, exc):
        return RemoteError(
            "the SSH connection to login node %s:%s of cluster %s was lost while running `%s` (%s); it may or may "
            "not have run: check before retrying" % (self.login.host, self.login.port, self.cluster, argv[0],
                                                     why(exc))).outcome_unknown()

    def _exchange(self, chan, argv, command, stdin, deadline, timeout):
        """Send the command and stdin, collect stdout/stderr and the exit status."""
        paramiko = paramiko_module()
        # exec_command waits for the server's reply without a timeout; a timer
        # closing the channel bounds that wait by the command's deadline.
        expired = threading.Event()

        def expire():
            expired.set()
            close_quietly(chan)

        timer = threading.Timer(max(0.0, deadline - time.monotonic()), expire)
        timer.daemon = True
        timer.start()
        try:
            try:
                chan.exec_command(command)
            except (paramiko.SSHException, EOFError, OSError) as exc:
                if expired.is_set():
                    raise self._timeout_error(argv, timeout) from None
                raise self._lost(argv, exc) from None
            out, err = self._pump(chan, stdin, deadline, expired, argv, timeout)
            if not chan.status_event.wait(max(0.0, deadline - time.monotonic())) or expired.is_set():
                raise self._timeout_error(argv, timeout)
        finally:
            timer.cancel()
        transport = chan.get_transport()
        status = chan.exit_status
        if status == -1 and (transport is None or not transport.is_active()):
            raise self._lost(argv, "connection closed before the exit status arrived")
        return out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), status

    def _pump(self, chan, stdin, deadline, expired, argv, timeout):
        # One thread moves both directions: stdin is sent whenever the SSH
        # window allows, and stdout/stderr are drained meanwhile, so a remote
        # program that writes while reading cannot deadlock us.
        out, err = [], []
        pending = memoryview(stdin.encode("utf-8")) if stdin else None
        if pending is None:
            chan.shutdown_write()   # remote reads of stdin see EOF at once (like ssh -n)
        chan.settimeout(_POLL_S)
        while True:
            if expired.is_set() or time.monotonic() >= deadline:
                expired.set()
                raise self._timeout_error(argv, timeout)
            if pending is not None:
                try:
                    while len(pending) and chan.send_ready():
                        pending = pending[chan.send(bytes(pending[:_CHUNK])):]
                    if not len(pending):
                        chan.shutdown_write()
                        pending = None
                except (socket.timeout, OSError):
                    pending = None  # the remote closed its stdin; it no longer reads
            while chan.recv_stderr_ready():
                err.append(chan.recv_stderr(_CHUNK))
            if chan.recv_ready() or pending is None or not chan.send_ready():
                try:
                    chunk = chan.recv(_CHUNK)
                except socket.timeout:
                    continue
                if not chunk:
                    break
                out.append(chunk)
        # stdout hit EOF: the SSH EOF covers stderr too, so what is buffered is all.
        while True:
            try:
                chunk = chan.recv_stderr(_CHUNK)
            except socket.timeout:
                if time.monotonic() >= deadline:
                    raise self._timeout_error(argv, timeout)
                continue
            if not chunk:
                break
            err.append(chunk)
        return b"".join(out), b"".join(err)
