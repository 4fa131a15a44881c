"""The text of a commented YAML site file for discovered clusters (pure).

No YAML library writes it: the comments (where each value came from, what
was guessed, what to check) are the point of the draft.  Every string is
written as a JSON string, which YAML reads as the same string whatever it
holds; keys are names the site checkers accept (partitions whose names they
refuse never get here, see :mod:`slurmkit.discovery.facts`).  Paths are
absolute, so the file may be moved.
"""

import json
from typing import List, NamedTuple, Optional, Sequence, Tuple

from slurmkit.discovery.facts import ClusterFacts, PartitionFacts, fold, printable


class FabricDraft(NamedTuple):
    """A partition's fabric as the draft writes it, with where each part came from."""

    type: str = "ethernet"
    hcas: Tuple[str, ...] = ()
    socket_ifname: Optional[str] = None
    gid_index: Optional[int] = None      # RoCE only
    comments: Tuple[str, ...] = ()       # "guess: ..." lines and what the probe saw


NOT_PROBED = FabricDraft(comments=(
    "guess: Slurm does not know the fabric and the nodes were not probed (--no-probe): written as ethernet "
    "without an interface, which NCCL reads as 'pick one'; set type, hcas and socket_ifname by hand",))


class ClusterDraft(NamedTuple):
    facts: ClusterFacts
    slurm_conf: Optional[str] = None     # absolute, for a cluster used where its slurm.conf is
    login: object = None                 # site.model.LoginNode, for a cluster reached over SSH
    fabrics: dict = {}                   # partition name -> FabricDraft (absent: NOT_PROBED)
    notes: Tuple[str, ...] = ()          # more comment lines for the cluster (what the probe found)


def quote(value) -> str:
    """A YAML scalar for ``value``: numbers as numbers, anything else as a JSON string."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(str(value))


def _comment(lines: List[str], indent: int, text: str) -> None:
    lines.append("%s# %s" % (" " * indent, printable(text, limit=400)))


def _partition(lines: List[str], part: PartitionFacts, fabric: FabricDraft) -> None:
    pad = " " * 8
    lines.append("      %s:" % part.name)
    for kind in part.node_types:
        _comment(lines, 8, "nodes %s: %s" % (fold(kind.nodes), kind.describe()))
    for text in part.notes + part.guesses:
        _comment(lines, 8, text)
    lines.append(pad + "accelerator: %s" % quote(part.accelerator))
    if part.accelerator != "none":
        lines.append(pad + "gpu_model: %s" % quote(part.gpu_model))
        lines.append(pad + "gres_name: %s" % quote(part.gres_name))
        lines.append(pad + "gpus_per_node: %d" % part.gpus_per_node)
    lines.append(pad + "cpus_per_node: %d" % part.cpus_per_node)
    if part.memory_mb:
        lines.append(pad + "memory_mb: %d" % part.memory_mb)
    if part.max_nodes:
        lines.append(pad + "max_nodes: %d" % part.max_nodes)
    lines.append(pad + "max_time: %s" % quote(part.max_time or "UNLIMITED"))
    lines.append(pad + "fabric:")
    for text in fabric.comments:
        _comment(lines, 10, text)
    lines.append(pad + "  type: %s" % quote(fabric.type))
    if fabric.hcas:
        lines.append(pad + "  hcas: [%s]" % ", ".join(quote(h) for h in fabric.hcas))
    if fabric.socket_ifname:
        lines.append(pad + "  socket_ifname: %s" % quote(fabric.socket_ifname))
    if fabric.gid_index is not None:
        lines.append(pad + "  roce:")
        lines.append(pad + "    gid_index: %d" % fabric.gid_index)


def _login(lines: List[str], login) -> None:
    lines.append("    login:")
    for key in ("host", "port", "user", "identity_file", "known_hosts", "proxy_jump"):
        value = getattr(login, key)
        if value is not None and not (key == "port" and value == 22):
            lines.append("      %s: %s" % (key, quote(value)))


def _cluster(lines: List[str], draft: ClusterDraft) -> None:
    from slurmkit.script.sbatch_header import slurm_duration

    facts = draft.facts
    lines.append("  %s:" % facts.name)
    about = ["Slurm %s" % printable(facts.version or "of unknown release"),
             "accounting %s" % ("on (sacct answers for ended jobs)" if facts.accounting else "off")]
    if facts.max_array_size:
        about.append("MaxArraySize=%d" % facts.max_array_size)
    if facts.max_array_tasks:
        about.append("max_array_tasks=%d" % facts.max_array_tasks)
    about.append("%s, %d leaf switch%s" % (facts.topology_plugin or "no topology plugin", facts.leaves,
                                          "" if facts.leaves == 1 else "es"))
    _comment(lines, 4, "; ".join(about))
    for text in facts.notes + draft.notes:
        _comment(lines, 4, text)
    if draft.slurm_conf:
        lines.append("    slurm_conf: %s" % quote(draft.slurm_conf))
    if draft.login is not None:
        _login(lines, draft.login)
    if facts.default_partition:
        lines.append("    default_partition: %s" % quote(facts.default_partition))
    _comment(lines, 4, "Slurm's cap on the wait of --switches=N@WAIT (SchedulerParameters max_switch_wait=%d%s): "
                       "a longer wait would be cut to it" % (facts.switch_wait_cap, "" if facts.switch_wait_cap != 300
                                                            else ", or Slurm's default"))
    lines.append("    max_switch_wait: %s" % quote(slurm_duration(facts.switch_wait_cap)))
    if facts.switch_group_features:
        _comment(lines, 4, "node features that each mark whole leaf switches: a heavy job over several leaves "
                           "stays in one group")
        lines.append("    switch_group_features: [%s]" % ", ".join(quote(f) for f in facts.switch_group_features))
    lines.append("    partitions:")
    for part in facts.partitions.values():
        _partition(lines, part, draft.fabrics.get(part.name, NOT_PROBED))


def site_text(name: str, drafts: Sequence[ClusterDraft], written: str) -> str:
    """The whole file: ``name`` the site, ``drafts`` its clusters (the first the default), ``written`` a
    line saying when and how (the caller's clock and command, kept out of this pure function)."""
    lines = ["# A site file drafted by `slurmkit site init` %s." % printable(written),
             "# Values come from Slurm (scontrol show partition, node, topology, config) and, where the nodes",
             "# were probed, from a short job per node type.  Lines that start with 'guess:' are what neither",
             "# could say for sure: check each one before researchers use this file.  Then, and whenever the",
             "# cluster changes:",
             "#   slurmkit site check --live THIS_FILE",
             "site: %s" % quote(name),
             "description: %s" % quote("drafted by slurmkit site init from %s"
                                       % ", ".join(d.facts.name for d in drafts)),
             "defaults:",
             "  cluster: %s" % quote(drafts[0].facts.name)]
    lines.append("clusters:")
    for draft in drafts:
        _cluster(lines, draft)
    return "\n".join(lines) + "\n"
