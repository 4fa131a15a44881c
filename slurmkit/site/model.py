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


# Node health (slurmkit.health).  Check names as results carry them (a
# result of a check with instances adds ":INSTANCE", e.g. "mount:/scratch");
# groups name several at once in a partition's ``health.skip``.
HEALTH_CHECK_GROUPS = {
    "host": ("memory", "swap", "load", "mount", "daemon", "dstate"),
    "gpu": ("nvml", "gpu_count", "gpu_lost", "xid", "ecc", "retired_pages", "remapped_rows", "nvlink",
            "throttle", "pcie", "stray_processes", "npu_count"),
    "ib": ("ib_port", "ib_rate", "ib_errors"),
    "containers": ("container_runtime",),
    "fabric": ("socket_ifname",),
}
HEALTH_CHECK_NAMES = tuple(name for names in HEALTH_CHECK_GROUPS.values() for name in names)
# Xids NVIDIA documents as needing a GPU reset or a reboot (double-bit ECC,
# GSP and micro-controller halts, NVLink, fallen off the bus, uncontained
# ECC, row-remap failure); application faults (13, 31, 43, 94) are left out.
DEFAULT_FATAL_XIDS = (48, 61, 62, 63, 64, 74, 79, 95, 119, 120, 140)


class HealthMount(NamedTuple):
    path: str                            # absolute; "%n" is the node's name
    mount: bool = False                  # must be a mount point
    writable: bool = False               # a file can be created and removed
    max_used_percent: Optional[float] = None
    timeout: float = 5.0                 # seconds before the mount counts as hung


class HealthChecks(NamedTuple):
    """One partition's health thresholds; None: derived from the partition (or no check)."""

    skip: Tuple[str, ...] = ()
    memory_mb: Optional[int] = None      # None: the partition's memory_mb
    memory_tolerance_percent: float = 5.0
    min_swap_mb: Optional[int] = None
    max_swap_used_percent: Optional[float] = None
    warn_load_per_core: Optional[float] = 2.0
    max_load_per_core: Optional[float] = None
    daemons: Tuple[str, ...] = ("munged", "slurmd")
    dstate_seconds: float = 120.0
    mounts: Tuple[HealthMount, ...] = ()
    gpus: Optional[int] = None           # None: the partition's gpus_per_node
    fatal_xids: Tuple[int, ...] = DEFAULT_FATAL_XIDS
    max_retired_pages: int = 60
    nvlinks: Optional[int] = None        # None: every link NVML reports must be active
    stray_gpu_processes: bool = True
    device_dir: str = "/dev"
    kernel_log: str = "/dev/kmsg"
    ib_sysfs: str = "/sys/class/infiniband"
    ib_ports: Optional[Tuple[str, ...]] = None   # None: the fabric's hcas (infiniband, roce)
    ib_rate_gbps: Optional[float] = None  # None: every port at the rate of the fastest

    @classmethod
    def from_plain(cls, data):
        data = dict(data)
        for key in ("skip", "daemons", "fatal_xids"):
            data[key] = tuple(data[key])
        data["mounts"] = tuple(HealthMount(**m) for m in data["mounts"])
        if data.get("ib_ports") is not None:
            data["ib_ports"] = tuple(data["ib_ports"])
        return cls(**data)


class HealthSsh(NamedTuple):
    """How the sweep reaches nodes; None: the cluster's login setting."""

    port: Optional[int] = None
    user: Optional[str] = None
    identity_file: Optional[str] = None
    known_hosts: Optional[str] = None
    proxy_jump: Optional[str] = None
    connect_timeout: Optional[float] = None


class ClusterHealth(NamedTuple):
    command: Tuple[str, ...] = ("slurmkit", "health", "check")   # the site's, unless the cluster sets its own
    ssh: HealthSsh = HealthSsh()               # the cluster's over the site's


class HealthSettings(NamedTuple):
    resume_after: int = 3                # clean checks in a row before a slurmkit drain is resumed
    drain_cap: object = "10%"            # int, or "N%" of a partition: see parse_drain_cap
    fanout: int = 32
    relays: bool = False                 # sweeps of more than fanout nodes go through relay nodes (health.relay)
    relay_fanout: Optional[int] = None   # nodes a relay checks at once; None: fanout
    node_timeout: float = 60.0
    check_timeout: float = 50.0
    state_dir: Optional[str] = None      # None: $SLURMKIT_STATE_DIR, else ~/.local/state/slurmkit


class RequeueSettings(NamedTuple):
    """What the requeue daemon needs from the site (slurmkit.requeue)."""

    transient_exit_codes: Tuple[int, ...] = ()   # exit codes restarted as transient (NCCL errors, Xid)
    signal_grace: int = 120                      # seconds of SIGUSR1 warning before the time limit
    hang_timeout: int = 0                        # seconds without progress before a job is ended; 0: never
    hang_startup: int = 0                        # seconds from start to first heartbeat allowed (>= hang_timeout)
    checkpoint_root: Optional[str] = None        # default parent of a tracked job's checkpoint directory
    # Clusters that see the same checkpoint filesystem: a restart may move between them.
    shared_checkpoint_clusters: Tuple[str, ...] = ()
    # How a complete checkpoint is recognised (slurmkit.checkpoint.CONVENTIONS); empty: all of them.
    checkpoint_conventions: Tuple[str, ...] = ()


def parse_drain_cap(value):
    """``(number, None)`` or ``(None, percent)`` from 3, "3" or "10%"; ValueError otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError("a drain cap cannot be negative")
        return value, None
    text = str(value).strip()
    if text.endswith("%"):
        try:
            share = float(text[:-1])
        except ValueError:
            share = -1.0
        if not 0 <= share <= 100:
            raise ValueError("%r is not a share; use a percentage from 0%% to 100%%, e.g. \"10%%\"" % value)
        return None, share
    if text.isdigit():
        return int(text), None
    raise ValueError("%r is not a drain cap; use a number of nodes (3) or a share of the partition (\"10%%\")"
                     % value)


class ContainerSettings(NamedTuple):
    """How jobs run in container images on a cluster or partition (slurmkit.containers)."""

    runtime: Optional[str] = None        # one of slurmkit.containers.grammar.RUNTIMES; None: no images here
    images: Dict[str, str] = {}          # image name -> where it is on the cluster (shared default: never mutated)
    mounts: Tuple[str, ...] = ()         # SRC[:DST[:ro]] every container job gets
    env: Tuple[str, ...] = ()            # more host variables that must win over the image's own
    options: Tuple[str, ...] = ()        # the site's own options of the runtime's command (apptainer --userns)

    @classmethod
    def from_plain(cls, data):
        return cls(runtime=data["runtime"], images=dict(data["images"]), mounts=tuple(data["mounts"]),
                   env=tuple(data["env"]), options=tuple(data.get("options") or ()))


class PowerModel(NamedTuple):
    """What one node and one accelerator draw, idle and busy (watts; None: the site did not say).

    Node watts are the node without its accelerators (CPUs, memory, fans,
    NICs), so a job's draw is nodes x (node + GPUs x GPU) whatever the GPU
    count per node (slurmkit.energy.model).
    """

    gpu_idle_watts: Optional[float] = None
    gpu_busy_watts: Optional[float] = None
    node_idle_watts: Optional[float] = None
    node_busy_watts: Optional[float] = None


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
    health: HealthChecks = HealthChecks()
    containers: ContainerSettings = ContainerSettings()   # the cluster's, with the partition's own keys
    power: Optional[PowerModel] = None   # None: no power model, a job's energy here is unknown

    @property
    def effective_gres_name(self):
        """The gres name jobs request (``--gres=NAME:TYPE:N``); None without accelerator."""
        return self.gres_name or default_gres_name(self.accelerator)


def default_gres_name(accelerator: str) -> Optional[str]:
    """The one rule for a partition without ``gres_name``: Ascend clusters schedule NPUs as
    ``--gres=npu:N``, NVIDIA ones GPUs as ``gpu:N``; no accelerator, no gres."""
    return {"nvidia": "gpu", "ascend": "npu"}.get(accelerator)


class PriceWindow(NamedTuple):
    start_hour: int                      # 0-23, inclusive
    end_hour: int                        # 0-24, exclusive; may wrap past midnight
    price: float


class HourWindow(NamedTuple):
    """A value for some hours of every day (an energy price per kWh, a carbon intensity in gCO2e/kWh)."""

    start_hour: int                      # 0-23, inclusive
    end_hour: int                        # 0-24, exclusive; may wrap past midnight
    value: float


class EnergySettings(NamedTuple):
    """A cluster's energy price, carbon intensity and PUE (slurmkit.energy); each absent one is unknown."""

    pue: Optional[float] = None
    price_per_kwh: Tuple[HourWindow, ...] = ()       # () : unknown
    carbon_intensity: Tuple[HourWindow, ...] = ()    # () : unknown; the profile a forecast falls back to
    carbon_forecast: Optional[str] = None            # a Carbon Aware SDK forecast file, read when planning
    carbon_forecast_location: Optional[str] = None   # which of its locations, when it holds several
    carbon_forecast_command: Tuple[str, ...] = ()    # or a command printing one, run when planning
    carbon_forecast_timeout: float = 10.0            # seconds that command may take
    gpu_freq: Dict[str, str] = {}                    # --prefer cheap|green -> sbatch --gpu-freq (shared default:
                                                     # never mutated)
    nvml_samples: Optional[str] = None               # a directory the nodes and slurmkit share: each job's NVML
                                                     # energy counters, read at its start and end; None: not read


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
    # Node features that each mark a group of leaves (a spine): heavy jobs over several leaves stay in one.
    switch_group_features: Tuple[str, ...] = ()
    price_per_gpu_hour: Tuple[PriceWindow, ...] = ()
    default_partition: Optional[str] = None
    health: ClusterHealth = ClusterHealth()
    containers: ContainerSettings = ContainerSettings()   # each partition's holds what applies there
    python: Optional[str] = None         # the Python of the API's calls on the nodes (slurmkit.api)
    energy: EnergySettings = EnergySettings()
    timezone: Optional[str] = None       # IANA name: the hours of its windows are its local hours; None: this machine's


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
    health: HealthSettings = HealthSettings()
    requeue: RequeueSettings = RequeueSettings()

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
        # data["health"] without a default: a cache entry written before health existed is
        # a KeyError, which makes the cache load the file again.
        return Partition(**dict(p, fabric=fabric, health=HealthChecks.from_plain(p["health"]),
                                containers=ContainerSettings.from_plain(p["containers"]),
                                # KeyError for an entry of an older slurmkit: a cache miss, loaded afresh.
                                power=PowerModel(**p["power"]) if p["power"] else None))

    def energy(e):
        return EnergySettings(**dict(e, price_per_kwh=tuple(HourWindow(**w) for w in e["price_per_kwh"]),
                                     carbon_intensity=tuple(HourWindow(**w) for w in e["carbon_intensity"]),
                                     carbon_forecast_command=tuple(e["carbon_forecast_command"])))

    def cluster(c):
        health = ClusterHealth(command=tuple(c["health"]["command"]), ssh=HealthSsh(**c["health"]["ssh"]))
        return Cluster(**dict(c, partitions={n: partition(p) for n, p in c["partitions"].items()},
                              login=LoginNode(**c["login"]) if c["login"] else None,
                              price_per_gpu_hour=tuple(PriceWindow(**w) for w in c["price_per_gpu_hour"]),
                              # KeyError for an entry of an older slurmkit: a cache miss, loaded afresh.
                              switch_group_features=tuple(c["switch_group_features"]), health=health,
                              containers=ContainerSettings.from_plain(c["containers"]),
                              energy=energy(c["energy"])))

    return Site(**dict(data, clusters={n: cluster(c) for n, c in data["clusters"].items()},
                       defaults=Defaults(**data["defaults"]), modules=tuple(data["modules"]),
                       setup=tuple(data["setup"]), template_dirs=tuple(data["template_dirs"]),
                       rendezvous_ports=tuple(data.get("rendezvous_ports") or Site._field_defaults["rendezvous_ports"]),
                       health=HealthSettings(**data["health"]),
                       requeue=RequeueSettings(**dict(data["requeue"],
                                                      transient_exit_codes=tuple(data["requeue"]["transient_exit_codes"]),
                                                      shared_checkpoint_clusters=tuple(
                                                          data["requeue"]["shared_checkpoint_clusters"]),
                                                      checkpoint_conventions=tuple(
                                                          data["requeue"]["checkpoint_conventions"])))))
