"""The ``slurmkit`` command group.

Subcommands live in ``job_commands``, ``site_commands`` and
``cluster_commands`` and are imported only when invoked: every submission is
a fresh process, and it should not pay for defining the other commands.
"""

import importlib

import click

from slurmkit.cli.options import CONTEXT, root_site_option

# name -> "module:attribute"
COMMANDS = {
    "render": "slurmkit.cli.job_commands:render",
    "submit": "slurmkit.cli.job_commands:submit",
    "status": "slurmkit.cli.job_commands:status",
    "wait": "slurmkit.cli.job_commands:wait",
    "cancel": "slurmkit.cli.job_commands:cancel",
    "templates": "slurmkit.cli.site_commands:templates",
    "images": "slurmkit.cli.site_commands:images",
    "site": "slurmkit.cli.site_commands:site",
    "topology": "slurmkit.cli.cluster_commands:topology",
    "clusters": "slurmkit.cli.cluster_commands:clusters_command",
    "health": "slurmkit.cli.health_commands:health",
    "daemon": "slurmkit.cli.requeue_commands:daemon",
    "jobs": "slurmkit.cli.requeue_commands:jobs",          # hidden: the old name of `daemon jobs`
    "sweep": "slurmkit.cli.sweep_commands:sweep",
    "logs": "slurmkit.cli.observe_commands:logs",
    "why": "slurmkit.cli.observe_commands:why",
    "eff": "slurmkit.cli.observe_commands:eff",
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def __init__(self, *args, lazy_commands=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(self.lazy_commands))

    def get_command(self, ctx, name):
        target = self.lazy_commands.get(name)
        if target is None:
            return super().get_command(ctx, name)
        module, attribute = target.split(":")
        return getattr(importlib.import_module(module), attribute)


class MovedGroup(click.Group):
    """The old name of a group that moved: hidden from help, one note on stderr, then that very group.

    It shares the group's callback, parameters and subcommands, so the old
    name cannot drift from the new one; only the usage line says the old name.
    """

    def __init__(self, name, moved_to, target):
        super().__init__(name, commands=target.commands, callback=target.callback, params=target.params,
                         help=target.help, invoke_without_command=target.invoke_without_command,
                         no_args_is_help=target.no_args_is_help, context_settings=target.context_settings,
                         hidden=True)
        self.note = "Note: 'slurmkit %s' is now 'slurmkit %s'" % (name, moved_to)

    def parse_args(self, ctx, args):
        if not ctx.resilient_parsing:      # not while the shell completes a word
            click.echo(self.note, err=True)
        return super().parse_args(ctx, args)


@click.group(cls=LazyGroup, lazy_commands=COMMANDS, context_settings=CONTEXT)
@click.version_option(package_name="slurmkit", message="slurmkit %(version)s")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@root_site_option
def cli(debug):
    """Topology-aware Slurm job submission for GPU sites.

    \b
    Example:
      slurmkit submit --site mysite -N 2 --comm heavy -- .venv/bin/python train.py
    """


def help_text(args):
    """What ``slurmkit ARGS`` (``--help``, or ``COMMAND --help``) prints: for the fast path's kept copy."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            cli.main(args=list(args), prog_name="slurmkit", standalone_mode=False)
        except click.exceptions.Exit:
            pass
    return out.getvalue()
