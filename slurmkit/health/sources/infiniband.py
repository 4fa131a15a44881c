"""The InfiniBand source: port state, rate and error counters from sysfs.

Layout (``<root>`` is ``/sys/class/infiniband`` unless the site says
otherwise; tests lay out the same tree in a temporary directory)::

    <root>/<hca>/ports/<port>/state       "4: ACTIVE"
    <root>/<hca>/ports/<port>/phys_state  "5: LinkUp"
    <root>/<hca>/ports/<port>/rate        "400 Gb/sec (4X NDR)"
    <root>/<hca>/ports/<port>/link_layer  "InfiniBand" or "Ethernet" (RoCE)
    <root>/<hca>/ports/<port>/counters/<name>

Some drivers answer counter reads from the adapter's firmware, which can
stall: :func:`read_ports` runs in a forked child (see ``probe``).

What a state file's text means and NCCL_IB_HCA's matching rule are in
:mod:`slurmkit.sysfs`, shared with ``slurmkit site init``/``site check``,
whose probe job prints the same files from a shell on the nodes.
"""

import os
import re
from typing import Iterable, Optional, Tuple

from slurmkit.sysfs import hca_matches, state_name

# Counters that mean the link itself is in trouble when they grow, and
# those that also grow with (rare) noise.
LINK_COUNTERS = ("link_downed", "link_error_recovery", "local_link_integrity_errors",
                 "excessive_buffer_overrun_errors")
NOISE_COUNTERS = ("symbol_error", "port_rcv_errors")
COUNTERS = LINK_COUNTERS + NOISE_COUNTERS

_RATE_RE = re.compile(r"^\s*([\d.]+)\s*Gb/sec")


def parse_port_spec(spec: str) -> Tuple[str, int]:
    """"=mlx5_0:1" / "mlx5_0:1" / "mlx5_0" -> ("mlx5_0", 1)."""
    name, _, port = spec.lstrip("=").partition(":")
    return name, int(port) if port else 1


def expected_ports(explicit: Optional[Iterable[str]], fabric) -> Tuple[str, ...]:
    """The ports to check: the partition's ``health.ib_ports``, else its fabric's HCAs (infiniband, roce).

    Each is "hca:port", or, for a fabric whose HCA list NCCL reads as prefixes (no '=' on any entry),
    "prefix*" / "prefix*:port": every port :func:`hca_matches` finds for it, as NCCL would use them.
    """
    if explicit is not None:
        return tuple("%s:%d" % parse_port_spec(s) for s in explicit)
    if fabric is None or fabric.type not in ("infiniband", "roce"):
        return ()
    specs = [h for h in fabric.hcas if not h.startswith("^")]   # "^..." excludes, names nothing
    if any(h.startswith("=") for h in fabric.hcas):
        return tuple("%s:%d" % parse_port_spec(s) for s in specs)
    out = []
    for spec in specs:
        name, _, port = spec.partition(":")
        out.append(name + "*" + (":" + port if port else ""))
    return tuple(out)


def list_ports(root: str) -> Tuple[str, ...]:
    """Every "hca:port" under ``root``, in order."""
    found = []
    try:
        hcas = sorted(os.listdir(root))
    except OSError:
        return ()
    for hca in hcas:
        try:
            numbers = os.listdir(os.path.join(root, hca, "ports"))
        except OSError:
            continue
        found.extend("%s:%s" % (hca, n) for n in sorted(numbers, key=lambda n: (len(n), n)))
    return tuple(found)


def read_attribute(path: str) -> Optional[str]:
    """One sysfs attribute's text, stripped; None when it cannot be read (the interfaces source's too)."""
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return None


def read_ports(root: str, ports: Iterable[str]) -> dict:
    """{"root_exists": bool, "ports": {"hca:port": {...}}} for the expected ports (a "prefix*" spec: those
    it matches, or the spec itself, missing, when none does)."""
    out = {"root_exists": os.path.isdir(root), "ports": {}}
    for spec in ports:
        if "*" in spec:
            # A prefix: the ports NCCL would take for it, each read as its own; none is a missing HCA.
            wanted = spec.replace("*", "")
            matched = [p for p in list_ports(root) if hca_matches(wanted, False, p)]
            if not matched:
                # "HCA has no port N" when devices of the prefix exist with other ports, else "no HCA".
                hca, _, port = wanted.partition(":")
                out["ports"][spec] = {"exists": False, "hca_exists": bool(port) and any(
                    p.startswith(hca) for p in list_ports(root))}
            out["ports"].update(read_ports(root, matched)["ports"])
            continue
        hca, port = parse_port_spec(spec)
        base = os.path.join(root, hca, "ports", str(port))
        if not os.path.isdir(base):
            out["ports"][spec] = {"exists": False, "hca_exists": os.path.isdir(os.path.join(root, hca))}
            continue
        state_code, state = state_name(read_attribute(os.path.join(base, "state")))
        phys_code, phys = state_name(read_attribute(os.path.join(base, "phys_state")))
        rate_text = read_attribute(os.path.join(base, "rate")) or ""
        rate = _RATE_RE.match(rate_text)
        counters = {}
        for name in COUNTERS:
            value = read_attribute(os.path.join(base, "counters", name))
            if value is not None and value.isdigit():
                counters[name] = int(value)
        out["ports"][spec] = {"exists": True, "state": state, "state_code": state_code, "phys_state": phys,
                              "phys_code": phys_code, "rate_gbps": float(rate.group(1)) if rate else None,
                              "rate_text": rate_text, "link_layer": read_attribute(os.path.join(base, "link_layer")),
                              "counters": counters}
    return out
