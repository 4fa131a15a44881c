"""The network interface source: which interfaces the node has and whether each is up, from sysfs.

Layout (``<root>`` is ``/sys/class/net``)::

    <root>/<name>/flags       "0x1003" (IFF_UP is bit 0)
    <root>/<name>/operstate   "up", "down", "unknown" (lo, many virtual devices)

The pure parts are shared with ``slurmkit site init``/``site check``, whose
probe job prints the same two files from a shell on nodes without
slurmkit: :func:`interface_up` reads them, :func:`ifname_matches` is
NCCL_SOCKET_IFNAME's matching rule (Gloo's ``GLOO_SOCKET_IFNAME`` names one
interface, which the rule covers).  Reading a few sysfs attributes of the
network stack does not wait on a device's firmware, so it runs in the
checking process, without a child.
"""

import os
from typing import Dict, Optional, Sequence

from slurmkit.health.sources.infiniband import read_attribute

IFF_UP = 0x1
NET_SYSFS = "/sys/class/net"
# operstate values of an interface that carries traffic: "unknown" is what the loopback and many virtual
# drivers report while up (RFC 2863's states; the kernel's Documentation/networking/operstates.rst).
_CARRYING = ("up", "unknown")


def interface_up(flags: Optional[str], operstate: Optional[str]) -> bool:
    """Whether an interface with these ``flags`` and ``operstate`` files carries traffic (pure).

    Up means administratively up (IFF_UP) with a link: an interface set down, or one whose cable or
    switch port is gone (operstate ``down``, ``lowerlayerdown``), carries nothing.
    """
    try:
        up = int((flags or "").strip(), 16) & IFF_UP
    except ValueError:
        return False
    return bool(up) and (operstate or "").strip().lower() in _CARRYING


def ifname_matches(spec: str, names: Sequence[str]) -> Optional[bool]:
    """Whether NCCL_SOCKET_IFNAME ``spec`` ("=eth0", "eth", "ib0,eth0") names one of ``names``.

    '=' asks for whole names, else each entry is a prefix; None when the spec excludes ('^...'), naming
    no interface that must exist.
    """
    if spec.startswith("^"):
        return None
    exact = spec.startswith("=")
    wanted = [n for n in spec.lstrip("=").split(",") if n]
    return any((i == n if exact else i.startswith(n)) for n in wanted for i in names)


def read_interfaces(root: str = NET_SYSFS) -> dict:
    """{"root_exists": bool, "interfaces": {name: {"up": bool, "operstate": str}}} for every interface."""
    try:
        names = sorted(os.listdir(root))
    except OSError as exc:
        return {"root_exists": False, "error": "%s: %s" % (root, exc.strerror or exc), "interfaces": {}}
    found: Dict[str, dict] = {}
    for name in names:
        base = os.path.join(root, name)
        flags = read_attribute(os.path.join(base, "flags"))
        operstate = read_attribute(os.path.join(base, "operstate"))
        if flags is None and operstate is None:
            continue                      # not an interface (a stray file under the root)
        found[name] = {"up": interface_up(flags, operstate), "operstate": operstate or "?"}
    return {"root_exists": True, "interfaces": found}
