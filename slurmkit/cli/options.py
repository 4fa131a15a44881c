"""Options shared by several commands, as decorators (one definition each), and output helpers.

Every value is checked here, where the option it came from is still known,
so that a bad value is refused with that option's name (``Invalid value for
'--job-name' / '-J': ...``) instead of surfacing later as a message about a
script line.  Numbers are strict: click's own IntRange and FloatRange take
whatever Python's ``int()``/``float()`` take (``'٣'``, ``' 2 '``, ``'1_0'``,
``'nan'``), none of which sbatch or a researcher means as a number.
"""

import functools
import math
import re

import click

from slurmkit.cli.views import open_session, print_json, require_site, warn  # noqa: F401 (used by the commands)

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
# render and submit stop reading their own options at the first word of the
# command, as sbatch, srun, env and ssh do: in `submit python3 train.py -c 2`
# the `-c 2` belongs to train.py, not to slurmkit.
COMMAND_CONTEXT = dict(CONTEXT, allow_interspersed_args=False)

_ASCII_INT_RE = re.compile(r"[+-]?[0-9]+", re.ASCII)
_ASCII_FLOAT_RE = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


class StrictInt(click.ParamType):
    """A whole number in ASCII digits within [min, max]; nothing Python's int() merely tolerates."""

    name = "integer"

    def __init__(self, min=None, max=None):
        self.min, self.max = min, max

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            text = str(value)
            if not _ASCII_INT_RE.fullmatch(text):
                self.fail("%r is not a whole number (digits 0-9 only, no spaces)" % text, param, ctx)
            number = int(text)
        if self.min is not None and number < self.min:
            self.fail("%d is below the least allowed value, %d" % (number, self.min), param, ctx)
        if self.max is not None and number > self.max:
            self.fail("%d is above the most allowed value, %d" % (number, self.max), param, ctx)
        return number

    def __repr__(self):
        return "StrictInt(%r, %r)" % (self.min, self.max)


class StrictFloat(click.ParamType):
    """A finite decimal number (ASCII) of at least ``min``: never nan or inf."""

    name = "number"

    def __init__(self, min=None):
        self.min = min

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        else:
            text = str(value)
            if not _ASCII_FLOAT_RE.fullmatch(text):
                self.fail("%r is not a number (digits 0-9 and one '.', no spaces)" % text, param, ctx)
            number = float(text)
        if not math.isfinite(number):
            self.fail("%r is too large; leave the option out for no limit" % (value,), param, ctx)
        if self.min is not None and number < self.min:
            self.fail("%s is below the least allowed value, %s" % (value, self.min), param, ctx)
        return number

    def __repr__(self):
        return "StrictFloat(%r)" % (self.min,)


def text_value(ctx, param, value):
    """Refuse an empty value or one with control characters, naming the option.

    An empty ``--partition ''`` or ``--qos ''`` would otherwise silently fall
    back to the site's default, and a newline in any value would end an
    ``#SBATCH`` line (or a log line) early.
    """
    values = value if isinstance(value, tuple) else (value,)
    for item in values:
        if item is None:
            continue
        if not item.strip():
            raise click.BadParameter("must not be empty (leave the option out for the default)", ctx=ctx,
                                     param=param)
        if _CONTROL_RE.search(item):
            raise click.BadParameter("%r contains a control character (a newline, tab, ...)" % item, ctx=ctx,
                                     param=param)
        if item != item.strip():
            raise click.BadParameter("%r has leading or trailing spaces" % item, ctx=ctx, param=param)
    return value


def sbatch_value(check_name: str):
    """A callback checking an sbatch option's text with ``sbatch_header.<check_name>`` (the renderer's own
    rule, so the option and a job spec built elsewhere are held to one)."""
    def callback(ctx, param, value):
        if value is None:
            return value
        text_value(ctx, param, value)
        from slurmkit.script import sbatch_header

        return getattr(sbatch_header, check_name)(value)
    return callback


def time_value(ctx, param, value):
    """A Slurm time (``--time``), in the forms sbatch reads, ASCII digits only."""
    if value is None:
        return value
    text_value(ctx, param, value)
    from slurmkit import times

    try:
        times.slurm_time_seconds(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None
    return value




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


def cluster_option(func=None, *, metavar: str = "NAME", dest: str = "cluster",
                   help: str = "Cluster of the site (default: the site's default cluster)."):
    """``--cluster``/``-M``: one option for every command (the name, the letter, no empty value); what it
    accepts, its metavar and help, is the command's.  ``@cluster_option`` or ``@cluster_option(help=...)``."""
    option = click.option("--cluster", "-M", dest, metavar=metavar, callback=text_value, help=help)
    return option(func) if func is not None else option


def json_option(func):
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(func)


def _parse_env(ctx, param, values):
    """``KEY=VALUE`` items as a dict; a name Slurm or the job's shell owns is refused here, with the option."""
    from slurmkit.errors import UsageError
    from slurmkit.script.quoting import check_env_name

    env = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter("%r is not KEY=VALUE" % item, ctx=ctx, param=param)
        try:
            check_env_name(key, source="")
        except UsageError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param=param) from None
        if key in env and env[key] != value:
            # Like a shell, the last one wins; unlike a shell, say so.
            warn(["--env %s given twice (%r, then %r); the last one is used" % (key, env[key], value)])
        env[key] = value
    return env


def _mount_values(ctx, param, values):
    """Each ``--mount`` checked with the containers' grammar, refused here with the option."""
    from slurmkit.containers.grammar import parse_mount

    for value in values:
        try:
            parse_mount(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param=param) from None
    return tuple(values)


JOB_OPTIONS = [
    click.option("--partition", "-p", metavar="NAME", callback=text_value,
                 help="Partition (default: the site's default)."),
    click.option("--nodes", "-N", type=StrictInt(min=1), default=1, show_default=True,
                 help="Number of nodes."),
    click.option("--gpus-per-node", type=StrictInt(min=0), metavar="N",
                 help="Accelerators per node (default: all of the partition's)."),
    click.option("--cpus-per-task", "-c", type=StrictInt(min=1), metavar="N",
                 help="CPUs per task (torchrun: its one task per node runs all that node's workers)."),
    click.option("--procs-per-node", type=StrictInt(min=1), metavar="N",
                 help="Workers per node (default: one per GPU; one on a partition without GPUs). torchrun "
                      "starts N workers, srun N tasks; each needs a CPU of its own."),
    click.option("--time", "-t", "time_limit", metavar="TIME", callback=time_value,
                 help="Time limit, e.g. 12:00:00 or UNLIMITED (default: the site's; 0 is no limit to Slurm, so "
                      "it is refused where the partition has one)."),
    click.option("--comm", type=click.Choice(["heavy", "light"]), default="light", show_default=True,
                 help="heavy: bandwidth-hungry, keep the job under as few leaf switches as possible."),
    click.option("--switches", type=StrictInt(min=1), metavar="N",
                 help="With --comm heavy: use N leaf switches instead of computing it from the topology "
                      "(refused with --comm light, which asks for no switch count)."),
    click.option("--template", "-T", metavar="NAME", callback=text_value,
                 help="Template (see 'slurmkit templates')."),
    click.option("--job-name", "-J", metavar="NAME", callback=text_value,
                 help="Job name (default: the command's name)."),
    click.option("--env", "-e", "env", multiple=True, callback=_parse_env, metavar="KEY=VALUE",
                 help="Export a variable in the job (repeatable)."),
    click.option("--account", "-A", metavar="NAME", callback=text_value, help="Account to charge."),
    click.option("--qos", "-q", metavar="NAME", callback=text_value, help="Quality of service."),
    click.option("--output", "-o", metavar="PATTERN", callback=text_value,
                 help="Output file pattern (default: slurmkit-NAME-%j.out, the job name with every "
                      "character but letters, digits, '.', '_' and '-' made '_')."),
    click.option("--nodelist", "-w", metavar="NODES", callback=text_value,
                 help="Run on these nodes (a Slurm hostlist such as an[1-2]), e.g. to pin a job to a node."),
    click.option("--exclude", "-x", metavar="NODES", callback=lambda ctx, param, value: _hostlist_names(
                     ctx, param, text_value(ctx, param, value)),
                 help="Never run on these nodes (a Slurm hostlist such as an[3-4])."),
    click.option("--constraint", "-C", metavar="FEATURES", callback=text_value,
                 help="Node features the job needs (sbatch --constraint), e.g. a100 or a100&ib. With --comm heavy "
                      "on a cluster with switch groups, features joined by '&' are combined with the group."),
    click.option("--exclusive", is_flag=True, help="Do not share the nodes with other jobs."),
    click.option("--mem", metavar="SIZE", callback=sbatch_value("check_mem"),
                 help="Memory per node (sbatch --mem), e.g. 64G or 512M (default: Slurm's); refused above what "
                      "the partition's nodes have."),
    click.option("--begin", metavar="WHEN", callback=sbatch_value("check_begin"),
                 help="Hold the job until then (sbatch --begin, the cluster's local time): 2026-12-05T08:00, "
                      "08:00, now+2hours, tomorrow. Not with --prefer cheap|green or --deadline, which choose "
                      "the start themselves."),
    click.option("--dependency", "-d", metavar="TYPE:JOBID[:JOBID]", callback=sbatch_value("check_dependency"),
                 help="Start after other jobs of the same cluster (sbatch --dependency), e.g. afterok:1234 or "
                      "afterany:1234:1240; the job then goes to that one cluster (name it with --cluster)."),
    click.option("--reservation", metavar="NAME", callback=sbatch_value("check_reservation"),
                 help="Run in this reservation (sbatch --reservation)."),
    click.option("--image", metavar="NAME|PATH|REF", callback=text_value,
                 help="Run the job's step in this container image: a name the site defines for the cluster "
                      "('slurmkit images'), a path or a registry reference its runtime takes. The batch script "
                      "stays on the host."),
    click.option("--mount", "mounts", multiple=True, metavar="SRC[:DST[:ro]]", callback=_mount_values,
                 help="With --image: also mount SRC (an absolute path on the node) at DST in the image "
                      "(repeatable); the working and checkpoint directories are mounted at their own paths."),
    click.option("--token", metavar="TOKEN", callback=text_value,
                 help="Idempotency token: if a job with this token exists, it is reported instead of "
                      "submitting again."),
    click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED),
]


def option_group(options, doc: str):
    """A decorator adding ``options`` (a list of click options) in their order: one set shared by commands."""
    def apply(func):
        for option in reversed(options):
            func = option(func)
        return func
    apply.__doc__ = doc
    return apply


job_options = option_group(JOB_OPTIONS, "The job's options, for ``submit``, ``render`` and ``sweep submit``.")


REQUEUE_OPTIONS = [
    click.option("--auto-requeue", is_flag=True,
                 help="Track the job: the requeue daemon restarts it from its latest complete checkpoint after a "
                      "node failure, preemption, time limit (with a newer checkpoint) or transient exit code "
                      "(a sweep: each task, from its own point's checkpoint)."),
    click.option("--max-restarts", type=StrictInt(min=0), metavar="N",
                 help="With --auto-requeue: restart at most N times (default 10)."),
    click.option("--checkpoint-convention", "conventions", multiple=True,
                 type=click.Choice(["marker", "dcp", "tracker", "file"]),
                 help="With --auto-requeue: how a complete checkpoint is recognised (repeatable; default: the "
                      "site's requeue.checkpoint_conventions, else all)."),
    click.option("--transient-exit", "transient_exit", multiple=True, type=StrictInt(1, 255), metavar="CODE",
                 help="With --auto-requeue: an exit code to restart like a node failure (repeatable; the site's "
                      "requeue.transient_exit_codes count too)."),
    click.option("--hang-timeout", metavar="TIME", callback=text_value,
                 help="With --auto-requeue: end the job and restart it when its heartbeat "
                      "(slurmkit.checkpoint.heartbeat) and checkpoints have not moved for this long; Slurm's time "
                      "format, as --time (30: 30 minutes, 0:45: 45 seconds; 0: never; default: the site's "
                      "requeue.hang_timeout)."),
    click.option("--hang-startup", metavar="TIME", callback=text_value,
                 help="With --auto-requeue and a hang timeout: how long each attempt may take from its start to "
                      "its first heartbeat (imports, rendezvous, loading the checkpoint) before a hang counts, so "
                      "that the hang timeout itself can be short; the same format (default: the site's "
                      "requeue.hang_startup, else the hang timeout)."),
]


requeue_options = option_group(REQUEUE_OPTIONS, "The requeue daemon's options, for ``submit`` and ``sweep submit``.")


# Placement in place and time (slurmkit.federation.windows), for ``submit`` and ``sweep submit``.
WHEN_OPTIONS = [
    click.option("--prefer", type=click.Choice(["soon", "cheap", "green"]), default=None,
                 help="soon: the earliest start (the default); cheap / green: the lowest expected cost / carbon "
                      "among the clusters and, with --deadline, the hourly start windows that end by it (a later "
                      "window is submitted with --begin). A sweep goes whole to the best window, its points "
                      "--max-running at a time."),
    click.option("--deadline", metavar="WHEN", callback=text_value,
                 help="The job (a sweep: all its points) must end by then: 2026-12-05T08:00, 2026-12-06 (its "
                      "midnight), 08:00 (the next one), +8h, +2d. Refused, with the earliest possible end, when no cluster can meet it."),
]


when_options = option_group(WHEN_OPTIONS, "--prefer and --deadline, for ``submit`` and ``sweep submit``.")


def timed(prefer, deadline, auto_requeue, what: str) -> bool:
    """Whether --prefer cheap|green or --deadline place ``what`` (a job, a task) in time; refused beside
    --auto-requeue, whose restarts start when it fails, whatever the window."""
    if prefer in (None, "soon") and deadline is None:
        return False
    if auto_requeue:
        from slurmkit.errors import UsageError

        raise UsageError("--prefer cheap|green and --deadline do not apply to --auto-requeue yet: its restarts "
                         "start when %s fails, whatever the window; submit without one of them" % what)
    return True


def job_spec_from(kwargs):
    """Build a JobSpec from the job options; pops them from ``kwargs``."""
    from slurmkit.script.render import JobSpec

    return JobSpec(
        command=tuple(kwargs.pop("command")), nodes=kwargs.pop("nodes"), gpus_per_node=kwargs.pop("gpus_per_node"),
        cpus_per_task=kwargs.pop("cpus_per_task"), time=kwargs.pop("time_limit"), comm=kwargs.pop("comm"),
        switches=kwargs.pop("switches"), template=kwargs.pop("template"), name=kwargs.pop("job_name"),
        env=kwargs.pop("env"), account=kwargs.pop("account"), qos=kwargs.pop("qos"), output=kwargs.pop("output"),
        exclusive=kwargs.pop("exclusive"), token=kwargs.pop("token"), procs_per_node=kwargs.pop("procs_per_node"),
        nodelist=kwargs.pop("nodelist"), exclude=kwargs.pop("exclude"), constraint=kwargs.pop("constraint"),
        image=kwargs.pop("image"), mounts=kwargs.pop("mounts"), mem=kwargs.pop("mem"), begin=kwargs.pop("begin"),
        dependency=kwargs.pop("dependency"), reservation=kwargs.pop("reservation"))


# More node names than any cluster has: a range beyond it is a typo (an[1-99999999]), and
# expanding it would take minutes and gigabytes.
MAX_HOSTLIST_NAMES = 100000


def hostlist_size(expression):
    """An upper bound of the names ``expression`` expands to, counted without expanding it."""
    total = 0
    for item in re.split(r",(?![^\[]*\])", expression):        # commas outside brackets
        count = 1
        for inside in re.findall(r"\[([^\]]*)\]", item):
            size = 0
            for part in inside.split(","):
                low, dash, high = part.partition("-")
                if dash and low.isascii() and low.isdigit() and high.isascii() and high.isdigit():
                    size += max(int(high) - int(low) + 1, 1)
                else:
                    size += 1
            count *= size
        total += count
    return total


def _hostlist_names(ctx, param, expression):
    """``an[3-4],bn1`` as the tuple of node names; empty without a value; a bad hostlist names the option."""
    if not expression:
        return ()
    if hostlist_size(expression) > MAX_HOSTLIST_NAMES:
        raise click.BadParameter("%r names more than %d nodes; check the ranges" % (expression, MAX_HOSTLIST_NAMES),
                                 ctx=ctx, param=param)
    from slurmkit.slurm import hostlist

    try:
        return tuple(hostlist.expand(expression))
    except Exception as exc:  # ClusterShell's NodeSetParseError and its kin: a malformed expression
        raise click.BadParameter("%r is not a Slurm hostlist such as an[3-4],bn1 (%s)" % (expression, exc),
                                 ctx=ctx, param=param) from None


def pass_session(func):
    """Turn the --site value into an open Session, closed when the command ends."""

    @functools.wraps(func)
    def wrapper(*args, site=None, **kwargs):
        with open_session(site) as session:
            return func(session, *args, **kwargs)

    return wrapper


_LOG_OPTIONS = [
    click.option("--follow", "-f", is_flag=True,
                 help="Keep printing as the job writes, until it ends (waiting while it is pending, and on to the "
                      "requeue daemon's next attempt); exit with the job's exit status."),
    click.option("--lines", "-n", type=click.IntRange(min=0), metavar="N",
                 help="Only the last N lines (of each file) to begin with (default: all)."),
    click.option("--err", "err", is_flag=True,
                 help="The job's error file (its --error; the output file when it has none)."),
    click.option("--rank", type=click.IntRange(min=0), metavar="R",
                 help="A job writing one file per rank or node (%t, %n in its --output): only rank/node R's "
                      "(default: all, each line prefixed with its rank)."),
    click.option("--attempt", type=click.IntRange(min=1), metavar="N",
                 help="A restarted job's attempt N (the requeue daemon's restarts and Slurm's requeues; default: "
                      "the latest)."),
    click.option("--journal", "journal_path", metavar="FILE", envvar="SLURMKIT_JOURNAL",
                 help="The requeue journal that knows restarted jobs' attempts (default: the daemon's)."),
]
log_options = option_group(_LOG_OPTIONS, "The options of ``logs`` and ``sweep logs``.")
