"""`slurmkit health check` on the node it runs on: which cluster, node and partition this is, what
Slurm says of the node, the check itself, and with ``slurm`` the drain or resume it decides.

The command (:mod:`slurmkit.cli.health_commands`) checks its options and prints; everything in
between is here, so that a site's own tooling runs the same check from Python.  Each check runs
under the site's watchdog (``health.check_timeout``), which ends it, changing nothing, should it
hang.  Like the command, this module is on the path of every node's periodic check: it imports
the health engine and what the check needs, never jinja2 or paramiko.
"""

from typing import NamedTuple, Optional, Tuple

from slurmkit.health.findings import NodeReport


class ThisNodeCheck(NamedTuple):
    report: NodeReport
    applied: Optional[object] = None      # slurmside.Applied: what was done in Slurm (with ``slurm``)
    warnings: Tuple[str, ...] = ()        # what was not compared, and why


def check_plan(source: str) -> ThisNodeCheck:
    """The check a sweep planned (:class:`slurmkit.health.plan.CheckPlan` as JSON, in the file
    ``source`` or ``-`` for standard input): node, cluster and partition are already decided, and
    Slurm is not asked."""
    from slurmkit.health import node as engine
    from slurmkit.health.plan import CheckPlan, read_source
    from slurmkit.health.watchdog import Watchdog

    plan = CheckPlan.from_json(read_source(source, "check plan"))
    with Watchdog(plan.check_timeout):
        return ThisNodeCheck(engine.check_node(plan))


def check_this_node(site, cluster: Optional[str] = None, node: Optional[str] = None,
                    partition: Optional[str] = None, slurm: bool = False, dry_run: bool = False) -> ThisNodeCheck:
    """Check this node by its partition's thresholds; with ``slurm``, drain it on a failure and resume
    it when slurmkit drained it and it is clean again (``dry_run``: say so, change nothing).

    The cluster is ``cluster`` or the one this node belongs to, the node ``node`` or slurmd's own
    name, the partition ``partition`` or the node's own in Slurm.  A host check of a named partition
    without accelerators needs no Slurm; when Slurm does not answer there, the check runs without
    its Gres and jobs and says so in ``warnings``.
    """
    from slurmkit.errors import SlurmkitError, UsageError
    from slurmkit.health import node as engine, plan as plans, slurmside
    from slurmkit.health.watchdog import Watchdog
    from slurmkit.session import Session

    warnings = []
    with Session(site) as session, Watchdog(site.health.check_timeout):
        the_cluster = slurmside.own_cluster(site, cluster)
        name = slurmside.own_node_name(node)
        info = None
        if partition:
            plans.choose_partition(the_cluster, (), partition)   # an unknown one is refused before Slurm
        # A host check needs no Slurm; accelerator counts (Gres), stray GPU processes (jobs),
        # the node's own partitions and --slurm do.
        needs_slurm = slurm or not partition or the_cluster.partitions[partition].accelerator != "none"
        if needs_slurm:
            try:
                info = slurmside.node_record(session.backend(the_cluster.name), name)
            except SlurmkitError as exc:
                # With a partition named, a host check runs without Slurm's record of a node Slurm does not
                # know (checked as a name of the admin's); other usage errors stand.
                if slurm or not partition or (isinstance(exc, UsageError)
                                               and not isinstance(exc, slurmside.UnknownNode)):
                    raise
                warnings.append("Slurm not asked about %s (%s): its Gres and jobs are not compared" % (name, exc))
        part = plans.choose_partition(the_cluster, info.partitions if info else (), partition)
        report = engine.check_node(plans.build(site, the_cluster, part, name, info))
        applied = None
        if slurm:
            applied = slurmside.decide_and_apply(session.backend(the_cluster.name), report,
                                                 site.health.resume_after, site.health.drain_cap,
                                                 dry_run, node_info=info)
    return ThisNodeCheck(report, applied, tuple(warnings))
