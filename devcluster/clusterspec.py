"""What the local clusters are: their specs (SPECS), where their state lives, the address layout
(an offset, and per cluster a Debian root of another Slurm release), and the small helpers every
part of devcluster uses.  See devcluster.py for the whole picture."""

import json
import os
from pathlib import Path


REPO = Path(__file__).resolve().parent.parent
STATE = Path(os.environ.get("DEVCLUSTER_STATE") or (REPO / ".devcluster")).resolve()
SSH_DIR = STATE / "ssh"
CLIENT_KEY = SSH_DIR / "id_ed25519"
KNOWN_HOSTS = SSH_DIR / "known_hosts"
SSH_CONFIG = SSH_DIR / "config"
CLUSTERS_JSON = STATE / "clusters.json"
# Where the clusters of this state directory run: an address block offset and,
# per cluster, a Debian root (another Slurm release) its daemons and commands
# run in.  Written by `up`, so that every later command on the same state
# directory (down, down-ctld from a test fixture ...) finds them without the
# environment that `up` had.
LAYOUT_JSON = STATE / "layout.json"
# A slurmkit site for the clusters of this state directory when some of them
# run another release (written by `up`): those are reached only through their
# login node, whose sshd and Slurm commands are the root's, never with this
# machine's own Slurm commands (a 22.05 client cannot talk to a 26.05 controller).
SITE_YAML = STATE / "site.yaml"
# Prices per GPU-hour in that site: all different, so that ranking by price is
# decided (alpha dearest; beta, on the other release, cheaper).
SITE_PRICES = {"alpha": 4.0, "beta": 3.0, "gamma": 1.5}
IN_ROOT = Path(__file__).resolve().parent / "in-root.sh"

SSHD = "/usr/sbin/sshd"
SLURMDBD_ENV = "/etc/devcluster/slurmdbd.env"
MARIADBD = "/usr/sbin/mariadbd"
DB_NAME = "slurm_acct_db"
DB_USER = "slurm"
# Hostname seen by jobs and login sessions; must resolve to 127.0.0.1 (see
# "Why UTS namespaces" in the docstring).
JOB_HOSTNAME = "localhost"
LOGIN_PORT = 2222
WAIT_IDLE_S = 60.0

# name -> description.  index k gives the 127.0.k.x addresses and 17kxx ports.
# partitions: (name, default, MaxTime, PriorityTier).
# max_switch_wait: Slurm's cap (s) on the wait a job's --switches=N@WAIT may ask
#   for (SchedulerParameters); None leaves Slurm's default of 300 s.
# oci: write an oci.conf (runc) beside slurm.conf: Slurm runs --container jobs in their bundle;
#   the other clusters have none, where Slurm runs such a job on the host.
# accounting: run slurmdbd on a private MariaDB for this cluster (sacct works);
#   the others keep accounting_storage/none, so both paths can be tested.
# preempt: (PreemptType, PreemptMode) for the whole cluster.
# max_array: (MaxArraySize, max_array_tasks) where a cluster keeps arrays small
#   (absent: Slurm's defaults, 1001 and MaxArraySize), so a sweep's split into
#   several arrays is tested against a real controller's refusal.
SPECS = {
    "alpha": {
        "index": 1, "prefix": "an", "count": 4,
        "gres": ("gpu", "h100", 8), "devname": "nvidia",
        "partitions": [("gpu", True, "24:00:00", 1), ("cpu", False, "INFINITE", 1)],
        "leaves": [("leaf1", [1, 2]), ("leaf2", [3, 4])], "spine": "spine",
        "max_switch_wait": 120, "accounting": True, "preempt": None,
    },
    "beta": {
        "index": 2, "prefix": "bn", "count": 3,
        "gres": ("gpu", "a100", 4), "devname": "nvidia",
        # urgent shares gpu's nodes at a higher tier: its jobs preempt gpu's.
        "partitions": [("gpu", True, "12:00:00", 1), ("urgent", False, "12:00:00", 2)],
        "leaves": [("leaf1", [1, 2]), ("leaf2", [3])], "spine": "spine",
        # CANCEL, not REQUEUE: the preempted job ends in state PREEMPTED (kept
        # by squeue/scontrol for MinJobAge, there being no slurmdbd here) and
        # stays ended.  With REQUEUE Slurm itself would put it back to PENDING
        # (JobState PENDING, Restarts=1), so a requeue daemon watching it would
        # never see the PREEMPTED end and must not restart it a second time.
        "max_switch_wait": 120, "accounting": False,
        "preempt": ("preempt/partition_prio", "CANCEL"),
        # Slurm's own OCI containers (srun --container=BUNDLE), run by runc as root through an
        # oci.conf beside slurm.conf: site_configs/local.yaml's containers.runtime oci for beta.
        "oci": True,
    },
    "gamma": {
        # Ascend-style accelerators: a generic gres (no gres plugin in Slurm).
        "index": 3, "prefix": "gn", "count": 2,
        "gres": ("npu", "ascend910b", 8), "devname": "davinci",
        "partitions": [("npu", True, "12:00:00", 1)],
        "leaves": [("leaf1", [1, 2])], "spine": None,
        "max_switch_wait": None, "accounting": False, "preempt": None,
        # Indices 0..49, at most 20 tasks per array: a 120-point sweep must
        # become several arrays here (sbatch refuses a larger one outright).
        "max_array": (50, 20),
        # slurmd runs `slurmkit health check --slurm` on each node every 5 s
        # (HealthCheckProgram); see render_health_site for what it checks.
        "health_check": True,
    },
}
# HealthCheckInterval on the clusters with spec["health_check"]: short, so a
# test sees slurmd drain and resume a node within seconds.
HEALTH_CHECK_INTERVAL = 5
NODE_CPUS = 4
NODE_MEM_MB = 4000


class DevClusterError(Exception):
    pass


def load_layout():
    """{"net_offset": N, "roots": {cluster: root}}: the environment's
    DEVCLUSTER_NET_OFFSET and DEVCLUSTER_ROOTS ("beta=/r/trixie,gamma=/r/sid")
    where set, else what `up` recorded in layout.json, else the host's Slurm
    on 127.0.k.x.

    The offset moves cluster k to 127.0.(k+N).x and its ports to those of
    index k+N, so that a second set of clusters (another Slurm release, a
    mixed-release federation) runs beside the default one."""
    try:
        saved = json.loads(LAYOUT_JSON.read_text())
    except (OSError, ValueError):
        saved = {}
    offset = os.environ.get("DEVCLUSTER_NET_OFFSET")
    try:
        offset = int(offset) if offset not in (None, "") else int(saved.get("net_offset", 0))
    except ValueError:
        raise DevClusterError("DEVCLUSTER_NET_OFFSET=%r is not a number" % offset)
    if not 0 <= offset <= 200:
        # 127.0.(k+N).x must stay a valid address and 17017+100*(k+N) a port.
        raise DevClusterError("DEVCLUSTER_NET_OFFSET=%d is outside 0..200" % offset)
    roots_env = os.environ.get("DEVCLUSTER_ROOTS")
    if roots_env is None:
        roots = dict(saved.get("roots") or {})
    else:
        roots = {}
        for item in roots_env.split(","):
            if not item.strip():
                continue
            name, eq, path = item.partition("=")
            if not eq or name.strip() not in SPECS:
                raise DevClusterError("DEVCLUSTER_ROOTS item %r: want CLUSTER=ROOT with CLUSTER one of %s"
                                      % (item, ", ".join(SPECS)))
            root = Path(path.strip()).resolve()
            if not (root / "bin" / "sh").exists():
                raise DevClusterError("DEVCLUSTER_ROOTS: %s is not a root file system" % root)
            roots[name.strip()] = str(root)
    return {"net_offset": offset, "roots": roots}


_LAYOUT = {}


def layout():
    if not _LAYOUT:
        _LAYOUT.update(load_layout())
    return _LAYOUT


def say(msg):
    print(msg, flush=True)


def hostlist(prefix, numbers):
    """an[1-2] / bn3 / an[1-4] for contiguous or listed numbers."""
    numbers = sorted(numbers)
    if len(numbers) == 1:
        return "%s%d" % (prefix, numbers[0])
    ranges, start, prev = [], numbers[0], numbers[0]
    for n in numbers[1:] + [None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        ranges.append(str(start) if start == prev else "%d-%d" % (start, prev))
        if n is not None:
            start = prev = n
    return "%s[%s]" % (prefix, ",".join(ranges))
