"""The Slurm side: carry out the ownership decisions, and check-then-act for one node.

Every change is one ``scontrol update`` (a drain of many nodes with the same
reason is one call); ``dry_run`` changes nothing and says what it would do.
A node's record is read again right before acting on it, so a drain or
resume never rests on a state older than the check (an admin may have
drained the node meanwhile: then it is theirs).
"""

import math
import time
from typing import Dict, List, NamedTuple, Optional, Sequence

from slurmkit.errors import SlurmkitError, UsageError
from slurmkit.health import ownership
from slurmkit.health.ownership import CAPPED, DRAIN, NONE, RESUME, UPDATE, Decision


class Applied(NamedTuple):
    decision: Decision
    done: bool                   # the change was made (False: dry run, nothing to do, or it failed)
    error: str = ""

    @property
    def text(self) -> str:
        d = self.decision
        if self.error:
            return "%s FAILED: %s" % (d.action, self.error)
        if d.action == DRAIN:
            return ("drained" if self.done else "would drain") + " (%s)" % d.reason
        if d.action == RESUME:
            return ("resumed" if self.done else "would resume") + ": " + d.note
        if d.action == UPDATE:
            return ("" if self.done else "would set: ") + d.note + " (%s)" % d.reason
        return d.note


def apply(backend, decisions: Sequence[Decision], dry_run: bool = False) -> List[Applied]:
    out: Dict[str, Applied] = {}
    todo = [d for d in decisions if d.action in (DRAIN, UPDATE, RESUME)]
    for d in decisions:
        if d.action in (NONE, CAPPED) or dry_run:
            out[d.node] = Applied(d, False)
    if dry_run:
        return [out[d.node] for d in decisions]
    by_reason: Dict[str, List[Decision]] = {}
    for d in todo:
        if d.action in (DRAIN, UPDATE):   # UPDATE is a drain again: Slurm keeps the state, takes the reason
            by_reason.setdefault(d.reason, []).append(d)
    groups = [(lambda nodes, r=reason: backend.drain(nodes, r), group) for reason, group in by_reason.items()]
    resumes = [d for d in todo if d.action == RESUME]
    if resumes:
        groups.append((backend.resume, resumes))
    for call, group in groups:
        try:
            call([d.node for d in group])
            out.update((d.node, Applied(d, True)) for d in group)
        except SlurmkitError as exc:
            out.update((d.node, Applied(d, False, str(exc))) for d in group)
    return [out[d.node] for d in decisions]


class UnknownNode(UsageError):
    """Slurm has no node of the name a check runs as (a login node's or a laptop's host name)."""


def node_record(backend, node: str):
    """Slurm's record of ``node``; a node Slurm does not know is :class:`UnknownNode`, saying how to name one
    (a check run on a login node or a laptop takes the host's name, which is no node's)."""
    from slurmkit.errors import SlurmCommandError

    unknown = UnknownNode("cluster %s has no node named %r: run 'slurmkit health check' on one of its nodes (as "
                         "slurmd's HealthCheckProgram does), or name the node with --node" % (backend.cluster_name, node))
    try:
        states = backend.node_states([node])
    except SlurmCommandError as exc:
        if "not found" in str(exc):           # scontrol: "Node vm not found"
            raise unknown from None
        raise
    found = [n for n in states if n.name == node]
    if not found:
        raise unknown
    return found[0]


# How far past the end of its drain's second a node waits before it counts the drains (a second
# for slurmctld's stamps to move on, and this margin for the node's clock to differ from slurmctld's).
STAMP_SETTLE_S = 0.5


def decide_and_apply(backend, report, resume_after: int, drain_cap, dry_run: bool = False,
                     node_info=None, clock=time) -> Applied:
    """Drain or resume the checked node per the ownership rules (HealthCheckProgram mode).

    The cap counts the nodes slurmkit keeps drained in each of the node's
    partitions, read from Slurm right before draining (one more RPC, paid
    only by a failing node), and again after: nodes checking themselves at
    the same time share nothing but Slurm, so a drain that the second count
    finds over the cap is undone (:func:`ownership.cap_after_drain`).  The
    second count waits until the second of this drain's stamp is over, so
    that every drain stamped in it is in: up to 1.5 s, paid only by a node
    that drains.  ``clock``: ``time()`` and ``sleep()`` (the time module; a FakeClock in tests).
    """
    info = node_info if node_info is not None else node_record(backend, report.node)
    decision = ownership.decide(info, report.failing, resume_after)
    if decision.action == NONE:
        return Applied(decision, False)
    nodes = backend.node_states() if decision.action == DRAIN else [node_record(backend, report.node)]
    fresh = next((n for n in nodes if n.name == report.node), info)
    decision = ownership.decide(fresh, report.failing, resume_after)
    if decision.action == DRAIN:
        decision = ownership.apply_cap([decision], nodes, drain_cap, {report.node: report.failing})[0]
    applied = apply(backend, [decision], dry_run)[0]
    if decision.action != DRAIN or not applied.done:
        return applied
    # slurmctld stamped the drain before it answered, so no later than now: once this second
    # is over, every drain stamped in it or before is applied and visible to every node alike.
    drained_at = clock.time()
    clock.sleep(max(0.0, math.floor(drained_at) + 1 + STAMP_SETTLE_S - drained_at))
    check = ownership.cap_after_drain(report.node, backend.node_states(), drain_cap)
    if check.keep:
        return applied
    _undo_drain(backend, report.node, decision.reason)
    return Applied(decision._replace(action=CAPPED, note=check.note), False)


def _undo_drain(backend, node: str, reason: str) -> None:
    """Resume ``node`` if it still carries the drain this check just made (an admin may have taken it)."""
    now = node_record(backend, node)
    if now.reason == reason and ownership.is_drained(now.state) and not ownership.is_down(now.state):
        backend.resume([node])


def own_node_name(explicit: Optional[str] = None, proc: str = "/proc") -> str:
    """The node this check runs as.

    ``--node``; else ``$SLURMD_NODENAME`` (slurmd sets it for its
    HealthCheckProgram and for jobs); else, when the parent process is a
    slurmd started with ``-N NAME`` (several slurmds on one host), that
    name; else this host's short name (Slurm's default NodeName).
    """
    import os
    import socket

    if explicit or os.environ.get("SLURMD_NODENAME"):
        return explicit or os.environ["SLURMD_NODENAME"]
    parent = os.getppid()
    try:
        with open(os.path.join(proc, str(parent), "comm")) as fh:
            comm = fh.read().strip()
        with open(os.path.join(proc, str(parent), "cmdline"), "rb") as fh:
            cmdline = fh.read().decode("utf-8", "replace").split("\0")
    except OSError:
        comm, cmdline = "", []
    if comm == "slurmd":
        from slurmkit.health.sources.host import slurmd_node

        name = slurmd_node(cmdline)
        if name:
            return name
    return socket.gethostname().split(".")[0]


def own_cluster(site, explicit: Optional[str] = None):
    """The cluster this node belongs to.

    ``--cluster``; else the one whose ``slurm_conf`` is ``$SLURM_CONF``; else
    the only one whose ``slurm_conf`` exists on this host (a compute node has
    one); else the site's default (or only) cluster.
    """
    import os

    if explicit:
        return site.cluster(explicit)
    conf = os.environ.get("SLURM_CONF")
    if conf:
        named = [c for c in site.clusters.values() if c.slurm_conf and os.path.realpath(c.slurm_conf)
                 == os.path.realpath(conf)]
        if len(named) == 1:
            return named[0]
    here = [c for c in site.clusters.values() if c.slurm_conf and os.path.exists(c.slurm_conf)]
    if len(here) == 1:
        return here[0]
    return site.cluster()
