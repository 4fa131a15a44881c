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

The rooms: this file is the commands (bring-up, stop, status) and
``main``; ``clusterspec.py`` what the clusters are (SPECS, state paths, the
address layout); ``slurmconf.py`` one cluster described and its files
(slurm.conf, gres, topology, slurmdbd, sshd); ``daemons.py`` starting,
recognising and stopping our daemons; ``prepare.py`` the files written
before they start; ``readiness.py`` asking the clusters how they are;
``hosttools.py`` this machine's tools.  ``scale.py`` (the 1,024-node
cluster) uses the same rooms, never this state.

Stdlib only; Python 3.9+.  Run as root (SlurmUser=root, sshd).
"""

import argparse
import fcntl
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from clusterspec import (DB_NAME, DB_USER, DevClusterError, JOB_HOSTNAME, layout, say, SITE_YAML, SPECS,
                         SSH_CONFIG, SSHD, STATE)
from daemons import start_daemon, tail
from hosttools import need_programs, run, ssh_keygen, write_if_changed
from prepare import (prepare_cluster, prepare_common, render_site, restore_key_files, save_layout,
                     write_clusters_json, write_known_hosts)
from readiness import check_listeners, ctld_up, live_job_ids, node_states, wait_ctld, wait_idle
from slurmconf import Cluster


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
    if add_test_qos(c) and c.slurmctld().pid():
        # slurmdbd tells a running slurmctld of a new QOS by calling it back at the address it
        # registered from, 127.0.0.1 here (loopback's source address), where slurmctld does not
        # listen (NoCtldInAddrAny): it learns of the QOS only as it starts.
        say("%s: QOS added, restarting slurmctld so it knows them" % c.name)
        c.slurmctld().stop()


# QOS that only the tests' jobs ask for (--qos=NAME), each with one limit, so that a test can hold
# a job on a QOS limit without limiting anyone else's jobs (AccountingStorageEnforce=limits).  They
# are made here, before slurmctld starts: slurmdbd cannot tell a running slurmctld of a new one (see
# up_accounting), so a test cannot make its own.
TEST_QOS = {
    "test_onejob": "MaxJobsPerUser=1",      # a second job pends: QOSMaxJobsPerUserLimit
    "test_onecpu": "GrpTRES=cpu=1",         # a second 1-CPU job pends: QOSGrpCpuLimit
}


def add_test_qos(c):
    """sacctmgr add qos for each of TEST_QOS missing; True when one was added."""
    p = run(c.wrap(["sacctmgr", "-n", "-P", "show", "qos", "format=name"]), env=c.env(), timeout=30)
    have = set(p.stdout.split())
    added = False
    for name, limit in TEST_QOS.items():
        if name not in have:
            run(c.wrap(["sacctmgr", "-i", "add", "qos", name, limit]), env=c.env(), timeout=30)
            say("%s: added QOS %s (%s) for the tests" % (c.name, name, limit))
            added = True
    return added


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
