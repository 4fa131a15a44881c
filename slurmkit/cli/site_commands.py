"""Site commands: ``site validate|show|trust`` and ``templates``."""

import click

from slurmkit.cli.cluster_commands import trust_command
from slurmkit.cli.options import (CONTEXT, StrictInt, cluster_option, json_option, pass_session, print_json,
                                  site_option, text_value, warn)


@click.command(context_settings=CONTEXT)
@site_option
def templates(site):
    """List the job templates (the site's own first, then the built-ins).

    \b
    Example:
      slurmkit templates --site mysite
    """
    from slurmkit.cli import display
    from slurmkit.script import templates as job_templates
    from slurmkit.site import find_site

    site_obj = find_site(site) if site else None
    click.echo(display.templates_table(job_templates.available_templates(site_obj), job_templates.template_description))


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


@site.command("init", context_settings=CONTEXT)
@site_option
@click.option("--cluster", "-M", "clusters", multiple=True, metavar="NAME", callback=text_value,
              help="Only this cluster of the site (repeatable; default: every cluster of the site, or without "
                   "--site the cluster this machine's Slurm commands talk to).")
@click.option("--output", "-o", metavar="FILE", callback=text_value,
              help="Write the site file here (default: print it).")
@click.option("--force", is_flag=True, help="Replace FILE if it exists.")
@click.option("--no-probe", is_flag=True,
              help="Do not run the short probe job per node type (interfaces, RDMA devices, runtimes).")
@click.option("--probe-wait", type=StrictInt(min=1, max=3600), default=30, show_default=True, metavar="SECONDS",
              help="How long each probe job may wait for a free node before it gives up.")
@click.option("--login", metavar="[USER@]HOST[:PORT]", callback=text_value,
              help="Read a cluster that is in no site file over SSH on this login node (its host key must be in "
                   "known_hosts; it is never accepted here); the draft keeps it as the cluster's login. "
                   "--cluster NAME names the cluster (default: Slurm's ClusterName).")
@click.option("--identity-file", metavar="FILE", callback=text_value, help="With --login: the SSH private key.")
@click.option("--known-hosts", metavar="FILE", callback=text_value,
              help="With --login: the known_hosts file the host key is checked against (default: OpenSSH's).")
@click.option("--proxy-jump", metavar="[USER@]HOST[:PORT]", callback=text_value,
              help="With --login: the bastion to reach the login node through.")
def site_init(site, clusters, output, force, no_probe, probe_wait, login, identity_file, known_hosts, proxy_jump):
    """Draft a site file from the live clusters: partitions, GPUs, gres, memory, limits, switches.

    Reads what Slurm knows (scontrol show partition, node, topology, config)
    of each cluster of the site given, of the cluster behind --login, or of
    the local cluster, and what only
    the nodes know through one short job per node type (the interface that
    carries the node's address, RDMA ports from sysfs, accelerator devices,
    container runtimes), and writes a commented YAML site file that 'site
    validate' accepts.  What neither could say for sure is marked 'guess:';
    an existing FILE is kept unless --force.

    \b
    Example:
      slurmkit site init -o ~/.config/slurmkit/sites/mysite.yaml
      slurmkit site init --site mysite --cluster hopper -o hopper.yaml
      slurmkit site init --login alice@hopper-login.example.org --cluster hopper -o hopper.yaml
    """
    from slurmkit.discovery.init import init_site, login_cluster
    from slurmkit.errors import UsageError
    from slurmkit.site import find_site

    reached = None
    if login:
        if site or len(clusters) > 1:
            raise UsageError("--login reads one cluster that is in no site file: it goes without --site, with at "
                             "most one --cluster NAME")
        reached = login_cluster(login, clusters[0] if clusters else None, identity_file, known_hosts, proxy_jump)
        clusters = ()
    elif identity_file or known_hosts or proxy_jump:
        raise UsageError("--identity-file, --known-hosts and --proxy-jump go with --login")
    result = init_site(find_site(site) if site else None, clusters, output, force, probe=not no_probe,
                       probe_wait=probe_wait, login=reached)
    warn(result.warnings)
    if output is None:
        click.echo(result.text, nl=False)
    else:
        click.echo("%s: written (%s); %d guess%s to check (lines marked 'guess:')"
                   % (output, ", ".join(c.name for c in result.clusters), result.guesses,
                      "" if result.guesses == 1 else "es"))


@site.command("check", context_settings=CONTEXT)
@site_option
@click.option("--live", is_flag=True,
              help="Compare the file with the clusters now (without it the file is only validated).")
@click.option("--cluster", "-M", "clusters", multiple=True, metavar="NAME", callback=text_value,
              help="Only this cluster of the site (repeatable; default: every cluster of the site).")
@json_option
@click.option("--no-probe", is_flag=True,
              help="Do not run the short probe job per node type: the fabrics (HCAs, socket interface) go unchecked.")
@click.option("--probe-wait", type=StrictInt(min=1, max=3600), default=30, show_default=True, metavar="SECONDS",
              help="How long each probe job may wait for a free node before it gives up.")
@click.argument("named_site", required=False, metavar="[SITE]", callback=text_value)
def site_check(site, live, clusters, as_json, no_probe, probe_wait, named_site):
    """Check the site file against the live clusters: one line per finding with its fix.

    With --live, reads each cluster as 'site init' does (partitions, nodes,
    topology, config, one probe job per node type) and reports partitions the
    cluster no longer has, gres types and GPU counts that differ from the
    nodes', limits above Slurm's, HCAs and socket interfaces the nodes do not
    have, switch-group features no node carries, and waits Slurm caps.  Each
    finding is 'fail' (jobs fail or never start), 'slower' (jobs run slower)
    or 'warning'; exit 1 when any is fail or slower, 0 otherwise.  Without
    --live the file is only validated, as 'site validate' does.  SITE (a
    name or a file) is the same as --site.

    \b
    Example:
      slurmkit site check --live mysite.yaml
      slurmkit site check --live --site mysite --cluster hopper --json
    """
    from slurmkit.cli import display
    from slurmkit.discovery.check import NO_SITE, check_site
    from slurmkit.errors import UsageError
    from slurmkit.site import find_site, resolve_site_path

    if named_site and site and named_site != site:
        raise UsageError("the site is named twice (--site %s and %s): give it once" % (site, named_site))
    site = named_site or site
    if not site:
        raise UsageError(NO_SITE)
    if not live:
        problems, warnings, ok = display.validate_report([resolve_site_path(site)])
        warn(warnings)
        for line in problems:
            click.echo(line, err=True)
        if as_json:
            print_json({"live": False, "problems": problems, "warnings": warnings})
        else:
            for path in ok:
                click.echo("%s: ok (validated only; --live compares it with the clusters)" % path)
        return 2 if problems else 0
    result = check_site(find_site(site), clusters, probe=not no_probe, probe_wait=probe_wait)
    if as_json:
        print_json(dict(result.to_dict(), live=True))
    else:
        for finding in result.findings:
            click.echo(finding.line())
        harmful = sum(1 for f in result.findings if f.severity != "warning")
        # Without the probe a clean result says nothing of HCAs and interfaces: say so, not a clean bill.
        click.echo("%s: %d finding%s, %d that make jobs fail or run slower%s"
                   % (", ".join(result.clusters), len(result.findings), "" if len(result.findings) == 1 else "s",
                      harmful, "; fabrics not checked (--no-probe)" if no_probe else ""))
    return 1 if result.harmful else 0


site.add_command(trust_command)
