"""The site config schema, as data.

Every key a site YAML file may contain is described once, here, by a small
nested-dict spec that the generic walker in :mod:`slurmkit.site.loader`
interprets; the checks the specs name are :mod:`slurmkit.site.checkers`.  Keeping the rules declarative means one walker reports every
kind of problem (unknown key, wrong type, missing key, bad choice) the same
way for every key, and the schema can be listed for documentation and tests
instead of being scattered over per-key ``if`` chains.

A spec is a dict with:

``type``
    ``"str"``, ``"int"``, ``"number"`` (int or float), ``"bool"``,
    ``"time"`` (a Slurm time string), ``"mapping"`` (fixed ``keys``),
    ``"map_of"`` (user-chosen keys, each value checked against ``values``),
    ``"list"`` (each item checked against ``items``) or ``"one_of"``
    (the first of ``alternatives`` whose shape -- scalar, list, mapping --
    matches the YAML node).
``required``
    The key must be present (and not null).
``default``
    Value used when the key is absent or null.
``choices``
    Allowed values of a scalar.
``min`` / ``max``
    Bounds of an ``int`` or ``number``; ``above``: a bound it must exceed.
    Numbers are always finite (``.nan`` and ``.inf`` are refused).
``multiline``
    A ``str`` that may hold newlines and other control characters (free
    text, shell lines); any other string with one is refused.
``min_items``
    Least number of entries of a ``list`` or ``map_of``.
``key_checker``
    For ``map_of``: a function ``name -> message or None`` checking each key.
``as_text``
    Keep a scalar's text as written (``022`` stays ``"022"``, not 18).
``path``
    A file or directory: ``~`` is expanded and a relative path is made
    absolute against the config file's directory.
``path_like``
    A file or directory when it starts with ``/``, ``~``, ``./`` or ``../``
    (then as ``path``), else a name kept as written (a registry reference).
``checker``
    For scalars: ``value -> message or None``.  For mappings and lists: a
    cross-key rule ``value -> [(relative key path tuple, message), ...]``
    run after the entries were checked one by one; entries that failed
    their own checks hold :data:`INVALID` so rules can skip them instead of
    reporting the same mistake twice.
``doc``
    One line for the documentation (``site_configs/README.md``).

Null counts as absent for optional keys, so ``account: null`` is the same as
leaving ``account`` out.
"""

from slurmkit.containers.grammar import RUNTIMES
from slurmkit.site.checkers import (check_checkpoint_convention, check_cluster, check_container_mount,
                                    check_containers, check_drain_cap, check_fabric, check_fabric_env_name,
                                    check_feature, check_gpu_freq, check_health_skip, check_hours, check_ib_port, check_image_location,
                                    check_image_name, check_mount_path, check_name, check_non_empty,
                                    check_partition, check_port_range, check_power, check_price_windows,
                                    check_carbon_forecast_source, check_carbon_windows, check_energy_price_windows,
                                    check_proxy_jump, check_runtime_option, check_site, check_timezone, check_unique,
                                    check_variable_name)
from slurmkit.site.model import ACCELERATORS, FABRICS
from slurmkit.times import TIME_FORMATS_TEXT


# ---------------------------------------------------------------------------
# The schema


ROCE = {
    "type": "mapping",
    "doc": "RoCE v2 settings; only with type roce",
    "keys": {
        "gid_index": {"type": "int", "min": 0, "max": 255,
                      "doc": "GID index of the RoCE v2 address (NCCL_IB_GID_INDEX); required for NVIDIA RoCE"},
        "traffic_class": {"type": "int", "min": 0, "max": 255,
                          "doc": "IP traffic class (NCCL_IB_TC / HCCL_RDMA_TC), e.g. 106"},
        "service_level": {"type": "int", "min": 0, "max": 15,
                          "doc": "InfiniBand service level (NCCL_IB_SL / HCCL_RDMA_SL)"},
    },
}

FABRIC = {
    "type": "mapping",
    "doc": "the network between nodes; default {type: ethernet}",
    "keys": {
        "type": {"type": "str", "default": "ethernet", "choices": FABRICS,
                 "doc": "infiniband, roce or ethernet"},
        "hcas": {"type": "list", "items": {"type": "str", "checker": check_non_empty},
                 "doc": "HCA ports for NCCL_IB_HCA, e.g. [\"=mlx5_0:1\"]; required for infiniband and roce "
                        "(not for Ascend)"},
        "socket_ifname": {"type": "str", "checker": check_non_empty,
                          "doc": "bootstrap interface(s): NCCL_SOCKET_IFNAME / HCCL_SOCKET_IFNAME"},
        "roce": ROCE,
        "env": {"type": "map_of", "key_checker": check_fabric_env_name,
                "values": {"type": "one_of",
                           "alternatives": [{"type": "str"}, {"type": "number", "as_text": True}]},
                "doc": "extra environment variables for the job, values strings or numbers; upper-case names, "
                       "and not SLURM_* nor the job shell's own (IFS, BASH_ENV, ...), as for --env"},
    },
    "checker": check_fabric,
}

# Node health: thresholds per partition (slurmkit.health).  Every key is
# optional; the documented defaults are slurmkit.site.model.HealthChecks'.
HEALTH_MOUNT = {
    "type": "mapping",
    "keys": {
        "path": {"type": "str", "required": True, "checker": check_mount_path,
                 "doc": "absolute path on the node; %n is replaced by the node name"},
        "mount": {"type": "bool", "default": False, "doc": "must be a mount point (read from the mount table)"},
        "writable": {"type": "bool", "default": False,
                     "doc": "a file can be created and removed there (read-only remounts fail)"},
        "max_used_percent": {"type": "number", "min": 0, "max": 100, "doc": "most disk use allowed"},
        "timeout": {"type": "number", "default": 5.0, "min": 0.1,
                    "doc": "seconds the probe may take before the mount counts as hung"},
    },
}

HEALTH_CHECKS = {
    "type": "mapping",
    "doc": "node health thresholds for this partition's nodes (slurmkit health)",
    "keys": {
        "skip": {"type": "list", "items": {"type": "str", "checker": check_health_skip},
                 "doc": "checks or groups (host, gpu, ib, containers, fabric) not to run"},
        "memory_mb": {"type": "int", "min": 1, "doc": "memory a node must have; default: memory_mb of the partition"},
        "memory_tolerance_percent": {"type": "number", "min": 0, "max": 100,
                                     "doc": "how much less memory still passes (the kernel keeps some)"},
        "min_swap_mb": {"type": "int", "min": 0, "doc": "swap a node must have"},
        "max_swap_used_percent": {"type": "number", "min": 0, "max": 100, "doc": "most swap use allowed"},
        "warn_load_per_core": {"type": "number", "min": 0, "doc": "load average per core that warns"},
        "max_load_per_core": {"type": "number", "min": 0, "doc": "load average per core that fails"},
        "daemons": {"type": "list", "items": {"type": "str", "checker": check_non_empty},
                    "doc": "processes that must run"},
        "dstate_seconds": {"type": "number", "min": 0,
                           "doc": "a process in D state at two checks this far apart fails; 0: off"},
        "mounts": {"type": "list", "items": HEALTH_MOUNT, "doc": "paths to probe (present, writable, disk use)"},
        "gpus": {"type": "int", "min": 0, "doc": "accelerators a node must show; default: gpus_per_node"},
        "fatal_xids": {"type": "list", "items": {"type": "int", "min": 1},
                       "doc": "NVIDIA Xid codes in the kernel log that fail the node"},
        "max_retired_pages": {"type": "int", "min": 0, "doc": "retired GPU memory pages (per GPU) that fail"},
        "nvlinks": {"type": "int", "min": 0, "doc": "active NVLinks each GPU must have; default: every link"},
        "stray_gpu_processes": {"type": "bool", "doc": "fail on GPU processes while no job runs on the node"},
        "device_dir": {"type": "str", "path": True, "doc": "where the accelerator device files are"},
        "kernel_log": {"type": "str", "path": True, "doc": "kernel log device read for Xid lines"},
        "ib_sysfs": {"type": "str", "path": True, "doc": "the InfiniBand sysfs class directory"},
        "ib_ports": {"type": "list", "items": {"type": "str", "checker": check_ib_port},
                     "doc": "HCA ports that must be ACTIVE/LinkUp; default: the fabric's hcas"},
        "ib_rate_gbps": {"type": "number", "min": 0, "doc": "the rate every expected port must run at"},
    },
}

HEALTH_SSH = {
    "type": "mapping",
    "doc": "how the sweep reaches nodes over SSH; unset keys come from the cluster's login",
    "keys": {
        "port": {"type": "int", "min": 1, "max": 65535, "doc": "SSH port of the nodes"},
        "user": {"type": "str", "checker": check_non_empty, "doc": "remote user"},
        "identity_file": {"type": "str", "path": True, "doc": "private key file"},
        "known_hosts": {"type": "str", "path": True, "doc": "known_hosts file with the nodes' keys"},
        "proxy_jump": {"type": "str", "checker": check_proxy_jump, "doc": "bastion, \"user@host:port\""},
        "connect_timeout": {"type": "number", "min": 0, "doc": "seconds to connect to one node"},
    },
}

HEALTH_COMMAND = {"type": "list", "items": {"type": "str", "checker": check_non_empty}, "min_items": 1,
                  "doc": "how the sweep runs the check on a node (--plan - --json is appended)"}

# Jobs in container images (slurmkit submit --image): a cluster's, and a partition's where it differs.
CONTAINERS = {
    "type": "mapping",
    "doc": "how jobs run in container images (--image); a partition's keys replace the cluster's, and its images "
           "add to the cluster's",
    "keys": {
        "runtime": {"type": "str", "choices": RUNTIMES,
                    "doc": "oci (Slurm's --container, with the cluster's oci.conf), charliecloud, pyxis (enroot), "
                           "apptainer or podman-hpc"},
        "images": {"type": "map_of", "key_checker": check_image_name,
                   "values": {"type": "str", "checker": check_image_location, "path_like": True},
                   "doc": "image name -> where it is on this cluster: an absolute path (bundle, directory, "
                          "SquashFS, SIF) or a registry reference"},
        "mounts": {"type": "list", "items": {"type": "str", "checker": check_container_mount},
                   "doc": "SRC[:DST[:ro]] every container job gets (absolute paths), besides its working and "
                          "checkpoint directories"},
        "env": {"type": "list", "items": {"type": "str", "checker": check_variable_name},
                "doc": "more variables of the host that must win over the image's own (slurmkit's fabric, "
                       "rendezvous, requeue and --env variables always do)"},
        "options": {"type": "list", "items": {"type": "str", "checker": check_runtime_option},
                    "doc": "the site's own options of the runtime's command, each one word starting with '-', "
                           "put right after it (apptainer exec --userns, ch-run --write-fake; srun options for oci "
                           "and pyxis)"},
    },
    "checker": check_containers,
}

# Green compute (slurmkit.energy): watts in, kWh, cost and gCO2 out.  Bounds catch unit slips (kW for W).
POWER = {
    "type": "mapping",
    "doc": "the partition's power model (slurmkit.energy): what a job's nodes and GPUs draw; absent: energy unknown",
    "keys": {
        "gpu_idle_watts": {"type": "number", "min": 0, "max": 5000, "doc": "one accelerator, idle"},
        "gpu_busy_watts": {"type": "number", "min": 0, "max": 5000,
                           "doc": "one accelerator, busy (about its board power limit); required with accelerators"},
        "node_idle_watts": {"type": "number", "min": 0, "max": 100000,
                            "doc": "one node without its accelerators (CPUs, memory, fans, NICs), idle"},
        "node_busy_watts": {"type": "number", "min": 0, "max": 100000,
                            "doc": "one node without its accelerators, busy; required"},
    },
    "checker": check_power,
}

PARTITION = {
    "type": "mapping",
    "doc": "one Slurm partition",
    "keys": {
        "accelerator": {"type": "str", "required": True, "choices": ACCELERATORS,
                        "doc": "nvidia, ascend or none"},
        "gpu_model": {"type": "str", "checker": check_non_empty,
                      "doc": "the gres type (h100, a100, ascend910b); required with an accelerator"},
        "gres_name": {"type": "str", "checker": check_name,
                      "doc": "generic resource name; default gpu (nvidia) or npu (ascend)"},
        "gpus_per_node": {"type": "int", "min": 0,
                          "doc": "accelerators per node; required (>= 1) with an accelerator, 0/absent without"},
        "cpus_per_node": {"type": "int", "required": True, "min": 1, "doc": "CPUs per node"},
        "memory_mb": {"type": "int", "min": 1, "doc": "memory per node in MB (Slurm RealMemory)"},
        "max_nodes": {"type": "int", "min": 1, "doc": "most nodes a job may use; absent: no known limit"},
        "max_time": {"type": "time", "doc": "longest job (Slurm time); absent or UNLIMITED: no limit"},
        "fabric": FABRIC,
        "health": HEALTH_CHECKS,
        "containers": CONTAINERS,
        "power": POWER,
    },
    "checker": check_partition,
}

def _hour_window(value_key: str, value_doc: str, example: str, **limits) -> dict:
    """A ``{hours, VALUE}`` window of a day's profile (GPU-hour price, energy price, carbon)."""
    return {
        "type": "mapping",
        "keys": {
            "hours": {"type": "str", "required": True, "checker": check_hours,
                      "doc": "\"START-END\" in whole hours, may wrap midnight (\"%s\")" % example},
            value_key: dict({"type": "number", "required": True, "min": 0, "doc": value_doc}, **limits),
        },
    }


PRICE_WINDOW = _hour_window("price", "price per GPU-hour in this window", "20-08")
ENERGY_PRICE_WINDOW = _hour_window("price", "price per kWh in this window", "22-06")
CARBON_WINDOW = _hour_window("value", "grams of CO2-equivalent per kWh in this window", "10-16", max=2000)

ENERGY = {
    "type": "mapping",
    "doc": "energy price, carbon intensity and PUE of this cluster (slurmkit.energy); each key absent: unknown",
    "keys": {
        "pue": {"type": "number", "min": 1, "max": 3,
                "doc": "power usage effectiveness: the facility's energy per unit of IT energy (1.1-1.6 typical)"},
        "price_per_kwh": {
            "type": "one_of",
            "doc": "price of one kWh drawn by the facility: a number, or a list of {hours, price} windows covering "
                   "the day",
            "alternatives": [
                {"type": "number", "min": 0},
                {"type": "list", "items": ENERGY_PRICE_WINDOW, "min_items": 1,
                 "checker": check_energy_price_windows},
            ],
        },
        "carbon_intensity": {
            "type": "one_of",
            "doc": "gCO2e per kWh: a number, or a list of {hours, value} windows covering the day (the profile a "
                   "forecast falls back to)",
            "alternatives": [
                {"type": "number", "min": 0, "max": 2000},
                {"type": "list", "items": CARBON_WINDOW, "min_items": 1, "checker": check_carbon_windows},
            ],
        },
        "carbon_forecast": {"type": "str", "path": True,
                            "doc": "a JSON forecast file in the Carbon Aware SDK's shape ([{location, timestamp, "
                                   "duration, value}], or its forecast response with forecastData); read when a "
                                   "job is planned"},
        "carbon_forecast_command": {"type": "list", "items": {"type": "str", "checker": check_non_empty},
                                    "min_items": 1,
                                    "doc": "instead of a file: a command (its words, no shell) run when a job is "
                                           "planned that prints the forecast in the same shape on its output"},
        "carbon_forecast_timeout": {"type": "number", "above": 0, "max": 300,
                                    "doc": "seconds the forecast command may take (default 10); a slower one is "
                                           "stopped and the hourly profile used"},
        "gpu_freq": {
            "type": "mapping",
            "doc": "the GPU frequency a job placed by --prefer cheap or green runs at (sbatch --gpu-freq): a lower "
                   "clock draws less power and runs longer; measure both with slurmkit eff before setting it",
            # The keys are slurmkit.federation.windows.PREFERENCES less soon (soon is today's behaviour).
            "keys": {pref: {"type": "str", "checker": check_gpu_freq,
                            "doc": "low, medium, high, highm1 or MHz, optionally ,memory=VALUE (sbatch's grammar)"}
                     for pref in ("cheap", "green")},
        },
        "nvml_samples": {"type": "str", "checker": check_mount_path,
                         "doc": "a directory every node and slurmkit's side of the cluster share (on the login node for a "
                                "cluster reached over SSH; the jobs' users may write it, like /tmp): jobs on NVIDIA "
                                "partitions write their GPUs' NVML energy counters there at their start and end (one "
                                "short srun step each), and slurmkit eff reads them; absent: not sampled"},
        "carbon_forecast_location": {"type": "str", "checker": check_non_empty,
                                     "doc": "the location whose points are used when the forecast holds several"},
    },
    "checker": check_carbon_forecast_source,
}

LOGIN = {
    "type": "mapping",
    "doc": "SSH access to the cluster's login node (federation); absent: run Slurm commands locally",
    "keys": {
        "host": {"type": "str", "required": True, "checker": check_non_empty, "doc": "host name or address"},
        "port": {"type": "int", "default": 22, "min": 1, "max": 65535, "doc": "SSH port"},
        "user": {"type": "str", "checker": check_non_empty, "doc": "remote user; default: SSH's default"},
        "identity_file": {"type": "str", "path": True, "doc": "private key file"},
        "known_hosts": {"type": "str", "path": True, "doc": "known_hosts file checked strictly"},
        "proxy_jump": {"type": "str", "checker": check_proxy_jump, "doc": "bastion, \"user@host:port\""},
        "connect_timeout": {"type": "number", "default": 10.0, "above": 0, "doc": "seconds to connect"},
        "command_timeout": {"type": "number", "default": 60.0, "above": 0, "doc": "seconds per remote command"},
    },
}

CLUSTER = {
    "type": "mapping",
    "doc": "one Slurm cluster",
    "keys": {
        "slurm_conf": {"type": "str", "path": True, "doc": "SLURM_CONF for local commands"},
        "login": LOGIN,
        "max_switch_wait": {"type": "time", "doc": "overrides topology.max_switch_wait for this cluster"},
        "switch_group_features": {
            "type": "list", "items": {"type": "str", "checker": check_feature}, "min_items": 1,
            "checker": check_unique,
            "doc": "node features that each mark one group of leaf switches (e.g. one per spine): a --comm heavy "
                   "job needing more than one leaf gets --constraint=[a|b|...], all its nodes in one group"},
        "default_partition": {"type": "str", "doc": "partition used when none is given"},
        "python": {"type": "str", "checker": check_non_empty,
                   "doc": "the Python that runs the Python API's calls (slurmkit.AutoExecutor) on the nodes: a path, "
                          "or a name on the nodes' PATH; it needs cloudpickle and the caller's MAJOR.MINOR. Default: "
                          "python3 (for a cluster used from this machine, this process's own Python)"},
        "timezone": {"type": "str", "checker": check_timezone,
                     "doc": "the cluster's local time zone (an IANA name: Europe/Paris): the hours of its price, "
                            "energy price and carbon windows are its local hours. Default: this machine's"},
        "price_per_gpu_hour": {
            "type": "one_of",
            "doc": "a number, or a list of {hours, price} windows covering the day",
            "alternatives": [
                {"type": "number", "min": 0},
                {"type": "list", "items": PRICE_WINDOW, "min_items": 1, "checker": check_price_windows},
            ],
        },
        "energy": ENERGY,
        "partitions": {"type": "map_of", "required": True, "min_items": 1, "key_checker": check_name,
                       "values": PARTITION, "doc": "partition name -> partition"},
        "health": {"type": "mapping", "doc": "this cluster's health sweep settings (over the site's)",
                   "keys": {"command": HEALTH_COMMAND, "ssh": HEALTH_SSH}},
        "containers": CONTAINERS,
    },
    "checker": check_cluster,
}

DEFAULTS = {
    "type": "mapping",
    "doc": "what a job gets when the command line does not say",
    "keys": {
        "cluster": {"type": "str", "doc": "default cluster (must exist)"},
        "partition": {"type": "str", "doc": "default partition (must exist)"},
        "account": {"type": "str", "doc": "sbatch --account"},
        "qos": {"type": "str", "doc": "sbatch --qos"},
        "time": {"type": "time", "default": "01:00:00", "doc": "sbatch --time"},
        "template": {"type": "str", "default": "torchrun", "checker": check_non_empty,
                     "doc": "job script template"},
    },
}

SITE = {
    "type": "mapping",
    # Top-level keys starting with "x-" are ignored: a place to define YAML
    # anchors shared by several partitions (as in docker-compose files).
    "extension_prefix": "x-",
    "keys": {
        "site": {"type": "str", "required": True, "checker": check_name, "doc": "name of the site"},
        "description": {"type": "str", "default": "", "multiline": True, "doc": "free text"},
        "defaults": dict(DEFAULTS, default={}),
        "topology": {
            "type": "mapping",
            "doc": "topology-aware placement",
            "default": {},
            "keys": {
                "max_switch_wait": {"type": "time", "default": "00:10:00",
                                    "doc": "how long a multi-node job may wait for fewer leaf switches"},
            },
        },
        "rendezvous": {
            "type": "mapping",
            "doc": "where multi-node jobs meet (MASTER_ADDR/MASTER_PORT, torchrun's rendezvous)",
            "default": {},
            "keys": {
                "ports": {"type": "str", "default": "29500-29999", "checker": check_port_range,
                          "doc": "port range LOW-HIGH; each job takes LOW + job id mod the range size on its "
                                 "first node"},
            },
        },
        "modules": {"type": "list", "items": {"type": "str", "checker": check_non_empty}, "default": [],
                    "doc": "environment modules loaded by the script (module load)"},
        "setup": {"type": "list", "items": {"type": "str", "multiline": True}, "default": [],
                  "doc": "shell lines run before the job, verbatim (trusted: written by the site admin)"},
        "template_dirs": {"type": "list", "items": {"type": "str", "checker": check_non_empty, "path": True},
                          "default": [], "doc": "directories searched for templates before the built-in ones"},
        "clusters": {"type": "map_of", "required": True, "min_items": 1, "key_checker": check_name,
                     "values": CLUSTER, "doc": "cluster name -> cluster"},
        "requeue": {
            "type": "mapping",
            "doc": "the requeue daemon (slurmkit submit --auto-requeue, slurmkit daemon)",
            "default": {},
            "keys": {
                "transient_exit_codes": {"type": "list", "default": [],
                                         "items": {"type": "int", "min": 1, "max": 255},
                                         "doc": "exit codes restarted as transient failures (NCCL errors, Xid)"},
                "signal_grace": {"type": "int", "default": 120, "min": 10, "max": 3600,
                                 "doc": "seconds before the time limit a tracked job gets SIGUSR1 to save"},
                "hang_timeout": {"type": "int", "default": 0, "min": 0, "max": 7 * 24 * 3600,
                                 "doc": "seconds without progress (heartbeat or checkpoint) after which the daemon "
                                        "ends a running tracked job and restarts it; 0: never"},
                "hang_startup": {"type": "int", "default": 0, "min": 0, "max": 7 * 24 * 3600,
                                 "doc": "seconds from a tracked job's start to its first heartbeat during which "
                                        "no hang is declared (its imports, rendezvous, checkpoint load); 0 or "
                                        "less than hang_timeout: the hang timeout"},
                "checkpoint_root": {"type": "str", "path": True,
                                    "doc": "default parent directory of tracked jobs' checkpoint directories"},
                "checkpoint_conventions": {"type": "list", "default": [],
                                           "items": {"type": "str", "checker": check_checkpoint_convention},
                                           "doc": "how a complete checkpoint is recognised: marker, dcp, tracker, "
                                                  "file (default: all)"},
                "shared_checkpoint_clusters": {"type": "list", "default": [], "items": {"type": "str"},
                                               "doc": "clusters that share the checkpoint filesystem: a restart "
                                                      "may move between them when one is unreachable"},
            },
        },
        "health": {
            "type": "mapping",
            "doc": "node health: draining, resuming and sweeping (slurmkit health)",
            "default": {},
            "keys": {
                "resume_after": {"type": "int", "default": 3, "min": 1,
                                 "doc": "clean checks in a row before slurmkit resumes a node it drained"},
                "drain_cap": {"type": "one_of", "default": "10%",
                              "doc": "most nodes of a partition slurmkit keeps drained: a number or \"N%\"",
                              "alternatives": [{"type": "int", "min": 0},
                                               {"type": "str", "checker": check_drain_cap}]},
                "fanout": {"type": "int", "default": 32, "min": 1, "doc": "nodes a sweep checks at once"},
                "relays": {"type": "bool", "default": False,
                           "doc": "a sweep of more nodes than fanout goes through relay nodes, each checking "
                                  "a group of its peers (two rounds up to fanout squared nodes); the nodes must "
                                  "reach each other with health.ssh"},
                "relay_fanout": {"type": "int", "min": 1,
                                 "doc": "nodes one relay checks at once (default: fanout); the whole sweep runs "
                                        "up to fanout times this many checks at the same time"},
                "node_timeout": {"type": "number", "default": 60.0, "min": 1,
                                 "doc": "seconds a sweep gives one node (connection and check)"},
                "check_timeout": {"type": "number", "default": 50.0, "min": 1,
                                  "doc": "watchdog of one check, e.g. under slurmd's HealthCheckProgram"},
                "state_dir": {"type": "str", "path": True,
                              "doc": "where checks keep what they compare across runs, and the sweep lock"},
                "command": dict(HEALTH_COMMAND, default=["slurmkit", "health", "check"]),
                "ssh": HEALTH_SSH,
            },
        },
    },
    "checker": check_site,
}

_EXPECT = {
    "str": "a string",
    "int": "an integer",
    "number": "a number",
    "bool": "true or false",
    "time": "a Slurm time string (%s)" % TIME_FORMATS_TEXT,
    "mapping": "a mapping",
    "map_of": "a mapping",
    "list": "a list",
}


def expected(spec):
    """What a value of ``spec`` looks like, for "expected X, got Y" messages."""
    kind = spec["type"]
    if kind == "one_of":
        return " or ".join(expected(alt) for alt in spec["alternatives"])
    if kind == "list" and "items" in spec and spec["items"]["type"] != "mapping":
        return "a list of %s" % _plural(expected(spec["items"]))
    if kind == "list" and spec["items"]["type"] == "mapping":
        return "a list of mappings"
    return _EXPECT[kind]


def _plural(text):
    for article in ("an ", "a "):
        if text.startswith(article):
            text = text[len(article):]
            break
    head, _, tail = text.partition(" ")
    return head + "s" + ((" " + tail) if tail else "")


def iter_keys(spec=None, prefix=""):
    """Yield ``(dotted path, spec)`` for every documented key, depth first.

    User-chosen keys appear as placeholders (``clusters.<cluster>``), list
    items as ``[]``.  Used by the documentation test and ``site schema``.
    """
    spec = SITE if spec is None else spec
    kind = spec["type"]
    if kind == "mapping":
        for name, sub in spec["keys"].items():
            path = prefix + "." + name if prefix else name
            yield path, sub
            for item in iter_keys(sub, path):
                yield item
    elif kind == "map_of" and spec["values"]["type"] in ("mapping", "map_of"):
        placeholder = "<%s>" % prefix.rsplit(".", 1)[-1].rstrip("s")
        for item in iter_keys(spec["values"], prefix + "." + placeholder):
            yield item
    elif kind == "list" and spec["items"]["type"] == "mapping":
        for item in iter_keys(spec["items"], prefix + "[]"):
            yield item
    elif kind == "one_of":
        for alt in spec["alternatives"]:
            for item in iter_keys(alt, prefix):
                yield item
