"""The network interface source: which interfaces the node has and whether each is up, from sysfs.

Layout (``<root>`` is ``/sys/class/net``)::

    <root>/<name>/flags       "0x1003" (IFF_UP is bit 0)
    <root>/<name>/operstate   "up", "down", "unknown" (lo, many virtual devices)

What the two files mean (:func:`slurmkit.sysfs.interface_up`) is shared with
``slurmkit site init``/``site check``, whose probe job prints the same files
from a shell on the nodes.  Reading a few sysfs attributes of the
network stack does not wait on a device's firmware, so it runs in the
checking process, without a child.
"""

import os
from typing import Dict

from slurmkit.health.sources.infiniband import read_attribute
from slurmkit.sysfs import interface_up

NET_SYSFS = "/sys/class/net"


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
