"""Who owns a drain, when slurmkit drains or resumes a node, and the drain cap: pure rules.

The contract with admins, all in the node's Slurm reason:

- slurmkit drains with a reason starting ``slurmkit:`` that names every
  failing check (``slurmkit: gpu_count, xid, mount:/scratch``), cut to
  :data:`REASON_MAX` characters with a ``+N more`` tail only when there are
  absurdly many (Slurm 22.05 keeps reasons of thousands of characters; the
  cap keeps ``sinfo -R`` readable);
- while the node passes its checks, slurmkit counts the clean checks in the
  reason itself (``...; clean 1/3``) and resumes the node after
  ``resume_after`` in a row; any failure starts the count again;
- a node whose reason does not start with ``slurmkit:`` (drained or downed by
  someone else, or whose reason an admin changed) is never touched, and a
  node that is DOWN or FAILING is never resumed, even with slurmkit's reason:
  Slurm or an admin took it further out than slurmkit did.

Why the count lives in the reason, not in a state file: every checker sees
the same reason (slurmd's HealthCheckProgram on the node, a cron sweep from
an admin host, an admin running a check by hand), it survives the node being
reimaged or the sweep host being replaced, anyone who resumes the node (or
changes its reason) resets it at once, and an admin reads it in ``sinfo -R``.
Two checkers racing can at worst lose one increment (a later resume), never
cause an early one.  A state file would split that count between hosts.
"""

import math
import re
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence

PREFIX = "slurmkit:"
REASON_MAX = 512
_CLEAN_RE = re.compile(r";\s*clean (\d+)/(\d+)\s*$")

# Decision actions
DRAIN, UPDATE, RESUME, NONE, CAPPED = "drain", "update", "resume", "none", "capped"


def drain_reason(failing: Sequence[str], clean: int = 0, resume_after: int = 0) -> str:
    """``slurmkit: a, b, c`` (``; clean K/N`` while counting), at most REASON_MAX characters."""
    tail = "; clean %d/%d" % (clean, resume_after) if clean else ""
    names = list(dict.fromkeys(failing)) or ["unknown"]
    budget = REASON_MAX - len(tail)
    for keep in range(len(names), 0, -1):
        more = "" if keep == len(names) else " +%d more" % (len(names) - keep)
        text = PREFIX + " " + ", ".join(names[:keep]) + more
        if len(text) <= budget:
            return text + tail
    return (PREFIX + " " + names[0])[:budget] + tail


def is_ours(reason: str) -> bool:
    return (reason or "").startswith(PREFIX)


def parse_reason(reason: str):
    """(failing names, clean count) of a slurmkit reason; None for anyone else's."""
    if not is_ours(reason):
        return None
    body = reason[len(PREFIX):].strip()
    clean = 0
    match = _CLEAN_RE.search(body)
    if match:
        clean = int(match.group(1))
        body = body[:match.start()].strip()
    names = tuple(n.strip() for n in body.split(", ") if n.strip())
    return names, clean


def flags(state: str):
    """``"IDLE+DRAIN"``, ``"DOWN*+DRAIN"``, ``"MIXED"`` -> the set of words in it (without ``*``/``~``...)."""
    return {part.strip("*~#!%$@^-") for part in state.upper().split("+")}


def is_drained(state: str) -> bool:
    """Drained or draining (Slurm: the DRAIN flag)."""
    return bool(flags(state) & {"DRAIN", "DRAINED", "DRAINING"})


def is_down(state: str) -> bool:
    return bool(flags(state) & {"DOWN", "FAIL", "FAILING"})


class Decision(NamedTuple):
    node: str
    action: str                  # DRAIN, UPDATE (set the reason again), RESUME, NONE, CAPPED
    reason: Optional[str] = None  # the reason to set (DRAIN, UPDATE)
    note: str = ""               # what the report says about it


def decide(node_info, failing: Sequence[str], resume_after: int) -> Decision:
    """What slurmkit does with one checked node (``failing`` empty: it passed every check)."""
    name, state, reason = node_info.name, node_info.state, node_info.reason or ""
    out_of_service = is_drained(state) or is_down(state)
    if out_of_service and not is_ours(reason):
        who = (" by %s" % node_info.reason_user) if node_info.reason_user else ""
        return Decision(name, NONE, note="%s%s (%s): left alone" % (state.lower(), who, reason or "no reason"))
    if is_down(state):
        return Decision(name, NONE, note="%s with slurmkit's reason: not slurmkit's to resume" % state.lower())
    if not out_of_service:
        if failing:
            return Decision(name, DRAIN, drain_reason(failing), "drain")
        return Decision(name, NONE, note="in service")
    names, clean = parse_reason(reason)
    if failing:
        wanted = drain_reason(failing)
        if wanted == reason:
            return Decision(name, NONE, note="drained by slurmkit, still failing")
        return Decision(name, UPDATE, wanted, "drained by slurmkit, still failing: reason updated")
    clean += 1
    if clean >= resume_after:
        return Decision(name, RESUME, note="%d clean check%s in a row: resume" % (clean, "" if clean == 1 else "s"))
    return Decision(name, UPDATE, drain_reason(names, clean, resume_after),
                    "drained by slurmkit, clean %d/%d" % (clean, resume_after))


def cap_limit(cap, size: int) -> int:
    """Most nodes of a partition of ``size`` slurmkit may keep drained: a number, or a share (at least 1)."""
    from slurmkit.site.model import parse_drain_cap

    number, share = parse_drain_cap(cap)
    if number is not None:
        return number
    if share <= 0:
        return 0
    return max(1, int(math.floor(size * share / 100.0 + 1e-9)))


def apply_cap(decisions: Iterable[Decision], nodes: Sequence, cap, failing: Dict[str, Sequence[str]]
              ) -> List[Decision]:
    """Turn the drains that would exceed the cap in any of a node's partitions into CAPPED.

    ``nodes`` are every node of the cluster as Slurm sees them now: a
    partition's size, and how many of its nodes slurmkit already keeps
    drained, come from them (so a broken check cannot drain a partition over
    several sweeps either).  The nodes with the most failing checks are
    drained first, then by name.
    """
    decisions = list(decisions)
    partitions_of = {n.name: n.partitions for n in nodes}
    size, drained = {}, {}
    for n in nodes:
        for p in n.partitions:
            size[p] = size.get(p, 0) + 1
            if is_ours(n.reason) and (is_drained(n.state) or is_down(n.state)):
                drained[p] = drained.get(p, 0) + 1
    limit = {p: cap_limit(cap, s) for p, s in size.items()}
    order = sorted((d for d in decisions if d.action == DRAIN),
                   key=lambda d: (-len(failing.get(d.node, ())), d.node))
    capped = set()
    for d in order:
        parts = partitions_of.get(d.node, ())
        full = [p for p in parts if drained.get(p, 0) + 1 > limit.get(p, 0)]
        if full:
            capped.add(d.node)
            continue
        for p in parts:
            drained[p] = drained.get(p, 0) + 1
    out = []
    for d in decisions:
        if d.node not in capped:
            out.append(d)
            continue
        parts = partitions_of.get(d.node, ())
        p = next(p for p in parts if drained.get(p, 0) + 1 > limit.get(p, 0))
        out.append(d._replace(action=CAPPED, note="not drained: partition %s has %d of its %d nodes drained by "
                                                  "slurmkit, its drain_cap (%s) allows %d"
                                                  % (p, drained.get(p, 0), size[p], cap, limit[p])))
    return out


class CapCheck(NamedTuple):
    """Whether a node that just drained itself may keep its drain (:func:`cap_after_drain`)."""
    keep: bool
    note: str = ""                   # why not, for the report


def cap_after_drain(node: str, nodes: Sequence, cap) -> CapCheck:
    """The drain cap, checked again after ``node`` drained itself, against every node as Slurm
    sees them once the second of its drain's stamp is over (``nodes``).

    Nodes that check themselves share nothing but Slurm.  Each reads "how many are drained",
    then drains: two that fail in the same second both read "none yet" and both drain.  So
    each drains first and then counts.  The drains are put in one order, the same for every
    node: by the time slurmctld stamped each (the reason's ``[user@time]``), then, within a
    second (the stamp has no finer grain), by node name.  A node keeps its drain only if the
    drains before it in that order, its own included, fit the cap.

    That holds under any interleaving, because slurmctld applies updates one at a time and
    stamps them as it does: a drain stamped in a later second came after, and that node
    counts this one.  Read once this drain's second is over (:func:`slurmside.decide_and_apply`
    waits for that), every drain of the same second or earlier is in ``nodes``, so every
    node sees the same drains before it, the first ``cap`` in the order keep theirs and all
    the others undo theirs: never more than the cap, and not none.  A drain without a stamp
    (none has been seen) is counted as before this one.
    """
    by_name = {n.name: n for n in nodes}
    me = by_name.get(node)
    if me is None or not is_ours(me.reason) or not is_drained(me.state):
        return CapCheck(True)                   # no longer our drain to judge (an admin took it)

    def before_me(n) -> bool:
        if n.reason_time is None or me.reason_time is None:
            return True
        return (n.reason_time, n.name) < (me.reason_time, me.name)
    size, earlier, same_second = {}, {}, {}
    for n in nodes:
        for p in n.partitions:
            size[p] = size.get(p, 0) + 1
            if n.name == node or p not in me.partitions:
                continue
            if not (is_ours(n.reason) and (is_drained(n.state) or is_down(n.state))) or not before_me(n):
                continue
            earlier[p] = earlier.get(p, 0) + 1
            if n.reason_time is not None and n.reason_time == me.reason_time:
                same_second[p] = same_second.get(p, 0) + 1
    notes = []
    for p in me.partitions:
        limit = cap_limit(cap, size[p])
        if earlier.get(p, 0) + 1 <= limit:
            continue
        notes.append("partition %s: %d of its %d nodes were drained by slurmkit before this one (%d of them in the "
                     "same second, before it by name), its drain_cap (%s) allows %d"
                     % (p, earlier.get(p, 0), size[p], same_second.get(p, 0), cap, limit))
    if not notes:
        return CapCheck(True)
    return CapCheck(False, "drain undone: " + "; ".join(notes))
