"""What Slurm says about a cluster, as a site file describes it (pure).

:func:`cluster_facts` takes what the backend read (``scontrol show
partition``, ``show node``, ``show topology``, ``show config``, the
release) and returns :class:`ClusterFacts`: each partition with its
accelerator, gres, GPUs, CPUs and memory per node, size and time limit;
the cluster's default partition, switch-group features and the cap Slurm
puts on ``--switches`` waits.  Whatever Slurm cannot say for sure is a
*guess*, carried as text next to the value so the site file marks it.

Names come from Slurm's output and are not trusted: a partition whose name
a site file cannot hold (see ``site.checkers.check_name``) is left out with
a note, and every text that ends up in a comment is made one printable line
(:func:`printable`).
"""

import re
from collections import Counter
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from slurmkit.site.checkers import check_feature, check_name

# Gres names that are accelerators, and the accelerator each one is.  Other generic resources
# (shard, mps, licences) are not devices a job spreads its ranks over.
ACCELERATOR_OF_GRES = {"gpu": "nvidia", "npu": "ascend"}

# A partition whose name says CPU jobs, on nodes that also carry GPUs (a common way to let CPU work
# use the cores GPU jobs leave): written without accelerator, as a guess.
_CPU_NAME_RE = re.compile(r"(^|[-_])cpus?($|[-_])|^cpu", re.I)
_UNPRINTABLE_RE = re.compile(r"[^\x20-\x7e]")


def printable(text, limit: int = 200) -> str:
    """``text`` as one line of printable ASCII (for comments and messages): others as '?', cut at ``limit``."""
    text = _UNPRINTABLE_RE.sub("?", str(text))
    return text if len(text) <= limit else text[:limit - 3] + "..."


class NodeType(NamedTuple):
    """Nodes that look the same to a job: accelerators, CPUs, memory."""

    gres: Tuple[Tuple[str, int], ...]    # accelerator gres ("gpu:h100", 8), sorted
    cpus: int
    memory_mb: int
    nodes: Tuple[str, ...] = ()

    @property
    def key(self):
        return (self.gres, self.cpus, self.memory_mb)

    def describe(self) -> str:
        gres = ",".join("%s:%d" % g for g in self.gres) or "no accelerators"
        return "%s, %d CPUs, %d MB" % (gres, self.cpus, self.memory_mb)


class PartitionFacts(NamedTuple):
    name: str
    accelerator: str = "none"
    gpu_model: Optional[str] = None
    gres_name: Optional[str] = None
    gpus_per_node: int = 0
    cpus_per_node: int = 1
    memory_mb: Optional[int] = None
    max_nodes: Optional[int] = None
    max_time: Optional[str] = None       # as Slurm prints it; "UNLIMITED" for none
    default: bool = False
    nodes: Tuple[str, ...] = ()
    node_types: Tuple[NodeType, ...] = ()
    guesses: Tuple[str, ...] = ()        # one comment line each: what was guessed and how to correct it
    notes: Tuple[str, ...] = ()          # what the admin should know (a mixed partition and its split)


class ClusterFacts(NamedTuple):
    name: str
    version: str = ""
    accounting: bool = False
    max_array_size: Optional[int] = None
    max_array_tasks: Optional[int] = None
    switch_wait_cap: int = 300           # seconds: SchedulerParameters max_switch_wait, Slurm's 300 when unset
    topology_plugin: str = ""
    leaves: int = 0
    default_partition: Optional[str] = None
    partitions: Dict[str, PartitionFacts] = {}
    switch_group_features: Tuple[str, ...] = ()
    node_types: Tuple[NodeType, ...] = ()   # every distinct type of the cluster (one probe job each)
    notes: Tuple[str, ...] = ()
    features: Tuple[str, ...] = ()       # every feature some node carries (site check: a switch group's is gone)

    def type_partition(self, node_type: NodeType) -> Optional[str]:
        """A partition whose nodes include this type's first node (where its probe job runs)."""
        first = node_type.nodes[0] if node_type.nodes else None
        for part in self.partitions.values():
            if first in part.nodes:
                return part.name
        return None


def _int(text) -> Optional[int]:
    text = str(text or "").strip()
    return int(text) if text.isascii() and text.isdigit() else None


def _unlimited(text) -> bool:
    return str(text or "").strip().upper() in ("UNLIMITED", "INFINITE", "NONE", "")


def node_type_of(node) -> NodeType:
    gres = tuple(sorted((key, count) for key, count in node.gres.items()
                        if key.split(":")[0] in ACCELERATOR_OF_GRES and count > 0))
    return NodeType(gres=gres, cpus=node.cpus, memory_mb=node.memory_mb, nodes=(node.name,))


def group_types(nodes) -> Tuple[NodeType, ...]:
    """The distinct node types of ``nodes``, each with its nodes, most nodes first."""
    groups: Dict[tuple, NodeType] = {}
    for node in nodes:
        kind = node_type_of(node)
        if kind.key in groups:
            groups[kind.key] = groups[kind.key]._replace(nodes=groups[kind.key].nodes + (node.name,))
        else:
            groups[kind.key] = kind
    return tuple(sorted(groups.values(), key=lambda t: (-len(t.nodes), t.nodes[0])))


def fold(names: Sequence[str]) -> str:
    from slurmkit.slurm import hostlist

    try:
        return printable(hostlist.fold(names))
    except Exception:   # ClusterShell refuses a hostile name: list them as they are
        return printable(",".join(names))


def switch_group_features(nodes, topology) -> Tuple[Tuple[str, ...], List[str]]:
    """(features that each mark one group of whole leaf switches, notes).

    A feature qualifies when the nodes carrying it are exactly the nodes of
    some leaf switches (more than none, fewer than all), and the qualifying
    features do not overlap: then ``--constraint=[a|b]`` keeps a job inside
    one group.  A feature every node has (the GPU model) marks no group.
    """
    from slurmkit.slurm import hostlist

    leaves = []
    for switch in topology.leaves:
        try:
            leaves.append(frozenset(hostlist.expand(switch.nodes)))
        except Exception:
            continue
    leaves = [leaf for leaf in leaves if leaf]
    if len(leaves) < 2:
        return (), []
    everyone = frozenset(n.name for n in nodes)
    carriers: Dict[str, set] = {}
    for node in nodes:
        for feature in node.features:
            carriers.setdefault(feature, set()).add(node.name)
    found, notes = [], []
    for feature in sorted(carriers):
        carried = frozenset(carriers[feature])
        if carried == everyone or check_feature(feature) is not None:
            continue
        covered = [leaf for leaf in leaves if leaf <= carried]
        if covered and frozenset().union(*covered) == carried:
            found.append(feature)
    taken: set = set()
    chosen = []
    for feature in found:
        if taken & carriers[feature]:
            notes.append("node feature %s overlaps another switch-group feature: left out of "
                         "switch_group_features" % printable(feature))
            continue
        taken |= carriers[feature]
        chosen.append(feature)
    return tuple(chosen), notes


def _accelerator(part_name: str, kinds: Tuple[NodeType, ...]):
    """(accelerator, gres key "gpu:h100", per node, guesses) for a partition's node types."""
    counts: Counter = Counter()
    for kind in kinds:
        for key, _ in kind.gres:
            counts[key] += len(kind.nodes)
    if not counts:
        return "none", None, 0, []
    key = counts.most_common(1)[0][0]
    per_node = min(dict(kind.gres).get(key, 0) for kind in kinds)
    accelerator = ACCELERATOR_OF_GRES[key.split(":")[0]]
    guesses = []
    if _CPU_NAME_RE.search(part_name):
        guesses.append("guess: written without accelerator because its name says CPU jobs, although its nodes "
                       "carry %s:%d; set accelerator: %s, gpu_model, gpus_per_node to give its jobs the devices"
                       % (printable(key), per_node, accelerator))
        return "none", None, 0, guesses
    if per_node < 1:
        guesses.append("guess: some nodes have no %s: written without accelerator" % printable(key))
        return "none", None, 0, guesses
    return accelerator, key, per_node, guesses


def partition_facts(name: str, record: Dict[str, str], nodes) -> PartitionFacts:
    """One partition from its ``scontrol show partition`` record and its nodes (pure)."""
    kinds = group_types(nodes)
    accelerator, key, per_node, guesses = _accelerator(name, kinds)
    notes = []
    if len(kinds) > 1:
        described = "; ".join("%s: %s" % (fold(k.nodes), k.describe()) for k in kinds)
        notes.append("partition %s mixes %d node types (%s): written with the least of each, so a job fits "
                     "every node; a partition per type gives jobs all of each node" % (name, len(kinds), described))
        split = ", ".join("%s_%d (Nodes=%s)" % (name, i + 1, fold(k.nodes)) for i, k in enumerate(kinds))
        notes.append("proposed split: %s" % split)
    gres_name, model = (key.split(":", 1) + [None])[:2] if key else (None, None)
    if key and model is None:
        # An untyped gres: --gpus-per-node=TYPE:N would ask for a type the nodes do not have.
        model = gres_name
        guesses.append("guess: the gres %s has no type in Slurm; gpu_model is set to its name, "
                       "give the nodes' gres a type (gres.conf Type=) to request them by model" % printable(key))
    total = _int(record.get("TotalNodes")) or len(nodes)
    max_nodes = _int(record.get("MaxNodes"))
    max_nodes = min(max_nodes, total) if max_nodes else total
    max_time = record.get("MaxTime", "UNLIMITED")
    max_time = "UNLIMITED" if _unlimited(max_time) else max_time.strip()
    cpus = min((k.cpus for k in kinds), default=1) or 1
    memory = min((k.memory_mb for k in kinds), default=0) or None
    return PartitionFacts(
        name=name, accelerator=accelerator, gpu_model=model, gres_name=gres_name, gpus_per_node=per_node,
        cpus_per_node=cpus, memory_mb=memory, max_nodes=max_nodes or None, max_time=max_time,
        default=record.get("Default", "").upper() == "YES", nodes=tuple(n.name for n in nodes), node_types=kinds,
        guesses=tuple(guesses), notes=tuple(notes))


def cluster_facts(name: str, version: str, config: Dict[str, str], partitions: Dict[str, Dict[str, str]],
                  nodes, topology) -> ClusterFacts:
    """The whole cluster as a site file describes it (pure; see the module docstring)."""
    from slurmkit.script.topology import parse_max_switch_wait
    from slurmkit.slurm import parsers

    notes = []
    by_partition: Dict[str, list] = {}
    for node in nodes:
        for part in node.partitions:
            by_partition.setdefault(part, []).append(node)
    parts: Dict[str, PartitionFacts] = {}
    for part_name, record in partitions.items():
        if check_name(part_name) is not None:
            notes.append("partition %r left out: a site file names partitions with letters, digits, '-' and '_'"
                         % printable(part_name))
            continue
        members = by_partition.get(part_name, [])
        if not members:
            notes.append("partition %s left out: it has no nodes" % part_name)
            continue
        parts[part_name] = partition_facts(part_name, record, members)
    default = next((p.name for p in parts.values() if p.default), None)
    features, feature_notes = switch_group_features(nodes, topology)
    notes.extend(feature_notes)
    return ClusterFacts(
        name=name, version=version, accounting=parsers.accounting_enabled(config),
        max_array_size=_int(config.get("MaxArraySize")),
        max_array_tasks=_int(parsers.scheduler_parameter(config, "max_array_tasks")),
        switch_wait_cap=parse_max_switch_wait(parsers.scheduler_parameter(config, "max_switch_wait")),
        topology_plugin=printable(config.get("TopologyPlugin", "")), leaves=len(topology.leaves),
        default_partition=default, partitions=parts, switch_group_features=features,
        node_types=group_types(nodes), notes=tuple(notes),
        features=tuple(sorted({feature for node in nodes for feature in node.features})))
