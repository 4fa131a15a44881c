"""Trusting a login node's host key (``slurmkit site trust``): fetch, show, then write.

Nothing is ever added to a known_hosts file except here, and the CLI calls
:func:`trust_login_key` only after the user has seen the fingerprint.
"""

import base64
import os
from dataclasses import dataclass, field
from typing import Optional

from slurmkit.errors import ConfigError, HostKeyError, UsageError
from slurmkit.remote.known_hosts import (host_key_name, known_hosts_files, known_hosts_line, read_known_hosts,
                                         trust_target_file)
from slurmkit.site.proxy_jump import parse_proxy_jump


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
        raise HostKeyError("the host key offered is not valid base64 (%r); nothing was written" % (key_b64,)) from None
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


@dataclass(frozen=True)
class HostKeyOffer:
    """A login node's host key as fetched, and what trusting it would do."""

    cluster: str
    host: str
    port: int
    keytype: str
    key_b64: str
    fingerprint: str
    target_file: str                   # where trust_login_key writes
    trusted_in: Optional[str] = None   # "FILE (line N)" already holding this exact key
    login: object = field(default=None, repr=False, compare=False)

    @property
    def hostport(self) -> str:
        return "%s:%d" % (self.host, self.port)


def login_host_key(site, name: str) -> HostKeyOffer:
    """Fetch the host key of cluster ``name``'s login node (key exchange only).

    Raises UsageError for an unknown cluster, ConfigError for one without a
    login node, RemoteError/ConnectTimeoutError when it cannot be reached, and
    HostKeyError (naming the fingerprint) when a known_hosts file marks the
    key ``@revoked``: such a key is never offered for trust.
    """
    if not name:
        raise UsageError("no cluster given; choose one of: %s" % ", ".join(sorted(site.clusters)))
    cluster = site.cluster(name)
    login = cluster.login
    if login is None:
        raise ConfigError("cluster %s of site %s has no login node in the site config, so there is no host key "
                          "to trust (it is used locally)" % (cluster.name, site.name))
    from slurmkit.remote.connect import fetch_host_key  # paramiko: only when a key is really fetched

    keytype, key_b64, fp = fetch_host_key(login, cluster.name)
    host_name = host_key_name(login.host, login.port)
    trusted = None
    for path in known_hosts_files(login):
        for entry in read_known_hosts(path):
            if entry.keytype != keytype or entry.key_b64 != key_b64:
                continue
            where = "%s (line %d)" % (entry.path, entry.lineno)
            if entry.marker == "@revoked":
                # The connection would refuse it anyway (for every host name).
                raise HostKeyError("the host key of login node %s:%s of cluster %s (%s %s) is marked @revoked in "
                                   "%s; refusing to trust it" % (login.host, login.port, cluster.name, keytype,
                                                                 fp, where))
            if entry.marker is None and entry.matches(host_name) and trusted is None:
                trusted = where
    return HostKeyOffer(cluster=cluster.name, host=login.host, port=int(login.port), keytype=keytype,
                        key_b64=key_b64, fingerprint=fp, target_file=trust_target_file(login),
                        trusted_in=trusted, login=login)


def trust_login_key(offer: HostKeyOffer) -> bool:
    """Add the offered key to its known_hosts file; False when it was already there.

    Call only after the user has seen ``offer.fingerprint`` and agreed.
    """
    return trust_host_key(offer.login, (offer.keytype, offer.key_b64, offer.fingerprint), offer.target_file)
