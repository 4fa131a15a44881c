"""The ``proxy_jump`` value of a login node: one rule for validating and connecting.

OpenSSH's ProxyJump accepts ``[user@]host[:port]`` and several comma-separated
hops; slurmkit connects through one bastion, so a multi-hop value is refused
when the site file is validated, with the same message a connection would give.
"""

from dataclasses import dataclass
from typing import Optional

from slurmkit.errors import ConfigError


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
