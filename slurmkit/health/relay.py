"""Tree fan-out for ``health sweep``: the sweep reaches a few relay nodes, and each relay checks its group.

Why: a flat sweep with fan-out F checks N nodes in N/F rounds and opens N
SSH sessions from one process.  At 1,024 nodes and F = 32 that is 32
rounds, and the sweep host's own CPU (one SSH handshake and one report per
node) grows with the cluster.  With ``health.relays`` on, a cluster with
more nodes to check than F is cut into about √N groups (never more than F)
of consecutive nodes (consecutive names mostly share a leaf switch).  The
sweep opens one session per group, to the group's relay, a node of that
group that Slurm sees responding.  The relay checks itself without SSH and
the rest of its group F at a time (``health.relay_fanout`` to change that),
with the same command, SSH settings and strict known_hosts, and answers
every node's row.  Up to F² nodes take two rounds whatever their number:
ClusterShell's gateways do the same for ``clush``.

The sweep keeps every decision (drain, resume, the cap): a relay only
checks.  A relay that cannot be reached, or that answers no usable rows,
costs its group nothing: the sweep checks the nodes it did not get a row
for itself.

A relay needs what any sweep needs on every node (slurmkit, ``health.command``),
and to reach its peers with ``health.ssh``: the identity file and the
known_hosts file at the same paths on the nodes as on the sweep host.

The wire format: a :class:`RelayJob` as JSON on the relay command's standard
input (``<health.command> --relay -``); rows as JSON on its standard output.
"""

import json
import math
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from slurmkit.errors import RemoteError, SlurmkitError, UsageError
from slurmkit.health.plan import CheckPlan
from slurmkit.health.findings import NodeReport
from slurmkit.site.model import LoginNode

RELAY_VERSION = 1
RELAY_FLAG = "--relay"
# Slurm states of a node whose host may be gone: never picked as a relay while another node is there.
_UNLIKELY_UP = ("DOWN", "FAIL", "POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN", "NOT_RESPONDING", "REBOOT")


class RelayNode(NamedTuple):
    plan: CheckPlan
    target: Optional[LoginNode]        # how the relay reaches the node; None: the relay itself


class RelayJob(NamedTuple):
    relay: str
    cluster: str
    command: Tuple[str, ...]           # health.command, as on the relay
    fanout: int
    node_timeout: float
    nodes: Tuple[RelayNode, ...]

    def to_json(self) -> str:
        return json.dumps({
            "version": RELAY_VERSION, "relay": self.relay, "cluster": self.cluster, "command": list(self.command),
            "fanout": self.fanout, "node_timeout": self.node_timeout,
            "nodes": [{"plan": n.plan.to_plain(),
                       "target": n.target._asdict() if n.target is not None else None} for n in self.nodes]},
            sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "RelayJob":
        try:
            data = json.loads(text)
            version = data["version"]
            if version != RELAY_VERSION:
                raise UsageError("the relay job is version %r; this slurmkit reads version %d: install the same "
                                 "slurmkit on the nodes as where the sweep runs" % (version, RELAY_VERSION))
            nodes = tuple(RelayNode(CheckPlan.from_plain(n["plan"]),
                                    LoginNode(**n["target"]) if n["target"] is not None else None)
                          for n in data["nodes"])
            return cls(relay=str(data["relay"]), cluster=str(data["cluster"]),
                       command=tuple(str(a) for a in data["command"]), fanout=max(1, int(data["fanout"])),
                       node_timeout=float(data["node_timeout"]), nodes=nodes)
        except (ValueError, KeyError, TypeError) as exc:
            raise UsageError("not a relay job (%s: %s)" % (type(exc).__name__, exc)) from None

    def timeout(self) -> float:
        """How long the sweep waits for the relay: its rounds of node checks, plus one for it to start and answer."""
        return self.node_timeout * (rounds(len(self.nodes), self.fanout) + 1)

    def watchdog(self) -> float:
        """When the relay ends itself, whatever hangs: half a round before the sweep stops waiting."""
        return self.node_timeout * (rounds(len(self.nodes), self.fanout) + 0.5)


def rounds(count: int, fanout: int) -> int:
    return max(1, int(math.ceil(count / float(max(1, fanout)))))


def relay_command(command: Sequence[str]) -> List[str]:
    return list(command) + [RELAY_FLAG, "-"]


# ---------------------------------------------------------------- the sweep's side: groups

def groups(count: int, fanout: int) -> List[range]:
    """Index ranges of groups of consecutive nodes, one relay each; none when ``count`` fits one round.

    About the square root of ``count`` groups of about as many nodes (the
    fewest sessions in all: 64 nodes are 8 relays of 8, not 32 relays of 2,
    each of which would start a relay to check one peer), and never more
    than ``fanout`` groups: the sweep's own sessions stay one round.  Sizes
    differ by one at most, so the slowest relay has no more nodes than it must.
    """
    if count <= fanout:
        return []
    number = min(fanout, int(math.ceil(math.sqrt(count))))
    base, extra = divmod(count, number)
    out, start = [], 0
    for i in range(number):
        size = base + (1 if i < extra else 0)
        out.append(range(start, start + size))
        start += size
    return out


def pick_relay(states: Sequence[str]) -> int:
    """Index of the group's relay: the first node whose Slurm state says its host is up, else the first."""
    for i, state in enumerate(states):
        text = state.upper()
        if "*" in text or any(word in text for word in _UNLIKELY_UP):
            continue
        return i
    return 0


# ---------------------------------------------------------------- the relay's side

def serve(job: RelayJob, runner_for: Optional[Callable] = None) -> List[dict]:
    """Check every node of ``job`` from here (this node is the relay): one row per node, in the job's order.

    ``runner_for(target, cluster, timeout)`` gives the runner for one node:
    by default a local process for the relay itself (``target`` None) and
    the SSH layer for its peers.
    """
    from slurmkit.health.fleet import check_with

    runner_for = runner_for or default_runner_for

    def one(node: RelayNode) -> dict:
        start = time.monotonic()
        status, report, error = check_with(lambda: runner_for(node.target, job.cluster, job.node_timeout),
                                           job.command, node.plan, job.node_timeout)
        return {"node": node.plan.node, "status": status, "error": error,
                "seconds": round(time.monotonic() - start, 3), "report": report.to_dict() if report else None}

    with ThreadPoolExecutor(max_workers=min(job.fanout, len(job.nodes)) or 1) as pool:
        return list(pool.map(one, job.nodes))


def default_runner_for(target: Optional[LoginNode], cluster: str, timeout: float):
    if target is None:
        from slurmkit.slurm.runner import LocalRunner

        return LocalRunner(default_timeout=timeout)
    from slurmkit.remote.runner import SSHRunner

    return SSHRunner(target._replace(command_timeout=timeout), cluster)


def main_relay(source: str) -> str:
    """What ``<health.command> --relay FILE|-`` prints: the rows of :func:`serve`, as JSON."""
    from slurmkit.health.plan import read_source
    from slurmkit.health.watchdog import Watchdog

    job = RelayJob.from_json(read_source(source, "relay job"))
    # The sweep gives up on this relay after job.timeout(); end before it, whatever hangs.
    with Watchdog(job.watchdog(), "the relay for %d nodes" % len(job.nodes), "health.node_timeout"):
        rows = serve(job)
    return json.dumps({"version": RELAY_VERSION, "relay": job.relay, "nodes": rows}, sort_keys=True)


# ---------------------------------------------------------------- the sweep's side: through the relays

class Relayed(NamedTuple):
    rows: List[object]                 # NodeRows (slurmkit.health.fleet)
    relays: int                        # relays that answered
    failed: List[str]                  # "relay: why", for relays whose groups the sweep checked itself


def sweep_through_relays(jobs: Sequence[tuple], settings, runner_factory: Callable,
                         check_directly: Callable[[Sequence[tuple]], List[object]]) -> Relayed:
    """Check ``jobs`` ((cluster, node info, plan), one cluster's) through relays; NodeRows for all of them.

    ``runner_factory(cluster, node_info, timeout)`` reaches a relay as it
    would reach any node; ``check_directly`` is the flat sweep, for what no
    relay answered.
    """
    from slurmkit.health import fleet

    cluster = jobs[0][0]
    work = []
    for index_range in groups(len(jobs), settings.fanout):
        group = [jobs[i] for i in index_range]
        pick = pick_relay([info.state for _, info, _ in group])
        relay_info = group[pick][1]
        nodes = tuple(RelayNode(plan, None if i == pick else fleet.node_target(cluster, info, settings.node_timeout))
                      for i, (_, info, plan) in enumerate(group))
        job = RelayJob(relay=relay_info.name, cluster=cluster.name, command=tuple(cluster.health.command),
                       fanout=settings.relay_fanout or settings.fanout, node_timeout=settings.node_timeout,
                       nodes=nodes)
        work.append((group, relay_info, job))

    def through(item):
        group, relay_info, job = item
        runner = None
        try:
            runner = runner_factory(cluster, relay_info, job.timeout())
            result = runner.run(relay_command(job.command), stdin=job.to_json(), timeout=job.timeout())
            answered = parse_rows(result.stdout, [plan.node for _, _, plan in group])
            why = "" if answered else _no_rows(result)
        except (RemoteError, SlurmkitError) as exc:
            answered, why = {}, str(exc).split("\n")[0]
        finally:
            if runner is not None:
                runner.close()
        rows = []
        for _, info, plan in group:
            got = answered.get(plan.node)
            if got is not None:
                rows.append(fleet.NodeRow(cluster.name, info.name, plan.partition, info.state.lower(),
                                            got["status"], got["report"], got["error"], seconds=got["seconds"],
                                            via=relay_info.name))
        missing = [j for j in group if j[2].node not in answered]
        return rows, missing, ("%s: %s" % (relay_info.name, why) if why else "")

    rows, fallback, failed, answered_relays = [], [], [], 0
    with ThreadPoolExecutor(max_workers=min(settings.fanout, len(work)) or 1) as pool:
        for got, missing, why in pool.map(through, work):
            rows += got
            fallback += missing
            if why:
                failed.append(why)
            else:
                answered_relays += 1
    if fallback:
        rows += check_directly(fallback)
    return Relayed(rows, answered_relays, failed)


def _no_rows(result) -> str:
    lines = [line for line in (result.stderr or result.stdout).splitlines() if line.strip()]
    return "the relay answered no rows (exit %d): %s" % (result.returncode, lines[-1] if lines else "no output")


def parse_rows(text: str, expected: Sequence[str]) -> Dict[str, dict]:
    """The rows a relay printed, by node, for the nodes it was sent; {} when it printed none usable.

    A row for a node it was not sent, or one whose report is not about its
    own node, is dropped: the sweep then checks that node itself.
    """
    from slurmkit.health.fleet import RELAYED_STATUSES

    try:
        data = json.loads(text)
        if data.get("version") != RELAY_VERSION:
            return {}
        wanted, out = set(expected), {}
        for row in data["nodes"]:
            node, status = str(row["node"]), str(row["status"])
            if node not in wanted or status not in RELAYED_STATUSES:
                continue
            report = NodeReport.from_dict(row["report"]) if row.get("report") is not None else None
            if report is not None and report.node != node:
                continue
            out[node] = {"status": status, "report": report, "error": str(row.get("error") or ""),
                         "seconds": float(row.get("seconds") or 0.0)}
        return out
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}
