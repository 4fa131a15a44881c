"""Site commands: ``site validate|show|trust`` and ``templates``."""

import click

from slurmkit.cli.cluster_commands import trust_command
from slurmkit.cli.options import CONTEXT, cluster_option, json_option, pass_session, print_json, site_option


@click.command(context_settings=CONTEXT)
@site_option
def templates(site):
    """List the job templates (the site's own first, then the built-ins).

    \b
    Example:
      slurmkit templates --site mysite
    """
    from slurmkit.cli import display
    from slurmkit.script import render as rendering
    from slurmkit.site import find_site

    site_obj = find_site(site) if site else None
    click.echo(display.templates_table(rendering.available_templates(site_obj), rendering.template_description))


@click.command(context_settings=CONTEXT)
@site_option
@cluster_option(help="Only this cluster (default: every cluster of the site).")
@json_option
@pass_session
def images(session, cluster, as_json):
    """List the container images each cluster can run (--image NAME), with its runtime.

    A path or a registry reference works too where the runtime takes one
    (pyxis, apptainer, podman-hpc).

    \b
    Example:
      slurmkit images --site mysite --cluster hopper
    """
    from slurmkit.cli import display
    from slurmkit.containers import catalog

    clusters = [session.site.cluster(cluster)] if cluster else list(session.site.clusters.values())
    rows = catalog.rows(clusters)
    if as_json:
        print_json({"images": [row.to_dict() for row in rows],
                    "runtimes": [{"cluster": c, "partition": p, "runtime": r} for c, p, r in catalog.runtimes_of(clusters)]})
    elif rows:
        click.echo(display.images_table(rows))
    else:
        click.echo("no images defined (the site's clusters.<cluster>.containers.images)")


@click.group(context_settings=CONTEXT)
def site():
    """Site configs: validate, show, trust login nodes.

    \b
    Example:
      slurmkit site validate site_configs/*.yaml
    """


@site.command("validate", context_settings=CONTEXT)
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
def site_validate(files):
    """Check site config files: one line per problem, exit 2 if any.

    \b
    Example:
      slurmkit site validate ~/.config/slurmkit/sites/mysite.yaml
    """
    from slurmkit.cli import display

    problems, warnings, ok = display.validate_report(files)
    for line in warnings:
        click.echo("Warning: %s" % line, err=True)
    for line in problems:
        click.echo(line, err=True)
    for path in ok:
        click.echo("%s: ok" % path)
    return 2 if problems else 0


@site.command("show", context_settings=CONTEXT)
@site_option
@json_option
@pass_session
def site_show(session, as_json):
    """Show the site: clusters, partitions, fabric settings and defaults.

    \b
    Example:
      slurmkit site show --site mysite --json
    """
    from slurmkit.cli import display

    if as_json:
        print_json(display.site_dict(session.site))
    else:
        click.echo(display.site_text(session.site))


site.add_command(trust_command)
