"""SSHRunner: run Slurm commands on a cluster's login node over SSH.

This is the only module of slurmkit that imports paramiko, and it imports it
lazily (inside functions) so that ``import slurmkit.remote.ssh`` stays cheap
and works on machines without paramiko as long as no remote cluster is used.

Security rules, all deliberate:

* Host keys are checked strictly.  The client always uses
  ``paramiko.RejectPolicy``: an unknown key raises :class:`HostKeyError` with
  the OpenSSH-style fingerprint and the command that trusts it
  (``slurmkit site trust CLUSTER``); a changed key is refused with the old and
  new fingerprints and the file holding the old line.  Nothing is ever added
  to a known_hosts file except by :func:`trust_host_key`, which the CLI calls
  only after the user confirmed the fingerprint.
* Known hosts come from ``/etc/ssh/ssh_known_hosts``, ``~/.ssh/known_hosts``
  and the login node's own ``known_hosts`` file.  Hashed names
  (``|1|salt|hash``), ``[host]:port`` names, wildcards, negations and
  ``@revoked`` lines are understood (parsed here so error messages can name
  the file and line).
* Authentication uses the login's ``identity_file`` if set, else the
  ssh-agent and the default ``~/.ssh/id_*`` keys.  Passwords are never sent,
  and the agent is never forwarded.
* ProxyJump ``[user@]bastion[:port]`` (one hop): the bastion is connected
  to and checked exactly like a login node, authenticated with the same keys
  (as the local user when the spec names none, like ``ssh -J``), and a
  ``direct-tcpip`` channel through it carries the login node's connection.
* Commands are sent as ``shlex.join(argv)``: every argument is quoted, so user
  values (job names, paths, ``$(...)``, newlines) reach the remote program
  byte for byte and nothing is interpreted by the remote shell.  (The remote
  login shell must be POSIX-like; csh does not accept newlines inside quotes.)

Connections are pooled per process: one SSH connection per login node
(keyed by user, host, port, proxy_jump, and the identity/known_hosts files it
was verified and authenticated with), opened lazily on the first command,
shared by every :class:`SSHRunner` for that login node and by all threads
(paramiko channels on one Transport work concurrently).  A connection found
dead when a command starts is reopened once; a command that may already have
run is never re-sent (the caller gets :class:`RemoteError` and decides, e.g.
by checking its idempotency token).
"""

import atexit
import base64
import hashlib
import hmac
import logging
import os
import re
import shlex
import socket
import threading
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from slurmkit.errors import (ConfigError, ConnectTimeoutError, HostKeyError, RemoteError,
                             SlurmUnavailableError)
from slurmkit.slurm.runner import CommandResult, Runner

log = logging.getLogger(__name__)

SYSTEM_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"
USER_KNOWN_HOSTS = "~/.ssh/known_hosts"
KEEPALIVE_S = 15            # keeps NAT/firewall state alive and detects dead peers
MAX_SESSIONS = 8            # OpenSSH's MaxSessions defaults to 10 per connection
_CHUNK = 32768
_POLL_S = 0.1               # how often a waiting command re-checks its deadline


# --------------------------------------------------------------------------
# Pure helpers (no paramiko): quoting, ProxyJump, fingerprints, known_hosts.
# --------------------------------------------------------------------------

def quote_command(argv: Sequence[str]) -> str:
    """The remote command line for ``argv``: every argument shell-quoted.

    The remote sshd hands this string to the user's login shell, so quoting
    each argument is what keeps user values from being interpreted there.
    """
    argv = [str(a) for a in argv]
    if not argv:
        raise ValueError("cannot run an empty command")
    for arg in argv:
        if "\x00" in arg:
            # No shell can carry a NUL inside an argument; refuse rather than truncate.
            raise ValueError("argument %r contains a NUL byte" % arg)
    return shlex.join(argv)


@dataclass(frozen=True)
class JumpHost:
    """A parsed ProxyJump ``[user@]host[:port]``."""

    host: str
    port: int = 22
    user: Optional[str] = None


def parse_proxy_jump(spec: str) -> JumpHost:
    """Parse ``[ssh://][user@]host[:port]``; IPv6 literals go in brackets.

    Only one hop is supported: the bastion itself is reached directly.
    """
    text = (spec or "").strip()
    if text.startswith("ssh://"):
        text = text[len("ssh://"):].rstrip("/")
    if not text:
        raise ConfigError("proxy_jump is empty; write it as user@host:port (user and port optional)")
    if "," in text:
        raise ConfigError("proxy_jump %r names several hops; slurmkit supports one bastion "
                          "(write it as user@host:port)" % spec)
    user, at, hostport = text.rpartition("@")
    if at and not user:
        raise ConfigError("proxy_jump %r has an empty user before '@'" % spec)
    port_text = None
    if hostport.startswith("["):
        host, bracket, rest = hostport[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ConfigError("proxy_jump %r: write an IPv6 bastion as [address]:port" % spec)
        port_text = rest[1:] if rest else None
    elif hostport.count(":") == 1:
        host, _, port_text = hostport.partition(":")
    elif ":" in hostport:
        raise ConfigError("proxy_jump %r: write an IPv6 bastion as [address]:port" % spec)
    else:
        host = hostport
    if not host or any(c.isspace() for c in host):
        raise ConfigError("proxy_jump %r has no valid host; write it as user@host:port" % spec)
    port = 22
    if port_text is not None:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ConfigError("proxy_jump %r has an invalid port %r" % (spec, port_text))
        port = int(port_text)
    return JumpHost(host=host, port=port, user=user or None)


def fingerprint(key_blob: bytes) -> str:
    """OpenSSH's fingerprint of a public key blob: ``SHA256:`` + unpadded base64."""
    digest = hashlib.sha256(key_blob).digest()
    return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")


def fingerprint_b64(key_b64: str) -> str:
    """Fingerprint of a key given as the base64 field of a known_hosts line."""
    return fingerprint(base64.b64decode(key_b64))


def host_key_name(host: str, port: int) -> str:
    """The name OpenSSH stores for a host: ``host`` on port 22, else ``[host]:port``."""
    host = host.lower()
    return host if int(port) == 22 else "[%s]:%d" % (host, int(port))


def known_hosts_line(host: str, port: int, keytype: str, key_b64: str) -> str:
    """One known_hosts line (with newline) in OpenSSH's unhashed format."""
    return "%s %s %s\n" % (host_key_name(host, port), keytype, key_b64)


def _hashed_name_matches(name: str, token: str) -> bool:
    # "|1|base64(salt)|base64(HMAC-SHA1(salt, name))", as written by HashKnownHosts.
    parts = token.split("|")
    if len(parts) != 4 or parts[1] != "1":
        return False
    try:
        salt = base64.b64decode(parts[2])
        want = base64.b64decode(parts[3])
    except (ValueError, TypeError):
        return False
    got = hmac.new(salt, name.encode("utf-8"), hashlib.sha1).digest()
    return hmac.compare_digest(got, want)


def _pattern_matches(name: str, pattern: str) -> bool:
    if pattern.startswith("|"):
        return _hashed_name_matches(name, pattern)
    # OpenSSH patterns know only '*' and '?'; everything else (e.g. the
    # brackets of "[host]:port") is literal, so fnmatch would be wrong here.
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern.lower())
    return re.fullmatch(regex, name.lower()) is not None


def host_matches(name: str, patterns: Sequence[str]) -> bool:
    """OpenSSH's rule: some pattern matches and no negated (``!``) pattern does."""
    matched = False
    for pattern in patterns:
        if pattern.startswith("!"):
            if _pattern_matches(name, pattern[1:]):
                return False
        elif _pattern_matches(name, pattern):
            matched = True
    return matched


@dataclass(frozen=True)
class KnownHostEntry:
    """One key line of a known_hosts file, kept with where it came from."""

    path: str
    lineno: int
    patterns: Tuple[str, ...]
    keytype: str
    key_b64: str
    marker: Optional[str] = None        # None, "@revoked" or "@cert-authority"

    def matches(self, name: str) -> bool:
        return host_matches(name, self.patterns)

    @property
    def fingerprint(self) -> str:
        return fingerprint_b64(self.key_b64)


def parse_known_hosts(text: str, path: str = "<string>") -> List[KnownHostEntry]:
    """Parse known_hosts text; malformed lines are skipped (they can only make
    the check stricter, since a skipped line never vouches for a key)."""
    entries = []
    for lineno, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        marker = None
        if fields[0].startswith("@"):
            marker, fields = fields[0], fields[1:]
            if marker not in ("@revoked", "@cert-authority"):
                continue
        if len(fields) < 3:
            continue
        try:
            base64.b64decode(fields[2], validate=True)
        except (ValueError, TypeError):
            continue
        entries.append(KnownHostEntry(path=path, lineno=lineno, patterns=tuple(fields[0].split(",")),
                                      keytype=fields[1], key_b64=fields[2], marker=marker))
    return entries


def read_known_hosts(path: str) -> List[KnownHostEntry]:
    """Entries of one known_hosts file; none when it does not exist."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return parse_known_hosts(f.read(), path)
    except FileNotFoundError:
        return []
    except OSError as exc:
        # An unreadable file cannot vouch for any key: stricter, so only warn.
        log.warning("cannot read known_hosts file %s: %s", path, exc)
        return []


def known_hosts_files(login) -> List[str]:
    """The known_hosts files consulted for ``login``, in load order.

    The login's own file comes last: its lines win over same-type lines of
    the shared files (paramiko keeps the last key per name and type).
    """
    files = [SYSTEM_KNOWN_HOSTS, os.path.expanduser(USER_KNOWN_HOSTS)]
    if getattr(login, "known_hosts", None):
        files.append(os.path.expanduser(login.known_hosts))
    seen, result = set(), []
    for path in files:
        real = os.path.realpath(path)
        if real not in seen:
            seen.add(real)
            result.append(path)
    return result


def trust_target_file(login) -> str:
    """Which file :func:`trust_host_key` writes: the login's known_hosts, else ~/.ssh/known_hosts."""
    return os.path.expanduser(login.known_hosts or USER_KNOWN_HOSTS)


# --------------------------------------------------------------------------
# Messages (pure, so the exact wording is unit-tested).
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class _Endpoint:
    """A host we connect to, with what it is to the user (for messages)."""

    host: str
    port: int
    user: Optional[str]
    cluster: str
    bastion: bool = False

    @property
    def hostport(self):
        return "%s:%d" % (self.host, self.port)

    @property
    def name(self):
        return host_key_name(self.host, self.port)

    def describe(self):
        if self.bastion:
            return "bastion %s (ProxyJump of cluster %s)" % (self.hostport, self.cluster)
        return "login node %s of cluster %s" % (self.hostport, self.cluster)


def unknown_host_key_message(ep: _Endpoint, keytype: str, fp: str) -> str:
    if ep.bastion:
        return ("host key of bastion %s (ProxyJump of cluster %s) is unknown: %s %s; if this fingerprint is "
                "right, add it to ~/.ssh/known_hosts (e.g. connect once with `ssh -p %d %s%s` and accept it)"
                % (ep.hostport, ep.cluster, keytype, fp, ep.port, (ep.user + "@") if ep.user else "", ep.host))
    return ("host key of %s (cluster %s) is unknown: %s %s; if this fingerprint is right, "
            "run `slurmkit site trust %s`" % (ep.hostport, ep.cluster, keytype, fp, ep.cluster))


def changed_host_key_message(ep: _Endpoint, keytype: str, expected_fp: str, got_fp: str,
                             where: Optional[KnownHostEntry]) -> str:
    what = ("BASTION %s (ProxyJump of cluster %s)" % (ep.hostport, ep.cluster) if ep.bastion
            else "%s (cluster %s)" % (ep.hostport, ep.cluster))
    location = "%s (line %d)" % (where.path, where.lineno) if where else "your known_hosts files"
    fix = ("run `slurmkit site trust %s`" % ep.cluster if not ep.bastion
           else "add the new key (e.g. connect once with `ssh -p %d %s`)" % (ep.port, ep.host))
    return ("HOST KEY OF %s HAS CHANGED: someone may be intercepting the connection, or the host was "
            "reinstalled; expected %s, got %s (%s); if the change is expected, remove the old line from %s "
            "and %s" % (what, expected_fp, got_fp, keytype, location, fix))


def revoked_host_key_message(ep: _Endpoint, keytype: str, fp: str, where: KnownHostEntry) -> str:
    return ("host key of %s is marked @revoked in %s (line %d): %s %s; refusing to connect"
            % (ep.describe(), where.path, where.lineno, keytype, fp))


def refused_message(ep: _Endpoint, reason: str) -> str:
    return "cannot reach %s: %s (is sshd running?)" % (ep.describe(), reason)


def auth_failed_message(ep: _Endpoint, user: str, identity_file: Optional[str]) -> str:
    if identity_file:
        tried = "the key %s (identity_file)" % identity_file
        advice = ("check that this is the right key and that its public half is in ~%s/.ssh/authorized_keys "
                  "on that host" % user)
    else:
        tried = "the keys of the ssh-agent and ~/.ssh/id_*"
        advice = ("check that ssh-agent holds the right key (`ssh-add -l`), or set identity_file in the "
                  "cluster's login section")
    return "%s refused SSH authentication as user %s: tried %s; %s" % (ep.describe(), user, tried, advice)


def command_not_found_message(program: str, cluster: str, where: str) -> str:
    return ("%s not found on the login node of %s (%s); install the Slurm client commands there or put "
            "them on the PATH of non-interactive SSH sessions" % (program, cluster, where))


# --------------------------------------------------------------------------
# paramiko glue
# --------------------------------------------------------------------------

def _paramiko():
    try:
        import paramiko
    except ImportError:
        raise RemoteError("paramiko is not installed, but a cluster is reached over SSH; "
                          "install it with `pip install paramiko`") from None
    return paramiko


class _KnownHosts:
    """All known_hosts entries for one connection attempt, with lookups."""

    def __init__(self, paths: Sequence[str]):
        self.paths = list(paths)
        self.entries = [e for p in self.paths for e in read_known_hosts(p)]

    def for_name(self, name: str) -> List[KnownHostEntry]:
        return [e for e in self.entries if e.marker is None and e.matches(name)]

    def revoked(self, keytype: str, key_b64: str) -> Optional[KnownHostEntry]:
        # A revoked key is refused for every host, whatever the line's host
        # patterns say: stricter than needed, never looser.
        for e in self.entries:
            if e.marker == "@revoked" and e.keytype == keytype and e.key_b64 == key_b64:
                return e
        return None

    def holding(self, name: str, key_b64: str) -> Optional[KnownHostEntry]:
        for e in self.for_name(name):
            if e.key_b64 == key_b64:
                return e
        return None


def _tcp_connect(ep: _Endpoint, timeout: float):
    try:
        return socket.create_connection((ep.host, ep.port), timeout=timeout)
    except socket.gaierror as exc:
        raise RemoteError("cannot resolve the host name of %s: %s; check the host in the site config"
                          % (ep.describe(), exc.strerror or exc)) from None
    except socket.timeout:
        raise ConnectTimeoutError("cannot reach %s within %ss (connect_timeout): no answer; is the host up and "
                                  "the port open (firewall, VPN)?" % (ep.describe(), _num(timeout))) from None
    except ConnectionRefusedError:
        raise RemoteError(refused_message(ep, "Connection refused")) from None
    except OSError as exc:
        raise RemoteError("cannot reach %s: %s" % (ep.describe(), exc.strerror or exc)) from None


def _why(exc) -> str:
    """An exception as text; some (EOFError(), socket.timeout()) have none."""
    return str(exc) or type(exc).__name__


def _close_quietly(thing):
    # Closing a channel sends a message; on a dead connection that raises,
    # which must not replace the error (or result) the caller is handling.
    try:
        thing.close()
    except Exception:
        pass


def _num(x):
    return ("%g" % x) if isinstance(x, float) else str(x)


def _timed_out(exc: BaseException) -> bool:
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, socket.timeout):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _ssh_connect(ep: _Endpoint, sock, login, known: _KnownHosts):
    """Handshake, strict host-key check and publickey auth over ``sock``.

    Returns a connected ``paramiko.SSHClient``; every failure is translated to
    a slurmkit error with a message that says what to do.
    """
    paramiko = _paramiko()

    class _RejectAndRemember(paramiko.RejectPolicy):
        # Still RejectPolicy (super() raises); it only remembers the key so the
        # error can show its fingerprint.
        rejected = None

        def missing_host_key(self, client, hostname, key):
            self.rejected = key
            super().missing_host_key(client, hostname, key)

    client = paramiko.SSHClient()
    policy = _RejectAndRemember()
    client.set_missing_host_key_policy(policy)
    # Only the lines for this host are handed to paramiko, under the exact
    # name it looks up; revoked keys are never vouched for.
    store = client.get_host_keys()
    for entry in known.for_name(ep.name):
        if known.revoked(entry.keytype, entry.key_b64):
            continue
        parsed = paramiko.hostkeys.HostKeyEntry.from_line("%s %s %s" % (ep.name, entry.keytype, entry.key_b64))
        if parsed is not None and parsed.key is not None:
            store.add(ep.name, parsed.key.get_name(), parsed.key)

    identity = _identity(login, ep.cluster)
    user = ep.user or _local_user()
    timeout = login.connect_timeout
    # paramiko looks the key up as "[hostname]:port" built from the hostname
    # passed here, so it must be spelled exactly like ep.name (lowercase).
    kwargs = dict(hostname=ep.host.lower(), port=ep.port, username=user, sock=sock, timeout=timeout,
                  banner_timeout=timeout, auth_timeout=timeout, password=None, passphrase=None)
    if identity:
        # Exactly this key: an agent full of other keys would otherwise burn
        # the server's MaxAuthTries before the right one is offered.
        kwargs.update(key_filename=identity, allow_agent=False, look_for_keys=False)
    else:
        kwargs.update(allow_agent=True, look_for_keys=True)

    started = time.monotonic()
    try:
        client.connect(**kwargs)
    except paramiko.BadHostKeyException as exc:
        client.close()
        got, expected = exc.key, exc.expected_key
        where = known.holding(ep.name, expected.get_base64())
        raise HostKeyError(changed_host_key_message(ep, got.get_name(), fingerprint(expected.asbytes()),
                                                    fingerprint(got.asbytes()), where)) from None
    except paramiko.PasswordRequiredException:
        client.close()
        raise RemoteError("identity_file %s of cluster %s is passphrase-protected and slurmkit never asks for "
                          "passphrases; load it into ssh-agent (`ssh-add %s`) and remove identity_file from the "
                          "site config" % (identity, ep.cluster, identity)) from None
    except paramiko.AuthenticationException as exc:
        client.close()
        if "timeout" in str(exc).lower():   # paramiko's auth_timeout: "Authentication timeout."
            raise ConnectTimeoutError("%s did not answer the SSH authentication within %ss (connect_timeout)"
                                      % (ep.describe(), _num(timeout))) from None
        raise RemoteError(auth_failed_message(ep, user, identity)) from None
    except paramiko.SSHException as exc:
        key = policy.rejected
        client.close()
        if key is not None:
            revoked = known.revoked(key.get_name(), key.get_base64())
            if revoked is not None:
                raise HostKeyError(revoked_host_key_message(ep, key.get_name(), fingerprint(key.asbytes()),
                                                            revoked)) from None
            raise HostKeyError(unknown_host_key_message(ep, key.get_name(), fingerprint(key.asbytes()))) from None
        if _timed_out(exc) or time.monotonic() - started >= timeout:
            raise ConnectTimeoutError("%s did not complete the SSH handshake within %ss (connect_timeout); "
                                      "the host or sshd may be overloaded" % (ep.describe(), _num(timeout))) from None
        raise RemoteError("SSH connection to %s failed: %s" % (ep.describe(), _why(exc))) from None
    except (EOFError, OSError) as exc:
        client.close()
        raise RemoteError("%s closed the connection during the SSH handshake (%s); check the sshd log there"
                          % (ep.describe(), _why(exc))) from None
    client.get_transport().set_keepalive(KEEPALIVE_S)
    return client


def _identity(login, cluster: str) -> Optional[str]:
    identity = os.path.expanduser(login.identity_file) if login.identity_file else None
    if identity and not os.path.isfile(identity):
        raise ConfigError("identity_file %s of cluster %s does not exist; fix the path in the site config"
                          % (identity, cluster))
    return identity


def _local_user():
    import getpass
    return getpass.getuser()


def _open_jump_channel(jump_client, ep: _Endpoint, bastion: _Endpoint, timeout: float):
    """A ``direct-tcpip`` channel from the bastion to ``ep`` (the login's socket)."""
    paramiko = _paramiko()
    try:
        return jump_client.get_transport().open_channel("direct-tcpip", (ep.host, ep.port), ("127.0.0.1", 0),
                                                        timeout=timeout)
    except paramiko.ChannelException as exc:
        reason = exc.text or "channel open failed (code %s)" % exc.code
        if exc.code == 2:   # SSH_OPEN_CONNECT_FAILED: the bastion's TCP connect failed
            reason += " (is sshd running?)"
        raise RemoteError("%s could not reach %s: %s" % (bastion.describe(), ep.describe(), reason)) from None
    except (paramiko.SSHException, EOFError, OSError) as exc:
        raise RemoteError("%s could not reach %s: %s" % (bastion.describe(), ep.describe(), _why(exc))) from None


def _endpoints(login, cluster: str) -> Tuple[_Endpoint, Optional[_Endpoint]]:
    ep = _Endpoint(host=login.host, port=int(login.port), user=login.user, cluster=cluster)
    if not login.proxy_jump:
        return ep, None
    jh = parse_proxy_jump(login.proxy_jump)
    return ep, _Endpoint(host=jh.host, port=jh.port, user=jh.user, cluster=cluster, bastion=True)


def _open(login, cluster: str):
    """Connect to the login node (through its bastion, if any): (client, jump_client)."""
    ep, bastion = _endpoints(login, cluster)
    _identity(login, cluster)       # a wrong path fails before any connection
    known = _KnownHosts(known_hosts_files(login))
    jump_client = None
    try:
        if bastion is not None:
            # The bastion is checked exactly as strictly as the login node.
            jump_client = _ssh_connect(bastion, _tcp_connect(bastion, login.connect_timeout), login, known)
            sock = _open_jump_channel(jump_client, ep, bastion, login.connect_timeout)
        else:
            sock = _tcp_connect(ep, login.connect_timeout)
        client = _ssh_connect(ep, sock, login, known)
    except BaseException:
        if jump_client is not None:
            jump_client.close()
        raise
    return client, jump_client


# --------------------------------------------------------------------------
# The connection pool
# --------------------------------------------------------------------------

_POOL_LOCK = threading.Lock()
_POOL: Dict[tuple, "_Connection"] = {}
_STATS = {"opened": 0}
_ATEXIT = []
_INHERITED = []     # a forked child's copies of the parent's connections


def _after_fork_in_child():
    # A forked child shares the parent's sockets: using or even closing them
    # (paramiko sends a disconnect) would break the parent's connections, and
    # paramiko's threads did not survive the fork.  Retire them untouched and
    # keep references so garbage collection never closes them either; the
    # child opens its own connections on demand.
    global _POOL_LOCK
    _POOL_LOCK = threading.Lock()
    for conn in _POOL.values():
        conn.retired = True
        _INHERITED.append(conn)
    _POOL.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _pool_key(login) -> tuple:
    user = login.user or _local_user()
    # identity_file and known_hosts are part of the key: a connection verified
    # against one known_hosts file must not vouch for a runner configured
    # with another (the one-connection-per-login-node rule still holds for
    # clusters that share a login node with the same settings).
    return (user, login.host.lower(), int(login.port), login.proxy_jump or None,
            login.identity_file or None, login.known_hosts or None)


class _Connection:
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

    def _current(self):
        return self.client.get_transport() if self.client is not None else None

    def _connect_locked(self):
        self._close_locked()
        self.client, self.jump_client = _open(self.login, self.cluster)
        with _POOL_LOCK:
            _STATS["opened"] += 1
            if not _ATEXIT:
                # Close cleanly at exit instead of leaving sshd with resets.
                atexit.register(close_all)
                _ATEXIT.append(True)
        return self._current()

    def transport(self):
        """(active transport, whether it was opened just now)."""
        with self.lock:
            current = self._current()
            if current is not None and current.is_active():
                return current, False
            if current is not None:
                log.info("SSH connection to %s:%s (cluster %s) is dead; reconnecting",
                         self.login.host, self.login.port, self.cluster)
            return self._connect_locked(), True

    def reconnect(self, dead):
        """Replace ``dead`` unless another thread already did."""
        with self.lock:
            current = self._current()
            if current is not None and current is not dead and current.is_active():
                return current
            log.info("SSH connection to %s:%s (cluster %s) failed to open a session; reconnecting once",
                     self.login.host, self.login.port, self.cluster)
            return self._connect_locked()

    def open_session(self):
        """A new session channel; reconnects once if the transport is unusable.

        Safe to retry: nothing of the command has been sent at this point.
        """
        paramiko = _paramiko()
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
                                  % (self.login.host, self.login.port, self.cluster, _why(exc))) from None
        transport = self.reconnect(transport)
        try:
            return transport.open_session(timeout=self.login.connect_timeout)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise RemoteError("cannot open a session on login node %s:%s of cluster %s even after reconnecting: %s"
                              % (self.login.host, self.login.port, self.cluster, _why(exc))) from None

    def _close_locked(self):
        for client in (self.client, self.jump_client):
            if client is not None:
                _close_quietly(client)
        self.client = self.jump_client = None

    def close(self):
        with self.lock:
            self._close_locked()


def close_all():
    """Close every pooled connection (runners reconnect on their next command)."""
    with _POOL_LOCK:
        conns = list(_POOL.values())
        _POOL.clear()
        for conn in conns:
            conn.retired = True
    for conn in conns:
        conn.close()


def connection_count() -> int:
    """How many login-node SSH connections this process has opened (reconnects included)."""
    with _POOL_LOCK:
        return _STATS["opened"]


def pooled_connections() -> int:
    """How many login nodes currently have a live pooled connection."""
    with _POOL_LOCK:
        conns = list(_POOL.values())
    return sum(1 for c in conns if c.client is not None and c._current() is not None and c._current().is_active())


# --------------------------------------------------------------------------
# The runner
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

    def _connection(self) -> _Connection:
        with self._lock:
            if self._conn is None or self._conn.retired:
                key = _pool_key(self.login)
                with _POOL_LOCK:
                    conn = _POOL.get(key)
                    if conn is None:
                        conn = _POOL[key] = _Connection(self.login, self.cluster)
                    conn.refs += 1
                self._conn = conn
            return self._conn

    def close(self):
        """Drop this runner's share of the pooled connection; the last one closes it."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is None:
            return
        with _POOL_LOCK:
            conn.refs -= 1
            last = conn.refs <= 0 and not conn.retired
            if last:
                conn.retired = True
                if _POOL.get(_pool_key(self.login)) is conn:
                    del _POOL[_pool_key(self.login)]
        if last:
            conn.close()

    def transport(self):
        """The live paramiko Transport, or None (for diagnostics and tests)."""
        conn = self._conn
        return conn._current() if conn is not None else None

    def describe(self):
        user = self.login.user or _local_user()
        text = "ssh %s@%s:%s" % (user, self.login.host, self.login.port)
        if self.login.proxy_jump:
            text += " via %s" % self.login.proxy_jump
        return text

    # -- running --

    def run(self, argv, stdin=None, timeout=None):
        argv = tuple(str(a) for a in argv)
        command = quote_command(argv)
        timeout = timeout or self.login.command_timeout
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
                _close_quietly(chan)
        finally:
            conn.sessions.release()
        if status == 127 and "not found" in stderr:
            raise SlurmUnavailableError(command_not_found_message(argv[0], self.cluster, self.describe()))
        return CommandResult(argv, status, stdout, stderr)

    def _timeout_error(self, argv, timeout, started=True):
        what = "`%s`" % " ".join(argv[:3]) + (" ..." if len(argv) > 3 else "")
        if started:
            return ConnectTimeoutError(
                "%s on cluster %s (login node %s:%s) did not finish within %ss; the SSH channel was closed "
                "(the remote command may still be running); slurmctld may be overloaded or down"
                % (what, self.cluster, self.login.host, self.login.port, _num(timeout))).outcome_unknown()
        return ConnectTimeoutError("%s on cluster %s (login node %s:%s) did not start within %ss: all SSH sessions "
                                   "to the login node stayed busy" % (what, self.cluster, self.login.host,
                                                                      self.login.port, _num(timeout)))

    def _lost(self, argv, exc):
        return RemoteError(
            "the SSH connection to login node %s:%s of cluster %s was lost while running `%s` (%s); it may or may "
            "not have run: check before retrying" % (self.login.host, self.login.port, self.cluster, argv[0],
                                                     _why(exc))).outcome_unknown()

    def _exchange(self, chan, argv, command, stdin, deadline, timeout):
        """Send the command and stdin, collect stdout/stderr and the exit status."""
        paramiko = _paramiko()
        # exec_command waits for the server's reply without a timeout; a timer
        # closing the channel bounds that wait by the command's deadline.
        expired = threading.Event()

        def expire():
            expired.set()
            _close_quietly(chan)

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


# --------------------------------------------------------------------------
# Host keys for `slurmkit site trust`
# --------------------------------------------------------------------------

def fetch_host_key(login, cluster: str = "?", jump: bool = False) -> Tuple[str, str, str]:
    """The login node's host key as (keytype, base64, fingerprint), unauthenticated.

    Only the key exchange is run (no authentication, no command), through
    the ProxyJump bastion if there is one (the bastion itself must already be
    trusted).  With ``jump=True`` the bastion's own key is fetched instead.
    The caller must show the fingerprint to the user before trusting it.
    """
    paramiko = _paramiko()
    ep, bastion = _endpoints(login, cluster)
    jump_client = None
    if jump:
        if bastion is None:
            raise ConfigError("cluster %s has no proxy_jump" % cluster)
        ep, sock = bastion, _tcp_connect(bastion, login.connect_timeout)
    elif bastion is not None:
        known = _KnownHosts(known_hosts_files(login))
        jump_client = _ssh_connect(bastion, _tcp_connect(bastion, login.connect_timeout), login, known)
        sock = _open_jump_channel(jump_client, ep, bastion, login.connect_timeout)
    else:
        sock = _tcp_connect(ep, login.connect_timeout)
    transport = None
    started = time.monotonic()
    try:
        transport = paramiko.Transport(sock)
        transport.banner_timeout = login.connect_timeout
        # start_client returns quietly when its timeout passes; then there is
        # no key yet and get_remote_server_key raises SSHException below.
        transport.start_client(timeout=login.connect_timeout)
        key = transport.get_remote_server_key()
        return key.get_name(), key.get_base64(), fingerprint(key.asbytes())
    except (paramiko.SSHException, EOFError, OSError) as exc:
        if _timed_out(exc) or time.monotonic() - started >= login.connect_timeout:
            raise ConnectTimeoutError("%s did not complete the SSH key exchange within %ss"
                                      % (ep.describe(), _num(login.connect_timeout))) from None
        raise RemoteError("cannot read the host key of %s: %s" % (ep.describe(), _why(exc))) from None
    finally:
        if transport is not None:
            transport.close()
        else:
            sock.close()
        if jump_client is not None:
            jump_client.close()


def trust_host_key(login, key, known_hosts_path: Optional[str] = None, jump: bool = False) -> bool:
    """Append the host key to ``known_hosts_path`` (default: :func:`trust_target_file`).

    ``key`` is what :func:`fetch_host_key` returned ((keytype, base64[, fp]))
    or a paramiko key.  Writes ``[host]:port keytype base64`` (``host ...``
    for port 22), creating the parent directory (700) and the file (600).
    Returns False if that exact key is already there; refuses (HostKeyError)
    if the file holds a *different* key of the same type for the host, since
    that old line would keep failing the check and must be removed by hand.
    """
    if hasattr(key, "get_name") and hasattr(key, "get_base64"):
        keytype, key_b64 = key.get_name(), key.get_base64()
    else:
        keytype, key_b64 = key[0], key[1]
    try:
        base64.b64decode(key_b64, validate=True)
    except (ValueError, TypeError):
        raise ValueError("not a base64 key: %r" % (key_b64,)) from None
    if jump:
        jh = parse_proxy_jump(login.proxy_jump or "")
        host, port = jh.host, jh.port
    else:
        host, port = login.host, int(login.port)
    path = os.path.expanduser(known_hosts_path or trust_target_file(login))
    name = host_key_name(host, port)
    for entry in read_known_hosts(path):
        if entry.marker is not None or not entry.matches(name):
            continue
        if entry.keytype == keytype and entry.key_b64 == key_b64:
            return False
        if entry.keytype == keytype:
            raise HostKeyError("%s (line %d) already holds a different %s key for %s (%s); remove that line "
                               "first if the host key really changed" % (path, entry.lineno, keytype, name,
                                                                        entry.fingerprint))
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        if f.tell() > 0 and not _ends_with_newline(path):
            f.write("\n")
        f.write(known_hosts_line(host, port, keytype, key_b64))
    return True


def _ends_with_newline(path: str) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"
