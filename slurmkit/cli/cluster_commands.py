"""Cluster commands: ``clusters`` (is every cluster reachable?), ``topology``, ``site trust``.

Thin commands over :mod:`slurmkit.federation.survey` and :mod:`slurmkit.cli.display`;
``trust`` is attached to the ``site`` group by ``site_commands``.
"""

import click

from slurmkit.cli.options import CONTEXT, cluster_option, json_option, pass_session, print_json, site_option
from slurmkit.cli.display import format_table as _table


def _accelerators(status):
    # "h100 28/32": the gres type is what users know; an untyped gres keeps its name.
    return ", ".join("%s %d/%d" % (key.split(":")[-1], v["idle"], v["total"])
                     for key, v in sorted(status.accelerators.items())) or "-"


def _row(status):
    if not status.reachable:
        return [status.name, "unreachable", status.version or "-", "-", "-", "-", "-",
                "%.0f" % status.rtt_ms, status.reason]
    return [status.name, "ok", status.version or "-", ",".join(status.partitions) or "-",
            "%d/%d" % (status.nodes_idle, status.nodes_total), _accelerators(status), status.pending_jobs,
            "%.0f" % status.rtt_ms, ""]


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
    """
    from slurmkit.federation import survey

    statuses = survey.probe_all(session, list(names) or None)
    if as_json:
        print_json([s.to_dict() for s in statuses])
    else:
        click.echo(_table([_row(s) for s in statuses],
                          ["CLUSTER", "REACH", "VERSION", "PARTITIONS", "NODES", "ACCELERATORS", "PENDING",
                           "RTT_MS", "REASON"]))
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
    """
    from slurmkit.remote import trust

    offer = trust.login_host_key(session.site, cluster)
    click.echo("cluster %s: login node %s" % (offer.cluster, offer.hostport))
    click.echo("host key: %s %s" % (offer.keytype, offer.fingerprint))
    click.echo("known_hosts file: %s" % offer.target_file)
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
@click.option("--partition", "-p", metavar="NAME", help="Count only this partition's accelerators.")
@pass_session
def topology(session, cluster, partition):
    """Draw the cluster's switch tree with each node's state and free GPUs."""
    from slurmkit.cli import display

    click.echo(display.topology_report(session, cluster, partition))
