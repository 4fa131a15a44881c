"""Opening SSH connections to login nodes: the only module of slurmkit that imports paramiko.

paramiko is imported lazily (inside :func:`paramiko_module`), so importing
this package stays cheap and works without paramiko as long as no remote
cluster is used.  Other modules of ``slurmkit.remote`` reach paramiko's
classes through :func:`paramiko_module`, never by importing it.

Security rules, all deliberate:

* Host keys are checked strictly.  The client always uses
  ``paramiko.RejectPolicy``: an unknown key raises :class:`HostKeyError` with
  the OpenSSH-style fingerprint and the command that trusts it
  (``slurmkit site trust CLUSTER``); a changed key is refused with the old and
  new fingerprints and the file holding the old line.  Nothing is ever added
  to a known_hosts file except by :func:`slurmkit.remote.trust.trust_host_key`,
  which the CLI calls only after the user confirmed the fingerprint.
* Known hosts come from ``/etc/ssh/ssh_known_hosts``, ``~/.ssh/known_hosts``
  and the login node's own ``known_hosts`` file (see ``known_hosts.py``).
* Authentication uses the login's ``identity_file`` if set, else the
  ssh-agent and the default ``~/.ssh/id_*`` keys.  Passwords are never sent,
  and the agent is never forwarded.
* ProxyJump ``[user@]bastion[:port]`` (one hop, see ``site/proxy_jump.py``):
  the bastion is connected to and checked exactly like a login node,
  authenticated with the same keys (as the local user when the spec names
  none, like ``ssh -J``), and a ``direct-tcpip`` channel through it carries
  the login node's connection.
"""

import os
import socket
import time
from dataclasses import dataclass
from typing import Optional, Tuple

from slurmkit.errors import ConfigError, ConnectTimeoutError, HostKeyError, RemoteError
from slurmkit.remote.known_hosts import (KnownHostEntry, KnownHosts, fingerprint, host_key_name,
                                         known_hosts_files)
from slurmkit.site.proxy_jump import parse_proxy_jump

KEEPALIVE_S = 15            # keeps NAT/firewall state alive and detects dead peers


# --------------------------------------------------------------------------
# Endpoints and messages (pure, so the exact wording is unit-tested).
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class Endpoint:
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


def unknown_host_key_message(ep: Endpoint, keytype: str, fp: str) -> str:
    if ep.bastion:
        return ("host key of bastion %s (ProxyJump of cluster %s) is unknown: %s %s; if this fingerprint is "
                "right, add it to ~/.ssh/known_hosts (e.g. connect once with `ssh -p %d %s%s` and accept it)"
                % (ep.hostport, ep.cluster, keytype, fp, ep.port, (ep.user + "@") if ep.user else "", ep.host))
    return ("host key of %s (cluster %s) is unknown: %s %s; if this fingerprint is right, "
            "run `slurmkit site trust %s`" % (ep.hostport, ep.cluster, keytype, fp, ep.cluster))


def changed_host_key_message(ep: Endpoint, keytype: str, expected_fp: str, got_fp: str,
                             where: Optional[KnownHostEntry]) -> str:
    what = ("BASTION %s (ProxyJump of cluster %s)" % (ep.hostport, ep.cluster) if ep.bastion
            else "%s (cluster %s)" % (ep.hostport, ep.cluster))
    location = "%s (line %d)" % (where.path, where.lineno) if where else "your known_hosts files"
    fix = ("run `slurmkit site trust %s`" % ep.cluster if not ep.bastion
           else "add the new key (e.g. connect once with `ssh -p %d %s`)" % (ep.port, ep.host))
    return ("HOST KEY OF %s HAS CHANGED: someone may be intercepting the connection, or the host was "
            "reinstalled; expected %s, got %s (%s); if the change is expected, remove the old line from %s "
            "and %s" % (what, expected_fp, got_fp, keytype, location, fix))


def revoked_host_key_message(ep: Endpoint, keytype: str, fp: str, where: KnownHostEntry) -> str:
    return ("host key of %s is marked @revoked in %s (line %d): %s %s; refusing to connect"
            % (ep.describe(), where.path, where.lineno, keytype, fp))


def refused_message(ep: Endpoint, reason: str) -> str:
    return "cannot reach %s: %s (is sshd running?)" % (ep.describe(), reason)


def auth_failed_message(ep: Endpoint, user: str, identity_file: Optional[str]) -> str:
    if identity_file:
        tried = "the key %s (identity_file)" % identity_file
        advice = ("check that this is the right key and that its public half is in ~%s/.ssh/authorized_keys "
                  "on that host" % user)
    else:
        tried = "the keys of the ssh-agent and ~/.ssh/id_*"
        advice = ("check that ssh-agent holds the right key (`ssh-add -l`), or set identity_file in the "
                  "cluster's login section")
    return "%s refused SSH authentication as user %s: tried %s; %s" % (ep.describe(), user, tried, advice)


# --------------------------------------------------------------------------
# paramiko glue
# --------------------------------------------------------------------------

def paramiko_module():
    try:
        import paramiko
    except ImportError:
        raise RemoteError("paramiko is not installed, but a cluster is reached over SSH; "
                          "install it with `pip install paramiko`") from None
    return paramiko


def _tcp_connect(ep: Endpoint, timeout: float):
    try:
        sock = socket.create_connection((ep.host, ep.port), timeout=timeout)
    except socket.gaierror as exc:
        raise RemoteError("cannot resolve the host name of %s: %s; check the host in the site config"
                          % (ep.describe(), exc.strerror or exc)) from None
    except socket.timeout:
        raise ConnectTimeoutError("cannot reach %s within %ss (connect_timeout): no answer; is the host up and "
                                  "the port open (firewall, VPN)?" % (ep.describe(), seconds_text(timeout))) from None
    except ConnectionRefusedError:
        raise RemoteError(refused_message(ep, "Connection refused")) from None
    except OSError as exc:
        raise RemoteError("cannot reach %s: %s" % (ep.describe(), exc.strerror or exc)) from None
    # Every SSH message is written whole, so Nagle's algorithm only delays the
    # small ones: with it, each handshake step that answers a small packet
    # waited for the server's delayed ACK (40 ms on Linux; a connection
    # took 60 ms on loopback instead of 20).  OpenSSH's client sets it too.
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
        pass  # not a TCP socket after all (a test's socketpair): latency only
    return sock


def why(exc) -> str:
    """An exception as text; some (EOFError(), socket.timeout()) have none."""
    return str(exc) or type(exc).__name__


def close_quietly(thing):
    # Closing a channel sends a message; on a dead connection that raises,
    # which must not replace the error (or result) the caller is handling.
    try:
        thing.close()
    except Exception:
        pass


def seconds_text(x):
    return ("%g" % x) if isinstance(x, float) else str(x)


def _timed_out(exc: BaseException) -> bool:
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, socket.timeout):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _ssh_connect(ep: Endpoint, sock, login, known: KnownHosts):
    """Handshake, strict host-key check and publickey auth over ``sock``.

    Returns a connected ``paramiko.SSHClient``; every failure is translated to
    a slurmkit error with a message that says what to do.
    """
    paramiko = paramiko_module()

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
    user = ep.user or local_user()
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
                                      % (ep.describe(), seconds_text(timeout))) from None
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
                                      "the host or sshd may be overloaded" % (ep.describe(), seconds_text(timeout))) from None
        raise RemoteError("SSH connection to %s failed: %s" % (ep.describe(), why(exc))) from None
    except (EOFError, OSError) as exc:
        client.close()
        raise RemoteError("%s closed the connection during the SSH handshake (%s); check the sshd log there"
                          % (ep.describe(), why(exc))) from None
    client.get_transport().set_keepalive(KEEPALIVE_S)
    return client


def _identity(login, cluster: str) -> Optional[str]:
    identity = os.path.expanduser(login.identity_file) if login.identity_file else None
    if identity and not os.path.isfile(identity):
        raise ConfigError("identity_file %s of cluster %s does not exist; fix the path in the site config"
                          % (identity, cluster))
    return identity


def local_user():
    import getpass
    return getpass.getuser()


def _open_jump_channel(jump_client, ep: Endpoint, bastion: Endpoint, timeout: float):
    """A ``direct-tcpip`` channel from the bastion to ``ep`` (the login's socket)."""
    paramiko = paramiko_module()
    try:
        return jump_client.get_transport().open_channel("direct-tcpip", (ep.host, ep.port), ("127.0.0.1", 0),
                                                        timeout=timeout)
    except paramiko.ChannelException as exc:
        reason = exc.text or "channel open failed (code %s)" % exc.code
        if exc.code == 2:   # SSH_OPEN_CONNECT_FAILED: the bastion's TCP connect failed
            reason += " (is sshd running?)"
        raise RemoteError("%s could not reach %s: %s" % (bastion.describe(), ep.describe(), reason)) from None
    except (paramiko.SSHException, EOFError, OSError) as exc:
        raise RemoteError("%s could not reach %s: %s" % (bastion.describe(), ep.describe(), why(exc))) from None


def _endpoints(login, cluster: str) -> Tuple[Endpoint, Optional[Endpoint]]:
    ep = Endpoint(host=login.host, port=int(login.port), user=login.user, cluster=cluster)
    if not login.proxy_jump:
        return ep, None
    jh = parse_proxy_jump(login.proxy_jump)
    return ep, Endpoint(host=jh.host, port=jh.port, user=jh.user, cluster=cluster, bastion=True)


def through_bastion(login, ep: Endpoint, bastion: Endpoint, known: KnownHosts):
    """(socket to ``ep`` through ``bastion``, the bastion's client).

    The bastion is checked exactly as strictly as a login node.
    """
    jump_client = _ssh_connect(bastion, _tcp_connect(bastion, login.connect_timeout), login, known)
    try:
        return _open_jump_channel(jump_client, ep, bastion, login.connect_timeout), jump_client
    except BaseException:
        jump_client.close()
        raise


def open_connection(login, cluster: str):
    """Connect to the login node (through its bastion, if any): (client, jump_client)."""
    ep, bastion = _endpoints(login, cluster)
    _identity(login, cluster)       # a wrong path fails before any connection
    known = KnownHosts(known_hosts_files(login))
    jump_client = None
    try:
        if bastion is not None:
            sock, jump_client = through_bastion(login, ep, bastion, known)
        else:
            sock = _tcp_connect(ep, login.connect_timeout)
        client = _ssh_connect(ep, sock, login, known)
    except BaseException:
        if jump_client is not None:
            jump_client.close()
        raise
    return client, jump_client


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
    paramiko = paramiko_module()
    ep, bastion = _endpoints(login, cluster)
    jump_client = None
    if jump:
        if bastion is None:
            raise ConfigError("cluster %s has no proxy_jump" % cluster)
        ep, sock = bastion, _tcp_connect(bastion, login.connect_timeout)
    elif bastion is not None:
        sock, jump_client = through_bastion(login, ep, bastion, KnownHosts(known_hosts_files(login)))
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
                                      % (ep.describe(), seconds_text(login.connect_timeout))) from None
        raise RemoteError("cannot read the host key of %s: %s" % (ep.describe(), why(exc))) from None
    finally:
        if transport is not None:
            transport.close()
        else:
            sock.close()
        if jump_client is not None:
            jump_client.close()
