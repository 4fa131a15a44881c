"""What a node's fabric looks like in the kernel's sysfs, and NCCL's rules for naming it: pure.

Two readers of the same files share these: ``slurmkit health`` on each node
(``health.sources.infiniband`` and ``health.sources.interfaces`` read the
files in Python) and the probe job of ``slurmkit site init`` and ``site check
--live`` (``discovery.nodeprobe``: a shell script prints the files on a node
without slurmkit, and its output is read here).  So a port is active, and an
interface up, for the site check exactly when it is for the health check,
and an HCA or interface name matches by the one rule NCCL uses.

Below every part that reads a cluster or a node (like ``times`` and
``envnames``): it imports nothing of slurmkit.
"""

from typing import NamedTuple, Optional, Sequence


# ---------------------------------------------------------------- RDMA ports: <root>/<hca>/ports/<port>/...

class RdmaPort(NamedTuple):
    """One port of an HCA as read from sysfs (here, or by ``site init``'s probe job on a node)."""

    name: str            # "mlx5_0:1"
    state: str           # "ACTIVE", "DOWN" ...
    link_layer: str      # "InfiniBand" or "Ethernet" (RoCE)
    rate: str            # "400 Gb/sec (4X NDR)"

    @property
    def active(self) -> bool:
        return self.state.upper() == "ACTIVE"


def hca_matches(spec: str, exact: bool, port_name: str) -> bool:
    """Whether NCCL_IB_HCA's entry ``spec`` ("mlx5_0:1", "mlx5") names the port "mlx5_0:1".

    ``exact``: the list began with '=' (whole device names); else NCCL takes each entry as a prefix.
    """
    hca, _, port = spec.lstrip("=").partition(":")
    their_hca, _, their_port = port_name.partition(":")
    if port and port != their_port:
        return False
    return their_hca == hca if exact else their_hca.startswith(hca)


def state_name(text: Optional[str]):
    """A port's ``state``/``phys_state`` file: "4: ACTIVE" -> (4, "ACTIVE"); (None, None) when empty."""
    if not text:
        return None, None
    code, _, name = text.partition(":")
    return (int(code) if code.strip().isdigit() else None), name.strip() or code.strip()


# ---------------------------------------------------------------- network interfaces: /sys/class/net/<name>/...

IFF_UP = 0x1
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
