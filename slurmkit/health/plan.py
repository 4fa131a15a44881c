"""What one node is checked against: a :class:`CheckPlan`, built from the site and Slurm's record.

The plan holds everything the checks need and nothing else, so a check needs
no site file on the node: ``slurmkit health sweep`` builds each node's plan
centrally and sends it as JSON on the remote command's standard input
(``health check --plan -``); ``health check`` on a node builds its own from
the site.  A plan from a newer slurmkit (a higher ``version``) is refused
rather than half understood.
"""

import json
import os
from typing import NamedTuple, Optional, Sequence, Tuple

from slurmkit.errors import UsageError
from slurmkit.site.model import HEALTH_CHECK_GROUPS, HealthChecks

# 2: container_runtime and oci_conf; 3: socket_ifname.  Older plans (no containers, no socket interface)
# are still read.
PLAN_VERSION = 3
READS_VERSIONS = (1, 2, 3)
_GROUP_OF = {name: group for group, names in HEALTH_CHECK_GROUPS.items() for name in names}


class CheckPlan(NamedTuple):
    node: str
    cluster: str
    partition: str
    accelerator: str = "none"            # nvidia, ascend, none
    gres_name: Optional[str] = None      # "gpu", "npu": what Slurm's Gres counts
    expected_gpus: Optional[int] = None  # from the thresholds, else the partition
    memory_mb: Optional[int] = None
    checks: HealthChecks = HealthChecks()
    ib_ports: Tuple[str, ...] = ()
    slurm_gres: Optional[int] = None     # Slurm's accelerator count for the node; None: not known
    has_job: Optional[bool] = None       # a job runs there now; None: not known
    state_dir: Optional[str] = None      # None: the node's default (see slurmkit.health.state)
    check_timeout: float = 50.0
    container_runtime: Optional[str] = None   # the partition's containers.runtime; None: no image jobs there
    oci_conf: Optional[str] = None       # runtime oci: beside the cluster's slurm.conf; None: the node's own
    socket_ifname: Optional[str] = None  # the fabric's NCCL_SOCKET_IFNAME ("=eth0", "ib"); None: not checked

    def enabled(self, name: str) -> bool:
        """Whether check ``name`` runs: not skipped by name or group, and it applies to this partition."""
        skip = set(self.checks.skip)
        group = _GROUP_OF.get(name)
        if name in skip or group in skip:
            return False
        if group == "gpu":
            return (self.accelerator == "ascend") == (name == "npu_count") and self.accelerator != "none"
        if group == "ib":
            return bool(self.ib_ports)
        if group == "containers":
            return self.container_runtime is not None
        if group == "fabric":
            return self.socket_ifname is not None
        return True

    def to_json(self) -> str:
        return json.dumps(self.to_plain(), sort_keys=True)

    def to_plain(self) -> dict:
        """The plan as JSON's types, versioned: what to_json writes, for a relay job that carries plans."""
        data = self._asdict()
        data["checks"] = _plain(self.checks)
        data["version"] = PLAN_VERSION
        return data

    @classmethod
    def from_json(cls, text: str) -> "CheckPlan":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise UsageError("not a check plan (%s: %s)" % (type(exc).__name__, exc)) from None
        return cls.from_plain(data)

    @classmethod
    def from_plain(cls, data) -> "CheckPlan":
        """A plan from :meth:`to_plain`'s types; UsageError when it is not one (or from a newer slurmkit)."""
        try:
            data = dict(data)
            version = data.pop("version")
            if version not in READS_VERSIONS:
                raise UsageError("the check plan is version %r; this slurmkit reads versions %s: install the same "
                                 "slurmkit on the nodes as where the sweep runs"
                                 % (version, ", ".join(map(str, READS_VERSIONS))))
            data["checks"] = HealthChecks.from_plain(data["checks"])
            data["ib_ports"] = tuple(data["ib_ports"])
            return cls(**data)
        except (ValueError, KeyError, TypeError) as exc:
            raise UsageError("not a check plan (%s: %s)" % (type(exc).__name__, exc)) from None


def read_source(source: str, what: str) -> str:
    """The text of ``source``, a file or ``-`` (standard input), for ``--plan`` and ``--relay``;
    UsageError naming ``what`` ("check plan", "relay job") when it cannot be read."""
    import sys

    try:
        if source == "-":
            return sys.stdin.read()
        with open(source) as fh:
            return fh.read()
    except OSError as exc:
        raise UsageError("cannot read the %s %s: %s" % (what, source, exc.strerror or exc)) from None


def _plain(value):
    if hasattr(value, "_asdict"):
        return {k: _plain(v) for k, v in value._asdict().items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def choose_partition(cluster, node_partitions: Sequence[str], wanted: Optional[str] = None):
    """The site partition a node is checked as.

    ``wanted`` (``--partition``) if given; else, of the node's partitions
    Slurm lists, the first the site describes that has an accelerator (the
    hardware is the same whichever partition a job came through, and the
    accelerator's partition expects the most), else the first it describes.
    """
    if wanted:
        if wanted not in cluster.partitions:
            raise UsageError("unknown partition %r on cluster %r; choose one of: %s"
                             % (wanted, cluster.name, ", ".join(sorted(cluster.partitions))))
        return cluster.partitions[wanted]
    known = [cluster.partitions[p] for p in node_partitions if p in cluster.partitions]
    if not known:
        raise UsageError("the node is in no partition the site describes for cluster %r (Slurm: %s; site: %s); "
                         "name one with --partition" % (cluster.name, ",".join(node_partitions) or "none",
                                                        ", ".join(sorted(cluster.partitions))))
    with_accelerator = [p for p in known if p.accelerator != "none"]
    return (with_accelerator or known)[0]


def has_job(node_info) -> bool:
    """A job holds (part of) the node: CPUs allocated, or Slurm's state says so."""
    base = node_info.state.upper().replace("*", "").split("+")[0]
    return node_info.cpus_alloc > 0 or base in ("ALLOCATED", "MIXED", "COMPLETING")


def build(site, cluster, partition, node: str, node_info=None) -> CheckPlan:
    """The plan for ``node`` of ``cluster`` checked as ``partition``; ``node_info`` adds Slurm's facts."""
    from slurmkit.health.sources.infiniband import expected_ports

    checks = partition.health
    gres_name = partition.effective_gres_name
    slurm_gres = None
    if node_info is not None and gres_name:
        slurm_gres = sum(count for key, count in node_info.gres.items() if key.split(":")[0] == gres_name)
    return CheckPlan(
        node=node, cluster=cluster.name, partition=partition.name, accelerator=partition.accelerator,
        gres_name=gres_name,
        expected_gpus=checks.gpus if checks.gpus is not None else (partition.gpus_per_node or None),
        memory_mb=checks.memory_mb if checks.memory_mb is not None else partition.memory_mb,
        checks=checks, ib_ports=expected_ports(checks.ib_ports, partition.fabric),
        slurm_gres=slurm_gres, has_job=has_job(node_info) if node_info is not None else None,
        state_dir=site.health.state_dir, check_timeout=site.health.check_timeout,
        container_runtime=partition.containers.runtime,
        oci_conf=(os.path.join(os.path.dirname(cluster.slurm_conf), "oci.conf")
                  if partition.containers.runtime == "oci" and cluster.slurm_conf else None),
        socket_ifname=partition.fabric.socket_ifname)
