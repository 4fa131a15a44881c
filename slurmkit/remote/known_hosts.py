"""known_hosts files: parsing, matching and fingerprints, as OpenSSH does them (pure, no paramiko).

Hashed names (``|1|salt|hash``), ``[host]:port`` names, wildcards, negations
and ``@revoked`` lines are understood here, so that error messages can name
the file and line that vouched for (or revoked) a key.
"""

import base64
import hashlib
import hmac
import logging
import os
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

log = logging.getLogger(__name__)

SYSTEM_KNOWN_HOSTS = "/etc/ssh/ssh_known_hosts"
USER_KNOWN_HOSTS = "~/.ssh/known_hosts"


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
    if "*" not in pattern and "?" not in pattern:
        # A literal name (what slurmkit and ssh write): equal or not.  Without
        # this each line cost a regex compiled afresh (re's cache holds 512),
        # 19 ms per connection against a 1,024-node known_hosts, per node of
        # a health sweep.
        return pattern.lower() == name.lower()
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


# path -> (its text, its entries): a health sweep connects to every node of a
# cluster, each time consulting the same files.  Keyed by the whole text, not
# by size and mtime: a key rewritten within the file system's timestamp
# granularity (same length, ed25519 keys all are) must never be missed.
_PARSED: Dict[str, Tuple[str, List[KnownHostEntry]]] = {}


def read_known_hosts(path: str) -> List[KnownHostEntry]:
    """Entries of one known_hosts file; none when it does not exist.

    Read every time, parsed only when its text differs from the last parse
    of the same path in this process."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        cached = _PARSED.get(path)
        if cached is not None and cached[0] == text:
            return list(cached[1])
        entries = parse_known_hosts(text, path)
        _PARSED[path] = (text, entries)
        return list(entries)
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


class KnownHosts:
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

