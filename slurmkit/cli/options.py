"""Options shared by several commands, as decorators (one definition each), and output helpers."""

import functools
import json

import click

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def warn(warnings):
    """Each warning as one ``Warning: ...`` line on stderr."""
    for warning in warnings:
        click.echo("Warning: %s" % warning, err=True)


def print_json(data):
    click.echo(json.dumps(data, indent=2, sort_keys=True))


def _complete_sites(ctx, param, incomplete):
    from slurmkit.site import list_sites

    return [name for name in sorted(list_sites()) if name.startswith(incomplete)]


# Where the group's own --site (``slurmkit --site x render ...``) is kept for the subcommand.
ROOT_SITE = "slurmkit.root_site"


def _site_value(ctx, param, value):
    """The subcommand's --site; else the one given before the subcommand; else $SLURMKIT_SITE.

    The subcommand's own option is what the user typed last, so it wins; the
    group's, typed on the command line, wins over the environment variable.
    """
    from click.core import ParameterSource

    root = ctx.meta.get(ROOT_SITE)
    if root and ctx.get_parameter_source(param.name) is not ParameterSource.COMMANDLINE:
        return root
    return value


def root_site_option(func):
    """--site on the ``slurmkit`` group itself, handed to whichever subcommand runs."""
    def remember(ctx, param, value):
        if value:
            ctx.meta[ROOT_SITE] = value
        return value

    return click.option("--site", "site", metavar="NAME|PATH", shell_complete=_complete_sites,
                        callback=remember, expose_value=False,
                        help="Site config for the subcommand (same as its own --site).")(func)


def site_option(func):
    return click.option("--site", "site", envvar="SLURMKIT_SITE", metavar="NAME|PATH",
                        shell_complete=_complete_sites, callback=_site_value,
                        help="Site config: a name on the site search path or a YAML file "
                             "(default: $SLURMKIT_SITE).")(func)


def cluster_option(func):
    return click.option("--cluster", "-M", metavar="NAME",
                        help="Cluster of the site (default: the site's default cluster).")(func)


def json_option(func):
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(func)


def _parse_env(ctx, param, values):
    env = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter("%r is not KEY=VALUE" % item, ctx=ctx, param=param)
        env[key] = value
    return env


JOB_OPTIONS = [
    click.option("--partition", "-p", metavar="NAME", help="Partition (default: the site's default)."),
    click.option("--nodes", "-N", type=click.IntRange(min=1), default=1, show_default=True,
                 help="Number of nodes."),
    click.option("--gpus-per-node", type=click.IntRange(min=0), metavar="N",
                 help="Accelerators per node (default: all of the partition's)."),
    click.option("--cpus-per-task", "-c", type=click.IntRange(min=1), metavar="N",
                 help="CPUs per task (torchrun: its one task per node runs all that node's workers)."),
    click.option("--procs-per-node", type=click.IntRange(min=1), metavar="N",
                 help="Workers per node (default: one per GPU; one on a partition without GPUs). torchrun "
                      "starts N workers, srun N tasks; each needs a CPU of its own."),
    click.option("--time", "-t", "time_limit", metavar="TIME", help="Time limit, e.g. 12:00:00 (default: the site's)."),
    click.option("--comm", type=click.Choice(["heavy", "light"]), default="light", show_default=True,
                 help="heavy: bandwidth-hungry, keep the job under as few leaf switches as possible."),
    click.option("--switches", type=click.IntRange(min=1), metavar="N",
                 help="With --comm heavy: use N leaf switches instead of computing it from the topology."),
    click.option("--template", "-T", metavar="NAME", help="Template (see 'slurmkit templates')."),
    click.option("--job-name", "-J", metavar="NAME", help="Job name (default: the command's name)."),
    click.option("--env", "-e", "env", multiple=True, callback=_parse_env, metavar="KEY=VALUE",
                 help="Export a variable in the job (repeatable)."),
    click.option("--account", "-A", metavar="NAME", help="Account to charge."),
    click.option("--qos", "-q", metavar="NAME", help="Quality of service."),
    click.option("--output", "-o", metavar="PATTERN",
                 help="Output file pattern (default: slurmkit-NAME-%j.out, the job name with every "
                      "character but letters, digits, '.', '_' and '-' made '_')."),
    click.option("--nodelist", "-w", metavar="NODES",
                 help="Run on these nodes (a Slurm hostlist such as an[1-2]), e.g. to pin a job to a node."),
    click.option("--exclude", "-x", metavar="NODES",
                 help="Never run on these nodes (a Slurm hostlist such as an[3-4])."),
    click.option("--exclusive", is_flag=True, help="Do not share the nodes with other jobs."),
    click.option("--token", metavar="TOKEN",
                 help="Idempotency token: if a job with this token exists, it is reported instead of "
                      "submitting again."),
    click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED),
]


def job_options(func):
    for option in reversed(JOB_OPTIONS):
        func = option(func)
    return func


def job_spec_from(kwargs):
    """Build a JobSpec from the job options; pops them from ``kwargs``."""
    from slurmkit.script.render import JobSpec

    return JobSpec(
        command=tuple(kwargs.pop("command")), nodes=kwargs.pop("nodes"), gpus_per_node=kwargs.pop("gpus_per_node"),
        cpus_per_task=kwargs.pop("cpus_per_task"), time=kwargs.pop("time_limit"), comm=kwargs.pop("comm"),
        switches=kwargs.pop("switches"), template=kwargs.pop("template"), name=kwargs.pop("job_name"),
        env=kwargs.pop("env"), account=kwargs.pop("account"), qos=kwargs.pop("qos"), output=kwargs.pop("output"),
        exclusive=kwargs.pop("exclusive"), token=kwargs.pop("token"), procs_per_node=kwargs.pop("procs_per_node"),
        nodelist=kwargs.pop("nodelist"), exclude=_hostlist_names(kwargs.pop("exclude")))


def _hostlist_names(expression):
    """``an[3-4],bn1`` as the tuple of node names; empty without a value."""
    if not expression:
        return ()
    from slurmkit.slurm import hostlist

    return tuple(hostlist.expand(expression))


def pass_session(func):
    """Turn the --site value into an open Session, closed when the command ends."""

    @functools.wraps(func)
    def wrapper(*args, site=None, **kwargs):
        from slurmkit.session import Session
        from slurmkit.site import find_site

        with Session(find_site(_require_site(site))) as session:
            return func(session, *args, **kwargs)

    return wrapper


def _require_site(site):
    if site:
        return site
    from slurmkit.errors import UsageError
    from slurmkit.site import list_sites

    names = sorted(list_sites())
    raise UsageError("no site given; use --site NAME|PATH or set SLURMKIT_SITE (available: %s)"
                     % (", ".join(names) or "none found"))
