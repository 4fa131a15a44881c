"""A validated site config's plain values turned into the typed model (:mod:`slurmkit.site.model`).

:mod:`slurmkit.site.loader` checks a file against the schema and hands over
its values only when nothing was wrong: so every key here exists (or holds
its schema default) and every value has its checked type, and building is
plain construction, with defaults the model owns (a gres name from the
accelerator, health settings a cluster inherits from the site).
"""

from slurmkit.site import checkers, schema
from slurmkit.site.model import (Cluster, ClusterHealth, ContainerSettings, Defaults, Fabric, HealthChecks, HealthMount,
                                 HealthSettings, HealthSsh, HourWindow, LoginNode, Partition, PowerModel, PriceWindow, RequeueSettings,
                                 EnergySettings,
                                 RoceSettings, Site, default_gres_name)


def build_site(value, path):
    """The :class:`Site` of a file at ``path`` whose values (``value``, the walker's output) passed every check."""
    defaults = value.get("defaults", {})
    return Site(
        name=value["site"],
        path=path,
        clusters={name: _build_cluster(name, cluster, value["health"])
                  for name, cluster in value["clusters"].items()},
        defaults=Defaults(**{key: defaults[key] for key in schema.DEFAULTS["keys"] if key in defaults}),
        max_switch_wait=value["topology"]["max_switch_wait"],
        rendezvous_ports=checkers.parse_port_range(value["rendezvous"]["ports"]),
        modules=tuple(value["modules"]),
        setup=tuple(value["setup"]),
        template_dirs=tuple(value["template_dirs"]),
        description=value["description"],
        health=_build_health_settings(value["health"]),
        requeue=RequeueSettings(
            transient_exit_codes=tuple(value["requeue"]["transient_exit_codes"]),
            signal_grace=value["requeue"]["signal_grace"], checkpoint_root=value["requeue"].get("checkpoint_root"),
            hang_timeout=value["requeue"]["hang_timeout"], hang_startup=value["requeue"]["hang_startup"],
            shared_checkpoint_clusters=tuple(value["requeue"]["shared_checkpoint_clusters"]),
            checkpoint_conventions=tuple(value["requeue"]["checkpoint_conventions"])),
    )


def _build_health_settings(value):
    return HealthSettings(
        resume_after=value["resume_after"], drain_cap=value["drain_cap"], fanout=value["fanout"],
        relays=value["relays"], relay_fanout=value.get("relay_fanout"),
        node_timeout=float(value["node_timeout"]), check_timeout=float(value["check_timeout"]),
        state_dir=value.get("state_dir"))


def _build_cluster_health(site_health, value):
    """The cluster's own ``health.command`` and ``health.ssh`` keys over the site's."""
    ssh = dict(site_health.get("ssh") or {})
    ssh.update(value.get("ssh") or {})
    if ssh.get("connect_timeout") is not None:
        ssh["connect_timeout"] = float(ssh["connect_timeout"])
    return ClusterHealth(command=tuple(value.get("command") or site_health["command"]), ssh=HealthSsh(**ssh))


def _build_partition_health(value):
    if value is None:
        return HealthChecks()
    fields = dict(value)
    for key in ("skip", "daemons", "fatal_xids", "ib_ports"):
        if key in fields:
            fields[key] = tuple(fields[key])
    if "mounts" in fields:
        fields["mounts"] = tuple(HealthMount(**mount) for mount in fields["mounts"])
    for key in ("memory_tolerance_percent", "max_swap_used_percent", "warn_load_per_core", "max_load_per_core",
                "dstate_seconds", "ib_rate_gbps"):
        if key in fields:
            fields[key] = float(fields[key])
    return HealthChecks(**fields)


def _build_containers(value, over=ContainerSettings()):
    """A ``containers`` mapping over ``over`` (a partition's over its cluster's): each key given replaces
    the one below, except ``images``, which adds to it (and replaces an image of the same name)."""
    if not value:
        return over
    return ContainerSettings(
        runtime=value.get("runtime") or over.runtime,
        images=dict(over.images, **(value.get("images") or {})),
        mounts=tuple(value["mounts"]) if value.get("mounts") is not None else over.mounts,
        env=tuple(value["env"]) if value.get("env") is not None else over.env,
        options=tuple(value["options"]) if value.get("options") is not None else over.options)


def _build_cluster(name, value, site_health=None):
    login = value.get("login")
    containers = _build_containers(value.get("containers"))
    return Cluster(
        name=name,
        partitions={pname: _build_partition(pname, part, containers) for pname, part in value["partitions"].items()},
        containers=containers,
        slurm_conf=value.get("slurm_conf"),
        python=value.get("python"),
        login=None if login is None else LoginNode(
            host=login["host"], port=login["port"], user=login.get("user"),
            identity_file=login.get("identity_file"), known_hosts=login.get("known_hosts"),
            proxy_jump=login.get("proxy_jump"), connect_timeout=float(login["connect_timeout"]),
            command_timeout=float(login["command_timeout"])),
        max_switch_wait=value.get("max_switch_wait"),
        switch_group_features=tuple(value.get("switch_group_features") or ()),
        price_per_gpu_hour=_build_prices(value.get("price_per_gpu_hour")),
        default_partition=value.get("default_partition"),
        energy=_build_energy(value.get("energy")),
        timezone=value.get("timezone"),
        health=_build_cluster_health(site_health or {"command": list(ClusterHealth._field_defaults["command"])},
                                     value.get("health") or {}),
    )


def _build_prices(value):
    if value is None:
        return ()
    if not isinstance(value, list):
        return (PriceWindow(0, 24, float(value)),)
    windows = []
    for window in value:
        start, end = checkers.parse_hours(window["hours"])
        windows.append(PriceWindow(start, end, float(window["price"])))
    return tuple(windows)


def _build_hour_windows(value, key):
    """A number (all day) or a list of {hours, KEY} windows, as HourWindows; () when absent (unknown)."""
    if value is None:
        return ()
    if not isinstance(value, list):
        return (HourWindow(0, 24, float(value)),)
    return tuple(HourWindow(*checkers.parse_hours(w["hours"]), float(w[key])) for w in value)


def _build_energy(value):
    if not value:
        return EnergySettings()
    return EnergySettings(
        pue=float(value["pue"]) if value.get("pue") is not None else None,
        price_per_kwh=_build_hour_windows(value.get("price_per_kwh"), "price"),
        carbon_intensity=_build_hour_windows(value.get("carbon_intensity"), "value"),
        carbon_forecast=value.get("carbon_forecast"),
        carbon_forecast_location=value.get("carbon_forecast_location"),
        carbon_forecast_command=tuple(value.get("carbon_forecast_command") or ()),
        carbon_forecast_timeout=float(value.get("carbon_forecast_timeout") or 10.0),
        gpu_freq=dict(value.get("gpu_freq") or {}),
        nvml_samples=value.get("nvml_samples"))


def _build_power(value):
    if not value:
        return None
    return PowerModel(**{key: float(v) for key, v in value.items() if v is not None})


def _build_partition(name, value, cluster_containers=ContainerSettings()):
    accelerator = value["accelerator"]
    max_time = value.get("max_time")
    return Partition(
        name=name,
        accelerator=accelerator,
        gpu_model=value.get("gpu_model"),
        gpus_per_node=value.get("gpus_per_node") or 0,
        cpus_per_node=value["cpus_per_node"],
        memory_mb=value.get("memory_mb"),
        max_nodes=value.get("max_nodes"),
        # The model's "no limit" is None; keep readers from parsing UNLIMITED.
        max_time=None if max_time is None or checkers.is_unlimited(max_time) else max_time,
        fabric=_build_fabric(value.get("fabric")),
        gres_name=value.get("gres_name") or default_gres_name(accelerator),
        health=_build_partition_health(value.get("health")),
        containers=_build_containers(value.get("containers"), cluster_containers),
        power=_build_power(value.get("power")),
    )


def _build_fabric(value):
    if value is None:
        return Fabric()
    roce = value.get("roce") or {}
    return Fabric(
        type=value["type"],
        hcas=tuple(value.get("hcas") or ()),
        socket_ifname=value.get("socket_ifname"),
        roce=RoceSettings(**roce),
        env={key: str(val) for key, val in (value.get("env") or {}).items()},
    )
