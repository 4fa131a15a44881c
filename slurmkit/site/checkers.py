"""The checks of a site config's values, for the schema (:mod:`slurmkit.site.schema`).

Scalar checkers take a value and return a message or None; cross-key rules
take a mapping or list whose entries were already checked one by one and
return ``[(relative key path, message), ...]``.  An entry that failed its
own check holds :data:`INVALID`, so a rule skips it instead of reporting
the same mistake twice.  Also here: the parsers of the values whose checks
and model share them (hours, port ranges, time limits).
"""

import difflib
import re

from slurmkit.site.model import HEALTH_CHECK_GROUPS, HEALTH_CHECK_NAMES, parse_drain_cap
from slurmkit.times import UNLIMITED_TIMES, slurm_time_seconds


class _Invalid(object):
    """Marker for a value that failed its own check (already reported)."""

    def __repr__(self):
        return "INVALID"


INVALID = _Invalid()


# ---------------------------------------------------------------------------
# Slurm time strings

# One parser of Slurm times for the whole project: slurmkit.times.


def check_time(value):
    try:
        slurm_time_seconds(value)
    except ValueError as exc:
        return str(exc)
    return None


def is_unlimited(text):
    return str(text).strip().lower() in UNLIMITED_TIMES


# ---------------------------------------------------------------------------
# Small scalar checkers

# Matched whole (fullmatch) in ASCII: "^...$" lets a trailing newline through
# (a site name "local\n" broke the script header), "\d" takes any digits.
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*", re.ASCII)
_HOURS_RE = re.compile(r"([0-9]{1,2})-([0-9]{1,2})", re.ASCII)
# [user@]host[:port], several hops separated by commas (ssh -J syntax).


def check_name(value):
    # Names end up in dotted key paths, file names and sbatch arguments:
    # keep them to letters, digits, '-' and '_'.
    if not _NAME_RE.fullmatch(value):
        return "%r is not a valid name: use letters, digits, '-' and '_' (starting with a letter or digit)" % value
    return None


def check_fabric_env_name(value):
    """A fabric ``env`` name: the rule of ``--env`` (:func:`slurmkit.envnames.problem`), since both are
    exported by the job script, and upper case: the collective libraries read only upper-case names, so
    a site's ``nccl_debug`` is a typo that would silently do nothing."""
    from slurmkit import envnames

    why = envnames.problem(value)
    if why is None and value != value.upper():
        why = "%r is not a valid environment variable name for a site (must match ^[A-Z_][A-Z0-9_]*$)" % value
    return why


def check_proxy_jump(value):
    # The very rule connections use, so a value that validates also connects.
    from slurmkit.errors import ConfigError
    from slurmkit.site.proxy_jump import parse_proxy_jump

    try:
        parse_proxy_jump(value)
    except ConfigError as exc:
        return str(exc)
    return None


# A Slurm node feature as slurmkit writes it into --constraint: no operator
# (& | [ ] ( ) * ,) and nothing that needs quoting.
_FEATURE_RE = re.compile(r"[A-Za-z0-9_.+-]+", re.ASCII)


def check_feature(value):
    if not _FEATURE_RE.fullmatch(value):
        return "%r is not a node feature name: use letters, digits, '_', '.', '+' and '-'" % value
    return None


def check_unique(values):
    """Each item once (a repeated switch group feature is a typo for another one)."""
    seen = set()
    problems = []
    for index, value in enumerate(values):
        if isinstance(value, str) and value in seen:
            problems.append(((index,), "%r is listed twice" % value))
        seen.add(value)
    return problems


def check_non_empty(value):
    if not value.strip():
        return "must not be empty"
    return None


def check_timezone(value):
    """An IANA time zone name this machine's tz database knows (Europe/Paris, America/Chicago, UTC)."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        return "unknown time zone %r: give an IANA name such as Europe/Paris or America/Chicago" % value
    return None


def parse_hours(value):
    """``"08-20"`` -> ``(8, 20)``; an end of 0 means midnight, i.e. 24.

    Raises ValueError for anything that is not START-END whole hours with
    START in 0-23, END in 0-24 and START != END.
    """
    match = _HOURS_RE.fullmatch(value.strip())
    if not match:
        raise ValueError("%r is not an hour range; use START-END in whole hours, e.g. \"08-20\" or \"20-08\""
                         % value)
    start, end = int(match.group(1)), int(match.group(2))
    if start > 23 or end > 24:
        raise ValueError("%r: hours run from 0 to 23 (an end may be 24)" % value)
    if end == 0:
        end = 24
    if start == end:
        raise ValueError("%r is an empty window (start equals end); use \"00-24\" for the whole day" % value)
    return start, end


def window_hours(start, end):
    """The hours of the day a window [start, end) covers, wrapping midnight."""
    if start < end:
        return list(range(start, end))
    return list(range(start, 24)) + list(range(0, end))


# sbatch --gpu-freq: [memory=]VALUE[,[memory=]VALUE][,verbose], VALUE low, medium, high, highm1 or MHz.
_GPU_FREQ_VALUE = r"(?:low|medium|high|highm1|[1-9][0-9]{1,4})"
_GPU_FREQ_RE = re.compile(r"(?:memory=)?%s(?:,(?:memory=)?%s)?(?:,verbose)?" % (_GPU_FREQ_VALUE, _GPU_FREQ_VALUE),
                          re.ASCII)


def check_gpu_freq(value):
    """sbatch --gpu-freq's value: what the site sets per preference, and what the renderer passes on."""
    if not _GPU_FREQ_RE.fullmatch(value):
        return ("%r is not an sbatch --gpu-freq: give low, medium, high, highm1 or a frequency in MHz (1410), "
                "optionally with memory=VALUE and verbose, comma-separated (medium,memory=high)" % value)
    return None


def check_hours(value):
    try:
        parse_hours(value)
    except ValueError as exc:
        return str(exc)
    return None


_PORTS_RE = re.compile(r"\s*([0-9]+)\s*-\s*([0-9]+)\s*", re.ASCII)


def parse_port_range(value):
    """``"29500-29999"`` -> ``(29500, 29999)``; ValueError unless 1024 < LO <= HI <= 65535."""
    match = _PORTS_RE.fullmatch(str(value))
    if not match:
        raise ValueError("%r is not a port range; use LOW-HIGH, e.g. \"29500-29999\"" % (value,))
    low, high = int(match.group(1)), int(match.group(2))
    if not 1024 < low <= high <= 65535:
        raise ValueError("%r: ports must be above 1024 (unprivileged), at most 65535, the low one first"
                         % (value,))
    return low, high


def check_port_range(value):
    try:
        parse_port_range(value)
    except ValueError as exc:
        return str(exc)
    return None


def _hour_ranges(hours):
    """[0, 1, 2, 7] -> "00-03, 07-08": compact text for messages."""
    spans, hours = [], sorted(set(hours))
    for hour in hours:
        if spans and spans[-1][1] == hour:
            spans[-1][1] = hour + 1
        else:
            spans.append([hour, hour + 1])
    return ", ".join("%02d-%02d" % (a, b) for a, b in spans)


# ---------------------------------------------------------------------------
# Cross-key rules (return [(relative key path, message)])

def _valid(mapping, *keys):
    return all(mapping.get(key) is not INVALID for key in keys)


def check_price_windows(windows):
    """Windows must cover each hour of the day exactly once."""
    return _check_day_windows(windows, "price")


def check_energy_price_windows(windows):
    """Energy price windows ({hours, price}), as the GPU-hour ones: each hour exactly once."""
    return _check_day_windows(windows, "energy price")


def check_carbon_windows(windows):
    """Carbon intensity windows ({hours, value}): each hour exactly once."""
    return _check_day_windows(windows, "carbon intensity")


def check_carbon_forecast_source(energy):
    """A cluster's forecast comes from a file or from a command, not both; a timeout is the command's."""
    if energy.get("carbon_forecast") and energy.get("carbon_forecast_command"):
        yield ("carbon_forecast_command",), ("give the forecast as a file (carbon_forecast) or as a command "
                                             "(carbon_forecast_command), not both")
    if energy.get("carbon_forecast_timeout") is not None and not energy.get("carbon_forecast_command"):
        yield ("carbon_forecast_timeout",), "carbon_forecast_timeout applies to carbon_forecast_command: add one"


def _check_day_windows(windows, noun):
    counts = [0] * 24
    for window in windows:
        if window is INVALID or not _valid(window, "hours") or "hours" not in window:
            return []  # a broken window was reported already; coverage would only add noise
        start, end = parse_hours(window["hours"])
        for hour in window_hours(start, end):
            counts[hour] += 1
    problems = []
    overlap = [h for h in range(24) if counts[h] > 1]
    gaps = [h for h in range(24) if counts[h] == 0]
    if overlap:
        problems.append(((), "%s windows overlap at hours %s; each hour must have exactly one %s"
                         % (noun, _hour_ranges(overlap), "value" if noun == "carbon intensity" else "price")))
    if gaps:
        problems.append(((), "%s windows leave hours %s uncovered; together they must cover all 24 hours"
                         % (noun, _hour_ranges(gaps))))
    return problems


def check_fabric(fabric):
    problems = []
    kind = fabric.get("type")
    if kind is INVALID:
        return problems
    if "roce" in fabric and kind != "roce":
        problems.append((("roce",), "only allowed when the fabric type is roce (it is %s)" % kind))
    hcas = fabric.get("hcas")
    if hcas and hcas is not INVALID and kind == "ethernet":
        problems.append((("hcas",), "HCAs are only used with fabric type infiniband or roce; "
                                    "remove them or change the type"))
    return problems


def check_partition(part):
    problems = check_partition_power(part)
    acc = part.get("accelerator")
    if acc is None or acc is INVALID:
        return problems  # missing/invalid accelerator is reported already
    if acc == "none":
        gpus = part.get("gpus_per_node")
        if gpus not in (None, 0, INVALID):
            problems.append((("gpus_per_node",), "must be 0 or absent when accelerator is none"))
        for key in ("gpu_model", "gres_name"):
            if part.get(key) not in (None, INVALID):
                problems.append(((key,), "only allowed when the partition has an accelerator "
                                         "(accelerator is none)"))
    else:
        if "gpu_model" not in part:
            problems.append((("gpu_model",), "required when accelerator is %s (it is the gres type, e.g. %s)"
                             % (acc, "h100" if acc == "nvidia" else "ascend910b")))
        gpus = part.get("gpus_per_node")
        if gpus is None:
            problems.append((("gpus_per_node",), "required when accelerator is %s" % acc))
        elif gpus is not INVALID and gpus < 1:
            problems.append((("gpus_per_node",), "must be at least 1 when accelerator is %s" % acc))
    fabric = part.get("fabric")
    # Fabric rules that depend on the accelerator.  HCCL on Ascend drives the
    # RDMA NICs built into the NPUs (configured by hccn.conf), so neither HCA
    # names nor a GID index are needed there; NCCL needs both to pick the
    # right ports and RoCE v2 addresses.
    if isinstance(fabric, dict) and fabric.get("type") in ("infiniband", "roce") and acc != "ascend":
        kind = fabric["type"]
        hcas = fabric.get("hcas")
        if hcas is not INVALID and not hcas:
            problems.append((("fabric", "hcas"), "required (a non-empty list, e.g. [\"=mlx5_0:1\"]) "
                                                 "for fabric type %s" % kind))
        if kind == "roce":
            roce = fabric.get("roce")
            if roce is None:
                problems.append((("fabric", "roce", "gid_index"),
                                 "required for fabric type roce (the RoCE v2 GID index, often 3)"))
            elif roce is not INVALID and roce.get("gid_index") is None:
                problems.append((("fabric", "roce", "gid_index"),
                                 "required for fabric type roce (the RoCE v2 GID index, often 3)"))
    return problems


def check_cluster(cluster):
    problems = []
    parts = cluster.get("partitions")
    ours = cluster.get("containers") if isinstance(cluster.get("containers"), dict) else {}
    if isinstance(parts, dict):
        # Images need a runtime: the partition's own, else the cluster's.
        for name, part in parts.items():
            theirs = part.get("containers") if isinstance(part, dict) else None
            if isinstance(theirs, dict) and theirs.get("images") and not (theirs.get("runtime") or ours.get("runtime")):
                problems.append((("partitions", name, "containers", "runtime"),
                                 "images need a runtime: set containers.runtime here or on the cluster"))
    if ours.get("images") and not ours.get("runtime"):
        problems.append((("containers", "runtime"), "images need a runtime: set containers.runtime (one of oci, "
                         "charliecloud, pyxis, apptainer, podman-hpc)"))
    default = cluster.get("default_partition")
    if isinstance(parts, dict) and isinstance(default, str) and default not in parts:
        problems.append((("default_partition",), "unknown partition %r; this cluster has: %s"
                         % (default, ", ".join(sorted(parts)))))
    return problems


def check_power(power):
    """A power model needs the busy watts of what the partition has; idle may not exceed busy."""
    problems = []
    for part in ("gpu", "node"):
        idle, busy = power.get(part + "_idle_watts"), power.get(part + "_busy_watts")
        if isinstance(idle, (int, float)) and isinstance(busy, (int, float)) and idle > busy:
            problems.append(((part + "_idle_watts",), "is more than %s_busy_watts (%s > %s); idle draws less "
                             "than busy" % (part, idle, busy)))
    if power.get("node_busy_watts") is None:
        # Without it every job's energy would silently leave out CPUs, memory and fans.
        problems.append(((), "node_busy_watts is required: what one node draws busy, without its GPUs"))
    return problems


def check_partition_power(part):
    """A partition with accelerators needs gpu_busy_watts in its power model, one without has none."""
    power = part.get("power")
    acc = part.get("accelerator")
    if not isinstance(power, dict) or acc in (None, INVALID):
        return []
    if acc != "none" and power.get("gpu_busy_watts") is None:
        return [(("power",), "gpu_busy_watts is required: the partition has accelerators (%s)" % acc)]
    if acc == "none" and (power.get("gpu_busy_watts") is not None or power.get("gpu_idle_watts") is not None):
        return [(("power",), "gpu_*_watts only apply to a partition with accelerators (accelerator is none)")]
    return []


def check_checkpoint_convention(value):
    from slurmkit.checkpoint import CONVENTIONS

    if value not in CONVENTIONS:
        return "%r is not a checkpoint convention; use one of: %s" % (value, ", ".join(CONVENTIONS))
    return None


def check_site(site):
    problems = []
    clusters = site.get("clusters")
    defaults = site.get("defaults")
    requeue = site.get("requeue")
    if isinstance(clusters, dict) and isinstance(requeue, dict) and isinstance(
            requeue.get("shared_checkpoint_clusters"), list):
        for i, name in enumerate(requeue["shared_checkpoint_clusters"]):
            if isinstance(name, str) and name not in clusters:
                problems.append((("requeue", "shared_checkpoint_clusters", i), "unknown cluster %r; clusters are: %s"
                                 % (name, ", ".join(sorted(clusters)))))
    if not isinstance(clusters, dict) or not isinstance(defaults, dict):
        return problems
    name = defaults.get("cluster")
    if isinstance(name, str) and name not in clusters:
        problems.append((("defaults", "cluster"), "unknown cluster %r; clusters are: %s"
                         % (name, ", ".join(sorted(clusters)))))
        return problems
    part = defaults.get("partition")
    if not isinstance(part, str):
        return problems
    if isinstance(name, str):
        cluster = clusters[name]
        if isinstance(cluster, dict) and isinstance(cluster.get("partitions"), dict):
            if part not in cluster["partitions"]:
                problems.append((("defaults", "partition"), "unknown partition %r on default cluster %r; it has: %s"
                                 % (part, name, ", ".join(sorted(cluster["partitions"])))))
    else:
        known = set()
        for cluster in clusters.values():
            if isinstance(cluster, dict) and isinstance(cluster.get("partitions"), dict):
                known.update(cluster["partitions"])
            else:
                return problems  # a broken cluster: cannot tell
        if part not in known:
            problems.append((("defaults", "partition"), "no cluster has a partition %r; partitions are: %s"
                             % (part, ", ".join(sorted(known)))))
    return problems


# ---------------------------------------------------------------------------
# Health and fabric values

def check_drain_cap(value):
    """``"10%"`` or a whole number as text; the integer form is checked by its own spec."""
    try:
        parse_drain_cap(value)
    except ValueError as exc:
        return str(exc)
    return None


def check_health_skip(value):
    known = list(HEALTH_CHECK_NAMES) + list(HEALTH_CHECK_GROUPS)
    if value not in known:
        close = difflib.get_close_matches(value, known, n=1)
        return "unknown check %r%s; checks: %s; groups: %s" % (
            value, "; did you mean %r?" % close[0] if close else "", ", ".join(HEALTH_CHECK_NAMES),
            ", ".join(HEALTH_CHECK_GROUPS))
    return None


def check_ib_port(value):
    # "mlx5_0:1", or "mlx5_0" for port 1; the "=" of an NCCL_IB_HCA entry is allowed.
    if not re.fullmatch(r"=?[A-Za-z0-9_.-]+(:[0-9]+)?", value, re.ASCII):
        return "%r is not an HCA port; use NAME:PORT as in /sys/class/infiniband, e.g. \"mlx5_0:1\"" % value
    return None


# ---------------------------------------------------------------------------
# Container images (one grammar with --image and --mount: slurmkit.containers.grammar)

_IMAGE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*", re.ASCII)


def check_image_name(value):
    if not _IMAGE_NAME_RE.fullmatch(value):
        return ("%r is not a valid image name: use letters, digits, '.', '-' and '_' (starting with a letter or "
                "digit), e.g. pytorch-25.01" % value)
    return None


def check_image_location(value):
    from slurmkit.containers.grammar import image_problem

    return image_problem(value)


def check_container_mount(value):
    from slurmkit.containers.grammar import parse_mount

    try:
        parse_mount(value)
    except ValueError as exc:
        return str(exc)
    return None


def check_runtime_option(value):
    if not value.startswith("-") or value == "--":     # control characters: refused for every string
        return ("%r is not an option of the runtime's command: one word starting with '-' (such as --userns), "
                "not '--' and not a program or an image" % value)
    return None


def check_variable_name(value):
    from slurmkit import envnames

    if not envnames.NAME_RE.fullmatch(value):
        return "%r is not a valid environment variable name (letters, digits and '_', not starting with a digit)" % value
    return None


def check_containers(containers):
    """A runtime that starts images only from a path (oci, charliecloud) cannot be given a registry reference."""
    from slurmkit.containers.grammar import IMAGE_FORMS, PATH_ONLY, is_path

    problems = []
    runtime = containers.get("runtime")
    images = containers.get("images")
    if runtime in PATH_ONLY and isinstance(images, dict):
        for name, where in images.items():
            if isinstance(where, str) and where is not INVALID and not is_path(where):
                problems.append((("images", name), "runtime %s starts %s, named by its absolute path; %r is not one"
                                 % (runtime, IMAGE_FORMS[runtime], where)))
    return problems


def check_mount_path(value):
    if not value.startswith("/"):
        return "%r must be an absolute path (it is checked on the node, where no other directory is implied)" % value
    return None
