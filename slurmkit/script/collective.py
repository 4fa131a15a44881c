"""Collective-library environment for a partition's fabric, and its lint.

NVIDIA partitions get NCCL variables, Ascend partitions the HCCL ones, and
every partition whose fabric names an interface gets ``GLOO_SOCKET_IFNAME``
(CPU-only DDP, and the gloo groups GPU jobs use for CPU tensors).  The
values come from the site config; :func:`lint` catches the classic mistakes
that silently cost bandwidth (a prefix HCA that also matches ``mlx5_10``, an
exclude-only interface list that lets NCCL bootstrap over ``lo``) and says
how to fix them.
"""

from typing import Dict, List, Optional

from slurmkit.site.model import Fabric, Partition


def _hca_names(fabric: Fabric):
    """(exact?, [names]) from the configured list; '=' on any entry means exact matching."""
    exact = any(h.startswith("=") for h in fabric.hcas)
    return exact, [h.lstrip("=") for h in fabric.hcas]


def nccl_ib_hca(fabric: Fabric) -> str:
    # NCCL reads one leading '=' (exact) for the whole list, not one per entry.
    exact, names = _hca_names(fabric)
    return ("=" if exact else "") + ",".join(names)


def gloo_ifname(socket_ifname: Optional[str]) -> Optional[str]:
    """GLOO_SOCKET_IFNAME for the fabric's ``socket_ifname``, or None when gloo cannot take it.

    NCCL's syntax is richer than gloo's: gloo wants whole interface names (a
    comma list is several devices), so NCCL's exact-match ``=`` is dropped, and an
    exclusion list (``^docker0,lo``) names no interface for gloo at all.
    """
    if not socket_ifname or socket_ifname.startswith("^"):
        return None
    names = [n.strip() for n in socket_ifname.lstrip("=").split(",") if n.strip()]
    return ",".join(names) or None


def collective_env(partition: Partition) -> Dict[str, str]:
    """Variables to export in the job for this partition (ordered, deterministic)."""
    fabric = partition.fabric
    env: Dict[str, str] = {}
    if partition.accelerator == "nvidia":
        if fabric.type in ("infiniband", "roce") and fabric.hcas:
            env["NCCL_IB_HCA"] = nccl_ib_hca(fabric)
        if fabric.type == "ethernet":
            env["NCCL_IB_DISABLE"] = "1"  # no RDMA: don't let NCCL probe for HCAs
        if fabric.socket_ifname:
            env["NCCL_SOCKET_IFNAME"] = fabric.socket_ifname
        if fabric.type == "roce":
            if fabric.roce.gid_index is not None:
                env["NCCL_IB_GID_INDEX"] = str(fabric.roce.gid_index)
            if fabric.roce.traffic_class is not None:
                env["NCCL_IB_TC"] = str(fabric.roce.traffic_class)
            if fabric.roce.service_level is not None:
                env["NCCL_IB_SL"] = str(fabric.roce.service_level)
    elif partition.accelerator == "ascend":
        # HCCL drives the NPUs' own RoCE ports; only host-side socket and QoS are ours to set.
        if fabric.socket_ifname:
            env["HCCL_SOCKET_IFNAME"] = fabric.socket_ifname
        if fabric.type == "roce":
            if fabric.roce.traffic_class is not None:
                env["HCCL_RDMA_TC"] = str(fabric.roce.traffic_class)
            if fabric.roce.service_level is not None:
                env["HCCL_RDMA_SL"] = str(fabric.roce.service_level)
    gloo = gloo_ifname(fabric.socket_ifname)
    if gloo:
        env["GLOO_SOCKET_IFNAME"] = gloo
    for key, value in fabric.env.items():
        env[key] = str(value)
    return env


def lint(partition: Partition, where: str = "") -> List[str]:
    """Warnings, each with the fix, for this partition's fabric settings."""
    fabric = partition.fabric
    prefix = (where + ": ") if where else ""
    warnings = []
    exact, names = _hca_names(fabric)
    if fabric.hcas and not exact:
        bare = [n.split(":")[0] for n in names]
        for name in bare:
            longer = sorted({other for other in bare if other != name and other.startswith(name)})
            if longer:
                warnings.append(
                    "%sNCCL_IB_HCA entry %r has no '=' and also matches %s; write the list as %r for exact matching"
                    % (prefix, name, ", ".join(repr(x) for x in longer), "=" + ",".join(names)))
    if any(h.startswith("=") for h in fabric.hcas) and not all(h.startswith("=") for h in fabric.hcas):
        warnings.append("%sNCCL applies '=' to the whole NCCL_IB_HCA list; mark every entry or none (rendered as %r)"
                        % (prefix, nccl_ib_hca(fabric)))
    ifname = fabric.socket_ifname or ""
    if ifname.startswith("^"):
        excluded = [p.lstrip("=") for p in ifname[1:].lstrip("=").split(",")]
        if not any("lo".startswith(p) or p == "lo" for p in excluded if p):
            warnings.append("%sNCCL_SOCKET_IFNAME=%s excludes only %s, so NCCL may bootstrap over the loopback "
                            "interface 'lo'; exclude it too: %s,lo" % (prefix, ifname, ", ".join(excluded), ifname))
    if ifname.startswith("^") and "GLOO_SOCKET_IFNAME" not in fabric.env:
        warnings.append("%ssocket_ifname %s only excludes interfaces, which gloo cannot use, so GLOO_SOCKET_IFNAME "
                        "is not set and gloo takes the address of the host name; name the interface in "
                        "fabric.env.GLOO_SOCKET_IFNAME" % (prefix, ifname))
    if partition.accelerator == "ascend" and fabric.roce.traffic_class is not None \
            and fabric.roce.traffic_class % 4:
        warnings.append("%sHCCL_RDMA_TC=%d is not a multiple of 4 (it is DSCP*4); use %d"
                        % (prefix, fabric.roce.traffic_class, fabric.roce.traffic_class // 4 * 4))
    return warnings
