"""The connection pool: one SSH connection per login node per process, shared by threads.

Keyed by user, host, port, proxy_jump, and the identity/known_hosts files it
was verified and authenticated with; opened lazily on the first command and
shared by every runner for that login node and by all threads (paramiko
channels on one Transport work concurrently).  A connection found dead when
a command starts is reopened once; a command that may already have run is
never re-sent (the caller gets :class:`RemoteError` and decides, e.g. by
checking its idempotency token).  A forked child never touches its parent's
connections.
"""

import atexit
import logging
import os
import threading
from typing import Dict

from slurmkit.errors import RemoteError
from slurmkit.remote import connect
from slurmkit.remote.connect import close_quietly, local_user, paramiko_module, why

log = logging.getLogger(__name__)

MAX_SESSIONS = 8            # OpenSSH's MaxSessions defaults to 10 per connection

POOL_LOCK = threading.Lock()
POOL: Dict[tuple, "Connection"] = {}
_STATS = {"opened": 0}
_ATEXIT = []
_INHERITED = []     # a forked child's copies of the parent's connections


def _after_fork_in_child():
    # A forked child shares the parent's sockets: using or even closing them
    # (paramiko sends a disconnect) would break the parent's connections, and
    # paramiko's threads did not survive the fork.  Retire them untouched and
    # keep references so garbage collection never closes them either; the
    # child opens its own connections on demand.
    global POOL_LOCK
    POOL_LOCK = threading.Lock()
    for conn in POOL.values():
        conn.retired = True
        _INHERITED.append(conn)
    POOL.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def pool_key(login) -> tuple:
    user = login.user or local_user()
    # identity_file and known_hosts are part of the key: a connection verified
    # against one known_hosts file must not vouch for a runner configured
    # with another (the one-connection-per-login-node rule still holds for
    # clusters that share a login node with the same settings).
    return (user, login.host.lower(), int(login.port), login.proxy_jump or None,
            login.identity_file or None, login.known_hosts or None)


class Connection:
    """One pooled SSH connection to a login node (and its bastion)."""

    def __init__(self, login, cluster: str):
        self.login = login
        self.cluster = cluster
        self.lock = threading.Lock()        # serialises connecting, not commands
        self.sessions = threading.BoundedSemaphore(MAX_SESSIONS)
        self.client = None
        self.jump_client = None
        self.refs = 0
        self.retired = False

    def current_transport(self):
        """The client's transport as it is now (None before a connection), without connecting."""
        return self.client.get_transport() if self.client is not None else None

    def _connect_locked(self):
        self._close_locked()
        self.client, self.jump_client = connect.open_connection(self.login, self.cluster)
        with POOL_LOCK:
            _STATS["opened"] += 1
            if not _ATEXIT:
                # Close cleanly at exit instead of leaving sshd with resets.
                atexit.register(close_all)
                _ATEXIT.append(True)
        return self.current_transport()

    def transport(self):
        """(active transport, whether it was opened just now)."""
        with self.lock:
            current = self.current_transport()
            if current is not None and current.is_active():
                return current, False
            if current is not None:
                log.info("SSH connection to %s:%s (cluster %s) is dead; reconnecting",
                         self.login.host, self.login.port, self.cluster)
            return self._connect_locked(), True

    def reconnect(self, dead):
        """Replace ``dead`` unless another thread already did."""
        with self.lock:
            current = self.current_transport()
            if current is not None and current is not dead and current.is_active():
                return current
            log.info("SSH connection to %s:%s (cluster %s) failed to open a session; reconnecting once",
                     self.login.host, self.login.port, self.cluster)
            return self._connect_locked()

    def open_session(self):
        """A new session channel; reconnects once if the transport is unusable.

        Safe to retry: nothing of the command has been sent at this point.
        """
        paramiko = paramiko_module()
        transport, fresh = self.transport()
        try:
            return transport.open_session(timeout=self.login.connect_timeout)
        except paramiko.ChannelException as exc:
            # The server answered and refused: the connection is fine, a new
            # one would be refused the same way.
            raise RemoteError("login node %s:%s of cluster %s refused to open a session: %s"
                              % (self.login.host, self.login.port, self.cluster, exc.text or exc)) from None
        except (paramiko.SSHException, EOFError, OSError) as exc:
            if fresh:
                raise RemoteError("cannot open a session on login node %s:%s of cluster %s: %s"
                                  % (self.login.host, self.login.port, self.cluster, why(exc))) from None
        transport = self.reconnect(transport)
        try:
            return transport.open_session(timeout=self.login.connect_timeout)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise RemoteError("cannot open a session on login node %s:%s of cluster %s even after reconnecting: %s"
                              % (self.login.host, self.login.port, self.cluster, why(exc))) from None

    def _close_locked(self):
        for client in (self.client, self.jump_client):
            if client is not None:
                close_quietly(client)
        self.client = self.jump_client = None

    def close(self):
        with self.lock:
            self._close_locked()


def close_all():
    """Close every pooled connection (runners reconnect on their next command)."""
    with POOL_LOCK:
        conns = list(POOL.values())
        POOL.clear()
        for conn in conns:
            conn.retired = True
    for conn in conns:
        conn.close()


def connection_count() -> int:
    """How many login-node SSH connections this process has opened (reconnects included)."""
    with POOL_LOCK:
        return _STATS["opened"]
