"""Switch topology: how many leaf switches a job needs, and a terminal drawing.

Slurm's ``--switches=N@wait`` asks the scheduler to place a job under at most
N leaf switches, waiting up to ``wait`` for such a placement.  For a
bandwidth-hungry job we ask for the smallest N that can possibly hold the
job: the fewest leaves whose partition nodes add up to the node count.

The topology rarely changes, so it is cached on disk for a few minutes
(``TopologyCache``): rendering a script must not cost slurmctld an RPC each
time, and ``render`` works offline once the cache is warm.
"""

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from slurmkit.slurm import hostlist
from slurmkit.cache import write_private
from slurmkit.errors import JobDoesNotFitError
from slurmkit.slurm.types import NodeInfo, Topology

DEFAULT_TTL = 600.0
# Slurm's cap on the wait of --switches=N@WAIT when SchedulerParameters has no max_switch_wait.
SLURM_DEFAULT_MAX_SWITCH_WAIT = 300


@dataclass(frozen=True)
class ClusterLayout:
    """What placement needs to know: the switches, each partition's nodes, the switch wait cap,
    and which nodes carry which feature (a site's switch groups are node features)."""

    topology: Topology
    partition_nodes: Dict[str, str]   # partition -> hostlist expression
    max_switch_wait: Optional[int] = None  # seconds Slurm lets --switches wait at most; None: unknown
    node_features: Dict[str, str] = field(default_factory=dict)  # feature -> hostlist of the nodes with it

    def to_dict(self):
        return {"topology": self.topology.to_dict(), "partition_nodes": self.partition_nodes,
                "max_switch_wait": self.max_switch_wait, "node_features": self.node_features}

    @classmethod
    def from_dict(cls, data):
        # A cache entry without the cap or the features (an older slurmkit) is a miss: KeyError, loaded afresh.
        return cls(Topology.from_dict(data["topology"]), dict(data["partition_nodes"]), data["max_switch_wait"],
                   dict(data["node_features"]))

    def leaves_for(self, partition: str) -> Dict[str, List[str]]:
        """Leaf switch -> the partition's nodes under it (leaves without any omitted)."""
        members = set(hostlist.expand(self.partition_nodes.get(partition, "")))
        leaves = {}
        for leaf in self.topology.leaves:
            nodes = [n for n in hostlist.expand(leaf.nodes) if n in members]
            if nodes:
                leaves[leaf.name] = nodes
        return leaves


def min_leaf_switches(leaf_sizes: Sequence[int], node_count: int) -> int:
    """Fewest leaves (largest first) whose nodes add up to ``node_count``.

    Raises JobDoesNotFitError when all leaves together are too small.
    """
    total = 0
    for used, size in enumerate(sorted(leaf_sizes, reverse=True), start=1):
        total += size
        if total >= node_count:
            return used
    raise JobDoesNotFitError("the job needs %d nodes but the partition has only %d under its switches"
                             % (node_count, total))


def switches_for(layout: ClusterLayout, partition: str, node_count: int) -> Optional[int]:
    """Leaf switches for a heavy job, or None when the cluster has no tree topology."""
    leaves = layout.leaves_for(partition)
    if not leaves:
        return None
    return min_leaf_switches([len(v) for v in leaves.values()], node_count)


def switch_groups(layout: ClusterLayout, partition: str, node_count: int, switches: int,
                  features: Sequence[str], required: Sequence[str] = ()) -> List[str]:
    """The group features (in the order given) whose nodes can hold a heavy job.

    A group is the partition's nodes carrying that feature (and every
    ``required`` feature, the user's own constraint): it can hold the job
    when ``node_count`` of them fit under at most ``switches`` leaves, as
    Slurm would place the job with ``--switches`` and ``--constraint`` both.
    A group that cannot is left out of ``--constraint=[a|b|...]``: Slurm
    refuses a job no group fits and would otherwise never run it there.
    """
    members = set(hostlist.expand(layout.partition_nodes.get(partition, "")))
    for feature in required:
        members &= set(hostlist.expand(layout.node_features.get(feature, "")))
    leaves = [set(hostlist.expand(leaf.nodes)) & members for leaf in layout.topology.leaves]
    usable = []
    for feature in features:
        group = set(hostlist.expand(layout.node_features.get(feature, "")))
        sizes = [len(leaf & group) for leaf in leaves if leaf & group]
        try:
            if min_leaf_switches(sizes, node_count) <= switches:
                usable.append(feature)
        except JobDoesNotFitError:
            continue
    return usable


def leaves_of(layout: ClusterLayout, nodelist: str) -> List[str]:
    """The leaf switches the nodes of ``nodelist`` sit under, in topology order."""
    nodes = set(hostlist.expand(nodelist))
    return [leaf.name for leaf in layout.topology.leaves if nodes & set(hostlist.expand(leaf.nodes))]


class TopologyCache:
    """On-disk cache of a cluster's layout, keyed by where the cluster is reached."""

    def __init__(self, directory: Optional[Path] = None, ttl: float = DEFAULT_TTL, clock=time):
        if directory is None:
            from slurmkit.cache import cache_root, private_dir

            directory = private_dir("topology") or os.path.join(cache_root(), "topology")
        self.directory = Path(directory)
        self.ttl = ttl
        self.clock = clock

    def _path(self, key: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in key)
        return self.directory / (safe + ".json")

    def get(self, key: str, load) -> ClusterLayout:
        """The cached layout, or ``load()`` stored for next time when missing or stale."""
        path = self._path(key)
        try:
            data = json.loads(path.read_text())
            if self.clock.time() - data["stored_at"] < self.ttl:
                return ClusterLayout.from_dict(data["layout"])
        except (OSError, ValueError, KeyError, TypeError):
            pass  # missing or corrupt: reload
        layout = load()
        self.put(key, layout)
        return layout

    def put(self, key: str, layout: ClusterLayout) -> None:
        """Store ``layout`` as read now (``slurmkit topology`` reads the cluster anyway, so a changed
        cluster is seen by the next ``submit`` at once instead of after the TTL)."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError:
            return  # a read-only home must not break submission
        write_private(str(self._path(key)), json.dumps({"stored_at": self.clock.time(), "layout": layout.to_dict()}))


def load_layout(backend, nodes: Optional[Sequence[NodeInfo]] = None) -> ClusterLayout:
    """Ask Slurm (four RPCs) for the topology, the partitions' node lists, the switch wait cap
    and the nodes' features; ``nodes`` already read saves the last."""
    partitions = backend.partitions()
    if nodes is None:
        nodes = backend.nodes()
    return ClusterLayout(backend.topology(), {name: kv.get("Nodes", "") for name, kv in partitions.items()},
                         max_switch_wait_of(backend), features_of(nodes))


def features_of(nodes: Sequence[NodeInfo]) -> Dict[str, str]:
    """feature -> the nodes with it, as one folded hostlist (a 1,024-node cluster's spine is one short string)."""
    members: Dict[str, List[str]] = {}
    for node in nodes:
        for feature in node.features:
            members.setdefault(feature, []).append(node.name)
    return {feature: hostlist.fold(names) for feature, names in sorted(members.items())}


def max_switch_wait_of(backend) -> Optional[int]:
    """The cluster's cap on --switches waits (seconds), or None when its configuration cannot be read."""
    from slurmkit.errors import SlurmkitError
    from slurmkit.slurm import parsers

    try:
        config = backend.config()
    except (SlurmkitError, NotImplementedError):
        return None  # placement still works; the site's wait is rendered uncapped
    return parse_max_switch_wait(parsers.scheduler_parameter(config, "max_switch_wait"))


def parse_max_switch_wait(value: Optional[str]) -> int:
    """SchedulerParameters' ``max_switch_wait`` value (seconds) -> the cap; Slurm's 300 when absent or empty."""
    try:
        return int(value) if value else SLURM_DEFAULT_MAX_SWITCH_WAIT
    except ValueError:
        return SLURM_DEFAULT_MAX_SWITCH_WAIT


def _switch_tree(layout: ClusterLayout):
    """(the top switches, switch name -> its child switches) of a layout's tree, for both drawings."""
    switches = {s.name: s for s in layout.topology.switches}
    children = {name: [switches[c] for c in hostlist.expand(s.switches) if c in switches]
                for name, s in switches.items()}
    child_names = {c.name for kids in children.values() for c in kids}
    return [s for s in layout.topology.switches if s.name not in child_names], children


def draw(layout: ClusterLayout, nodes: Sequence[NodeInfo], gres_name: str = "gpu") -> str:
    """The switch tree as text: each node with its state and free/total accelerators."""
    by_name = {n.name: n for n in nodes}
    roots, children = _switch_tree(layout)
    lines: List[str] = []

    def node_line(name, prefix, last):
        info = by_name.get(name)
        if info is None:
            detail = "unknown"
        else:
            detail = info.state.lower()
            if info.total(gres_name):
                detail += "  %d/%d %s free" % (info.free(gres_name), info.total(gres_name), gres_name)
        lines.append("%s%s %-10s %s" % (prefix, "└──" if last else "├──", name, detail))

    def walk(switch, prefix, last, top):
        free = sum(by_name[n].free(gres_name) for n in hostlist.expand(switch.nodes)
                   if n in by_name and by_name[n].usable)
        label = "%s (level %d, %d %s free)" % (switch.name, switch.level, free, gres_name)
        lines.append(label if top else "%s%s %s" % (prefix, "└──" if last else "├──", label))
        inner = prefix if top else prefix + ("    " if last else "│   ")
        kids = children[switch.name]
        if kids:
            for i, kid in enumerate(kids):
                walk(kid, inner, i == len(kids) - 1, False)
        else:
            names = hostlist.expand(switch.nodes)
            for i, name in enumerate(names):
                node_line(name, inner, i == len(names) - 1)

    for root in roots:
        walk(root, "", True, True)
    if not roots:
        lines.append("(no switch topology: the cluster does not use topology/tree)")
    return "\n".join(lines)


# Above this many nodes ``slurmkit topology`` draws one line per switch
# (draw_summary) unless asked for every node: a 1,024-node tree is over 1,100
# lines, which no one reads, while its 73 switch lines show at a glance where
# the free GPUs are.
SUMMARY_ABOVE_NODES = 64


def _state_counts(names, by_name) -> str:
    """'12 idle, 3 mixed, 1 down' for these nodes (Slurm's base state, flags dropped)."""
    counts: Dict[str, int] = {}
    for name in names:
        info = by_name.get(name)
        state = "unknown" if info is None else info.state.split("+")[0].lower().rstrip("*~#!%$@^-")
        counts[state] = counts.get(state, 0) + 1
    order = ["idle", "mixed", "allocated", "completing"]
    keys = [k for k in order if k in counts] + sorted(k for k in counts if k not in order)
    return ", ".join("%d %s" % (counts[k], k) for k in keys)


def draw_summary(layout: ClusterLayout, nodes: Sequence[NodeInfo], gres_name: str = "gpu") -> str:
    """The switch tree, one line per switch: its nodes (leaves: as a hostlist),
    their states and free/total accelerators on the usable ones."""
    by_name = {n.name: n for n in nodes}
    roots, children = _switch_tree(layout)
    lines: List[str] = []
    width = max([len(s.name) for s in layout.topology.switches] + [4])

    def walk(switch, prefix, last, top):
        names = [n for n in hostlist.expand(switch.nodes) if n in by_name]
        usable = [by_name[n] for n in names if by_name[n].usable]
        free = sum(n.free(gres_name) for n in usable)
        total = sum(by_name[n].total(gres_name) for n in names)
        kids = children[switch.name]
        where = "" if kids else "  %s" % switch.nodes
        # Columns line up whatever the depth: a level deeper is 4 characters of tree further right.
        label = "%-*s %4d nodes  %5d/%-5d %s free  (%s)%s" % (
            width + 4 * max(switch.level, 0), switch.name, len(names), free, total, gres_name, _state_counts(names, by_name), where)
        lines.append(label if top else "%s%s %s" % (prefix, "└──" if last else "├──", label))
        inner = prefix if top else prefix + ("    " if last else "│   ")
        for i, kid in enumerate(kids):
            walk(kid, inner, i == len(kids) - 1, False)

    for root in roots:
        walk(root, "", True, True)
    if not roots:
        lines.append("(no switch topology: the cluster does not use topology/tree)")
    return "\n".join(lines)
