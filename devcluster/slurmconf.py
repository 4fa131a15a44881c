"""One cluster described: its nodes, addresses and ports, daemons, and the files it runs on
(slurm.conf, gres.conf, topology.conf, slurmdbd.conf, the health check's site, sshd_config)."""

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

from clusterspec import (DB_NAME, DB_USER, HEALTH_CHECK_INTERVAL, hostlist, IN_ROOT, JOB_HOSTNAME, layout,
                         LOGIN_PORT, MARIADBD, NODE_CPUS, NODE_MEM_MB, REPO, SLURMDBD_ENV, SPECS, SSHD, STATE)
from daemons import Daemon, SlurmDaemons
from hosttools import run, sshd_knows_option


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


class Cluster(SlurmDaemons):
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
        self.oci_conf = self.etc / "oci.conf"
        self.oci_state = self.dir / "oci"      # runc's --root: the state of the containers it runs
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

    # ---- daemons (munged, slurmctld and env() are SlurmDaemons') ---------
    def slurmd(self, node):
        return self.slurmd_daemon(node, self.node_addr(self.nodes.index(node) + 1))

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
        ] + self.daemon_conf() + [
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
        ] + self.node_conf() + [
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
                # Count the accelerators in accounting, as a GPU site does: AllocTRES then carries
                # gres/gpu=N, which `slurmkit eff` turns into GPU-hours.
                "AccountingStorageTRES=gres/%s" % self.gres_name,
                # Keep each job's --comment in the database: the requeue daemon finds an
                # attempt by its token there once squeue has forgotten the job.
                "AccountingStoreFlags=job_comment",
                # Enforce QOS and association limits, as a site with accounting does: a job over
                # one pends with QOS.../Assoc... as its reason (`slurmkit why` says it with the
                # limit and the usage).  "limits" implies "associations": every job needs one, and
                # root's (account root, made with the cluster) is what the suites submit as; the
                # QOS a test limits is its own (--qos), so no other job meets a limit.
                "AccountingStorageEnforce=limits",
                # Kill a step whose tasks' memory (sampled at JobAcctGatherFrequency, or the job's
                # --acctg-freq) exceeds what it asked for: Slurm's own memory enforcement where
                # cgroups are not available (TaskPlugin=task/none here); the job ends
                # OUT_OF_MEMORY, which `slurmkit why` and `eff` explain.
                "JobAcctGatherParams=OverMemoryKill",
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

    def render_oci_conf(self, instance):
        """runc as root, its state in the cluster's directory; INSTANCE.%n.%u.%j.%s.%t names one task's
        container (INSTANCE: the cluster's own word, prepare.oci_instance: the name is its cgroup's too)."""
        runc = "runc --root=%s" % self.oci_state
        name = "%s.%%n.%%u.%%j.%%s.%%t" % instance
        return "\n".join([
            "# Generated by devcluster.py: Slurm's --container jobs run by runc",
            'RunTimeQuery="%s state %s"' % (runc, name),
            'RunTimeKill="%s kill -a %s"' % (runc, name),
            'RunTimeDelete="%s delete --force %s"' % (runc, name),
            'RunTimeRun="%s run %s -b %%b"' % (runc, name), ""])

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
