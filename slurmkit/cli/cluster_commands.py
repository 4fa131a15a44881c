"""Cluster commands: ``clusters`` (is every cluster reachable?), ``topology``, ``site trust``.

Thin commands over :mod:`slurmkit.federation.survey` and :mod:`slurmkit.cli.display`;
``trust`` is attached to the ``site`` group by ``site_commands``.
"""

import click

from slurmkit.cli.options import (CONTEXT, cluster_option, json_option, pass_session, print_json, site_option,
                                  text_value)


@click.command("clusters", context_settings=CONTEXT)
@site_option
@json_option
@click.argument("names", nargs=-1, metavar="[CLUSTER]...")
@pass_session
def clusters_command(session, as_json, names):
    """Probe the site's clusters: reachability, Slurm version, idle nodes and accelerators, pending jobs.

    One command per cluster (one SSH round trip for a remote one), all
    clusters in parallel.  Idle counts are idle/total; an unreachable
    cluster shows why on its row.  Exits 1 only when no cluster is reachable.

    \b
    Examples:
      slurmkit clusters
      slurmkit clusters beta gamma --json
    """
    from slurmkit.cli import display
    from slurmkit.federation import survey

    statuses = survey.probe_all(session, list(names) or None)
    if as_json:
        print_json([s.to_dict() for s in statuses])
    else:
        click.echo(display.clusters_table(statuses))
    return 1 if statuses and not any(s.reachable for s in statuses) else 0


@click.command("trust", context_settings=CONTEXT)
@site_option
@click.option("--yes", "-y", is_flag=True, help="Trust the key without asking (it is still printed first).")
@click.argument("cluster", metavar="CLUSTER")
@pass_session
def trust_command(session, yes, cluster):
    """Show the host key of CLUSTER's login node and, once confirmed, trust it.

    The key is fetched with an SSH key exchange only (nothing is sent), its
    SHA256 fingerprint is printed, and after confirmation it is appended to
    the login's known_hosts file.  Compare the fingerprint with one obtained
    out of band (e.g. from the cluster's admins) before saying yes.

    \b
    Example:
      slurmkit site trust beta
    """
    from slurmkit.cli import display
    from slurmkit.remote import trust

    offer = trust.login_host_key(session.site, cluster)
    click.echo(display.host_key_offer_text(offer))
    if offer.trusted_in:
        click.echo("already trusted (%s); nothing to do" % offer.trusted_in)
        return 0
    if not yes and not click.confirm("Trust this key?", default=False):
        click.echo("not trusted; nothing was written", err=True)
        return 1
    if trust.trust_login_key(offer):
        click.echo("trusted: added %s %s to %s" % (offer.hostport, offer.keytype, offer.target_file))
    else:
        click.echo("already trusted (%s); nothing to do" % offer.target_file)
    return 0


@click.command(context_settings=CONTEXT)
@site_option
@cluster_option
@click.option("--partition", "-p", metavar="NAME", callback=text_value,
              help="Count only this partition's accelerators.")
@click.option("--detail/--summary", default=None,
              # 64: topology.SUMMARY_ABOVE_NODES, not imported here to keep start-up light.
              help="Every node, or one line per switch (default: per switch above 64 nodes).")
@pass_session
def topology(session, cluster, partition, detail):
    """Draw the cluster's switch tree with each node's state and free GPUs.

    \b
    Examples:
      slurmkit topology
      slurmkit topology --cluster beta --partition gpu
    """
    from slurmkit.cli import display

    click.echo(display.topology_report(session, cluster, partition, detail))
