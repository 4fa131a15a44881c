#!/usr/bin/env python3
"""Throwaway local Slurm test clusters on loopback (real Slurm, munge, sshd).

Three independent clusters run side by side on this one machine, each with
its own munged (own key and socket), its own slurmctld, one slurmd per node
(``slurmd -N NAME``) and one OpenSSH "login node".  alpha also has real
accounting: its own slurmdbd on its own MariaDB server (``sacct`` works);
beta and gamma have none.  beta's ``urgent`` partition preempts its ``gpu``
partition (PreemptMode=CANCEL: the victim ends PREEMPTED).  alpha and beta cap
``--switches=N@WAIT`` at 120 s (SchedulerParameters=max_switch_wait=120);
gamma keeps Slurm's 300 s.  Every daemon binds to a 127.0.0.0/8 address only
(MariaDB to none: unix socket).  Nothing under /etc is read or written by the
daemons we start; all state lives below ``<repo>/.devcluster/``::

    .devcluster/
      clusters.json            what tests read: confs, nodes, ports, keys, logs
      .lock                    serialises concurrent devcluster.py commands
      ssh/id_ed25519[.pub]     client key (no passphrase), authorized on all
                               three login nodes as root
      ssh/known_hosts          "[127.0.k.2]:2222 ssh-ed25519 ..." x 3
      ssh/config               convenience: ssh -F .devcluster/ssh/config alpha
      <cluster>/
        etc/slurm.conf         SLURM_CONF for this cluster (+ gres.conf,
        etc/gres.conf          topology.conf next to it)
        etc/topology.conf
        etc/slurmdbd.conf      alpha: mode 0600 (holds the database password)
        dbd/slurmdbd.pid|log   alpha: slurmdbd
        mariadb/               alpha: data/ (mariadb-install-db on first
                               start), mariadbd.sock, mariadbd.pid|log,
                               slurm.pass (slurmdbd's database password)
        munge/                 munge.key, munge.socket, munged.pid/.log, seed
        ctld/state/            StateSaveLocation
        ctld/slurmctld.pid|log
        slurmd/<node>/         SlurmdSpoolDir (%n)
        slurmd/slurmd.<node>.pid|log
        dev/nvidia0..7         fake char devices (1:3, like /dev/null) for
                               gres.conf File= (gamma: davinci0..7)
        etc/healthcheck        gamma: slurmd's HealthCheckProgram (slurmkit health
        etc/slurmkit-health.yaml  check --slurm) and the site it checks against
        health/                gamma: scratch/<node> (must be writable: remove one
                               to fail that node's check), state/, last.<node>.log
        sshd/                  sshd_config, host key (+ .orig while rekeyed),
                               authorized_keys, sshd.pid, sshd.log
        out/                   stdout/stderr of daemon start commands

Address and port map, cluster index k (alpha=1, beta=2, gamma=3)::

    slurmctld      127.0.k.1:17k17
    slurmd node i  127.0.k.(10+i):17k(20+i)      (an1 = 127.0.1.11:17121)
    srun ports     17k50-17k99  (SrunPortRange)
    login sshd     127.0.k.2:2222, and 127.0.k.(10+i):2222 as node i (health sweep)
    slurmdbd       127.0.k.3:17k19               (alpha only: 127.0.1.3:17119)
    MariaDB        no TCP port (--skip-networking): .devcluster/alpha/mariadb/mariadbd.sock

Commands::

    up [CLUSTER...]     start whatever is not running (idempotent), resume
                        the DOWN/DRAIN nodes that are devcluster's own (reason
                        "Not responding", "Node unexpectedly rebooted", or one
                        starting "devcluster:"), wait until every node is idle.
                        Nodes drained or downed with any other reason (a
                        test's, an admin's, a "slurmkit:" health drain) are
                        reported and left alone.
    down [CLUSTER...]   cancel live jobs, stop exactly the recorded daemons
    env [CLUSTER]       print "export SLURM_CONF=..." (default alpha)
    status [CLUSTER...] daemons and node states; exit 1 if anything is down
    up-ctld / down-ctld CLUSTER        one slurmctld (failover tests)
    up-sshd / down-sshd CLUSTER        one login node
    rekey-sshd CLUSTER                 new host key, old one kept aside,
                                       known_hosts NOT updated
    restore-sshd-key CLUSTER           put the original host key back

Why UTS namespaces: Slurm's CommunicationParameters=NoInAddrAny (slurmd,
srun, ...) and NoCtldInAddrAny (slurmctld) do not bind to NodeAddr or to the
SlurmctldHost address: every program binds to what gethostname() resolves to
(slurm_setup_addr()).  Hence, without touching /etc/hosts:

* slurmctld runs in a private UTS namespace whose hostname is its address
  127.0.k.1 (and SlurmctldHost=127.0.k.1, so it knows it is the controller);
* each slurmd starts in a private UTS namespace named 127.0.k.(10+i), binds
  there, and as soon as it listens its namespace is renamed "localhost".
  Jobs inherit that namespace, and srun inside a job must listen on
  127.0.0.1: slurmstepd connects back to the *source* address of srun's
  launch request, which the kernel always picks as 127.0.0.1 for loopback
  destinations (else: "[7.0] error: connect io: Connection refused");
* login sshds run in a UTS namespace named "localhost" for the same reason;
* slurmdbd runs in one named 127.0.k.3: it refuses to run unless its
  hostname is DbdHost ("This host not configured to run SlurmDBD"), and
  binds to what that resolves to (CommunicationParameters=NoInAddrAny).
srun started directly on this machine binds to what the machine's hostname
resolves to; ``up`` warns when that is not 127.0.0.1.

A daemon counts as ours when its pid file names a live process whose
/proc/PID/comm is the expected program and whose command line contains our
config path (slurmdbd, which takes no config option: whose environment has
our SLURM_CONF); ``down`` only ever signals such processes.

Stdlib only; Python 3.9+.  Run as root (SlurmUser=root, sshd).
"""

import argparse
import fcntl
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
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


def save_layout():
    STATE.mkdir(parents=True, exist_ok=True)
    write_if_changed(LAYOUT_JSON, json.dumps(layout(), indent=2, sort_keys=True) + "\n")


def say(msg):
    print(msg, flush=True)


# --------------------------------------------------------------------------
# Cluster description
# --------------------------------------------------------------------------

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


class Cluster:
    def __init__(self, name):
        spec = SPECS[name]
        self.name = name
        self.spec = spec
        # k: the address block (127.0.k.x, ports 17kxx): the cluster's index,
        # moved by the layout's offset.
        self.index = spec["index"]
        k = spec["index"] + layout()["net_offset"]
        self.k = k
        # A Debian root whose Slurm this cluster runs (None: this machine's).
        root = layout()["roots"].get(name)
        self.root = Path(root) if root else None
        self.dir = STATE / name
        self.etc = self.dir / "etc"
        self.slurm_conf = self.etc / "slurm.conf"
        self.gres_conf = self.etc / "gres.conf"
        self.topology_conf = self.etc / "topology.conf"
        self.munge_dir = self.dir / "munge"
        self.munge_key = self.munge_dir / "munge.key"
        self.munge_socket = self.munge_dir / "munge.socket"
        self.ctld_dir = self.dir / "ctld"
        self.slurmd_dir = self.dir / "slurmd"
        self.dev_dir = self.dir / "dev"
        self.sshd_dir = self.dir / "sshd"
        self.out_dir = self.dir / "out"
        self.sshd_config = self.sshd_dir / "sshd_config"
        self.host_key = self.sshd_dir / "ssh_host_ed25519_key"
        self.host_key_orig = self.sshd_dir / "ssh_host_ed25519_key.orig"
        self.authorized_keys = self.sshd_dir / "authorized_keys"
        self.ctld_addr = "127.0.%d.1" % k
        self.ctld_port = 17017 + 100 * k
        self.login_host = "127.0.%d.2" % k
        self.login_port = LOGIN_PORT
        self.srun_ports = (17050 + 100 * k, 17099 + 100 * k)
        # Accounting (clusters with spec["accounting"]): slurmdbd on its own
        # address, MariaDB without any TCP listener (unix socket only).
        self.accounting = bool(spec["accounting"])
        self.dbd_addr = "127.0.%d.3" % k
        self.dbd_port = 17019 + 100 * k
        self.dbd_dir = self.dir / "dbd"
        self.slurmdbd_conf = self.etc / "slurmdbd.conf"  # slurmdbd looks next to SLURM_CONF
        self.mariadb_dir = self.dir / "mariadb"
        self.mariadb_data = self.mariadb_dir / "data"
        self.mariadb_socket = self.mariadb_dir / "mariadbd.sock"
        self.storage_pass_file = self.mariadb_dir / "slurm.pass"
        # Node health (clusters with spec["health_check"]): slurmd's
        # HealthCheckProgram, the site it checks against, per-node scratch
        # directories it requires (a test removes one to fail a node's check).
        self.health_check = bool(spec.get("health_check"))
        self.health_dir = self.dir / "health"
        self.health_program = self.etc / "healthcheck"
        self.health_site = self.etc / "slurmkit-health.yaml"
        self.health_scratch = self.health_dir / "scratch"
        self.numbers = list(range(1, spec["count"] + 1))
        self.nodes = ["%s%d" % (spec["prefix"], i) for i in self.numbers]
        self.nodelist = hostlist(spec["prefix"], self.numbers)
        self.gres_name, self.gres_type, self.gres_count = spec["gres"]
        self.gres = "%s:%s:%d" % spec["gres"]

    def node_addr(self, i):
        return "127.0.%d.%d" % (self.k, 10 + i)

    def wrap(self, argv):
        """argv as run for this cluster: inside its root (its Slurm, munge,
        sshd), with the repository at the same path, or as it is."""
        argv = [str(a) for a in argv]
        if self.root is None:
            return argv
        return [str(IN_ROOT), str(self.root), "--"] + argv

    def has_program(self, program):
        """Whether the program exists where this cluster runs its commands."""
        if self.root is None:
            return shutil.which(program) is not None if "/" not in program else os.path.exists(program)
        if "/" in program:
            return os.path.exists(str(self.root) + program)
        return any(os.access("%s%s/%s" % (self.root, d, program), os.X_OK)
                   for d in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"))

    def node_port(self, i):
        return 17020 + 100 * self.k + i

    def env(self):
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.slurm_conf)
        for var in ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_CLUSTERS"):
            env.pop(var, None)
        return env

    # ---- daemons ---------------------------------------------------------
    def munged(self):
        m = self.munge_dir
        return Daemon(self, "munged", "munged", [
            "munged", "--key-file=%s" % self.munge_key, "--socket=%s" % self.munge_socket,
            "--pid-file=%s" % (m / "munged.pid"), "--log-file=%s" % (m / "munged.log"),
            "--seed-file=%s" % (m / "munged.seed"), "-f",
        ], m / "munged.pid", str(self.munge_socket), m / "munged.log")

    def slurmctld(self):
        return Daemon(self, "slurmctld", "slurmctld",
                      ["slurmctld", "-f", str(self.slurm_conf), "-i"],
                      self.ctld_dir / "slurmctld.pid", str(self.slurm_conf),
                      self.ctld_dir / "slurmctld.log", uts_hostname=self.ctld_addr)

    def slurmd(self, node):
        return Daemon(self, "slurmd " + node, "slurmd",
                      ["slurmd", "-f", str(self.slurm_conf), "-N", node],
                      self.slurmd_dir / ("slurmd.%s.pid" % node), str(self.slurm_conf),
                      self.slurmd_dir / ("slurmd.%s.log" % node), node=node,
                      uts_hostname=self.node_addr(self.nodes.index(node) + 1))

    def sshd(self):
        return Daemon(self, "sshd", "sshd",
                      [SSHD, "-f", str(self.sshd_config), "-E", str(self.sshd_dir / "sshd.log")],
                      self.sshd_dir / "sshd.pid", str(self.sshd_config),
                      self.sshd_dir / "sshd.log", uts_hostname=JOB_HOSTNAME)

    def mariadbd(self):
        m = self.mariadb_dir
        return Daemon(self, "mariadbd", "mariadbd", [
            MARIADBD, "--no-defaults", "--user=root",
            "--datadir=%s" % self.mariadb_data, "--socket=%s" % self.mariadb_socket,
            "--pid-file=%s" % (m / "mariadbd.pid"), "--log-error=%s" % (m / "mariadbd.log"),
            # No TCP at all: slurmdbd, sacctmgr's set-up and anyone curious use the socket.
            "--skip-networking",
            # slurmdbd logs "Database settings not recommended values" below
            # half of its recommendations; InnoDB only touches the pages it
            # uses, so 2 GB costs the resident memory of the data (MBs here).
            "--innodb-buffer-pool-size=2048M", "--innodb-lock-wait-timeout=900",
            # MariaDB 11.6+ turns snapshot isolation on, which slurmdbd 24.11+
            # reports as unsupported (a write conflict would be fatal to it);
            # "loose-": older servers, which do not know it, ignore it.
            "--loose-innodb-snapshot-isolation=OFF",
        ], m / "mariadbd.pid", "--datadir=%s" % self.mariadb_data, m / "mariadbd.log",
            foreground=True)

    def slurmdbd(self):
        # slurmdbd has no option naming its config: it reads slurmdbd.conf next
        # to $SLURM_CONF, so that variable (in /proc/PID/environ) is its identity.
        # StorageHost=localhost makes the MySQL client library use a unix
        # socket, the one MYSQL_UNIX_PORT names.
        env = {"SLURM_CONF": str(self.slurm_conf), "MYSQL_UNIX_PORT": str(self.mariadb_socket)}
        env.update(self.slurmdbd_extra_env())
        return Daemon(self, "slurmdbd", "slurmdbd", ["slurmdbd"],
                      self.dbd_dir / "slurmdbd.pid", "SLURM_CONF=%s" % self.slurm_conf,
                      self.dbd_dir / "slurmdbd.log", uts_hostname=self.dbd_addr, env=env)

    def slurmdbd_extra_env(self):
        """KEY=VALUE lines of /etc/devcluster/slurmdbd.env where this cluster's
        Slurm is installed (a root made by scripts/releases/mkroot.sh writes one
        when the root's MariaDB client library cannot serve slurmdbd; see there)."""
        path = Path((str(self.root) if self.root else "") + SLURMDBD_ENV)
        try:
            lines = path.read_text().splitlines()
        except OSError:
            return {}
        env = {}
        for line in lines:
            key, eq, value = line.strip().partition("=")
            if eq and key and not key.startswith("#"):
                env[key] = value
        return env

    def accounting_daemons(self):
        return [self.mariadbd(), self.slurmdbd()] if self.accounting else []

    def daemons(self):
        return ([self.munged()] + self.accounting_daemons() + [self.slurmctld()]
                + [self.slurmd(n) for n in self.nodes] + [self.sshd()])

    # ---- config files ----------------------------------------------------
    def render_slurm_conf(self):
        s = self.spec
        lines = [
            "# Generated by devcluster/devcluster.py -- do not edit; rewritten by 'up'.",
            "ClusterName=%s" % self.name,
            # slurmctld runs with hostname == its address (see Daemon), so the
            # controller name is the numeric address itself.
            "SlurmctldHost=%s" % self.ctld_addr,
            "SlurmctldPort=%d" % self.ctld_port,
            "SlurmdPort=%d" % self.node_port(1),
            "SrunPortRange=%d-%d" % self.srun_ports,
            # NoInAddrAny covers slurmd/srun/...; slurmctld needs its own flag.
            "CommunicationParameters=NoInAddrAny,NoCtldInAddrAny",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            "AuthInfo=socket=%s" % self.munge_socket,
            "StateSaveLocation=%s" % (self.ctld_dir / "state"),
            "SlurmctldPidFile=%s" % (self.ctld_dir / "slurmctld.pid"),
            "SlurmctldLogFile=%s" % (self.ctld_dir / "slurmctld.log"),
            "SlurmdSpoolDir=%s/%%n" % self.slurmd_dir,
            "SlurmdPidFile=%s/slurmd.%%n.pid" % self.slurmd_dir,
            "SlurmdLogFile=%s/slurmd.%%n.log" % self.slurmd_dir,
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            # The machine has fewer CPUs/less memory than the nodes claim.
            "SlurmdParameters=config_overrides",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "DefMemPerCPU=%d" % (NODE_MEM_MB // NODE_CPUS),
            "TopologyPlugin=topology/tree",
            "GresTypes=%s" % self.gres_name,
            "MpiDefault=none",
            "PropagateResourceLimits=NONE",
            "ReturnToService=2",
            # Keep finished jobs visible to squeue/scontrol for an hour: the
            # only record of them on clusters without slurmdbd, and the same
            # view on all three.
            "MinJobAge=3600",
            # Every task of an array counts against MaxJobCount until MinJobAge after it ended,
            # started or not: one run of make bench adds 15,000 (10,000 is Slurm's default).
            "MaxJobCount=50000",
            # Job ids far apart per cluster: the three clusters share one machine, and jobs of
            # different clusters with the same id (as on fresh clusters) would derive the same
            # rendezvous port (site rendezvous.ports) and collide on it.  Real clusters have
            # machines of their own.
            "FirstJobId=%d" % (1 + (self.index - 1) * 3000),
        ]
        if self.accounting:
            lines += [
                "AccountingStorageType=accounting_storage/slurmdbd",
                "AccountingStorageHost=%s" % self.dbd_addr,
                "AccountingStoragePort=%d" % self.dbd_port,
                # The munge socket for talking to slurmdbd (AuthInfo does not
                # apply to that connection; without this: /run/munge's default).
                "AccountingStoragePass=%s" % self.munge_socket,
                # Per-job CPU/memory samples from /proc (works in our UTS
                # namespaces; linuxproc tracks the processes).
                "JobAcctGatherType=jobacct_gather/linux",
                # Keep each job's --comment in the database: the requeue daemon finds an
                # attempt by its token there once squeue has forgotten the job.
                "AccountingStoreFlags=job_comment",
            ]
        else:
            lines += [
                "AccountingStorageType=accounting_storage/none",
                "JobAcctGatherType=jobacct_gather/none",
            ]
        if s["preempt"]:
            lines += ["PreemptType=%s" % s["preempt"][0], "PreemptMode=%s" % s["preempt"][1]]
        if self.health_check:
            lines += [
                "HealthCheckProgram=%s" % self.health_program,
                "HealthCheckInterval=%d" % HEALTH_CHECK_INTERVAL,
                # Idle, allocated and drained nodes alike: a drained node must
                # keep being checked to be resumed.
                "HealthCheckNodeState=ANY",
            ]
        sched = ["bf_interval=5"]
        if s["max_switch_wait"] is not None:
            # A job asking for --switches=N@WAIT longer than this gets WAIT
            # cut to it (scontrol show job: Switches=N@00:02:00).
            sched.append("max_switch_wait=%d" % s["max_switch_wait"])
        if s.get("max_array"):
            lines.append("MaxArraySize=%d" % s["max_array"][0])
            sched.append("max_array_tasks=%d" % s["max_array"][1])
        lines += [
            "JobCompType=jobcomp/none",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=%s" % ",".join(sched),
            "SlurmctldTimeout=30",
            "SlurmdTimeout=30",
            "MessageTimeout=10",
            "InactiveLimit=0",
            "KillWait=5",
            "Waittime=0",
            "MailProg=/bin/true",
            "",
        ]
        for i, node in zip(self.numbers, self.nodes):
            lines.append(
                "NodeName=%s NodeAddr=%s NodeHostname=%s Port=%d CPUs=%d "
                "RealMemory=%d Gres=%s State=UNKNOWN"
                % (node, self.node_addr(i), self.node_addr(i), self.node_port(i), NODE_CPUS,
                   NODE_MEM_MB, self.gres))
        lines.append("")
        for part, default, maxtime, tier in s["partitions"]:
            lines.append("PartitionName=%s Nodes=%s Default=%s MaxTime=%s PriorityTier=%d State=UP"
                         % (part, self.nodelist, "YES" if default else "NO", maxtime, tier))
        return "\n".join(lines) + "\n"

    def render_slurmdbd_conf(self, storage_pass):
        """slurmdbd.conf (mode 0600: slurmdbd refuses a readable one; it holds
        the database password)."""
        return "\n".join([
            "# Generated by devcluster/devcluster.py -- do not edit; rewritten by 'up'.",
            "AuthType=auth/munge",
            "AuthInfo=socket=%s" % self.munge_socket,
            # slurmdbd insists on running where DbdHost names: it runs in a UTS
            # namespace whose hostname is its address, as slurmctld does.
            "DbdHost=%s" % self.dbd_addr,
            "DbdAddr=%s" % self.dbd_addr,
            "DbdPort=%d" % self.dbd_port,
            # Bind to what the hostname resolves to (127.0.k.3), not INADDR_ANY.
            "CommunicationParameters=NoInAddrAny",
            "SlurmUser=root",
            "DebugLevel=info",
            "LogFile=%s" % (self.dbd_dir / "slurmdbd.log"),
            "PidFile=%s" % (self.dbd_dir / "slurmdbd.pid"),
            "StorageType=accounting_storage/mysql",
            # localhost = the unix socket named by MYSQL_UNIX_PORT (see slurmdbd()).
            "StorageHost=localhost",
            "StorageUser=%s" % DB_USER,
            "StoragePass=%s" % storage_pass,
            "StorageLoc=%s" % DB_NAME,
            "",
        ])

    def render_health_program(self):
        """slurmd's HealthCheckProgram: the repository's own slurmkit, as the node slurmd serves.

        slurmd runs it without arguments, with SLURMD_NODENAME set, and kills
        it after 60 s; slurmkit's own watchdog (check_timeout) ends it first.
        Its output of the last run per node goes to health/last.<node>.log."""
        python = REPO / ".venv" / "bin" / "python"
        return "\n".join([
            "#!/bin/sh",
            "# Generated by devcluster.py: HealthCheckProgram of cluster %s." % self.name,
            "PY=%s" % shlex.quote(str(python)),
            '[ -x "$PY" ] || exit 0   # no .venv yet (make venv): nothing to check with',
            'exec "$PY" -m slurmkit health check --slurm --site %s --cluster %s >%s/last."$SLURMD_NODENAME".log 2>&1'
            % (shlex.quote(str(self.health_site)), self.name, shlex.quote(str(self.health_dir))),
            ""])

    def render_health_site(self):
        """The site the health check reads: this cluster only, with checks whose outcome
        this shared machine does not change by itself (load and D state do, so they are
        skipped), the fake NPU devices, and one scratch directory per node that must be
        writable: a test removes a node's to fail its check, and puts it back."""
        s = self.spec
        part = [p for p, default, _, _ in s["partitions"] if default][0]
        return "\n".join([
            "# Generated by devcluster.py: the site %s's HealthCheckProgram checks against." % self.name,
            "site: devcluster-%s-health" % self.name,
            "health:",
            "  resume_after: 2",
            "  drain_cap: 1",
            "  check_timeout: 20",
            "  state_dir: %s" % json.dumps(str(self.health_dir / "state")),
            "clusters:",
            "  %s:" % self.name,
            "    slurm_conf: %s" % json.dumps(str(self.slurm_conf)),
            "    partitions:",
            "      %s:" % part,
            "        accelerator: %s" % ("ascend" if self.gres_name == "npu" else "nvidia"),
            "        gpu_model: %s" % self.gres_type,
            "        gres_name: %s" % self.gres_name,
            "        gpus_per_node: %d" % self.gres_count,
            "        cpus_per_node: %d" % NODE_CPUS,
            "        memory_mb: %d" % NODE_MEM_MB,
            "        health:",
            "          device_dir: %s" % json.dumps(str(self.dev_dir)),
            "          skip: [load, dstate]",
            "          mounts:",
            "            - {path: %s, writable: true}" % json.dumps(str(self.health_scratch / "%n")),
            ""])

    def render_gres_conf(self):
        dev = "%s/%s[0-%d]" % (self.dev_dir, self.spec["devname"], self.gres_count - 1)
        return ("# Generated by devcluster.py\nNodeName=%s Name=%s Type=%s File=%s\n"
                % (self.nodelist, self.gres_name, self.gres_type, dev))

    def render_topology_conf(self):
        lines = ["# Generated by devcluster.py"]
        for leaf, nums in self.spec["leaves"]:
            lines.append("SwitchName=%s Nodes=%s" % (leaf, hostlist(self.spec["prefix"], nums)))
        if self.spec["spine"]:
            lines.append("SwitchName=%s Switches=%s" % (
                self.spec["spine"], ",".join(leaf for leaf, _ in self.spec["leaves"])))
        return "\n".join(lines) + "\n"

    def render_sshd_config(self):
        extra = []
        if sshd_knows_option("PerSourcePenalties=no", self):
            # OpenSSH 9.8+ penalises a source address for connections closed
            # before login and for failed authentications (the wrong-key tests
            # do both on purpose) until it refuses new ones: every client here
            # is 127.0.0.1, so one test's penalties would fail the next ones.
            extra.append("PerSourcePenalties no")
        return "\n".join([
            "# Generated by devcluster.py: login node of cluster %s" % self.name,
            "ListenAddress %s:%d" % (self.login_host, self.login_port),
        ] + [
            # Each node is reachable at its own address (slurmd's NodeAddr) for
            # `slurmkit health sweep`; the same sshd serves them all.
            "ListenAddress %s:%d" % (self.node_addr(i), self.login_port) for i in self.numbers
        ] + [
            "AddressFamily inet",
            "HostKey %s" % self.host_key,
            "PidFile %s" % (self.sshd_dir / "sshd.pid"),
            "UsePAM no",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            "AuthorizedKeysFile %s" % self.authorized_keys,
            "AllowAgentForwarding no",
            "AllowTcpForwarding yes",
            "X11Forwarding no",
            "StrictModes no",
            "UseDNS no",
            "PrintMotd no",
            "MaxStartups 100:30:200",
            "MaxSessions 100",
            "LogLevel VERBOSE",
            # A login node's own HOME: the machine's root dotfiles (which may run
            # pyenv or conda hooks in every `bash -c`) must not tax each remote command.
            "SetEnv SLURM_CONF=%s HOME=%s" % (self.slurm_conf, self.sshd_dir / "home"),
            "Subsystem sftp internal-sftp",
        ] + extra + [""])

    def describe(self):
        d = {
            "name": self.name,
            "index": self.index,
            # the address block 127.0.<net>.x (index + DEVCLUSTER_NET_OFFSET)
            "net": self.k,
            # the Debian root whose Slurm this cluster runs (null: this machine's)
            "root": str(self.root) if self.root else None,
            "slurm_version": slurm_version(self),
            "slurm_conf": str(self.slurm_conf),
            "gres_conf": str(self.gres_conf),
            "topology_conf": str(self.topology_conf),
            "state_dir": str(self.dir),
            "munge_socket": str(self.munge_socket),
            "ctld": {"addr": self.ctld_addr, "port": self.ctld_port,
                     "pid_file": str(self.ctld_dir / "slurmctld.pid"),
                     "log": str(self.ctld_dir / "slurmctld.log"),
                     "pid": self.slurmctld().pid()},
            "srun_port_range": list(self.srun_ports),
            "nodelist": self.nodelist,
            "node_names": list(self.nodes),
            "nodes": {},
            "gres": {"name": self.gres_name, "type": self.gres_type, "count": self.gres_count,
                     "spec": self.gres, "device_dir": str(self.dev_dir)},
            "cpus_per_node": NODE_CPUS,
            "memory_mb_per_node": NODE_MEM_MB,
            "partitions": [{"name": p, "default": dflt, "max_time": mt, "priority_tier": tier}
                           for p, dflt, mt, tier in self.spec["partitions"]],
            "default_partition": [p for p, dflt, _, _ in self.spec["partitions"] if dflt][0],
            "max_switch_wait_s": self.spec["max_switch_wait"],
            "preempt": ({"type": self.spec["preempt"][0], "mode": self.spec["preempt"][1]}
                        if self.spec["preempt"] else None),
            "accounting": self.describe_accounting(),
            "health_check": ({"program": str(self.health_program), "site": str(self.health_site),
                              "interval_s": HEALTH_CHECK_INTERVAL, "scratch": str(self.health_scratch),
                              "state_dir": str(self.health_dir / "state"), "log_dir": str(self.health_dir)}
                             if self.health_check else None),
            "topology": {"leaves": {leaf: hostlist(self.spec["prefix"], nums)
                                    for leaf, nums in self.spec["leaves"]},
                         "spine": self.spec["spine"]},
            "login": {"host": self.login_host, "port": self.login_port, "user": "root",
                      "sshd_config": str(self.sshd_config),
                      "host_key": str(self.host_key),
                      "host_key_pub": str(self.host_key) + ".pub",
                      "sshd_pid_file": str(self.sshd_dir / "sshd.pid"),
                      "sshd_log": str(self.sshd_dir / "sshd.log"),
                      "sshd_pid": self.sshd().pid()},
        }
        for i, node in zip(self.numbers, self.nodes):
            d["nodes"][node] = {"addr": self.node_addr(i), "port": self.node_port(i),
                                "ssh": {"host": self.node_addr(i), "port": self.login_port},
                                "log": str(self.slurmd_dir / ("slurmd.%s.log" % node)),
                                "pid_file": str(self.slurmd_dir / ("slurmd.%s.pid" % node))}
        return d

    def describe_accounting(self):
        if not self.accounting:
            return None
        dbd, db = self.slurmdbd(), self.mariadbd()
        return {
            "storage": "slurmdbd",
            "slurmdbd": {"addr": self.dbd_addr, "port": self.dbd_port, "conf": str(self.slurmdbd_conf),
                         "pid_file": str(dbd.pidfile), "log": str(dbd.log), "pid": dbd.pid()},
            "mariadb": {"socket": str(self.mariadb_socket), "datadir": str(self.mariadb_data),
                        "database": DB_NAME, "pid_file": str(db.pidfile), "log": str(db.log),
                        "pid": db.pid()},
        }


# --------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------

def read_pid(pidfile):
    try:
        return int(Path(pidfile).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def proc_comm(pid):
    try:
        return Path("/proc/%d/comm" % pid).read_text().strip()
    except OSError:
        return None


def proc_cmdline(pid):
    try:
        return Path("/proc/%d/cmdline" % pid).read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def proc_environ(pid):
    try:
        return Path("/proc/%d/environ" % pid).read_bytes().split(b"\0")
    except OSError:
        return []


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is not alive for our purposes.
    try:
        fields = Path("/proc/%d/stat" % pid).read_text()
        return fields.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def tail(path, n=25):
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return "(no %s)" % path
    return "\n".join("    " + line for line in lines[-n:])


class Daemon:
    """One daemon process: how to start it and how to recognise it.

    ident is a string its command line contains (our config path), or, for a
    daemon started with env, one NAME=VALUE entry of its environment.
    foreground: the program does not fork into the background itself (it is
    detached here, and writes its pid file itself)."""

    def __init__(self, cluster, label, comm, argv, pidfile, ident, log, node=None, uts_hostname=None,
                 env=None, foreground=False):
        self.cluster = cluster
        self.label = label
        self.comm = comm
        self.argv = argv
        if uts_hostname:
            # Run in a private UTS namespace with this hostname (see the module
            # docstring, "Why UTS namespaces").
            self.argv = ["unshare", "--uts", "--", "sh", "-c",
                         'echo "$0" > /proc/sys/kernel/hostname && exec "$@"',
                         uts_hostname] + list(argv)
        # A cluster of another release: the daemon is that root's program.
        self.argv = cluster.wrap(self.argv)
        self.pidfile = Path(pidfile)
        self.ident = ident
        self.log = Path(log)
        self.node = node
        self.env = env or {}
        self.foreground = foreground
        self.out = cluster.out_dir / ("%s.out" % label.replace(" ", "."))

    def is_ours(self, pid):
        """pid is a live process of our program started with our config."""
        if not pid or not pid_alive(pid):
            return False
        comm = proc_comm(pid)
        if comm is None or comm != self.comm[:15]:
            return False
        cmd = proc_cmdline(pid)
        if self.env:
            if self.ident.encode() not in proc_environ(pid):
                return False
        elif self.ident not in cmd:
            return False
        if self.node and ("-N %s" % self.node) not in cmd:
            return False
        return True

    def pid(self):
        pid = read_pid(self.pidfile)
        return pid if self.is_ours(pid) else None

    def start(self, timeout=20.0):
        pid = self.pid()
        if pid:
            return pid, False
        if self.pidfile.exists():
            self.pidfile.unlink()
        self.out.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.pop("SLURM_CONF", None)
        env.update(self.env)
        if self.foreground:
            return self._start_foreground(env, timeout)
        with open(self.out, "w") as out:
            try:
                proc = subprocess.run(self.argv, stdin=subprocess.DEVNULL, stdout=out,
                                      stderr=subprocess.STDOUT, env=env, timeout=timeout,
                                      start_new_session=True)
            except subprocess.TimeoutExpired:
                raise DevClusterError("%s: %s did not daemonize within %ds\n%s"
                                      % (self.cluster.name, self.label, timeout, tail(self.out)))
        if proc.returncode != 0:
            raise DevClusterError("%s: %s exited %d: %s\n%s\n  log %s:\n%s" % (
                self.cluster.name, self.label, proc.returncode, " ".join(self.argv),
                tail(self.out), self.log, tail(self.log)))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid = self.pid()
            if pid:
                return pid, True
            time.sleep(0.1)
        raise DevClusterError("%s: %s started but no live process in %s after %ds\n%s\n  log %s:\n%s"
                              % (self.cluster.name, self.label, self.pidfile, timeout,
                                 tail(self.out), self.log, tail(self.log)))

    def _start_foreground(self, env, timeout):
        with open(self.out, "w") as out:
            # Its own session: it outlives this command and no terminal signal reaches it.
            proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid = self.pid()
            if pid:
                return pid, True
            if proc.poll() is not None:
                raise DevClusterError("%s: %s exited %d: %s\n%s\n  log %s:\n%s" % (
                    self.cluster.name, self.label, proc.returncode, " ".join(self.argv),
                    tail(self.out), self.log, tail(self.log)))
            time.sleep(0.1)
        raise DevClusterError("%s: %s (pid %d) wrote no pid file %s after %ds\n  log %s:\n%s"
                              % (self.cluster.name, self.label, proc.pid, self.pidfile, timeout,
                                 self.log, tail(self.log)))

    def stop(self, timeout=20.0):
        """Stop the recorded process if it is ours; returns its pid or None."""
        raw = read_pid(self.pidfile)
        pid = raw if self.is_ours(raw) else None
        if pid is None:
            if raw and pid_alive(raw):
                say("  %s: %s: pid file %s names pid %d (%s), not ours -- left alone"
                    % (self.cluster.name, self.label, self.pidfile, raw, proc_comm(raw)))
            if self.pidfile.exists():
                self.pidfile.unlink()
            return None
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.is_ours(pid):
            time.sleep(0.1)
        if self.is_ours(pid):
            say("  %s: %s (pid %d) ignored SIGTERM for %ds, sending SIGKILL"
                % (self.cluster.name, self.label, pid, timeout))
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and self.is_ours(pid):
                time.sleep(0.1)
            if self.is_ours(pid):
                raise DevClusterError("%s: %s (pid %d) survived SIGKILL" % (self.cluster.name, self.label, pid))
        if self.pidfile.exists() and read_pid(self.pidfile) == pid:
            self.pidfile.unlink()
        return pid


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------

def run(argv, env=None, check=True, timeout=60):
    proc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise DevClusterError("%s failed (%d): %s%s" % (" ".join(map(str, argv)), proc.returncode,
                                                       proc.stdout, proc.stderr))
    return proc


def write_if_changed(path, text, mode=0o644):
    path = Path(path)
    try:
        if path.read_text() == text:
            return False
    except OSError:
        pass
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
    return True


ACCOUNTING_PROGRAMS = ("slurmdbd", "sacctmgr", "sacct", "mariadb-install-db", "mariadb")


def need_programs(clusters=()):
    """This machine's own tools (keys, namespaces), then what each cluster
    runs, where it runs it (in its root, for a cluster of another release)."""
    missing = [p for p in ("unshare", "nsenter", "ssh-keygen", "ssh") if shutil.which(p) is None]
    wanted = ["unshare", "slurmctld", "slurmd", "munged", "munge", "unmunge", "mungekey", "scontrol",
              "sinfo", SSHD]
    for c in list(clusters) or [None]:
        progs = wanted + (list(ACCOUNTING_PROGRAMS) + [MARIADBD] if c is not None and c.accounting else [])
        for prog in progs:
            if c is not None and c.root is not None:
                if not c.has_program(prog):
                    missing.append("%s (in %s)" % (prog, c.root))
            elif not (os.path.exists(prog) if "/" in prog else shutil.which(prog)):
                missing.append(prog)
    missing = list(dict.fromkeys(missing))
    if missing:
        raise DevClusterError("missing programs: %s (run: make install-system; for a root: "
                              "scripts/releases/mkroot.sh)" % " ".join(missing))
    if os.geteuid() != 0:
        raise DevClusterError("devcluster must run as root (SlurmUser=root, sshd on loopback)")


def check_path_lengths(cluster):
    # Unix socket paths are limited to 107 bytes (munge socket, slurmstepd sockets).
    longest = len(str(cluster.slurmd_dir / cluster.nodes[0] / (cluster.nodes[0] + "_4294967294.4294967294")))
    if longest > 107 or len(str(cluster.munge_socket)) > 100:
        raise DevClusterError("state dir %s is too deep for unix socket paths; set DEVCLUSTER_STATE "
                              "to a shorter directory" % STATE)


_SSHD_OPTIONS = {}


def sshd_knows_option(option, cluster=None):
    """Whether the sshd (of cluster's root, if it has one) accepts OPTION
    ("Name=value"): sshd refuses to start on an option it does not know
    (PerSourcePenalties is new in OpenSSH 9.8; Debian 12 has 9.2, whose sshd
    has no -G either, which also answers no)."""
    root = cluster.root if cluster is not None else None
    key = (str(root), option)
    if key not in _SSHD_OPTIONS:
        argv = [SSHD, "-G", "-f", "/dev/null", "-o", option]
        try:
            p = run(cluster.wrap(argv) if cluster is not None else argv, check=False, timeout=15)
            _SSHD_OPTIONS[key] = p.returncode == 0
        except OSError:
            _SSHD_OPTIONS[key] = False
    return _SSHD_OPTIONS[key]


def ssh_keygen(path, comment):
    path = Path(path)
    if path.exists() and Path(str(path) + ".pub").exists():
        return False
    for p in (path, Path(str(path) + ".pub")):
        if p.exists():
            p.unlink()
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])
    return True


def pubkey(path):
    return Path(str(path) + ".pub").read_text().split()[:2]


# --------------------------------------------------------------------------
# Preparing files
# --------------------------------------------------------------------------

def prepare_common():
    STATE.mkdir(parents=True, exist_ok=True)
    SSH_DIR.mkdir(mode=0o700, exist_ok=True)
    if ssh_keygen(CLIENT_KEY, "devcluster-client"):
        say("ssh: generated client key %s" % CLIENT_KEY)
    Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)  # privilege separation dir


def prepare_cluster(c):
    """Create directories, keys and config files.

    Returns (slurm configs changed, sshd must be restarted, slurmdbd.conf changed)."""
    check_path_lengths(c)
    for d in (c.etc, c.ctld_dir / "state", c.slurmd_dir, c.dev_dir, c.out_dir):
        d.mkdir(parents=True, exist_ok=True)
    for n in c.nodes:
        (c.slurmd_dir / n).mkdir(exist_ok=True)
    c.munge_dir.mkdir(mode=0o700, exist_ok=True)
    os.chmod(c.munge_dir, 0o700)
    c.sshd_dir.mkdir(mode=0o700, exist_ok=True)
    (c.sshd_dir / "home").mkdir(mode=0o700, exist_ok=True)
    for i in range(c.gres_count):
        make_fake_device(c.dev_dir / ("%s%d" % (c.spec["devname"], i)))
    if not c.munge_key.exists():
        run(c.wrap(["mungekey", "-c", "-k", str(c.munge_key)]))
        os.chmod(c.munge_key, 0o600)
        say("%s: generated munge key" % c.name)
    changed = False
    if c.health_check:
        for n in c.nodes:
            (c.health_scratch / n).mkdir(parents=True, exist_ok=True)
        write_if_changed(c.health_site, c.render_health_site())
        # Written before slurm.conf names it: slurmd checks the program exists.
        write_if_changed(c.health_program, c.render_health_program(), 0o755)
    changed |= write_if_changed(c.slurm_conf, c.render_slurm_conf())
    changed |= write_if_changed(c.gres_conf, c.render_gres_conf())
    changed |= write_if_changed(c.topology_conf, c.render_topology_conf())
    # Login node.  A host key left aside by rekey-sshd is put back (and the
    # sshd restarted by the caller), so known_hosts matches again.
    restored = False
    if c.host_key_orig.exists():
        restore_key_files(c)
        restored = True
    if ssh_keygen(c.host_key, "devcluster-%s-login" % c.name):
        say("%s: generated login host key" % c.name)
    write_if_changed(c.authorized_keys, Path(str(CLIENT_KEY) + ".pub").read_text(), 0o600)
    sshd_changed = write_if_changed(c.sshd_config, c.render_sshd_config(), 0o600)
    dbd_changed = prepare_accounting(c) if c.accounting else False
    return changed, sshd_changed or restored, dbd_changed


def prepare_accounting(c):
    """Directories, the database password and slurmdbd.conf; True if that changed."""
    c.dbd_dir.mkdir(exist_ok=True)
    c.mariadb_dir.mkdir(mode=0o700, exist_ok=True)
    os.chmod(c.mariadb_dir, 0o700)
    if not c.storage_pass_file.exists():
        write_if_changed(c.storage_pass_file, secrets.token_hex(16) + "\n", 0o600)
    storage_pass = c.storage_pass_file.read_text().strip()
    changed = write_if_changed(c.slurmdbd_conf, c.render_slurmdbd_conf(storage_pass), 0o600)
    os.chmod(c.slurmdbd_conf, 0o600)  # slurmdbd refuses to start on anything wider
    return changed


def make_fake_device(path):
    """A character device aliasing /dev/null (1:3): slurmd rejects gres.conf
    File= entries that are not char/block devices ("... is not a valid
    character or block device, fix your gres.conf") and then sets no
    CUDA_VISIBLE_DEVICES."""
    try:
        st = os.lstat(str(path))
        if stat.S_ISCHR(st.st_mode):
            return
        os.unlink(str(path))
    except FileNotFoundError:
        pass
    try:
        os.mknod(str(path), stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except OSError as e:
        say("warning: mknod %s failed (%s); using a plain file" % (path, e))
        Path(path).touch()


def restore_key_files(c):
    for suffix in ("", ".pub"):
        os.replace(str(c.host_key_orig) + suffix, str(c.host_key) + suffix)
    say("%s: restored original login host key" % c.name)


def write_known_hosts(clusters):
    lines = []
    for c in clusters:
        if not Path(str(c.host_key) + ".pub").exists() and not c.host_key_orig.exists():
            continue  # never brought up
        kt, key = pubkey(c.host_key_orig if c.host_key_orig.exists() else c.host_key)
        lines.append("[%s]:%d %s %s" % (c.login_host, c.login_port, kt, key))
        # The nodes' addresses reach the same sshd (health sweep): same key.
        lines += ["[%s]:%d %s %s" % (c.node_addr(i), c.login_port, kt, key) for i in c.numbers]
    write_if_changed(KNOWN_HOSTS, "\n".join(lines) + "\n", 0o600)
    cfg = ["# ssh -F %s alpha   (generated by devcluster.py)" % SSH_CONFIG]
    for c in clusters:
        cfg += ["Host %s %s-login" % (c.name, c.name),
                "    HostName %s" % c.login_host,
                "    Port %d" % c.login_port,
                "    User root",
                "    IdentityFile %s" % CLIENT_KEY,
                "    IdentitiesOnly yes",
                "    UserKnownHostsFile %s" % KNOWN_HOSTS,
                "    StrictHostKeyChecking yes",
                "    BatchMode yes", ""]
    write_if_changed(SSH_CONFIG, "\n".join(cfg), 0o600)


def render_site(clusters):
    """The slurmkit site of these clusters, as JSON (which YAML reads as it is)."""
    site = {
        "site": "devcluster-releases",
        "description": "devcluster clusters of several Slurm releases (%s); generated by devcluster.py"
                       % ", ".join("%s %s" % (c.name, slurm_version(c) or "?") for c in clusters),
        "defaults": {"cluster": clusters[0].name, "time": "00:10:00", "template": "single"},
        "topology": {"max_switch_wait": "00:02:00"},
        "clusters": {},
    }
    for c in clusters:
        parts = {}
        for name, _, maxtime, _ in c.spec["partitions"]:
            part = {"cpus_per_node": NODE_CPUS, "memory_mb": NODE_MEM_MB, "max_nodes": len(c.nodes),
                    "max_time": maxtime, "fabric": {"type": "ethernet", "socket_ifname": "lo"}}
            if name == "cpu":
                # alpha's CPU partition, as in site_configs/local.yaml: its jobs ask for no GPU.
                part["accelerator"] = "none"
            else:
                part.update(accelerator="ascend" if c.gres_name == "npu" else "nvidia",
                            gpu_model=c.gres_type, gpus_per_node=c.gres_count)
                if c.gres_name != "gpu":
                    part["gres_name"] = c.gres_name
            parts[name] = part
        entry = {"login": {"host": c.login_host, "port": c.login_port, "user": "root",
                           "identity_file": str(CLIENT_KEY), "known_hosts": str(KNOWN_HOSTS)},
                 "default_partition": [p for p, dflt, _, _ in c.spec["partitions"] if dflt][0],
                 "price_per_gpu_hour": SITE_PRICES.get(c.name, 1.0),
                 "partitions": parts}
        if c.spec["max_switch_wait"] is None:
            entry["max_switch_wait"] = "00:05:00"    # Slurm's own cap, which gamma keeps
        if c.root is None:
            entry["slurm_conf"] = str(c.slurm_conf)
        site["clusters"][c.name] = entry
    return json.dumps(site, indent=2) + "\n"


def write_clusters_json():
    all_clusters = [Cluster(n) for n in SPECS]
    data = {
        "version": 1,
        "repo": str(REPO),
        "state_dir": str(STATE),
        "script": str(Path(__file__).resolve()),
        "ssh": {"identity": str(CLIENT_KEY), "public_key": str(CLIENT_KEY) + ".pub",
                "known_hosts": str(KNOWN_HOSTS), "config": str(SSH_CONFIG), "user": "root"},
        "default_cluster": "alpha",
        "clusters": {c.name: c.describe() for c in all_clusters},
    }
    write_if_changed(CLUSTERS_JSON, json.dumps(data, indent=2, sort_keys=True) + "\n")


# --------------------------------------------------------------------------
# Slurm queries
# --------------------------------------------------------------------------

_VERSIONS = {}


def slurm_version(c):
    """The Slurm release of the cluster's commands ("24.11.5"), or None before
    its slurm.conf exists (Slurm's commands read it before --version)."""
    key = str(c.root)
    if key not in _VERSIONS:
        if not c.slurm_conf.exists():
            return None
        try:
            p = run(c.wrap(["sinfo", "--version"]), env=c.env(), check=False, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        words = p.stdout.split()
        if p.returncode != 0 or len(words) < 2:
            return None
        _VERSIONS[key] = words[1]
    return _VERSIONS[key]


def ctld_up(c):
    try:
        p = run(c.wrap(["scontrol", "ping"]), env=c.env(), check=False, timeout=15)
    except subprocess.TimeoutExpired:
        return False
    return p.returncode == 0 and "is UP" in p.stdout


def wait_ctld(c, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ctld_up(c):
            return
        if not c.slurmctld().pid():
            break
        time.sleep(0.3)
    raise DevClusterError("%s: slurmctld not answering on %s:%d\n  %s:\n%s" % (
        c.name, c.ctld_addr, c.ctld_port, c.ctld_dir / "slurmctld.log", tail(c.ctld_dir / "slurmctld.log")))


def node_conditions(c):
    """{node: (state, reason)}: sinfo's long state (idle, down*, drained,
    mixed, ...) and the node's reason ("" when it has none)."""
    p = run(c.wrap(["sinfo", "-h", "-N", "-o", "%N %T %E"]), env=c.env(), check=False, timeout=15)
    conds = {}
    if p.returncode != 0:
        return conds
    # A node in two partitions is listed twice, identically.
    for line in p.stdout.splitlines():
        parts = line.split(None, 2)
        if len(parts) >= 2:
            reason = parts[2].strip() if len(parts) == 3 else ""
            conds[parts[0]] = (parts[1].lower(), "" if reason == "none" else reason)
    return conds


def node_states(c):
    """{node: state} as sinfo's long state (idle, down*, drained, mixed, ...)."""
    return {n: st for n, (st, _) in node_conditions(c).items()}


READY_STATES = ("idle", "mixed", "allocated", "completing")
# Reasons Slurm gives a node whose slurmd devcluster (re)started, and the
# prefix of any reason devcluster itself writes.  Only such nodes are
# devcluster's to resume; any other reason (a test's, an admin's, a
# "slurmkit:" health drain) belongs to whoever set it.
OWN_REASONS = ("Not responding", "Node unexpectedly rebooted")
OWN_REASON_PREFIX = "devcluster:"


def unavailable(state):
    base = state.rstrip("*~#!%$@^-")
    return "down" in base or "drain" in base or "fail" in base


def resumable_by_us(state, reason):
    """A DOWN/DRAIN/FAIL node devcluster may resume: down at boot with no
    reason yet, or a reason from OWN_REASONS or with OWN_REASON_PREFIX."""
    if not reason:
        return "drain" not in state  # nobody drains without a reason; down* at boot has none
    return reason.startswith(OWN_REASONS) or reason.startswith(OWN_REASON_PREFIX)


def wait_idle(clusters, timeout=WAIT_IDLE_S):
    """Wait until every node of every cluster is idle, resuming the DOWN/DRAIN
    nodes that are devcluster's business (resumable_by_us).

    Nodes taken out of service by anyone else are reported and left alone:
    they neither fail this nor are waited for.  Nodes busy with somebody's
    running job (mixed/allocated/completing, and responding) are accepted
    after 10 s: the cluster is healthy, just in use (the clusters are shared
    by concurrent test sessions)."""
    start = time.monotonic()
    deadline = start + timeout
    last_resume = {}
    pending = {}
    foreign = {}
    while True:
        pending = {}
        foreign = {}
        busy_only = True
        for c in clusters:
            conds = node_conditions(c)
            for node in c.nodes:
                st, reason = conds.get(node, ("unknown", ""))
                if st == "idle":
                    continue
                if unavailable(st) and not resumable_by_us(st, reason):
                    foreign[(c.name, node)] = (st, reason)
                    continue
                pending[(c.name, node)] = st
                if st not in READY_STATES:
                    busy_only = False
                if unavailable(st) and time.monotonic() - last_resume.get((c.name, node), -99) > 5:
                    last_resume[(c.name, node)] = time.monotonic()
                    p = run(c.wrap(["scontrol", "update", "NodeName=%s" % node, "State=RESUME"]),
                            env=c.env(), check=False)
                    say("%s: %s was %s (%s) -> resume%s" % (
                        c.name, node, st, reason or "no reason",
                        "" if p.returncode == 0 else " (%s)" % p.stderr.strip()))
        if not pending:
            break
        if busy_only and time.monotonic() - start > min(10.0, timeout / 2):
            say("nodes busy with running jobs (ok): %s" % ", ".join(
                "%s/%s=%s" % (cn, n, st) for (cn, n), st in sorted(pending.items())))
            break
        if time.monotonic() > deadline:
            fail_not_idle(pending, timeout)
        time.sleep(0.5)
    for (cn, n), (st, reason) in sorted(foreign.items()):
        say("%s: %s is %s with reason %r, set by someone else: left alone "
            "(scontrol update NodeName=%s State=RESUME when done with it)" % (cn, n, st, reason, n))


def fail_not_idle(pending, timeout):
    msg = ["nodes not idle after %ds: %s" % (timeout, ", ".join(
        "%s/%s=%s" % (cn, n, st) for (cn, n), st in sorted(pending.items())))]
    seen = set()
    for (cn, n), _ in sorted(pending.items()):
        c = Cluster(cn)
        if cn not in seen:
            seen.add(cn)
            msg.append("  %s:\n%s" % (c.ctld_dir / "slurmctld.log", tail(c.ctld_dir / "slurmctld.log", 15)))
        d = c.slurmd(n)
        msg.append("  %s:\n%s" % (d.log, tail(d.log, 10)))
    raise DevClusterError("\n".join(msg))


def live_job_ids(c):
    p = run(c.wrap(["squeue", "-h", "-t", "PENDING,RUNNING,SUSPENDED,CONFIGURING,COMPLETING", "-o", "%A"]),
            env=c.env(), check=False, timeout=15)
    return [j for j in p.stdout.split() if j.strip()] if p.returncode == 0 else []


def listeners():
    """[(proto, local_addr, port, pid, comm)] from ss."""
    p = run(["ss", "-H", "-ltunp"], check=False)
    out = []
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) < 5:
            continue
        proto, local = parts[0], parts[4]
        addr, _, port = local.rpartition(":")
        rest = " ".join(parts[5:])
        for chunk in rest.split("((")[1:] if "users:" in rest else []:
            for proc in chunk.split("),("):
                fields = proc.strip("()").split(",")
                comm = fields[0].strip('"')
                pid = None
                for f in fields[1:]:
                    if f.startswith("pid="):
                        pid = int(f[4:])
                out.append((proto, addr, port, pid, comm))
        if "users:" not in rest:
            out.append((proto, addr, port, None, None))
    return out


def check_listeners(clusters):
    ours = {}
    for c in clusters:
        for d in c.daemons():
            pid = d.pid()
            if pid:
                ours[pid] = "%s/%s" % (c.name, d.label)
    bad, good = [], 0
    for proto, addr, port, pid, comm in listeners():
        if pid in ours or comm in ("slurmctld", "slurmd", "slurmstepd", "srun", "munged", "slurmdbd",
                                   "mariadbd"):
            a = addr.strip("[]").split("%")[0]
            if a.startswith("127."):
                good += 1
            else:
                bad.append("%s %s:%s %s" % (proto, addr, port, ours.get(pid, comm)))
    if bad:
        raise DevClusterError("daemons listening outside loopback: " + "; ".join(bad))
    say("listeners: %d sockets (slurmctld, slurmd, slurmdbd, srun, sshd), all on 127.0.0.0/8" % good)


# --------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------

def check_host_srun():
    host = socket.gethostname()
    try:
        addr = socket.gethostbyname(host)
    except OSError:
        addr = None
    if addr != "127.0.0.1":
        say("warning: this machine's hostname %r resolves to %s, not 127.0.0.1: srun run directly "
            "here will listen there and its tasks' I/O cannot connect back; use sbatch, or srun "
            "inside a job or on a login node (ssh)" % (host, addr))


def start_daemon(d):
    pid, started = d.start()
    say("%s: %-11s %s (pid %d)" % (d.cluster.name, d.label, "started" if started else "running", pid))
    return started


def up_munge(c):
    start_daemon(c.munged())
    # A credential made and decoded through this cluster's munged.
    cred = run(c.wrap(["munge", "-n", "-S", str(c.munge_socket)]), check=False)
    p = cred
    if cred.returncode == 0:
        p = subprocess.run(c.wrap(["unmunge", "-S", str(c.munge_socket)]), input=cred.stdout,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                           timeout=60)
    if p.returncode != 0:
        raise DevClusterError("%s: munge round trip failed: %s%s" % (c.name, p.stdout, p.stderr))


def up_ctld(c):
    start_daemon(c.slurmctld())
    wait_ctld(c)


def mariadb_sql(c, sql, timeout=30):
    """Run SQL as MariaDB's root (socket authentication: we are root) on the
    cluster's private server; the SQL goes on stdin, never into argv."""
    return subprocess.run(c.wrap(["mariadb", "--no-defaults", "--socket=%s" % c.mariadb_socket, "-N", "-B"]),
                          input=sql, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=timeout)


def up_accounting(c, dbd_conf_changed=False):
    """MariaDB, then slurmdbd, then the cluster registered in it: all before
    slurmctld starts, which registers with slurmdbd at once (and, started
    with no state files, exits when the database cannot give it the TRES list)."""
    if not c.accounting:
        return
    db = c.mariadbd()
    marker = c.mariadb_dir / "initialised"
    if not db.pid() and not marker.exists():
        # First start, or an initialisation cut short: begin from an empty datadir.
        if c.mariadb_data.exists():
            shutil.rmtree(str(c.mariadb_data))
        t0 = time.monotonic()
        run(c.wrap(["mariadb-install-db", "--no-defaults", "--user=root", "--datadir=%s" % c.mariadb_data,
                    "--auth-root-authentication-method=socket", "--skip-test-db"]), timeout=180)
        marker.write_text("mariadb-install-db done\n")
        say("%s: initialised MariaDB in %s (%.1fs)" % (c.name, c.mariadb_data, time.monotonic() - t0))
    db_started = start_daemon(db)
    deadline = time.monotonic() + 30
    while True:
        p = mariadb_sql(c, "SELECT 1;")
        if p.returncode == 0:
            break
        if time.monotonic() > deadline or not db.pid():
            raise DevClusterError("%s: MariaDB not answering on %s: %s\n  log %s:\n%s" % (
                c.name, c.mariadb_socket, p.stderr.strip(), db.log, tail(db.log)))
        time.sleep(0.2)
    dbd = c.slurmdbd()
    if dbd_conf_changed and dbd.pid():
        say("%s: slurmdbd.conf changed, restarting slurmdbd" % c.name)
        dbd.stop()
    if db_started or not dbd.pid():
        # The account slurmdbd logs in with; idempotent, and it re-applies the
        # password should slurm.pass have been replaced.
        password = c.storage_pass_file.read_text().strip()
        sql = ("CREATE USER IF NOT EXISTS '{u}'@'localhost' IDENTIFIED BY '{p}';\n"
               "ALTER USER '{u}'@'localhost' IDENTIFIED BY '{p}';\n"
               "GRANT ALL ON `{d}`.* TO '{u}'@'localhost';\n").format(u=DB_USER, p=password, d=DB_NAME)
        p = mariadb_sql(c, sql)
        if p.returncode != 0:
            raise DevClusterError("%s: creating the MariaDB user for slurmdbd failed: %s"
                                  % (c.name, p.stderr.strip()))
    start_daemon(dbd)
    wait_port(c.dbd_addr, c.dbd_port, "%s slurmdbd" % c.name, timeout=30)
    register_cluster(c)


def register_cluster(c, timeout=30.0):
    """sacctmgr add cluster, once; slurmdbd may take a moment to answer."""
    deadline = time.monotonic() + timeout
    while True:
        p = run(c.wrap(["sacctmgr", "-n", "-P", "list", "cluster", "format=cluster"]), env=c.env(),
                check=False, timeout=30)
        if p.returncode == 0:
            break
        if time.monotonic() > deadline:
            raise DevClusterError("%s: sacctmgr cannot reach slurmdbd on %s:%d: %s\n  log %s:\n%s" % (
                c.name, c.dbd_addr, c.dbd_port, (p.stdout + p.stderr).strip(), c.slurmdbd().log,
                tail(c.slurmdbd().log)))
        time.sleep(0.3)
    if c.name not in p.stdout.split():
        run(c.wrap(["sacctmgr", "-i", "add", "cluster", c.name]), env=c.env(), timeout=30)
        say("%s: registered cluster in slurmdbd" % c.name)


def up_slurmds(c):
    for i, n in zip(c.numbers, c.nodes):
        d = c.slurmd(n)
        start_daemon(d)
        # slurmd has bound NodeAddr:Port once it accepts connections; from then
        # on its namespace's hostname only matters to jobs (srun binds to it).
        wait_port(c.node_addr(i), c.node_port(i), "%s slurmd %s" % (c.name, n))
        set_uts_hostname(d.pid(), JOB_HOSTNAME)


def set_uts_hostname(pid, name):
    """Rename the private UTS namespace of pid (never the machine's own)."""
    try:
        theirs = os.readlink("/proc/%d/ns/uts" % pid)
        mine = os.readlink("/proc/self/ns/uts")
    except OSError as e:
        raise DevClusterError("cannot inspect UTS namespace of pid %s: %s" % (pid, e))
    try:
        init = os.readlink("/proc/1/ns/uts")
    except OSError:
        init = mine
    if theirs in (mine, init):
        raise DevClusterError("pid %d shares this machine's UTS namespace; refusing to rename it "
                              "(stop it with 'down' and run 'up')" % pid)
    run(["nsenter", "--target", str(pid), "--uts", "--", "sh", "-c",
         'echo "$0" > /proc/sys/kernel/hostname', name])


def up_sshd(c):
    d = c.sshd()
    if not d.pid():
        p = run(c.wrap([SSHD, "-t", "-f", str(c.sshd_config)]), check=False)
        if p.returncode != 0:
            raise DevClusterError("%s: sshd config test failed: %s" % (c.name, p.stdout + p.stderr))
    start_daemon(d)
    wait_port(c.login_host, c.login_port, "%s sshd" % c.name)


def is_listening(host, port):
    """A TCP listener on host:port exists (read from /proc/net/tcp, so that no
    probe connection shows up as an error in the daemon's log)."""
    want = "%s:%04X" % ("".join("%02X" % int(o) for o in reversed(host.split("."))), port)
    try:
        with open("/proc/net/tcp") as f:
            next(f)
            for line in f:
                parts = line.split()
                if len(parts) > 3 and parts[1] == want and parts[3] == "0A":
                    return True
    except OSError:
        pass
    return False


def wait_port(host, port, what, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if is_listening(host, port):
            return
        time.sleep(0.1)
    raise DevClusterError("%s not listening on %s:%d after %ds" % (what, host, port, timeout))


def cmd_up(names):
    t0 = time.monotonic()
    clusters = [Cluster(n) for n in names]
    need_programs(clusters)
    save_layout()
    prepare_common()
    changed = {}
    for c in clusters:
        changed[c.name] = prepare_cluster(c)
    write_known_hosts([Cluster(n) for n in SPECS])
    for c in clusters:
        conf_changed, sshd_changed, dbd_changed = changed[c.name]
        if conf_changed:
            running = [d for d in [c.slurmctld()] + [c.slurmd(n) for n in c.nodes] if d.pid()]
            if running:
                say("%s: Slurm config changed, restarting slurmctld and slurmds" % c.name)
                for d in running:
                    d.stop()
        if sshd_changed and c.sshd().pid():
            c.sshd().stop()
            say("%s: sshd config or host key changed, restarting sshd" % c.name)
        up_munge(c)
        up_accounting(c, dbd_changed)
        up_ctld(c)
        up_slurmds(c)
        up_sshd(c)
    write_clusters_json()
    if layout()["roots"]:
        write_if_changed(SITE_YAML, render_site([Cluster(n) for n in SPECS]))
    wait_idle(clusters)
    for c in clusters:
        say("%s: %s up (SLURM_CONF=%s)" % (c.name, c.nodelist, c.slurm_conf))
    check_listeners(clusters)
    check_host_srun()
    write_clusters_json()
    say("up in %.1fs; eval \"$(%s env CLUSTER)\" or ssh -F %s CLUSTER"
        % (time.monotonic() - t0, os.path.relpath(__file__), os.path.relpath(SSH_CONFIG)))


def cmd_down(names):
    clusters = [Cluster(n) for n in names]
    for c in clusters:
        if c.slurmctld().pid() and ctld_up(c):
            jobs = live_job_ids(c)
            if jobs:
                run(c.wrap(["scancel"] + jobs), env=c.env(), check=False)
                say("%s: cancelled %d live job(s): %s" % (c.name, len(jobs), " ".join(jobs)))
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline and live_job_ids(c):
                    time.sleep(0.5)
    for c in clusters:
        # slurmdbd after slurmctld (which flushes its last records to it),
        # MariaDB after slurmdbd.
        for d in ([c.sshd()] + [c.slurmd(n) for n in c.nodes] + [c.slurmctld()]
                  + list(reversed(c.accounting_daemons())) + [c.munged()]):
            pid = d.stop()
            if pid:
                say("%s: %-11s stopped (pid %d)" % (c.name, d.label, pid))
    if STATE.exists():
        write_clusters_json()
    say("down: %s" % " ".join(names))


def cmd_status(names):
    ok = True
    for c in [Cluster(n) for n in names]:
        parts = []
        for d in c.daemons():
            pid = d.pid()
            ok &= bool(pid)
            parts.append("%s=%s" % (d.label.replace("slurmd ", ""), pid or "DOWN"))
        say("%s: %s" % (c.name, " ".join(parts)))
        if c.slurmctld().pid() and ctld_up(c):
            states = node_states(c)
            say("%s: ctld %s:%d  login %s:%d  nodes %s" % (
                c.name, c.ctld_addr, c.ctld_port, c.login_host, c.login_port,
                " ".join("%s=%s" % (n, states.get(n, "?")) for n in c.nodes)))
        else:
            say("%s: slurmctld not answering" % c.name)
            ok = False
    return 0 if ok else 1


def cmd_env(name):
    c = Cluster(name)
    print("export SLURM_CONF=%s" % shlex.quote(str(c.slurm_conf)))


def cmd_one(action, name):
    c = Cluster(name)
    if action == "down-ctld":
        pid = c.slurmctld().stop()
        say("%s: slurmctld %s" % (name, "stopped (pid %d)" % pid if pid else "was not running"))
    elif action == "up-ctld":
        need_programs([c])
        up_munge(c)
        up_accounting(c)
        up_ctld(c)
        wait_idle([c])
    elif action == "down-sshd":
        pid = c.sshd().stop()
        say("%s: sshd %s" % (name, "stopped (pid %d)" % pid if pid else "was not running"))
    elif action == "up-sshd":
        need_programs([c])
        up_sshd(c)
    elif action == "rekey-sshd":
        need_programs([c])
        if not c.host_key_orig.exists():
            for suffix in ("", ".pub"):
                os.replace(str(c.host_key) + suffix, str(c.host_key_orig) + suffix)
        else:
            for suffix in ("", ".pub"):
                p = Path(str(c.host_key) + suffix)
                if p.exists():
                    p.unlink()
        ssh_keygen(c.host_key, "devcluster-%s-login-rekeyed" % c.name)
        c.sshd().stop()
        up_sshd(c)
        say("%s: login host key replaced (known_hosts unchanged; restore-sshd-key %s to undo)"
            % (name, name))
    elif action == "restore-sshd-key":
        need_programs([c])
        if c.host_key_orig.exists():
            restore_key_files(c)
            c.sshd().stop()
        else:
            say("%s: host key is already the original" % name)
        up_sshd(c)
    write_clusters_json()
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND")
    sub.required = True
    for cmd, hlp in (("up", "start everything not running, wait until all nodes are idle"),
                     ("down", "stop everything devcluster started"),
                     ("status", "show daemons and node states")):
        p = sub.add_parser(cmd, help=hlp)
        p.add_argument("clusters", nargs="*", metavar="CLUSTER",
                       help="any of %s (default: all)" % ", ".join(SPECS))
    p = sub.add_parser("env", help="print export SLURM_CONF=... for eval")
    p.add_argument("cluster", nargs="?", default="alpha", choices=list(SPECS))
    for cmd, hlp in (("up-ctld", "start one cluster's slurmctld (and its munged)"),
                     ("down-ctld", "stop one cluster's slurmctld"),
                     ("up-sshd", "start one login node's sshd"),
                     ("down-sshd", "stop one login node's sshd"),
                     ("rekey-sshd", "new login host key, old kept aside; known_hosts unchanged"),
                     ("restore-sshd-key", "put the original login host key back")):
        p = sub.add_parser(cmd, help=hlp)
        p.add_argument("cluster", choices=list(SPECS))
    args = ap.parse_args(argv)

    if args.cmd == "env":
        cmd_env(args.cluster)
        return 0
    names = getattr(args, "clusters", None) or list(SPECS)
    unknown = [n for n in names if n not in SPECS]
    if unknown:
        ap.error("unknown cluster(s) %s; choose from %s" % (", ".join(unknown), ", ".join(SPECS)))
    STATE.mkdir(parents=True, exist_ok=True)
    with open(STATE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if args.cmd == "up":
                cmd_up(names)
                return 0
            if args.cmd == "down":
                cmd_down(names)
                return 0
            if args.cmd == "status":
                return cmd_status(names)
            return cmd_one(args.cmd, args.cluster)
        except DevClusterError as e:
            print("devcluster: error: %s" % e, file=sys.stderr, flush=True)
            return 1


if __name__ == "__main__":
    sys.exit(main())
