"""The daemons devcluster starts: how each is started, recognised (pid file, /proc comm, command
line or environment) and stopped, and nothing else ever signalled."""

import os
import signal
import subprocess
import time
from pathlib import Path

from clusterspec import DevClusterError, NODE_CPUS, NODE_MEM_MB, say


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


def start_daemon(d):
    pid, started = d.start()
    say("%s: %-11s %s (pid %d)" % (d.cluster.name, d.label, "started" if started else "running", pid))
    return started


class SlurmDaemons:
    """The daemons every local cluster runs, for a class that says where their files are
    (``slurm_conf``, ``munge_dir``/``munge_key``/``munge_socket``, ``ctld_dir`` and ``ctld_addr``,
    ``slurmd_dir``): devcluster's clusters (slurmconf.Cluster) and scale.py's one large cluster."""

    munge_threads = None          # munged's default; a cluster of many nodes wants more

    def env(self):
        """This environment, with the cluster's SLURM_CONF and none of a job's own variables."""
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.slurm_conf)
        for var in ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_CLUSTERS"):
            env.pop(var, None)
        return env

    def daemon_conf(self):
        """slurm.conf lines for how the daemons bind, run, authenticate, and keep their state, pid
        and log files."""
        return [
            # NoInAddrAny covers slurmd/srun/...; slurmctld needs its own flag.
            "CommunicationParameters=NoInAddrAny,NoCtldInAddrAny",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            # cred_expire: how long a job's launch credential lives, and so how long Slurm holds a
            # requeued job before it may start again (default 120 s).  30 s is still far above a
            # launch on this machine, and a checkpointed job's restart waits a quarter as long.
            "AuthInfo=socket=%s,cred_expire=30" % self.munge_socket,
            "StateSaveLocation=%s" % (self.ctld_dir / "state"),
            "SlurmctldPidFile=%s" % (self.ctld_dir / "slurmctld.pid"),
            "SlurmctldLogFile=%s" % (self.ctld_dir / "slurmctld.log"),
            "SlurmdSpoolDir=%s/%%n" % self.slurmd_dir,
            "SlurmdPidFile=%s/slurmd.%%n.pid" % self.slurmd_dir,
            "SlurmdLogFile=%s/slurmd.%%n.log" % self.slurmd_dir,
        ]

    def node_conf(self):
        """slurm.conf lines for what the nodes are: fewer CPUs and less memory here than they claim,
        no cgroups, cores and memory as consumable, a switch tree."""
        return [
            # The machine has fewer CPUs/less memory than the nodes claim.
            "SlurmdParameters=config_overrides",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "DefMemPerCPU=%d" % (NODE_MEM_MB // NODE_CPUS),
            "TopologyPlugin=topology/tree",
        ]

    def munged(self):
        m = self.munge_dir
        threads = ["--num-threads=%d" % self.munge_threads] if self.munge_threads else []
        return Daemon(self, "munged", "munged", [
            "munged", "--key-file=%s" % self.munge_key, "--socket=%s" % self.munge_socket,
            "--pid-file=%s" % (m / "munged.pid"), "--log-file=%s" % (m / "munged.log"),
            "--seed-file=%s" % (m / "munged.seed")] + threads + ["-f"],
            m / "munged.pid", str(self.munge_socket), m / "munged.log")

    def slurmctld(self):
        return Daemon(self, "slurmctld", "slurmctld", ["slurmctld", "-f", str(self.slurm_conf), "-i"],
                      self.ctld_dir / "slurmctld.pid", str(self.slurm_conf),
                      self.ctld_dir / "slurmctld.log", uts_hostname=self.ctld_addr)

    def slurmd_daemon(self, node, addr):
        """slurmd of ``node``, bound to ``addr`` (its UTS namespace's name)."""
        return Daemon(self, "slurmd " + node, "slurmd", ["slurmd", "-f", str(self.slurm_conf), "-N", node],
                      self.slurmd_dir / ("slurmd.%s.pid" % node), str(self.slurm_conf),
                      self.slurmd_dir / ("slurmd.%s.log" % node), node=node, uts_hostname=addr)
