"""``slurmkit health check`` and ``slurmkit health sweep``: thin commands over :mod:`slurmkit.health`.

``check`` is what runs on every node (from cron, by hand, or as slurmd's
HealthCheckProgram every few minutes on thousands of nodes): it imports the
site (from its cache), psutil and the checks it runs, and neither jinja2 nor
paramiko.
"""

import click

from slurmkit.cli.options import CONTEXT, cluster_option, json_option, pass_session, print_json, site_option, warn


@click.group("health", context_settings=CONTEXT)
def health():
    """Node health: check a node, sweep clusters, drain and resume nodes in Slurm.

    \b
    Examples:
      slurmkit health check --partition gpu
      slurmkit health check --slurm          # as slurmd's HealthCheckProgram
      slurmkit health sweep --cluster all --drain
    """


@health.command("check", context_settings=CONTEXT)
@site_option
@cluster_option(help="The node's cluster (default: the one whose slurm_conf is $SLURM_CONF or exists here, "
                     "else the site's default).")
@click.option("--node", "-n", metavar="NAME",
              help="Check as this node (default: $SLURMD_NODENAME, else the -N of the slurmd that started this, "
                   "else the host's short name).")
@click.option("--partition", "-p", metavar="NAME",
              help="Check against this partition's thresholds (default: from Slurm's record of the node).")
@json_option
@click.option("--prom", "prom_file", metavar="FILE",
              help="Also write the results as a Prometheus textfile (atomically), e.g. for node_exporter.")
@click.option("--slurm", "slurm_mode", is_flag=True,
              help="HealthCheckProgram mode: drain this node on failure, resume it after enough clean checks "
                   "(only if slurmkit drained it).")
@click.option("--dry-run", is_flag=True, help="With --slurm: say what would change in Slurm, change nothing.")
@click.option("--plan", "plan_source", metavar="FILE|-",
              help="Check against a plan (JSON) instead of the site: what 'health sweep' sends each node.")
@click.option("--relay", "relay_source", metavar="FILE|-",
              help="Check a group of nodes from this one for 'health sweep' (health.relays); prints their rows "
                   "as JSON.")
def check(site, cluster, node, partition, as_json, prom_file, slurm_mode, dry_run, plan_source, relay_source):
    """Check this node: host, GPUs or NPUs, InfiniBand, by its partition's thresholds.

    Exit 0 when healthy, 1 when a check failed, 2 on bad usage or config.
    Warnings never fail.  With --slurm, the node is drained with a reason
    naming every failing check, and resumed after health.resume_after clean
    checks only when slurmkit drained it; a node drained by anyone else is
    left alone.  A watchdog (health.check_timeout) ends the check, changing
    nothing, should it take too long.

    \b
    Examples:
      slurmkit health check --partition gpu --json
      slurmkit health check --prom /var/lib/node_exporter/textfile/slurmkit.prom
      slurmkit health check --slurm --site /etc/slurmkit/sites/mysite.yaml
    """
    from slurmkit.errors import SlurmkitError, UsageError
    from slurmkit.health import this_node

    if dry_run and not slurm_mode:
        raise UsageError("--dry-run goes with --slurm (a plain check changes nothing anyway)")
    if relay_source:
        if plan_source or slurm_mode or cluster or node or partition or prom_file:
            raise UsageError("--relay checks the nodes its job names, as a sweep asked; it goes with no other "
                             "option but --json")
        from slurmkit.health import relay

        click.echo(relay.main_relay(relay_source))
        return 0
    if plan_source:
        if slurm_mode or cluster or node or partition:
            raise UsageError("--plan already names the node, cluster and partition; it cannot go with "
                             "--slurm, --cluster, --node or --partition")
        done = this_node.check_plan(plan_source)
    else:
        from slurmkit.cli.options import require_site
        from slurmkit.site import find_site

        done = this_node.check_this_node(find_site(require_site(site)), cluster=cluster, node=node,
                                         partition=partition, slurm=slurm_mode, dry_run=dry_run)
    warn(done.warnings)
    report, applied = done.report, done.applied
    if prom_file:
        from slurmkit.health import prom

        try:
            prom.write(prom_file, report)
        except OSError as exc:
            raise SlurmkitError("cannot write %s: %s" % (prom_file, exc.strerror or exc)) from None
    if as_json:
        data = report.to_dict()
        if applied is not None:
            data["slurm"] = {"action": applied.decision.action, "done": applied.done, "text": applied.text,
                             "reason": applied.decision.reason, "error": applied.error or None}
        print_json(data)
    else:
        from slurmkit.health.report import node_text

        click.echo(node_text(report, applied.text if applied is not None else None))
    if applied is not None and applied.error:
        raise SlurmkitError("%s: %s" % (report.node, applied.text))
    return 0 if report.healthy else 1


@health.command("sweep", context_settings=CONTEXT)
@site_option
@cluster_option(dest="cluster_spec", metavar="NAME[,NAME]|all",
                help="Clusters to sweep (default: the site's default cluster); 'all' for every one.")
@click.option("--partition", "-p", metavar="NAME", help="Only the nodes of this partition.")
@click.option("--node", "-n", "nodes", metavar="NAME", multiple=True, help="Only this node (repeatable).")
@click.option("--drain", is_flag=True,
              help="Drain failing nodes and resume the ones slurmkit drained once clean (ownership rules, cap).")
@click.option("--dry-run", is_flag=True, help="Say what --drain would change, change nothing.")
@json_option
@pass_session
def sweep(session, cluster_spec, partition, nodes, drain, dry_run, as_json):
    """Check every node of one or all clusters over SSH, in parallel; one table.

    Each node is reached at its NodeAddr (health.ssh, else the cluster's
    login settings) and runs 'slurmkit health check' there (health.command),
    health.fanout nodes at a time, each within health.node_timeout.  An
    unreachable node is reported, never drained.  A lock keeps two sweeps
    (say, cron's) from overlapping.  Exit 0 when every node is healthy, 1
    otherwise.

    \b
    Examples:
      slurmkit health sweep --cluster all
      slurmkit health sweep --cluster beta --partition gpu --drain --dry-run
      */10 * * * * slurmkit health sweep --site mysite --cluster all --drain --json > /var/log/slurmkit-sweep.json
    """
    from slurmkit.health import fleet

    site = session.site
    if cluster_spec == "all":
        names = list(site.clusters)
    elif cluster_spec:
        names = [n.strip() for n in cluster_spec.split(",") if n.strip()]
    else:
        names = [site.cluster().name]
    result = fleet.sweep(session, names, partition=partition, drain=drain, dry_run=dry_run,
                           nodes=list(nodes) or None)
    if as_json:
        print_json(result.to_dict())
    else:
        from slurmkit.health.report import sweep_text

        click.echo(sweep_text(result))
    return 0 if result.ok else 1
