"""Asking the running clusters how they are: the controller up, node states, waiting until every
node is idle, jobs still alive, who listens where."""

import subprocess
import time

from clusterspec import DevClusterError, say, WAIT_IDLE_S
from daemons import tail
from hosttools import run
from slurmconf import Cluster


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
