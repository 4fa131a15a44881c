#!/usr/bin/env python3
"""An opt-in large local Slurm cluster "scale": N real slurmds on loopback.

One munged, one slurmctld and N ``slurmd -N NAME`` processes (64, 256,
1,024 ...), each slurmd in its own UTS namespace as in devcluster.py (see
"Why UTS namespaces" there), from this machine's Slurm.  Nothing of it
starts unless asked (``make scale-up N=1024`` or
``python3 devcluster/scale.py up 1024``); ``make cluster-down`` stops it too.

Shape (what a GPU site of that size looks like to the scheduler)::

    core
      spine01 .. spineS         8 leaves each (128 nodes)
        leaf001 .. leafL        16 nodes each
          sn0001 .. snNNNN      4 CPUs, 4000 MB, gres gpu:h100:8 (fake devices)

Addresses: its own block, away from devcluster's 127.0.k.x (k <= 23 with the
mixed releases' offset) ::

    slurmctld   127.0.64.1:16417
    nodes       127.0.65.1 .. 127.0.65.250, 127.0.66.1 .. (250 per /24)
    slurmd      every node on port 16420: each slurmd binds only its own
                address (NoInAddrAny), so they can share one port
    srun        16450-16499
    sshd        every node's address on port 16422, for `slurmkit health
                sweep`: one sshd per 16 nodes (sshd takes at most 16
                ListenAddress lines), each with its own host key, listed
                in ssh/known_hosts as [ADDR]:16422 for each of its nodes

slurm.conf names the nodes in hostlist form, one line per /24 and spine
(``NodeName=sn[0001-0128] NodeAddr=127.0.65.[1-128] ... Features=spine01,h100``): with one line per
node every client command (sbatch, squeue ...) parses N lines, which costs
tens of milliseconds per command at 1,024 nodes.

State: ``.devcluster/scale/`` (etc/slurm.conf, gres.conf, topology.conf,
site.yaml: a slurmkit site of this cluster alone; scale.json: what the tests
read; ctld/, slurmd/, munge/, dev/; ssh/: the client key, known_hosts and
authorized_keys; sshd/gNN/: one sshd's config, host key, pid file and log).  A config change (another N) restarts
the whole cluster from empty state.

Stdlib only; run as root.  Reuses devcluster.py's helpers, never its state.
"""

import argparse
import ctypes
import fcntl
import json
import os
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# devcluster's helpers only (its rooms: clusterspec, daemons, hosttools, prepare, readiness), never its state.
import clusterspec  # noqa: E402
from clusterspec import DevClusterError, JOB_HOSTNAME, NODE_CPUS, NODE_MEM_MB, SSHD  # noqa: E402
from daemons import Daemon, SlurmDaemons, start_daemon, tail  # noqa: E402
from hosttools import need_programs, run, ssh_keygen, write_if_changed  # noqa: E402
from prepare import make_fake_device  # noqa: E402
from readiness import ctld_up, node_conditions, resumable_by_us, unavailable, wait_ctld  # noqa: E402

NAME = "scale"
STATE = clusterspec.STATE / NAME
SCALE_JSON = STATE / "scale.json"
SITE_YAML = STATE / "site.yaml"
CTLD_NET = 64           # 127.0.64.1: slurmctld
NODE_NET0 = 65          # nodes from 127.0.65.1 on
PER_NET = 250           # nodes per /24 (addresses .1 to .250)
CTLD_PORT = 16417
SLURMD_PORT = 16420
SRUN_PORTS = (16450, 16499)
SSHD_PORT = 16422
NODES_PER_SSHD = 16     # sshd refuses more than 16 ListenAddress lines
# The check a health sweep runs on each node: this repository's venv (psutil), else this Python.
_VENV_PYTHON = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "python"
HEALTH_PYTHON = str(_VENV_PYTHON) if _VENV_PYTHON.exists() else sys.executable
NODES_PER_LEAF = 16
LEAVES_PER_SPINE = 8
MAX_NODES = PER_NET * 9  # 127.0.65-73.x
GPUS = 8
# More munge threads than munged's 2: every one of N slurmds and every client
# RPC needs a credential decoded, and registration of 1,024 nodes at start
# queues up behind two threads.
MUNGE_THREADS = 16
# slurmctld holds a socket per slurmd message in flight; Slurm's own
# packaging sets LimitNOFILE=65536.  At 1,024 open files a step over hundreds
# of nodes put srun into an error loop (issue 13).
NOFILE = 65536
# Parallel slurmd starts: each is a fork+exec and a daemonize; more than a few
# at a time on two cores only queues them in the scheduler.
START_BATCH = 32


def say(msg):
    print(msg, flush=True)


def node_name(i):
    return "sn%04d" % i


def node_addr(i):
    """Node i (1-based) -> 127.0.(65 + (i-1)//250).((i-1)%250 + 1)."""
    return "127.0.%d.%d" % (NODE_NET0 + (i - 1) // PER_NET, (i - 1) % PER_NET + 1)


def nodelist(first, last):
    return "sn[%04d-%04d]" % (first, last) if last > first else node_name(first)


def node_blocks(n):
    """[(first, last, net, spine)]: runs of nodes in one /24 and under one
    spine, for one hostlist line each (12 lines at 1,024 nodes)."""
    per_spine = NODES_PER_LEAF * LEAVES_PER_SPINE
    cuts = sorted(set(range(1, n + 1, PER_NET)) | set(range(1, n + 1, per_spine)) | {n + 1})
    return [(a, b - 1, NODE_NET0 + (a - 1) // PER_NET, "spine%02d" % ((a - 1) // per_spine + 1))
            for a, b in zip(cuts, cuts[1:])]


def leaves(n):
    """[(leaf, first, last)] of 16 nodes each (the last may be smaller)."""
    return [("leaf%03d" % (k // NODES_PER_LEAF + 1), k + 1, min(n, k + NODES_PER_LEAF))
            for k in range(0, n, NODES_PER_LEAF)]


def sshd_groups(n):
    """[(group number, first node, last node)] of NODES_PER_SSHD nodes each."""
    return [(k // NODES_PER_SSHD + 1, k + 1, min(n, k + NODES_PER_SSHD)) for k in range(0, n, NODES_PER_SSHD)]


def spines(n):
    """[(spine, [leaf names])] of 8 leaves each."""
    names = [leaf for leaf, _, _ in leaves(n)]
    return [("spine%02d" % (k // LEAVES_PER_SPINE + 1), names[k:k + LEAVES_PER_SPINE])
            for k in range(0, len(names), LEAVES_PER_SPINE)]


class Scale(SlurmDaemons):
    """What devcluster.Daemon needs of a cluster (name, wrap, out_dir), plus the files."""

    def __init__(self, n):
        if not 16 <= n <= MAX_NODES:
            raise DevClusterError("scale: N=%d nodes; want 16..%d" % (n, MAX_NODES))
        self.name = NAME
        self.n = n
        self.root = None
        self.dir = STATE
        self.etc = STATE / "etc"
        self.slurm_conf = self.etc / "slurm.conf"
        self.gres_conf = self.etc / "gres.conf"
        self.topology_conf = self.etc / "topology.conf"
        self.munge_dir = STATE / "munge"
        self.munge_key = self.munge_dir / "munge.key"
        self.munge_socket = self.munge_dir / "munge.socket"
        self.ctld_dir = STATE / "ctld"
        self.slurmd_dir = STATE / "slurmd"
        self.dev_dir = STATE / "dev"
        self.out_dir = STATE / "out"
        self.ssh_dir = STATE / "ssh"
        self.client_key = self.ssh_dir / "id_ed25519"
        self.known_hosts = self.ssh_dir / "known_hosts"
        self.authorized_keys = self.ssh_dir / "authorized_keys"
        self.sshd_root = STATE / "sshd"
        self.health_state = STATE / "health"
        self.ctld_addr = "127.0.%d.1" % CTLD_NET
        self.nodes = [node_name(i) for i in range(1, n + 1)]
        self.nodelist = nodelist(1, n)

    def wrap(self, argv):
        return [str(a) for a in argv]

    # ---- daemons (devcluster's SlurmDaemons: munged, slurmctld, env) ----
    munge_threads = MUNGE_THREADS

    def slurmd(self, i):
        return self.slurmd_daemon(node_name(i), node_addr(i))

    def sshd_dir(self, g):
        return self.sshd_root / ("g%02d" % g)

    def sshd(self, g):
        d = self.sshd_dir(g)
        return Daemon(self, "sshd g%02d" % g, "sshd", [SSHD, "-f", str(d / "sshd_config"), "-E",
                                                          str(d / "sshd.log")],
                         d / "sshd.pid", str(d / "sshd_config"), d / "sshd.log")

    def sshds(self):
        return [self.sshd(g) for g, _, _ in sshd_groups(self.n)]

    # ---- files ---------------------------------------------------------------
    def render_sshd_config(self, g, first, last):
        d = self.sshd_dir(g)
        return "\n".join(
            ["# Generated by devcluster/scale.py: the sshd of nodes %s (health sweeps)" % nodelist(first, last)]
            + ["ListenAddress %s:%d" % (node_addr(i), SSHD_PORT) for i in range(first, last + 1)]
            + ["AddressFamily inet", "HostKey %s" % (d / "ssh_host_ed25519_key"), "PidFile %s" % (d / "sshd.pid"),
               "UsePAM no", "PubkeyAuthentication yes", "PasswordAuthentication no",
               "KbdInteractiveAuthentication no", "PermitRootLogin prohibit-password",
               "AuthorizedKeysFile %s" % self.authorized_keys, "AllowAgentForwarding no",
               "AllowTcpForwarding no", "X11Forwarding no", "StrictModes no", "UseDNS no", "PrintMotd no",
               # A sweep's fan-out of sessions at once, all from 127.0.0.1.
               "MaxStartups 100:30:200", "MaxSessions 100",
               # 1,024 nodes' worth of connection lines at VERBOSE is noise.
               "LogLevel ERROR",
               # Its own HOME: root's dotfiles (pyenv, conda hooks) must not tax every check.
               "SetEnv SLURM_CONF=%s HOME=%s" % (self.slurm_conf, self.sshd_root / "home"), ""])

    def prepare_ssh(self):
        """Client key, one host key per sshd, known_hosts for every node's address, the sshd configs."""
        self.ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        (self.sshd_root / "home").mkdir(mode=0o700, parents=True, exist_ok=True)
        ssh_keygen(self.client_key, "devcluster-scale-client")
        write_if_changed(self.authorized_keys, Path(str(self.client_key) + ".pub").read_text(), 0o600)
        known = []
        for g, first, last in sshd_groups(self.n):
            d = self.sshd_dir(g)
            d.mkdir(mode=0o700, exist_ok=True)
            ssh_keygen(d / "ssh_host_ed25519_key", "devcluster-scale-g%02d" % g)
            keytype, key = (d / "ssh_host_ed25519_key.pub").read_text().split()[:2]
            known += ["[%s]:%d %s %s" % (node_addr(i), SSHD_PORT, keytype, key) for i in range(first, last + 1)]
            if write_if_changed(d / "sshd_config", self.render_sshd_config(g, first, last), 0o600):
                self.sshd(g).stop()   # a running one reads its config only at start
        write_if_changed(self.known_hosts, "\n".join(known) + "\n", 0o644)
        self.health_state.mkdir(parents=True, exist_ok=True)

    def render_slurm_conf(self):
        lines = [
            "# Generated by devcluster/scale.py -- do not edit; rewritten by 'up'.",
            "ClusterName=%s" % NAME,
            "SlurmctldHost=%s" % self.ctld_addr,
            "SlurmctldPort=%d" % CTLD_PORT,
            # One port for all: each slurmd binds only its own NodeAddr.
            "SlurmdPort=%d" % SLURMD_PORT,
            "SrunPortRange=%d-%d" % SRUN_PORTS,
        ] + self.daemon_conf() + [
            "SlurmctldDebug=info",
            # error only: 1,024 slurmds logging every job start at info fill
            # the disk and cost CPU for nothing a test reads.
            "SlurmdDebug=error",
        ] + self.node_conf() + [
            "GresTypes=gpu",
            "MpiDefault=none",
            "PropagateResourceLimits=NONE",
            "ReturnToService=2",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            # 10,000 queued jobs besides 10,000 sweep tasks: Slurm's default
            # MaxJobCount is 10000.  MaxArraySize stays at Slurm's default
            # (1001), which a site of this size keeps too: a 10,000-point
            # sweep must split into arrays within it (bench_scale.py).
            "MaxJobCount=100000",
            "MaxArraySize=1001",
            "MinJobAge=300",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=bf_interval=5,max_switch_wait=120",
            "SlurmctldTimeout=60",
            "SlurmdTimeout=120",
            # srun steps over hundreds of nodes wait on a tree of slurmds.
            "MessageTimeout=60",
            "InactiveLimit=0",
            "KillWait=5",
            "Waittime=0",
            "MailProg=/bin/true",
            "",
        ]
        for first, last, net, spine in node_blocks(self.n):
            a0, a1 = (first - 1) % PER_NET + 1, (last - 1) % PER_NET + 1
            addrs = "127.0.%d.[%d-%d]" % (net, a0, a1) if a1 > a0 else "127.0.%d.%d" % (net, a0)
            # Features: the node's spine, and its GPU model.  slurmkit's
            # `--constraint=[spine01|spine02|...]` (the site's
            # switch_group_features; Slurm's matching OR: every node with the
            # same one) keeps a heavy job under one spine, which --switches
            # alone does not; `h100` is a feature of the user's own to combine
            # with it (h100&[spine01|...]; test_scale.py).
            lines.append("NodeName=%s NodeAddr=%s NodeHostname=%s CPUs=%d RealMemory=%d Gres=gpu:h100:%d "
                         "Features=%s,h100 State=UNKNOWN" % (nodelist(first, last), addrs, addrs, NODE_CPUS,
                                                             NODE_MEM_MB, GPUS, spine))
        lines += ["", "PartitionName=gpu Nodes=%s Default=YES MaxTime=24:00:00 State=UP" % self.nodelist]
        return "\n".join(lines) + "\n"

    def render_gres_conf(self):
        return ("# Generated by devcluster/scale.py\nNodeName=%s Name=gpu Type=h100 File=%s/nvidia[0-%d]\n"
                % (self.nodelist, self.dev_dir, GPUS - 1))

    def render_topology_conf(self):
        lines = ["# Generated by devcluster/scale.py: %d nodes, %d per leaf, %d leaves per spine, one core"
                 % (self.n, NODES_PER_LEAF, LEAVES_PER_SPINE)]
        lines += ["SwitchName=%s Nodes=%s" % (leaf, nodelist(a, b)) for leaf, a, b in leaves(self.n)]
        sp = spines(self.n)
        lines += ["SwitchName=%s Switches=%s" % (s, ",".join(ls)) for s, ls in sp]
        lines.append("SwitchName=core Switches=%s" % ",".join(s for s, _ in sp))
        return "\n".join(lines) + "\n"

    def render_site(self):
        """A slurmkit site of this cluster alone (JSON, which YAML reads as it is)."""
        site = {
            "site": "devcluster-scale",
            "description": "devcluster scale: %d nodes x 8 fake H100, three-level tree; generated by scale.py" % self.n,
            "defaults": {"cluster": NAME, "partition": "gpu", "time": "00:10:00", "template": "single"},
            "topology": {"max_switch_wait": "00:02:00"},
            # `slurmkit health sweep` reaches each node's own address (one sshd per 16 nodes).
            "health": {"state_dir": str(self.health_state), "command": [HEALTH_PYTHON, "-m", "slurmkit.health"],
                       "ssh": {"port": SSHD_PORT, "user": "root", "identity_file": str(self.client_key),
                               "known_hosts": str(self.known_hosts)}},
            "clusters": {NAME: {
                "slurm_conf": str(self.slurm_conf),
                "default_partition": "gpu",
                "switch_group_features": [s for s, _ in spines(self.n)],
                "price_per_gpu_hour": 1.0,
                "partitions": {"gpu": {
                    "accelerator": "nvidia", "gpu_model": "h100", "gpus_per_node": GPUS,
                    "cpus_per_node": NODE_CPUS, "memory_mb": NODE_MEM_MB, "max_nodes": self.n,
                    "max_time": "24:00:00", "fabric": {"type": "ethernet", "socket_ifname": "lo"},
                    # No NVML here, and the load is the whole machine's.
                    "health": {"skip": ["gpu", "load", "dstate"], "device_dir": str(self.dev_dir)}}},
            }},
        }
        return json.dumps(site, indent=2) + "\n"

    def describe(self):
        return {
            "name": NAME, "nodes": self.n, "nodelist": self.nodelist,
            "slurm_conf": str(self.slurm_conf), "site": str(SITE_YAML),
            "topology_conf": str(self.topology_conf), "state_dir": str(STATE),
            "ctld": {"addr": self.ctld_addr, "port": CTLD_PORT, "log": str(self.ctld_dir / "slurmctld.log"),
                     "pid_file": str(self.ctld_dir / "slurmctld.pid")},
            "slurmd_port": SLURMD_PORT,
            "leaves": {leaf: nodelist(a, b) for leaf, a, b in leaves(self.n)},
            "spines": {s: ls for s, ls in spines(self.n)},
            "core": [s for s, _ in spines(self.n)],
            "sshd": {"port": SSHD_PORT, "known_hosts": str(self.known_hosts), "identity": str(self.client_key),
                     "groups": {"g%02d" % g: nodelist(a, b) for g, a, b in sshd_groups(self.n)}},
        }


# --------------------------------------------------------------------------

def raise_nofile():
    """Our open-file limit up to NOFILE (or the hard limit): children inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = NOFILE if hard == resource.RLIM_INFINITY else min(NOFILE, hard)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


CLONE_NEWUTS = 0x04000000
_libc = None


def rename_uts(pids, name=JOB_HOSTNAME):
    """Rename the private UTS namespace of each pid to NAME (jobs' srun binds
    to what the hostname resolves to; see devcluster.py), in one forked child
    per pid with setns(2) rather than an nsenter exec each: 1,024 execs of
    nsenter + sh cost seconds on two cores.  Never touches this machine's own
    namespace (refused, as devcluster.set_uts_hostname does)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    mine = os.readlink("/proc/self/ns/uts")
    try:
        init = os.readlink("/proc/1/ns/uts")
    except OSError:
        init = mine
    for pid in pids:
        theirs = os.readlink("/proc/%d/ns/uts" % pid)
        if theirs in (mine, init):
            raise DevClusterError("pid %d shares this machine's UTS namespace; refusing to rename it" % pid)
        child = os.fork()
        if child == 0:  # pragma: no cover - the child only renames and exits
            code = 1
            try:
                fd = os.open("/proc/%d/ns/uts" % pid, os.O_RDONLY)
                if _libc.setns(fd, CLONE_NEWUTS) == 0:
                    socket.sethostname(name)
                    code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(child, 0)
        if status != 0:
            raise DevClusterError("could not rename the UTS namespace of pid %d" % pid)


def listening_addrs(port):
    """The IPv4 addresses with a TCP listener on port (from /proc/net/tcp, once)."""
    out = set()
    want = ":%04X" % port
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            parts = line.split()
            if len(parts) > 3 and parts[1].endswith(want) and parts[3] == "0A":
                h = parts[1].split(":")[0]
                out.add(".".join(str(int(h[k:k + 2], 16)) for k in (6, 4, 2, 0)))
    return out


def start_slurmds(c, timeout=120.0):
    """Start the slurmds not running, START_BATCH at a time, then wait until
    every one listens on its address; rename the namespaces of those started."""
    todo = [i for i in range(1, c.n + 1) if not c.slurmd(i).pid()]
    if not todo:
        return 0
    c.out_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.pop("SLURM_CONF", None)
    log = open(c.out_dir / "slurmd.start.out", "w")
    procs = []
    for i in todo:
        d = c.slurmd(i)
        if d.pidfile.exists():
            d.pidfile.unlink()
        procs.append((i, subprocess.Popen(d.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                          env=env, start_new_session=True)))
        if len(procs) >= START_BATCH:
            for j, p in procs:
                if p.wait(timeout=60) != 0:
                    raise DevClusterError("scale: slurmd %s exited %d\n%s" % (node_name(j), p.returncode,
                                                                                tail(c.out_dir / "slurmd.start.out")))
            procs = []
    for j, p in procs:
        if p.wait(timeout=60) != 0:
            raise DevClusterError("scale: slurmd %s exited %d" % (node_name(j), p.returncode))
    log.close()
    wanted = {node_addr(i): i for i in todo}
    deadline = time.monotonic() + timeout
    while True:
        missing = set(wanted) - listening_addrs(SLURMD_PORT)
        if not missing:
            break
        if time.monotonic() > deadline:
            first = wanted[sorted(missing)[0]]
            raise DevClusterError("scale: %d slurmds not listening after %ds (e.g. %s):\n%s"
                                     % (len(missing), timeout, node_name(first),
                                        tail(c.slurmd(first).log)))
        time.sleep(0.2)
    pids = []
    for i in todo:
        pid = c.slurmd(i).pid()
        if not pid:
            raise DevClusterError("scale: slurmd %s listens but its pid file names no live slurmd" % node_name(i))
        pids.append(pid)
    rename_uts(pids)
    return len(todo)


def start_sshds(c, workers=8):
    """Start the node sshds not running, a few at a time (each daemonizes, then writes its pid file)."""
    from concurrent.futures import ThreadPoolExecutor

    Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)  # sshd's privilege separation dir
    with ThreadPoolExecutor(workers) as pool:
        started = list(pool.map(lambda d: d.start()[1], c.sshds()))
    return sum(started)


def node_states(c):
    p = run(["sinfo", "-h", "-o", "%T %D"], env=c.env(), check=False, timeout=60)
    states = {}
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2:
            states[parts[0]] = states.get(parts[0], 0) + int(parts[1])
    return states


def wait_idle(c, timeout):
    """Until all N nodes are idle; nodes down at boot (no reason, or 'Not
    responding') are resumed, others left alone (as devcluster.py does)."""
    deadline = time.monotonic() + timeout
    resumed = 0.0
    while True:
        conds = node_conditions(c)
        idle = sum(1 for n in c.nodes if conds.get(n, ("?", ""))[0] == "idle")
        if idle == c.n:
            return
        down = [n for n in c.nodes if unavailable(conds.get(n, ("?", ""))[0])
                and resumable_by_us(*conds.get(n, ("?", "")))]
        if down and time.monotonic() - resumed > 5:
            resumed = time.monotonic()
            run(["scontrol", "update", "NodeName=%s" % ",".join(down), "State=RESUME"],
                   env=c.env(), check=False)
        if time.monotonic() > deadline:
            others = {}
            for n in c.nodes:
                st = conds.get(n, ("unknown", ""))[0]
                if st != "idle":
                    others[st] = others.get(st, 0) + 1
            raise DevClusterError("scale: %d of %d nodes idle after %ds (%s)\n%s" % (
                idle, c.n, timeout, others, tail(c.ctld_dir / "slurmctld.log", 15)))
        time.sleep(0.3)


def rss_mb(pids):
    """Proportional set size (MB): N slurmds share libslurm's pages, which
    RSS would count N times (5.8 MB each at 256 nodes, most of it shared)."""
    total = 0
    for pid in pids:
        try:
            for line in Path("/proc/%d/smaps_rollup" % pid).read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024.0


# sdiag message types that the daemons and running jobs send slurmctld on
# their own (registrations, job and step ends), and sdiag's own request: not
# what a client command costs.
DAEMON_RPCS = frozenset([
    "MESSAGE_NODE_REGISTRATION_STATUS", "MESSAGE_EPILOG_COMPLETE", "REQUEST_COMPLETE_BATCH_SCRIPT",
    "REQUEST_STEP_COMPLETE", "REQUEST_COMPLETE_PROLOG", "REQUEST_STATS_INFO", "REQUEST_HET_JOB_ALLOC_INFO",
    "REQUEST_JOB_STEP_CREATE", "REQUEST_UPDATE_JOB_STEP", "MESSAGE_COMPOSITE", "REQUEST_BATCH_SCRIPT_ROUTE",
])


def rpc_counts(env, settle=0.5):
    """{message type: count} from sdiag's "by message type" table, client
    types only (DAEMON_RPCS left out).  Diff two of these around a command for
    the RPCs it cost slurmctld; sdiag -r is avoided (it would zero the
    counters for anyone else watching).

    settle: seconds to wait first.  slurmctld counts an RPC only after it has
    answered it, so the last RPC of a command that just exited may not be
    counted yet (seen: a test's earlier `scontrol show job` counted in the
    next command's diff on a busy two-core machine)."""
    time.sleep(settle)
    p = run(["sdiag"], env=env, timeout=60)
    counts, inside = {}, False
    for line in p.stdout.splitlines():
        if line.startswith("Remote Procedure Call statistics by message type"):
            inside = True
            continue
        if inside and line.startswith("Remote Procedure Call statistics by user"):
            break
        parts = line.split()
        if inside and len(parts) >= 4 and parts[-3].startswith("count:"):
            if parts[0] not in DAEMON_RPCS:
                counts[parts[0]] = int(parts[-3].split(":", 1)[1])
                if parts[-1].startswith("total_time:"):
                    # microseconds slurmctld spent on this type: "TYPE@us" keys,
                    # left out of rpc_diff's counts by rpc_split.
                    counts[parts[0] + "@us"] = int(parts[-1].split(":", 1)[1])
    return counts


def rpc_split(diff):
    """(RPCs by type, slurmctld microseconds in all) of an rpc_diff."""
    return ({k: v for k, v in diff.items() if not k.endswith("@us")},
            sum(v for k, v in diff.items() if k.endswith("@us")))


def rpc_diff(before, after):
    """{type: n} of the RPCs between two rpc_counts (types with n > 0)."""
    return {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}


def queue_held_jobs(env, count, name="scale-others", workers=4, user=None):
    """COUNT separate held jobs named NAME (cancel with scancel --name NAME), submitted as USER if given
    (runuser: other users' jobs, as on a shared cluster).

    Separate sbatch calls, not one --array: a pending array is a single
    record in slurmctld (squeue without -r shows one line), so it would not
    load a job listing the way COUNT jobs of other users do.  About 3.5 s per
    1,000 here (4 sbatch at a time)."""
    from concurrent.futures import ThreadPoolExecutor

    argv = ["sbatch", "--hold", "--quiet", "--job-name=%s" % name, "-o", "/dev/null", "--wrap", "true"]
    if user:
        argv = ["runuser", "-u", user, "--"] + argv

    def one(_):
        return subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=120, cwd="/")

    with ThreadPoolExecutor(workers) as pool:
        failed = [p.stderr for p in pool.map(one, range(count)) if p.returncode != 0]
    if failed:
        raise DevClusterError("scale: %d of %d sbatch --hold failed: %s" % (len(failed), count, failed[0]))


USE_LOCK = STATE / "use.lock"


def use_lock():
    """An open file holding an exclusive flock on USE_LOCK: one user of the
    scale cluster at a time (a test module, bench-scale), since each resizes
    and stops it; a second waits.  Close the file to let go."""
    STATE.mkdir(parents=True, exist_ok=True)
    f = open(USE_LOCK, "w")
    fcntl.flock(f, fcntl.LOCK_EX)
    return f


def recorded_n():
    try:
        return int(json.loads(SCALE_JSON.read_text())["nodes"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def all_daemons(n):
    c = Scale(n)
    return c, [c.slurmd(i) for i in range(1, n + 1)] + [c.slurmctld(), c.munged()]


def cmd_up(n):
    t0 = time.monotonic()
    need_programs()
    raise_nofile()
    old = recorded_n()
    if old is not None and old != n:
        say("scale: was %d nodes, now %d: stopping the old cluster, state cleared" % (old, n))
        cmd_down(clear=True)
    c = Scale(n)
    for d in (c.etc, c.ctld_dir / "state", c.slurmd_dir, c.dev_dir, c.out_dir):
        d.mkdir(parents=True, exist_ok=True)
    for node in c.nodes:
        (c.slurmd_dir / node).mkdir(exist_ok=True)
    c.munge_dir.mkdir(exist_ok=True)
    # Other users reach the socket (bench-scale queues its 10,000 other jobs as nobody); nothing else
    # there can be listed or read (the key stays 0600).
    os.chmod(c.munge_dir, 0o711)
    for g in range(GPUS):
        make_fake_device(c.dev_dir / ("nvidia%d" % g))
    if not c.munge_key.exists():
        run(["mungekey", "-c", "-k", str(c.munge_key)])
        os.chmod(c.munge_key, 0o600)
    changed = write_if_changed(c.slurm_conf, c.render_slurm_conf())
    changed |= write_if_changed(c.gres_conf, c.render_gres_conf())
    changed |= write_if_changed(c.topology_conf, c.render_topology_conf())
    c.prepare_ssh()
    write_if_changed(SITE_YAML, c.render_site())
    write_if_changed(SCALE_JSON, json.dumps(c.describe(), indent=2, sort_keys=True) + "\n")
    if changed:
        running = [d for d in [c.slurmctld()] + [c.slurmd(i) for i in range(1, n + 1)] if d.pid()]
        if running:
            say("scale: config changed, restarting %d daemons" % len(running))
            for d in running:
                d.stop()
    start_daemon(c.munged())
    start_daemon(c.slurmctld())
    wait_ctld(c, timeout=60)
    t1 = time.monotonic()
    started = start_slurmds(c)
    t2 = time.monotonic()
    # Registration of N nodes takes a while on two cores: a generous wait.
    wait_idle(c, timeout=max(60.0, n * 0.25))
    t3 = time.monotonic()
    sshds = start_sshds(c)
    t4 = time.monotonic()
    pids = [d.pid() for d in [c.slurmctld(), c.munged()]]
    slurmd_pids = [c.slurmd(i).pid() for i in range(1, n + 1)]
    mem = {"slurmctld_mb": round(rss_mb(pids[:1]), 1), "munged_mb": round(rss_mb(pids[1:]), 1),
           "slurmds_mb": round(rss_mb(slurmd_pids), 1)}
    mem["total_mb"] = round(sum(mem.values()), 1)
    timing = {"up_s": round(t3 - t0, 2), "ctld_s": round(t1 - t0, 2), "slurmds_s": round(t2 - t1, 2),
              "idle_s": round(t3 - t2, 2), "slurmds_started": started, "sshds_s": round(t4 - t3, 2),
              "sshds_started": sshds}
    desc = c.describe()
    desc.update(started_at=time.time(), timing=timing, memory=mem)
    write_if_changed(SCALE_JSON, json.dumps(desc, indent=2, sort_keys=True) + "\n")
    say("scale: %s idle: %d nodes up in %.1fs (slurmds %.1fs, registration %.1fs); PSS %.0f MB "
        "(slurmctld %.0f, slurmds %.0f); SLURM_CONF=%s; site %s"
        % (c.nodelist, n, t3 - t0, t2 - t1, t3 - t2, mem["total_mb"], mem["slurmctld_mb"],
           mem["slurmds_mb"], c.slurm_conf, SITE_YAML))
    return 0


def cmd_down(clear=False):
    n = recorded_n()
    if n is None:
        say("scale: not set up")
        return 0
    c, daemons = all_daemons(n)
    ctld = c.slurmctld()
    if ctld.pid():
        # Live jobs first: slurmctld would keep them in its state for the next start.
        run(["scancel", "--quiet", "--partition=gpu"], env=c.env(), check=False, timeout=60)
    stopped = 0
    # SIGTERM to every slurmd at once, then wait: stopping 1,024 one by one is minutes.
    pids = []
    for d in daemons[:-2]:
        pid = d.pid()
        if pid:
            os.kill(pid, signal.SIGTERM)
            pids.append((d, pid))
    deadline = time.monotonic() + 30
    for d, pid in pids:
        while time.monotonic() < deadline and d.is_ours(pid):
            time.sleep(0.05)
        if d.is_ours(pid):
            os.kill(pid, signal.SIGKILL)
        stopped += 1
    for d in c.sshds() + daemons[-2:]:
        if d.stop():
            stopped += 1
    if clear:
        for sub in ("ctld", "slurmd", "out"):
            shutil.rmtree(str(STATE / sub), ignore_errors=True)
    say("scale: stopped %d daemons" % stopped)
    return 0


def cmd_status():
    n = recorded_n()
    if n is None:
        say("scale: not set up")
        return 1
    c, daemons = all_daemons(n)
    alive = sum(1 for d in daemons[:-2] if d.pid())
    sshds = c.sshds()
    sshd_alive = sum(1 for d in sshds if d.pid())
    ctld = bool(c.slurmctld().pid()) and ctld_up(c)
    say("scale: %d nodes; slurmctld %s; munged %s; slurmds %d/%d running; node sshds %d/%d"
        % (n, "up" if ctld else "DOWN", "up" if c.munged().pid() else "DOWN", alive, n, sshd_alive, len(sshds)))
    if ctld:
        say("scale: node states %s" % node_states(c))
    return 0 if ctld and alive == n and sshd_alive == len(sshds) else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND")
    sub.required = True
    p = sub.add_parser("up", help="start (or resize to) N nodes and wait until all are idle")
    p.add_argument("nodes", type=int, nargs="?", default=256)
    p = sub.add_parser("down", help="stop everything scale.py started")
    p.add_argument("--clear", action="store_true",
                   help="also forget slurmctld's state (jobs ended or cancelled that it still lists)")
    sub.add_parser("status", help="daemons and node states")
    sub.add_parser("env", help="print export SLURM_CONF=...")
    args = ap.parse_args(argv)
    if args.cmd == "env":
        print("export SLURM_CONF=%s" % shlex.quote(str(STATE / "etc" / "slurm.conf")))
        return 0
    STATE.mkdir(parents=True, exist_ok=True)
    with open(STATE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if args.cmd == "up":
                return cmd_up(args.nodes)
            if args.cmd == "down":
                return cmd_down(clear=args.clear)
            return cmd_status()
        except DevClusterError as e:
            print("scale: error: %s" % e, file=sys.stderr, flush=True)
            return 1


if __name__ == "__main__":
    sys.exit(main())
