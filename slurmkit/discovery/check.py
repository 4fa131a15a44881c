"""``slurmkit site check --live``: where a site file and its clusters have drifted apart.

:func:`compare` (pure) takes one cluster as the site file describes it, the
cluster's facts now (:mod:`~slurmkit.discovery.facts`) and what the probe
jobs found on its nodes (:class:`~slurmkit.discovery.init.Probes`), and
returns :class:`Finding` s: one line each, saying what differs and how to
fix it, with a severity:

- ``fail``: a job the file describes fails or never starts (a partition the
  cluster no longer has, more GPUs, CPUs or memory per node than the nodes
  have, a gres type they do not carry, a limit above Slurm's, a socket
  interface no node has, a switch-group feature no node carries);
- ``slower``: jobs run, slower than they could (an HCA no probed node has:
  NCCL falls back to sockets; fewer GPUs than the nodes carry; a feature
  that no longer marks whole leaf switches);
- ``warning``: worth knowing, jobs unharmed (a partition the file does not
  describe, a wait Slurm shortens to its cap, a node type not probed).

:func:`check_site` reaches each cluster the way ``site init`` does
(:func:`~slurmkit.discovery.init.read_live`, the same probe job) and
compares; the command exits 1 when any finding is not a warning.

Values in the findings come from Slurm's output and the nodes' and are not
trusted: each is made one printable line (``facts.printable``).
"""

from typing import List, NamedTuple, Optional, Sequence

from slurmkit import times
from slurmkit.discovery.facts import ClusterFacts, PartitionFacts, printable
from slurmkit.errors import UsageError
from slurmkit.sysfs import hca_matches, ifname_matches

FAIL, SLOWER, WARNING = "fail", "slower", "warning"
# What makes `site check` exit 1: a finding that makes jobs fail or run slower.
HARMFUL = (FAIL, SLOWER)
_ORDER = {FAIL: 0, SLOWER: 1, WARNING: 2}
NO_SITE = "site check needs the site to check: name it (SITE or --site NAME|PATH) or set $SLURMKIT_SITE"


class Finding(NamedTuple):
    cluster: str
    partition: Optional[str]             # None: the cluster as a whole
    key: str                             # the site file's key, "partitions.gpu.gpus_per_node"
    severity: str                        # FAIL, SLOWER or WARNING
    message: str                         # what differs and the fix, one line

    def line(self) -> str:
        return "%s: clusters.%s.%s: %s" % (self.severity, self.cluster, self.key, self.message)

    def to_dict(self) -> dict:
        return dict(self._asdict())


def _seconds(text) -> Optional[int]:
    """A Slurm time in seconds; None for unlimited or for text that is not a time (Slurm's own oddities)."""
    try:
        return times.slurm_time_seconds(text)
    except (TypeError, ValueError):
        return None


def _limited(text) -> bool:
    return text is not None and str(text).strip().upper() not in ("UNLIMITED", "INFINITE", "NONE", "")


def _partition(cluster: str, name: str, part, live: PartitionFacts) -> List[Finding]:
    """The partition's Slurm side: accelerators, gres, CPUs, memory, size and time limits."""
    out: List[Finding] = []

    def add(key, severity, message):
        out.append(Finding(cluster, name, "partitions.%s.%s" % (name, key), severity, message))

    if part.accelerator != "none":
        out.extend(_gres(cluster, name, part, live))
    elif live.accelerator != "none":
        gres = "%s:%s:%d" % (live.gres_name, live.gpu_model, live.gpus_per_node)
        add("accelerator", WARNING, "none in the file, the nodes carry %s: jobs here get no %s (set accelerator: %s "
                                    "to give them the devices)" % (printable(gres), live.accelerator, live.accelerator))
    if part.cpus_per_node > live.cpus_per_node:
        add("cpus_per_node", FAIL, "%d in the file, the smallest node has %d CPUs: jobs asking for all of them never "
                                   "start; set cpus_per_node: %d" % (part.cpus_per_node, live.cpus_per_node,
                                                                     live.cpus_per_node))
    if part.memory_mb and live.memory_mb and part.memory_mb > live.memory_mb:
        add("memory_mb", FAIL, "%d in the file, the smallest node has RealMemory=%d: jobs asking for it never start; "
                               "set memory_mb: %d" % (part.memory_mb, live.memory_mb, live.memory_mb))
    if live.max_nodes and part.max_nodes and part.max_nodes > live.max_nodes:
        add("max_nodes", FAIL, "%d in the file, Slurm lets a job have at most %d: larger jobs are refused or never "
                               "start; set max_nodes: %d" % (part.max_nodes, live.max_nodes, live.max_nodes))
    if _limited(live.max_time):
        theirs = _seconds(live.max_time)
        ours = _seconds(part.max_time) if _limited(part.max_time) else None
        if theirs is not None and (ours is None or ours > theirs):
            add("max_time", FAIL, "%s in the file, Slurm's MaxTime is %s: longer jobs are refused or never start; "
                                  "set max_time: \"%s\"" % (printable(part.max_time or "unlimited"),
                                                          printable(live.max_time), printable(live.max_time)))
    return out


def _count(kind, gres_name: str, model: Optional[str]) -> int:
    """How many of the gres ``gres_name:model`` one node of ``kind`` carries (an untyped gres: by its name)."""
    gres = dict(kind.gres)
    if model and "%s:%s" % (gres_name, model) in gres:
        return gres["%s:%s" % (gres_name, model)]
    return gres.get(gres_name, 0) if model in (None, gres_name) else 0


def _gres(cluster: str, name: str, part, live: PartitionFacts) -> List[Finding]:
    """The file's accelerators against every node type of the partition.

    Counted from the node types themselves, not from the facts' accelerator: a partition named for CPU jobs
    is drafted without accelerator, yet a file that gives it the nodes' GPUs is right.
    """
    key = "partitions.%s" % name
    gres_name, model = part.effective_gres_name, part.gpu_model
    wanted = "%s:%s" % (gres_name, model) if model else gres_name
    carried = sorted({"%s:%d" % g for kind in live.node_types for g in kind.gres})
    have = min((_count(kind, gres_name, model) for kind in live.node_types), default=0)
    if have == 0:
        on_some = any(_count(kind, gres_name, model) for kind in live.node_types)
        where = "some nodes of the partition carry no %s" % wanted if on_some else \
            "the nodes carry %s" % (", ".join(carried) or "no accelerator gres")
        same_name = sorted({k.split(":", 1)[1] for kind in live.node_types for k, _ in kind.gres
                            if k.startswith(gres_name + ":")})
        if not on_some and len(same_name) == 1:
            fix, field = "set gpu_model: %s" % same_name[0], "gpu_model"
        elif not on_some and live.gres_name and live.gres_name != gres_name:
            fix, field = "set gres_name: %s" % live.gres_name, "gres_name"
        else:
            fix, field = "fix the nodes' gres, or set accelerator: none", "accelerator"
        return [Finding(cluster, name, "%s.%s" % (key, field), FAIL,
                        "%s in the file, %s: jobs ask for a gres no node of theirs has and never start; %s"
                        % (printable(wanted), printable(where), printable(fix)))]
    if part.gpus_per_node > have:
        return [Finding(cluster, name, key + ".gpus_per_node", FAIL,
                        "%d in the file, the nodes carry %s:%d: jobs ask for more than a node has and never start; "
                        "set gpus_per_node: %d" % (part.gpus_per_node, printable(wanted), have, have))]
    if part.gpus_per_node < have:
        return [Finding(cluster, name, key + ".gpus_per_node", SLOWER,
                        "%d in the file, the nodes carry %s:%d: jobs leave GPUs idle; set gpus_per_node: %d"
                        % (part.gpus_per_node, printable(wanted), have, have))]
    return []


def _fabric(cluster: str, name: str, part, live: PartitionFacts, probes) -> List[Finding]:
    """The partition's fabric against the probe of its node types."""
    out: List[Finding] = []
    kinds = [k.key for k in live.node_types]
    probed = [probes.found[k] for k in kinds if k in probes.found]
    for key in kinds:
        if key in probes.failures:
            out.append(Finding(cluster, name, "partitions.%s.fabric" % name, WARNING,
                               "not checked against the nodes: %s" % printable(probes.failures[key])))
    if not probed:
        return out
    nodes = ", ".join(printable(p.node) or "?" for p in probed)
    fabric = part.fabric
    if fabric.socket_ifname:
        interfaces = sorted({i for p in probed for i in p.interfaces})
        if ifname_matches(fabric.socket_ifname, interfaces) is False:
            routed = sorted({p.route_iface for p in probed if p.route_iface and p.route_iface in p.interfaces})
            down = sorted({p.route_iface for p in probed if p.route_iface and p.route_iface not in p.interfaces})
            if routed:
                fix = "set socket_ifname: %s (the interface that carries the nodes' addresses)" % routed[0]
            elif down:
                fix = "bring %s up on the nodes (it carries their addresses; its link is down)" % printable(down[0])
            else:
                fix = "set it to one of: %s" % (", ".join(printable(i) for i in interfaces) or "none found")
            out.append(Finding(cluster, name, "partitions.%s.fabric.socket_ifname" % name, FAIL,
                               "%s names no interface that is up on the probed nodes (%s): NCCL and Gloo find no "
                               "socket and jobs fail; %s" % (printable(fabric.socket_ifname), nodes, fix)))
    if fabric.type in ("infiniband", "roce"):
        exact = any(h.startswith("=") for h in fabric.hcas)
        ports = [port for p in probed for port in p.rdma]
        active = sorted({port.name for port in ports if port.active})
        for spec in fabric.hcas:
            if spec.startswith("^"):       # an exclusion names no device that must exist
                continue
            wanted = spec.lstrip("=")
            matching = [port for port in ports if hca_matches(wanted, exact, port.name)]
            if not matching:
                message = "no probed node (%s) has HCA %s" % (nodes, printable(wanted))
            elif not any(port.active for port in matching):
                message = "HCA %s is not active on the probed nodes (%s)" % (printable(wanted), nodes)
            else:
                continue
            fix = ("set hcas to the active ports: %s" % ", ".join("=" + printable(a) for a in active) if active
                   else "no active RDMA port was found: check the HCAs and the subnet manager, or set type: ethernet")
            out.append(Finding(cluster, name, "partitions.%s.fabric.hcas" % name, SLOWER,
                               "%s: NCCL falls back to sockets and jobs run slower; %s" % (message, fix)))
    else:
        active = sorted({port.name for p in probed for port in p.rdma if port.active})
        if active:
            out.append(Finding(cluster, name, "partitions.%s.fabric.type" % name, SLOWER,
                               "%s in the file, but the probed nodes (%s) have active RDMA ports (%s): jobs use "
                               "sockets; set type: infiniband or roce and hcas"
                               % (fabric.type, nodes, ", ".join(printable(a) for a in active))))
    return out


def compare(site, cluster, live: ClusterFacts, probes=None) -> List[Finding]:
    """Where ``cluster`` of ``site`` (as loaded) and the live cluster differ: findings, most harmful first.

    ``probes`` (:class:`~slurmkit.discovery.init.Probes`) adds the fabric's findings; None (no probe job
    was run) leaves the fabric unchecked.  Pure: nothing is read here.
    """
    name = cluster.name
    out: List[Finding] = []
    for part_name, part in cluster.partitions.items():
        theirs = live.partitions.get(part_name)
        if theirs is None:
            have = ", ".join(sorted(live.partitions)) or "none"
            out.append(Finding(name, part_name, "partitions.%s" % part_name, FAIL,
                               "the cluster has no partition %s (it has: %s): jobs there are refused; remove it "
                               "or rename it" % (part_name, printable(have))))
            continue
        out.extend(_partition(name, part_name, part, theirs))
        if probes is not None:
            out.extend(_fabric(name, part_name, part, theirs, probes))
    for part_name in sorted(set(live.partitions) - set(cluster.partitions)):
        out.append(Finding(name, part_name, "partitions.%s" % part_name, WARNING,
                           "the cluster has partition %s, the file does not describe it: add it to submit there "
                           "(site init --cluster %s drafts it)" % (part_name, name)))
    for note in live.notes:
        if note.startswith("partition ") and "left out" in note:
            out.append(Finding(name, None, "partitions", WARNING, printable(note)))
    carried = set(live.features)
    for feature in cluster.switch_group_features:
        if feature not in carried:
            out.append(Finding(name, None, "switch_group_features", FAIL,
                               "no node carries feature %s: jobs that keep to a switch group ask for it and are "
                               "refused; remove it%s" % (printable(feature), _features_fix(live))))
        elif feature not in live.switch_group_features:
            out.append(Finding(name, None, "switch_group_features", SLOWER,
                               "the nodes with feature %s are no longer whole leaf switches: jobs kept to it may "
                               "span more switches; remove it%s" % (printable(feature), _features_fix(live))))
    wait = _seconds(site.switch_wait(cluster))
    if wait is not None and wait > live.switch_wait_cap:
        out.append(Finding(name, None, "max_switch_wait", WARNING,
                           "%s asked, Slurm caps the wait for fewer leaf switches at %d s (SchedulerParameters "
                           "max_switch_wait): jobs wait %d s; set max_switch_wait to at most that, or raise the cap"
                           % (printable(site.switch_wait(cluster)), live.switch_wait_cap, live.switch_wait_cap)))
    return sorted(out, key=lambda f: _ORDER[f.severity])


def _features_fix(live: ClusterFacts) -> str:
    if not live.switch_group_features:
        return ""
    return " (the features that mark whole leaf switches now: %s)" % ", ".join(
        printable(f) for f in live.switch_group_features)


class CheckResult(NamedTuple):
    findings: List[Finding]              # a probe that could not run is a warning among them
    clusters: List[str]

    @property
    def harmful(self) -> bool:
        return any(f.severity in HARMFUL for f in self.findings)

    def to_dict(self) -> dict:
        return {"clusters": list(self.clusters), "harmful": self.harmful,
                "findings": [f.to_dict() for f in self.findings]}


def check_site(site, names: Sequence[str] = (), backend_factory=None, probe: bool = True,
               probe_wait: int = 30) -> CheckResult:
    """Compare each cluster of ``site`` (all, or ``names``) with the cluster now (see the module docstring).

    A cluster that does not answer raises SlurmkitError naming it (``--cluster`` leaves it out), as in
    ``site init``: a check that skipped it would read as a clean bill.
    """
    from slurmkit.discovery.init import read_live, targets

    clusters = targets(site, names)
    if site is None:
        raise UsageError(NO_SITE)
    clusters = targets(site, names)
    findings: List[Finding] = []
    for cluster in clusters:
        live, probes = read_live(cluster, backend_factory, probe, probe_wait, several=len(clusters) > 1)
        findings.extend(compare(site, cluster, live, probes))
    return CheckResult(sorted(findings, key=lambda f: _ORDER[f.severity]), [c.name for c in clusters])
