"""Typed view of a validated site config.

The loader (``slurmkit.site.loader``) validates the YAML against
``slurmkit.site.schema`` first, so everything here can assume correct types
and fills in documented defaults.  These objects are plain, immutable data:
rendering, federation and the CLI read them, nothing writes them.

They are ``typing.NamedTuple`` records rather than frozen dataclasses: every
``slurmkit submit`` is a fresh process that defines them, and a NamedTuple
costs a tenth of a frozen dataclass to define.  Use ``._replace()`` to derive
a changed copy; the ``{}`` defaults are shared and never mutated.
"""

from typing import Dict, NamedTuple, Optional, Tuple

ACCELERATORS = ("nvidia", "ascend", "none")
FABRICS = ("infiniband", "roce", "ethernet")


class RoceSettings(NamedTuple):
    gid_index: Optional[int] = None      # NCCL_IB_GID_INDEX / HCCL equivalent
    traffic_class: Optional[int] = None  # NCCL_IB_TC
    service_level: Optional[int] = None  # NCCL_IB_SL


class Fabric(NamedTuple):
    type: str = "ethernet"               # one of FABRICS
    hcas: Tuple[str, ...] = ()           # e.g. ("=mlx5_0:1", "=mlx5_1:1") -> NCCL_IB_HCA
    socket_ifname: Optional[str] = None  # NCCL_SOCKET_IFNAME / HCCL_SOCKET_IFNAME
    roce: RoceSettings = RoceSettings()
    env: Dict[str, str] = {}             # extra fabric variables, verbatim (shared default: never mutated)


class Partition(NamedTuple):
    name: str
    accelerator: str = "none"            # one of ACCELERATORS
    gpu_model: Optional[str] = None      # "h100", "a100", "ascend910b"; the gres type
    gpus_per_node: int = 0
    cpus_per_node: int = 1
    memory_mb: Optional[int] = None      # per node
    max_nodes: Optional[int] = None      # None: no limit known
    max_time: Optional[str] = None       # Slurm time string, None: unlimited
    fabric: Fabric = Fabric()
    gres_name: Optional[str] = None      # Slurm gres name; None: derive ("gpu" nvidia, "npu" ascend)

    @property
    def effective_gres_name(self):
        """The gres name jobs request (``--gres=NAME:TYPE:N``); None without accelerator."""
        if self.gres_name:
            return self.gres_name
        return {"nvidia": "gpu", "ascend": "npu"}.get(self.accelerator)


class PriceWindow(NamedTuple):
    start_hour: int                      # 0-23, inclusive
    end_hour: int                        # 0-24, exclusive; may wrap past midnight
    price: float


class LoginNode(NamedTuple):
    """How to reach a cluster's login node over SSH (federation)."""

    host: str
    port: int = 22
    user: Optional[str] = None
    identity_file: Optional[str] = None
    known_hosts: Optional[str] = None
    proxy_jump: Optional[str] = None     # "user@bastion:port"
    connect_timeout: float = 10.0
    command_timeout: float = 60.0


class Cluster(NamedTuple):
    name: str
    partitions: Dict[str, Partition]
    slurm_conf: Optional[str] = None     # SLURM_CONF for local commands
    login: Optional[LoginNode] = None    # None: run Slurm commands locally
    max_switch_wait: Optional[str] = None  # overrides Site.max_switch_wait
    price_per_gpu_hour: Tuple[PriceWindow, ...] = ()
    default_partition: Optional[str] = None


class Defaults(NamedTuple):
    cluster: Optional[str] = None
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    time: str = "01:00:00"
    template: str = "torchrun"


class Site(NamedTuple):
    name: str
    path: str                            # the file it was loaded from
    clusters: Dict[str, Cluster]
    defaults: Defaults = Defaults()
    max_switch_wait: str = "00:10:00"    # how long a heavy job may wait for fewer switches
    # MASTER_PORT / torchrun rendezvous ports (low, high): each job takes low + job id mod the size, on its
    # first node.  torchrun's own default port starts it; it ends below Linux's ephemeral ports
    # (32768-60999), which outgoing connections take at random.
    rendezvous_ports: Tuple[int, int] = (29500, 29999)
    modules: Tuple[str, ...] = ()        # `module load` lines emitted in the script
    setup: Tuple[str, ...] = ()          # verbatim setup lines (site-admin trusted)
    template_dirs: Tuple[str, ...] = ()  # searched before the built-in templates
    description: str = ""

    def cluster(self, name=None):
        """The named cluster, else the default, else the only one."""
        from slurmkit.errors import UsageError

        name = name or self.defaults.cluster or (next(iter(self.clusters)) if len(self.clusters) == 1 else None)
        if name is None:
            raise UsageError("site %r has several clusters; choose one with --cluster (one of: %s)"
                             % (self.name, ", ".join(sorted(self.clusters))))
        try:
            return self.clusters[name]
        except KeyError:
            raise UsageError("unknown cluster %r in site %r; choose one of: %s"
                             % (name, self.name, ", ".join(sorted(self.clusters)))) from None

    def partition(self, cluster, name=None):
        """The named partition of ``cluster``, else the cluster's or site's default."""
        from slurmkit.errors import UsageError

        name = name or cluster.default_partition or self.defaults.partition
        if name is None:
            raise UsageError("no partition given and site %r has no default; choose one with --partition (one of: %s)"
                             % (self.name, ", ".join(sorted(cluster.partitions))))
        try:
            return cluster.partitions[name]
        except KeyError:
            raise UsageError("unknown partition %r on cluster %r; choose one of: %s"
                             % (name, cluster.name, ", ".join(sorted(cluster.partitions)))) from None

    def switch_wait(self, cluster):
        return cluster.max_switch_wait or self.max_switch_wait


def as_plain(value):
    """Records as dicts (recursively) and tuples as lists: the JSON form of a Site."""
    if hasattr(value, "_asdict"):
        return {k: as_plain(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {k: as_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_plain(v) for v in value]
    return value


def site_from_plain(data: dict) -> Site:
    """The inverse of ``as_plain(site)`` (for the on-disk site cache, which is JSON, not pickle)."""
    def partition(p):
        f = p["fabric"]
        fabric = Fabric(**dict(f, hcas=tuple(f["hcas"]), roce=RoceSettings(**f["roce"])))
        return Partition(**dict(p, fabric=fabric))

    def cluster(c):
        return Cluster(**dict(c, partitions={n: partition(p) for n, p in c["partitions"].items()},
                              login=LoginNode(**c["login"]) if c["login"] else None,
                              price_per_gpu_hour=tuple(PriceWindow(**w) for w in c["price_per_gpu_hour"])))

    return Site(**dict(data, clusters={n: cluster(c) for n, c in data["clusters"].items()},
                       defaults=Defaults(**data["defaults"]), modules=tuple(data["modules"]),
                       setup=tuple(data["setup"]), template_dirs=tuple(data["template_dirs"]),
                       rendezvous_ports=tuple(data.get("rendezvous_ports") or Site._field_defaults["rendezvous_ports"])))
