"""Render sbatch scripts from Jinja2 templates and the site config.

Safety model: every value a template prints is shell-quoted unless it is a
:class:`Trusted` string.  Trusted strings are built here from validated data
(the ``#SBATCH`` directives, exported variables) or come from the site admin
(setup lines, template files), or are the user's own shell: the job's setup
lines (``JobSpec.setup``, the Python API's ``slurm_setup``), which the user
writes as they would write the batch script itself, like the command.  So a job name or argument such as
``$(touch /tmp/x)`` is passed literally and never executed.

``#SBATCH`` lines are parsed by sbatch, not by a shell: their values use
sbatch's own quoting (double quotes, backslash escapes), and values with
control characters are refused because a newline would end the directive.
Every rendered script is checked to have all its directives where sbatch
reads them (before the first line that is not a comment), so no value, the
site's or a template's, can make sbatch ignore them.

The command reaches its launcher safely: ``exec --``, ``srun ... --`` and
``torchrun ... --`` end the launchers' options, so a command whose first
word starts with ``-`` is run, not read as an option.  Variables Slurm sets
for the job (``SLURM_*``) and those the script's own shell reads (``IFS``,
``BASH_ENV``, ...) are refused in ``--env``.
"""

import os
import re
import shlex
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from slurmkit.script import collective
from slurmkit import times
from slurmkit.errors import ConfigError, JobDoesNotFitError, UsageError
from slurmkit.site.model import Cluster, Partition, Site

TEMPLATE_SUFFIX = ".sh.j2"
# Paths are plain strings here: this module is on every submission's path and
# pathlib costs a fresh process several milliseconds to import.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def _builtin_templates() -> str:
    """The built-in templates: ``slurmkit/templates`` in an installed wheel (setup.cfg maps
    the top-level ``templates/`` there), else ``templates/`` of the source checkout."""
    installed = os.path.join(_PACKAGE_DIR, "templates")
    return installed if os.path.isdir(installed) else os.path.join(os.path.dirname(_PACKAGE_DIR), "templates")


BUILTIN_TEMPLATES = _builtin_templates()
_PART_COMMENT_RE = re.compile(r"\A\{#.*?#\}\n", re.S)
_parts: Dict[Tuple[str, int, int], str] = {}


def script_part(name: str, site: Optional[Site] = None) -> str:
    """A template part that is plain bash after its first ``{# ... #}`` comment (the supervise
    loop, ``_supervise.sh.j2``), as Jinja renders it for the templates that include it: found the
    way Jinja's include finds it, in the site's template directories first, then the built-ins, so
    a site that overrides the part changes every script that runs it (a sweep's array script too).
    Read without Jinja, so a sweep's array script, built around an already rendered (cached) job,
    does not load it."""
    path = template_file(name, template_dirs(site)) or os.path.join(BUILTIN_TEMPLATES, name)
    try:
        stamp = os.stat(path)
    except OSError as exc:
        raise ConfigError("template part %s: cannot read: %s" % (path, exc.strerror or exc)) from None
    # Keyed as Jinja's loader checks a template (path and modification time): a daemon that runs
    # for weeks sees a part the site changed.
    key = (path, stamp.st_mtime_ns, stamp.st_size)
    if key not in _parts:
        from slurmkit import textfile

        try:
            source = textfile.read_text(path, TEMPLATE_LIMIT)
        except textfile.FileProblem as exc:
            raise ConfigError("template part %s: %s" % (path, exc)) from None
        text = _PART_COMMENT_RE.sub("", source, count=1)
        if re.search(r"\{[{%#]", text):
            raise ConfigError("template part %s holds Jinja beyond its first comment; it must be plain bash" % path)
        _parts[key] = text
    return _parts[key]


COMM_MODES = ("heavy", "light")
# Patterns are matched whole (fullmatch) and in ASCII: with "^...$" a value
# ending in a newline matches too, and "\d" takes digits of any script.
# An interpreter by name or path: python, python3, python3.11, /opt/venv/bin/python.
_PYTHON_RE = re.compile(r"python[0-9.]*", re.ASCII)
_UNSAFE_FILE_CHARS_RE = re.compile(r"[^A-Za-z0-9._-]+", re.ASCII)
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_SIGNAL_RE = re.compile(r"(?:B:)?USR[12]@[0-9]{1,5}", re.ASCII)
_SBATCH_PLAIN_RE = re.compile(r"[A-Za-z0-9_.,:@%/+=-]+", re.ASCII)
# A --constraint slurmkit can add a switch group to: node features joined by
# '&' (AND).  Slurm takes "a&b&[g1|g2]"; an OR, brackets or counts of the
# user's own would change meaning once combined.
_FEATURE_AND_RE = re.compile(r"[A-Za-z0-9_.+-]+(?:&[A-Za-z0-9_.+-]+)*", re.ASCII)
_CONSTRAINT_DIRECTIVE_RE = re.compile(r"#SBATCH\s+(?:--constraint(?:=|\s)|-C)")
# The #SBATCH option each directive comes from on slurmkit's command line, for messages.
_OPTION_OF = {"--job-name": "--job-name/-J", "--partition": "--partition/-p", "--time": "--time/-t",
              "--account": "--account/-A", "--qos": "--qos/-q", "--output": "--output/-o",
              "--nodelist": "--nodelist/-w", "--exclude": "--exclude/-x", "--comment": "--token",
              "--constraint": "--constraint/-C"}


class Trusted(str):
    """A string the renderer prints verbatim (already quoted or admin-written)."""


class JobSpec(NamedTuple):
    """What the user asked for; partition defaults fill the gaps.

    A NamedTuple (cheap to define in each short-lived process); derive changed
    copies with ``._replace()``.
    """

    command: Tuple[str, ...]
    nodes: int = 1
    gpus_per_node: Optional[int] = None      # None: all of the partition's per node
    cpus_per_task: Optional[int] = None
    time: Optional[str] = None               # None: the site default
    comm: str = "light"                      # heavy: ask for few leaf switches
    template: Optional[str] = None           # None: the site default
    name: Optional[str] = None
    env: Dict[str, str] = {}                 # shared default: never mutated
    account: Optional[str] = None
    qos: Optional[str] = None
    output: Optional[str] = None
    exclusive: bool = False
    token: Optional[str] = None              # written into --comment for idempotent submission
    switches: Optional[int] = None           # explicit override of the computed leaf count
    procs_per_node: Optional[int] = None     # workers per node; None: one per GPU (one without GPUs)
    nodelist: Optional[str] = None           # sbatch --nodelist: nodes the job must run on
    exclude: Tuple[str, ...] = ()            # sbatch --exclude: nodes the job must not run on
    constraint: Optional[str] = None         # sbatch --constraint: node features the job needs
    # Set for a job under the requeue daemon (slurmkit.requeue): its checkpoint directory,
    # which attempt this is, the checkpoint it resumes from.
    checkpoint_dir: Optional[str] = None
    attempt: Optional[int] = None
    resume_from: Optional[str] = None
    # Run the step in a container image (slurmkit.containers): a name the site defines for the
    # cluster, a path or a reference the cluster's runtime takes; mounts as SRC[:DST[:ro]].
    image: Optional[str] = None
    mounts: Tuple[str, ...] = ()
    mem: Optional[str] = None                # sbatch --mem: memory per node (16G, 512M); None: Slurm's default
    array: Optional[str] = None              # sbatch --array: the Python API's map_array ("0-49")
    # The job's own shell lines before the launch (the Python API's slurm_setup), printed as written.
    setup: Tuple[str, ...] = ()
    # The Python API's checkpointing (slurmkit.api.payload): sbatch --requeue (True) / --no-requeue (False),
    # and --signal ([B:]USR1@SECONDS).  A job under the requeue daemon has its own (checkpoint_dir).
    requeue: Optional[bool] = None
    signal: Optional[str] = None
    # sbatch --begin (YYYY-MM-DDTHH:MM:SS, local time): the federation's --prefer cheap|green puts a job in
    # a later, cheaper or cleaner window by holding it until then (Slurm's reason: BeginTime).
    begin: Optional[str] = None


class ContainerLaunch(NamedTuple):
    """What the templates print to start each task in the job's image (see :func:`container_launch`)."""

    runtime: str
    image: str                               # as the user named it
    location: str                            # where the runtime finds it on the cluster
    srun: Trusted                            # srun options of the runtime, with a trailing space, or ""
    task: Trusted                            # the runtime's command and the in-image check, before each task
    prologue: Tuple[Trusted, ...]            # batch-script lines (on the host) before the first step


class RenderedJob(NamedTuple):
    script: str
    warnings: Tuple[str, ...]
    template: str
    cluster: str
    partition: str
    switches: Optional[int]
    switch_wait: Optional[str] = None        # the wait in --switches=N@WAIT, after the cluster's cap
    output: Optional[str] = None             # the --output pattern rendered (checked before sbatch)
    name: Optional[str] = None               # the job name rendered (Slurm's %x)
    constraint: Optional[str] = None         # the --constraint rendered (the user's, a switch group's, both)
    image: Optional[str] = None              # where the job's image is on the cluster, with its runtime
    runtime: Optional[str] = None

    def to_dict(self):
        """Everything but the script, for ``--json`` output."""
        return {"cluster": self.cluster, "partition": self.partition, "template": self.template,
                "switches": self.switches, "switch_wait": self.switch_wait, "constraint": self.constraint,
                "image": self.image, "runtime": self.runtime, "warnings": list(self.warnings)}


class Launch(NamedTuple):
    """How a command is started by torchrun (see :func:`launcher_command`)."""

    python: Optional[str]                    # the interpreter the command names; None: it names none
    args: Tuple[str, ...]                    # what follows torchrun's own options
    runs_python: bool                        # False: torchrun --no-python
    name: str                                # the default job name
    problem: Optional[str] = None            # why torchrun cannot start this command, if it cannot


def check_env_name(key: str, source: str = "--env") -> None:
    """Refuse a variable name the job cannot be given (:func:`slurmkit.envnames.problem`; UsageError,
    prefixed with ``source`` when given)."""
    from slurmkit import envnames

    why = envnames.problem(key)
    if why:
        raise UsageError("%s%s" % ("%s: " % source if source else "", why))


def sbatch_quote(value, option: str = "") -> str:
    """Quote a value for a ``#SBATCH`` line the way sbatch's parser reads it."""
    text = str(value)
    if _CONTROL_RE.search(text):
        raise UsageError("%s%r contains a control character (such as a newline), which cannot go on an #SBATCH "
                         "line" % ("%s " % option if option else "", text))
    if text and _SBATCH_PLAIN_RE.fullmatch(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def shell_quote(value) -> str:
    return shlex.quote(str(value))


def shell_quote_line(value) -> str:
    """:func:`shell_quote`, on one line: a value with a control character (a newline) becomes ``$'...'``.

    For text bash reads a line at a time (a sweep's points table): the same word, never split over lines.
    """
    text = str(value)
    if not _CONTROL_RE.search(text):
        return shlex.quote(text)
    return "$'" + "".join("\\x%02x" % ord(c) if _CONTROL_RE.match(c) or c in "\\'" else c for c in text) + "'"


def _finalize(value):
    if isinstance(value, Trusted):
        return value
    if value is None:
        raise UsageError("a template printed an empty value")
    return shell_quote(value)


def template_dirs(site: Optional[Site]) -> List[str]:
    """The template directories, searched in order: the site's own, then the built-ins."""
    return [str(d) for d in (site.template_dirs if site else ())] + [BUILTIN_TEMPLATES]


def available_templates(site: Optional[Site] = None) -> Dict[str, str]:
    """Template name -> file; a site's own directories shadow the built-ins."""
    found: Dict[str, str] = {}
    for directory in template_dirs(site):
        try:
            names = sorted(os.listdir(directory))
        except OSError:  # a missing template directory adds nothing
            continue
        for filename in names:
            name = filename[:-len(TEMPLATE_SUFFIX)]
            path = os.path.join(directory, filename)
            # A FIFO or device named like a template would block or flood whoever reads it.
            if filename.endswith(TEMPLATE_SUFFIX) and not name.startswith("_") and os.path.isfile(path):
                found.setdefault(name, path)
    return found


def template_description(path: str) -> str:
    """The first ``{# ... #}`` comment of a template, for `slurmkit templates`."""
    from slurmkit import textfile

    try:
        text = textfile.read_text(path, TEMPLATE_LIMIT)
    except textfile.FileProblem as exc:
        return "(unreadable: %s)" % exc
    m = re.search(r"\{#\s*(.*?)\s*#\}", text, re.S)
    return " ".join(m.group(1).split()) if m else ""


# A template is a page of shell; a larger file is a mistake (or /dev/zero).
TEMPLATE_LIMIT = 1 << 20


def template_file(name: str, directories: Sequence[str]) -> Optional[str]:
    """The first of ``directories`` holding ``name`` (a relative path with '/'), as that file's path, or None:
    how Jinja's loader and :func:`script_part` find a template or a part (a dangling link counts: reading it
    then says so)."""
    for directory in directories:
        path = os.path.join(directory, *name.split("/"))
        if os.path.lexists(path):
            return path
    return None


def _bounded_loader(jinja2, searchpath):
    """jinja2's FileSystemLoader, reading every file (templates, includes, parents) with
    :func:`slurmkit.textfile.read_text`: a FIFO, a device, a huge or non-UTF-8 file is one
    ConfigError naming it, never a hang or a crash."""
    from slurmkit import textfile
    from jinja2.loaders import split_template_path

    class BoundedLoader(jinja2.FileSystemLoader):
        def get_source(self, environment, template):
            filename = template_file("/".join(split_template_path(template)), self.searchpath)
            if filename is None:
                raise jinja2.TemplateNotFound(template)
            try:
                source = textfile.read_text(filename, TEMPLATE_LIMIT)
                mtime = os.path.getmtime(filename)
            except textfile.FileProblem as exc:
                raise ConfigError("template file %s%s: %s" % (
                    filename, ":%d" % exc.line if exc.line else "", exc)) from None
            except OSError as exc:
                raise ConfigError("template file %s: cannot read: %s" % (filename, exc.strerror or exc)) from None

            def uptodate(filename=filename, mtime=mtime):
                try:
                    return os.path.getmtime(filename) == mtime
                except OSError:
                    return False

            return source, os.path.normpath(filename), uptodate

    return BoundedLoader(searchpath)


def _environment(site: Optional[Site]):
    import jinja2  # lazy: only rendering needs it

    from slurmkit.cache import private_dir

    # Compiled templates are cached (keyed by jinja2 on name and source checksum):
    # compiling them is most of a fresh process's rendering time.
    cache_dir = private_dir("templates")
    env = jinja2.Environment(
        loader=_bounded_loader(jinja2, template_dirs(site)),
        bytecode_cache=jinja2.FileSystemBytecodeCache(str(cache_dir)) if cache_dir else None,
        undefined=jinja2.StrictUndefined, finalize=_finalize, autoescape=False,
        keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    env.filters["trusted"] = Trusted
    env.filters["q"] = lambda v: Trusted(shell_quote(v))
    env.filters["argv"] = lambda items: Trusted(" ".join(shell_quote(i) for i in items))
    return env


def check_fit(spec: JobSpec, partition: Partition, cluster: Cluster, gpus: int, time: str) -> None:
    """Refuse, before sbatch, a job that can never run in this partition."""
    where = "partition %s on cluster %s" % (partition.name, cluster.name)
    if spec.nodes < 1:
        raise UsageError("--nodes must be at least 1")
    if spec.procs_per_node is not None and spec.procs_per_node < 1:
        raise UsageError("--procs-per-node must be at least 1")
    if partition.max_nodes is not None and spec.nodes > partition.max_nodes:
        raise JobDoesNotFitError("the job asks for %d nodes but %s has %d"
                                 % (spec.nodes, where, partition.max_nodes))
    if gpus and partition.accelerator == "none":
        raise JobDoesNotFitError("the job asks for %d GPUs per node but %s has no accelerators" % (gpus, where))
    if gpus > partition.gpus_per_node:
        raise JobDoesNotFitError("the job asks for %d %s per node but %s has %d per node"
                                 % (gpus, gres_name(partition), where, partition.gpus_per_node))
    if spec.cpus_per_task is not None and spec.cpus_per_task > partition.cpus_per_node:
        raise JobDoesNotFitError("the job asks for %d CPUs per task but %s has %d CPUs per node"
                                 % (spec.cpus_per_task, where, partition.cpus_per_node))
    # Every worker needs a CPU of its own, whichever template starts it.
    if spec.procs_per_node is not None and spec.procs_per_node > partition.cpus_per_node:
        raise JobDoesNotFitError("the job asks for %d workers per node but %s has %d CPUs per node"
                                 % (spec.procs_per_node, where, partition.cpus_per_node))
    asked = times.parse_minutes(time)
    limit = times.parse_minutes(partition.max_time) if partition.max_time else None
    # Where the time came from, for the message: the option, or the site's default.
    said = "--time=%s" % time if spec.time else "the site's default time %s (defaults.time)" % time
    if limit is not None and times.is_zero(time):
        # sbatch reads 0 as "no limit": the job would pend forever against the partition's.
        raise JobDoesNotFitError("the job asks for %s, which Slurm reads as no time limit, but the time limit of "
                                 "%s is %s; give a time up to that" % (said, where, partition.max_time))
    if limit is not None and (asked is None or asked > limit):
        raise JobDoesNotFitError("the job asks for %s but the time limit of %s is %s"
                                 % (said, where, partition.max_time))


def gres_name(partition: Partition) -> str:
    """The gres a job requests; "gpu" names the (absent) accelerators of a CPU partition in messages."""
    return partition.effective_gres_name or "gpu"


def output_file_name(name: str) -> str:
    """The default output file: the job name made safe for a file name, and the job id.

    Slurm's ``%x`` is the raw job name: ``exp/lr3e-4`` would put the file into a
    directory ``slurmkit-exp`` that does not exist, and Slurm then fails the job
    without writing anything anywhere.  Here every character other than letters,
    digits, ``.``, ``_`` and ``-`` becomes ``_`` (``%`` too, so a name is never read
    as a pattern), the name is shortened to stay far below file name limits, and
    ``%j`` keeps two jobs of one name apart.
    """
    safe = _UNSAFE_FILE_CHARS_RE.sub("_", name)[:100].strip("_")
    return "slurmkit-%s-%%j.out" % safe if safe else "slurmkit-%j.out"


def slurm_duration(seconds: int) -> str:
    """Seconds as a Slurm time, ``[D-]HH:MM:SS``."""
    days, rest = divmod(int(seconds), 86400)
    text = "%02d:%02d:%02d" % (rest // 3600, rest // 60 % 60, rest % 60)
    return "%d-%s" % (days, text) if days else text


def switch_wait(site: Site, cluster: Cluster, layout=None) -> Tuple[str, Optional[str]]:
    """(the wait to put in ``--switches=N@WAIT``, a warning or None).

    Slurm shortens a longer wait to the cluster's cap (``max_switch_wait`` in
    SchedulerParameters, read with the topology; 300 s when not set).  The capped
    value is rendered, with a warning: then the script, ``--json`` and
    ``scontrol show job`` all say what Slurm will really do, instead of a wait
    the job never gets.  Without a known cap the site's value is kept.
    """
    asked = site.switch_wait(cluster)
    cap = getattr(layout, "max_switch_wait", None)
    if cap is None:
        return asked, None
    asked_seconds = times.slurm_time_seconds(asked)  # None: UNLIMITED
    if asked_seconds is not None and asked_seconds <= cap:
        return asked, None
    capped = slurm_duration(cap)
    return capped, ("cluster %s caps the wait for fewer leaf switches at %s (max_switch_wait=%d in Slurm's "
                    "SchedulerParameters); the site's max_switch_wait %s is rendered as %s"
                    % (cluster.name, capped, cap, asked, capped))


def group_constraint(cluster: Cluster, partition: Partition, spec: JobSpec, switches: int,
                     layout=None) -> Tuple[Optional[str], List[str]]:
    """(the --constraint of a heavy job over ``switches`` leaves, warnings).

    ``--switches`` bounds the number of leaves but not where they are: Slurm
    22.05 spread a 64-node job over two spines when the first was partly
    busy (tests/integration/test_scale.py).  Where the site names a node
    feature per group of leaves (``switch_group_features``, e.g. one per
    spine), Slurm's matching OR ``[a|b|...]`` gives all of the job's nodes
    the same one.  Only groups that can hold the job under ``switches``
    leaves are offered (with the user's own features); without the layout
    (``--switches`` given, topology unreadable) all are, and Slurm refuses at
    submission a job none fits.  A user constraint of features joined by
    '&' is kept and ANDed with the group; any other form is refused, since
    combined with the group it would mean something else.
    """
    features = cluster.switch_group_features
    user = spec.constraint
    if not features or switches <= 1:
        return user, []
    required: Tuple[str, ...] = ()
    if user is not None:
        if not _FEATURE_AND_RE.fullmatch(user):
            raise UsageError("--constraint %r cannot be combined with --comm heavy on cluster %s: slurmkit adds its "
                             "switch group (--constraint=[%s]) and can join only features separated by '&' to it "
                             "(e.g. --constraint a&b); simplify the constraint, or use --comm light"
                             % (user, cluster.name, "|".join(features)))
        required = tuple(user.split("&"))
        if set(required) & set(features):
            return user, []  # the user already chose the group
    if layout is None:
        groups = list(features)
    else:
        from slurmkit.script import topology

        groups = topology.switch_groups(layout, partition.name, spec.nodes, switches, features, required)
        if not groups:
            return user, ["no switch group of partition %s (%s) holds %d nodes%s under %d leaf switches; "
                          "the job is not kept within one group" % (
                              partition.name, ", ".join(features), spec.nodes,
                              " with %s" % user if user else "", switches)]
    group = groups[0] if len(groups) == 1 else "[%s]" % "|".join(groups)
    return (user + "&" + group if user else group), []


_BEGIN_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}", re.ASCII)


def build_directives(site: Site, cluster: Cluster, partition: Partition, spec: JobSpec, *, name: str,
                     gpus: int, time: str, ntasks_per_node: int, switches: Optional[int],
                     wait: Optional[str] = None, cpus_per_task: Optional[int] = None,
                     constraint: Optional[str] = None) -> List[str]:
    """The ``#SBATCH`` options, already quoted for sbatch's parser."""
    opts: List[Tuple[str, object]] = [
        ("--job-name", name), ("--partition", partition.name), ("--nodes", spec.nodes),
        ("--ntasks-per-node", ntasks_per_node)]
    if gpus:
        typed = "%s:%d" % (partition.gpu_model, gpus) if partition.gpu_model else str(gpus)
        if gres_name(partition) == "gpu":
            opts.append(("--gpus-per-node", typed))
        else:  # Ascend and other generic resources are requested as gres
            opts.append(("--gres", "%s:%s" % (gres_name(partition), typed)))
    cpus = cpus_per_task if cpus_per_task is not None else spec.cpus_per_task
    if cpus:
        opts.append(("--cpus-per-task", cpus))
    if spec.mem:
        opts.append(("--mem", spec.mem))
    opts.append(("--time", time))
    if spec.begin is not None:
        if not _BEGIN_RE.fullmatch(spec.begin):
            raise UsageError("begin %r: give YYYY-MM-DDTHH:MM:SS" % spec.begin)
        opts.append(("--begin", spec.begin))
    if spec.array:
        if not re.fullmatch(r"[0-9]+(-[0-9]+)?", spec.array, re.ASCII):
            raise UsageError("array %r: give FIRST-LAST, such as 0-49" % spec.array)
        opts.append(("--array", spec.array))
    if switches is not None:
        opts.append(("--switches", "%d@%s" % (switches, wait or site.switch_wait(cluster))))
    if constraint:
        opts.append(("--constraint", constraint))
    account = spec.account or site.defaults.account
    qos = spec.qos or site.defaults.qos
    if account:
        opts.append(("--account", account))
    if qos:
        opts.append(("--qos", qos))
    if spec.nodelist:
        opts.append(("--nodelist", spec.nodelist))
    if spec.exclude:
        opts.append(("--exclude", ",".join(spec.exclude)))
    if spec.checkpoint_dir is not None:
        if spec.requeue or spec.signal:
            raise UsageError("a job under the requeue daemon (a checkpoint directory) is restarted by the daemon: "
                             "it takes no requeue or signal of its own")
        # The daemon restarts failures as new jobs (from a checkpoint, off bad nodes);
        # Slurm's own requeue would restart the same failure a second time.
        opts.append(("--no-requeue", None))
        # Time to save before the time limit: the batch shell gets USR1 and passes it on.
        opts.append(("--signal", "B:USR1@%d" % site.requeue.signal_grace))
    else:
        if spec.requeue is not None:
            opts.append(("--requeue" if spec.requeue else "--no-requeue", None))
        if spec.signal is not None:
            if not _SIGNAL_RE.fullmatch(spec.signal):
                raise UsageError("signal %r: give [B:]USR1@SECONDS or [B:]USR2@SECONDS" % spec.signal)
            opts.append(("--signal", spec.signal))
    if spec.exclusive:
        opts.append(("--exclusive", None))
    opts.append(("--output", spec.output or output_file_name(name)))
    if spec.token:
        opts.append(("--comment", "slurmkit:" + spec.token))
    return ["%s=%s" % (k, sbatch_quote(v, _OPTION_OF.get(k, k))) if v is not None else k for k, v in opts]


def _exports(env: Dict[str, str], source: str) -> List[Trusted]:
    lines = []
    for key, value in env.items():
        check_env_name(key, source)
        lines.append(Trusted("export %s=%s" % (key, shell_quote(value))))
    return lines


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def launcher_command(command: Sequence[str]) -> Launch:
    """How torchrun starts ``command``, and the job's default name.

    A command that names a Python (``python3 train.py``, ``/opt/venv/bin/python
    -u train.py``, ``python -m pkg.train``) is launched by *that* Python, as
    ``PYTHON -m torch.distributed.run ... train.py``: the workers then run in the
    environment the user chose, not in whatever ``torchrun`` is first on PATH.
    ``-u`` is dropped (torchrun starts every worker with ``-u``); other
    interpreter options cannot be passed on to the workers, so they are a
    problem for the torchrun template.  A bare ``train.py`` is started by
    ``torchrun`` from PATH; any other command with ``--no-python``.
    """
    argv = tuple(command)
    if not argv:
        return Launch(None, argv, False, "")
    if _PYTHON_RE.fullmatch(os.path.basename(argv[0])):
        python, rest = argv[0], list(argv[1:])
        while rest and rest[0] == "-u":
            rest.pop(0)
        if len(rest) > 1 and rest[0] == "-m":
            return Launch(python, tuple(rest), True, rest[1].rsplit(".", 1)[-1])
        if rest and not rest[0].startswith("-"):
            return Launch(python, tuple(rest), True, _stem(rest[0]))
        what = ("%r" % rest[0]) if rest else "no script"
        return Launch(python, argv, False, os.path.basename(python), problem=(
            "torchrun starts a Python script or module (python train.py, python -m pkg.train); %s given "
            "after %s cannot be passed on to its workers: set interpreter options through the environment "
            "(--env PYTHONOPTIMIZE=1, PYTHONWARNINGS=...) or use template srun" % (what, python)))
    # A first word starting with '-' would be read as torchrun's own option: '--' ends those.
    safe = ("--",) + argv if argv[0].startswith("-") else argv
    if argv[0].endswith(".py"):
        return Launch(None, safe, True, _stem(argv[0]))
    return Launch(None, safe, False, os.path.basename(argv[0]))


class _UserEnv:
    """What the templates ask about the user's ``--env``, with a warning for each variable it replaces.

    A template calls ``user_sets("MASTER_PORT", "the rendezvous port ...")`` where it
    would set a variable itself, and skips its own value when the user gave one:
    the user's ``--env`` wins, and says so.
    """

    def __init__(self, env: Dict[str, str], template: str):
        self.env, self.template, self.warnings = env, template, []

    def __call__(self, key: str, what: str = "") -> bool:
        if key not in self.env:
            return False
        warning = "--env %s=%s replaces %s (template %s)" % (key, self.env[key], what or "its value", self.template)
        if warning not in self.warnings:
            self.warnings.append(warning)
        return True


def _check_env_survives(script: str, user_exports: List[Trusted], env: Dict[str, str], template: str) -> None:
    """Refuse a script that would drop or silently override the user's ``--env``.

    The built-in templates yield to ``--env`` (see :class:`_UserEnv`); a site's own
    template might export the variables nowhere, or assign one again after the
    user's export.  Either way ``--env`` would be ignored without a word.
    """
    if not env:
        return
    block = "\n".join(user_exports) + "\n"
    at = script.find(block)
    if at < 0:
        raise UsageError("template %s does not export the --env variables (%s); it must print "
                         "{{ user_exports }} like the built-in templates" % (template, ", ".join(env)))
    rest = script[at + len(block):]
    for key in env:
        if re.search(r"(?m)^[ \t]*(?:export[ \t]+|declare[ \t]+(?:-\w+[ \t]+)*|readonly[ \t]+)?%s=" % re.escape(key),
                     rest):
            raise UsageError("template %s sets %s itself after your --env %s=..., which would be ignored; "
                             "leave it out or use a template that does not set it" % (template, key, key))


def render(site: Site, cluster: Cluster, partition: Partition, spec: JobSpec,
           layout=None) -> RenderedJob:
    """Render the script ``submit`` would send.

    ``layout`` (a :class:`slurmkit.script.topology.ClusterLayout`) is needed only for
    ``comm='heavy'`` without an explicit ``spec.switches``; when given, its
    ``max_switch_wait`` caps the wait of ``--switches``.

    In order: the request itself (:func:`_check_request`), the template, the
    fit on the partition, the switches (:func:`_switch_request`), the tasks
    per node (:func:`_task_shape`), the environment (:func:`_job_environment`),
    then the template rendered and checked (:func:`_checked_script`).
    """
    _check_request(spec)
    template_name = spec.template or site.defaults.template
    templates = available_templates(site)
    if template_name not in templates:
        raise UsageError("unknown template %r; choose one of: %s" % (template_name, ", ".join(sorted(templates))))
    gpus = partition.gpus_per_node if spec.gpus_per_node is None else spec.gpus_per_node
    time = spec.time or site.defaults.time
    check_fit(spec, partition, cluster, gpus, time)
    if template_name == "single" and spec.nodes != 1:
        raise UsageError("template 'single' runs one process on one node; use --nodes 1 or template 'srun'")
    if template_name == "single" and (spec.procs_per_node or 1) > 1:
        raise UsageError("template 'single' runs one process; for --procs-per-node %d use template 'torchrun' "
                         "or 'srun'" % spec.procs_per_node)
    warnings = collective.lint(partition, "partition %s" % partition.name)
    if times.is_zero(time):
        warnings.append("--time=%s is no time limit to Slurm (not zero minutes); the job runs until it ends"
                        % time)
    switches, wait, constraint = _switch_request(site, cluster, partition, spec, layout, warnings)
    workers, ntasks, task_cpus = _task_shape(template_name, spec, cluster, partition, gpus, warnings)
    launch = launcher_command(spec.command)
    if template_name == "torchrun" and launch.problem:
        raise UsageError(launch.problem)
    # `python train.py` is job "train", not "python".
    name = spec.name or launch.name
    fabric_env, user_exports, requeue_exports, user_sets = _job_environment(spec, partition, template_name, warnings)
    container = container_launch(cluster, partition, spec, template_name, fabric_env)
    if container is not None and container.runtime == "oci" and ntasks > 1:
        warnings.append("runtime oci: Slurm 22.05 starts one task per node in a container and refuses the "
                        "step's %d ('unexpected number of tasks' in slurmd's log); use --procs-per-node 1, the "
                        "torchrun template, or a runtime that wraps each task" % ntasks)
    lo, hi = site.rendezvous_ports
    context = {
        "site": site, "cluster": cluster, "partition": partition, "job": spec, "name": name,
        "gpus_per_node": gpus, "ntasks_per_node": ntasks, "switches": switches, "switch_wait": wait,
        "task_cpus": task_cpus,
        "directives": [Trusted(d) for d in build_directives(
            site, cluster, partition, spec, name=name, gpus=gpus, time=time,
            ntasks_per_node=ntasks, switches=switches, wait=wait, cpus_per_task=task_cpus,
            constraint=constraint)],
        "modules": list(site.modules), "setup": [Trusted(s) for s in site.setup],
        "job_setup": [Trusted(s) for s in spec.setup],
        "fabric_exports": _exports(fabric_env, "site config"),
        "user_exports": user_exports, "user_sets": user_sets, "requeue_exports": requeue_exports,
        "command": Trusted(" ".join(shell_quote(a) for a in spec.command)),
        "launch": launch,
        "launch_args": Trusted(" ".join(shell_quote(a) for a in launch.args)),
        "launch_prefix": Trusted("" if launch.runs_python else "--no-python "),
        "nproc_per_node": workers,
        "rdzv_ports": (lo, hi),
        "container": container,
    }
    script = _checked_script(site, template_name, context, spec, user_exports, constraint)
    warnings.extend(user_sets.warnings)
    return RenderedJob(script=script, warnings=tuple(warnings), template=template_name,
                       cluster=cluster.name, partition=partition.name, switches=switches,
                       switch_wait=wait, output=spec.output or output_file_name(name), name=name,
                       constraint=constraint, image=container.location if container else None,
                       runtime=container.runtime if container else None)


def check_setup_lines(lines: Sequence[str], source: str = "slurm_setup") -> None:
    """The job's own setup lines are printed as written, one each: a line break (or a NUL) inside one
    would make it several lines where one was given.  UsageError naming ``source``."""
    for line in lines:
        if _CONTROL_RE.search(line.replace("\t", "")):
            raise UsageError("%s: %r holds a line break or another control character; give each line as its own "
                             "item" % (source, line))


def _check_request(spec: JobSpec) -> None:
    """What the request alone can get wrong: no command, an unknown --comm, --switches without heavy,
    a setup line that is not one line."""
    check_setup_lines(spec.setup)
    if not spec.command:
        raise UsageError("no command given; put it after '--', e.g. slurmkit submit -- python train.py")
    if not spec.command[0].strip():
        raise UsageError("the command's first word is empty; name the program to run, e.g. -- python train.py")
    if spec.comm not in COMM_MODES:
        raise UsageError("--comm must be one of: %s" % ", ".join(COMM_MODES))
    if spec.switches is not None and spec.comm != "heavy":
        # Light jobs ask for no switch count: --switches would vanish without a word.
        raise UsageError("--switches %d applies to --comm heavy only; add --comm heavy, or leave --switches out"
                         % spec.switches)
    if spec.constraint is not None and (not spec.constraint.strip() or spec.constraint != spec.constraint.strip()):
        raise UsageError("--constraint %r: give node features such as a100 or a100&ib, without surrounding "
                         "spaces" % spec.constraint)


def _switch_request(site: Site, cluster: Cluster, partition: Partition, spec: JobSpec, layout,
                    warnings: List[str]) -> Tuple[Optional[int], Optional[str], Optional[str]]:
    """(switches, their wait, the constraint with its switch group) of a ``--comm heavy`` job; a light
    job's is (None, None, its own constraint)."""
    if spec.comm != "heavy":
        return None, None, spec.constraint
    if spec.switches is not None:
        switches = spec.switches
    elif layout is not None:
        from slurmkit.script import topology

        switches = topology.switches_for(layout, partition.name, spec.nodes)
    else:
        raise UsageError("--comm heavy needs the cluster's topology; it could not be read, "
                         "so give the leaf switch count with --switches N")
    if switches is None:
        return None, None, spec.constraint
    wait, capped = switch_wait(site, cluster, layout)
    if capped:
        warnings.append(capped)
    constraint, group_warnings = group_constraint(cluster, partition, spec, switches, layout)
    warnings.extend(group_warnings)
    return switches, wait, constraint


def _task_shape(template_name: str, spec: JobSpec, cluster: Cluster, partition: Partition, gpus: int,
                warnings: List[str]) -> Tuple[int, int, Optional[int]]:
    """(workers per node, Slurm tasks per node, CPUs per task) for the template, checked against the
    partition's CPUs."""
    # Workers per node: one per GPU unless --procs-per-node says otherwise.
    workers = spec.procs_per_node or max(gpus, 1)
    if gpus and workers > gpus:
        warnings.append("%d workers per node share %d %s; NCCL refuses two ranks on one GPU"
                        % (workers, gpus, gres_name(partition)))
    task_cpus = spec.cpus_per_task
    if template_name == "torchrun":
        # One launcher task per node holds all of that node's workers, so its CPUs are theirs:
        # with --procs-per-node and no -c, one each (else Slurm may confine N workers to one CPU).
        ntasks = 1
        if spec.procs_per_node is not None:
            if task_cpus is None:
                task_cpus = workers if workers > 1 else None
            elif task_cpus < workers:
                raise UsageError("template torchrun runs its %d workers per node in one task of -c %d CPUs; give "
                                 "-c %d or more (the CPUs of all workers of a node) or leave -c out"
                                 % (workers, task_cpus, workers))
    else:
        ntasks = 1 if template_name == "single" else workers
    if ntasks * (task_cpus or 1) > partition.cpus_per_node:
        raise JobDoesNotFitError(
            "template %s starts %d tasks per node x %d CPUs each, but partition %s on cluster %s has %d CPUs per node"
            % (template_name, ntasks, task_cpus or 1, partition.name, cluster.name, partition.cpus_per_node))
    return workers, ntasks, task_cpus


def _job_environment(spec: JobSpec, partition: Partition, template_name: str, warnings: List[str]):
    """(the fabric's variables, the --env exports, the requeue daemon's exports, the --env settings the
    template's shell must keep) of the job."""
    fabric_env = collective.collective_env(partition)
    for key in spec.env:
        if key in fabric_env and fabric_env[key] != spec.env[key]:
            warnings.append("--env %s=%s replaces the site's %s=%s for partition %s"
                            % (key, spec.env[key], key, fabric_env[key], partition.name))
    user_exports = _exports(spec.env, "--env")
    requeue_exports = []
    if spec.checkpoint_dir is not None:
        for key in ("SLURMKIT_CHECKPOINT_DIR", "SLURMKIT_ATTEMPT", "SLURMKIT_RESUME_FROM"):
            if key in spec.env:
                raise UsageError("--env %s: the requeue daemon sets it for each attempt" % key)
        requeue_env = {"SLURMKIT_CHECKPOINT_DIR": spec.checkpoint_dir, "SLURMKIT_ATTEMPT": str(spec.attempt or 1)}
        if spec.resume_from:
            requeue_env["SLURMKIT_RESUME_FROM"] = spec.resume_from
        requeue_exports = _exports(requeue_env, "requeue")
    return fabric_env, user_exports, requeue_exports, _UserEnv(spec.env, template_name)


# Variables the templates set on the host that the program in the image reads (besides the fabric's
# and the --env ones): the rendezvous of the srun and torchrun templates, and the requeue daemon's.
# Launchers that start tasks from the host (the batch script's side), never from inside an image.
_HOST_LAUNCHERS = ("srun", "salloc", "sbatch", "mpirun", "mpiexec", "mpiexec.hydra", "orterun", "prterun")
_RENDEZVOUS_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "SLURMKIT_NODE_ADDRS")
_REQUEUE_VARIABLES = ("SLURMKIT_CHECKPOINT_DIR", "SLURMKIT_ATTEMPT", "SLURMKIT_STEP_DIR", "SLURMKIT_HEARTBEAT",
                      "PET_SIGNALS_TO_HANDLE", "TORCHELASTIC_SIGNALS_TO_HANDLE")

# Runs first in the image, before the task (as `bash -c "$slurmkit_in_image" slurmkit-in-image IMAGE
# HOST_ROOT HOST_NET WORKDIR [DIR...] -- TASK...`): the task must really be in the image (its root is
# another mount than the host's: Slurm runs a --container job on the host when the node has no
# oci.conf), in the host's network (a private one cuts the rendezvous), with its own Slurm variables
# where the step has several tasks (Slurm 22.05's --container passes only srun's), and see the job's
# directories at their paths; it starts the task in the job's working directory.
IN_IMAGE_CHECK = r"""i=$1 h=$2 n=$3 w=$4; shift 3
where=${SLURMD_NODENAME:-${HOSTNAME:-this node}}
r=
if [[ -r /proc/self/mountinfo ]]; then
    while read -r a b c d m e; do [[ $m == / ]] && r=$a; done </proc/self/mountinfo
fi
if [[ -n $h && $r == "$h" ]]; then
    echo "slurmkit: error: the task on $where runs on the host, not in image $i: the runtime did not start it" \
        "(runtime oci: the node needs an oci.conf beside its slurm.conf)" >&2
    exit 1
fi
if [[ -n $n && -e /proc/self/ns/net ]] && command -v readlink >/dev/null && [[ $(readlink /proc/self/ns/net) != "$n" ]]; then
    echo "slurmkit: error: image $i runs in a network namespace of its own on $where, where the other nodes of the job" \
        "cannot reach it: run it in the network of the host (an OCI bundle: remove the network namespace from its" \
        "config.json)" >&2
    exit 1
fi
if [[ ${SLURM_STEP_NUM_TASKS:-1} != 1 && -z ${SLURM_PROCID:-} ]]; then
    echo "slurmkit: error: the runtime started the task in image $i without its own Slurm variables (SLURM_PROCID," \
        "SLURM_NODEID, SLURMD_NODENAME), so the $SLURM_STEP_NUM_TASKS tasks of the step cannot tell each other apart" \
        "(Slurm 22.05's --container passes only those of srun): run one task, or a runtime that wraps the task" \
        "(charliecloud, pyxis, apptainer)" >&2
    exit 1
fi
while (($#)) && [[ $1 != -- ]]; do
    [[ -d $1 ]] || { echo "slurmkit: error: $1 is not in image $i on $where: mount it (--mount $1) or add it to the image" >&2; exit 1; }
    shift
done
shift
cd -- "$w" || exit 1
exec "$@"
"""


def container_launch(cluster: Cluster, partition: Partition, spec: JobSpec, template_name: str,
                     fabric_env: Dict[str, str]) -> Optional[ContainerLaunch]:
    """How the job's tasks start in its image on ``partition`` (None without ``--image``): the image
    resolved through the site's names, the mounts checked, the runtime's adapter asked, and the
    in-job checks.  A runtime that cannot do what the job asks is a UsageError naming it."""
    if spec.image is None:
        if spec.mounts:
            raise UsageError("--mount applies to jobs in a container image: add --image NAME")
        return None
    from slurmkit.containers import catalog, grammar, runtimes

    launcher = os.path.basename(spec.command[0]) if spec.command else ""
    if launcher in _HOST_LAUNCHERS:
        raise UsageError("with --image the command runs inside the image, where Slurm's and MPI's launchers are "
                         "not: leave %r out (slurmkit's templates start the tasks: torchrun one per node, srun one "
                         "per GPU; an MPI program runs under template srun through Slurm's PMI)" % launcher)
    settings = partition.containers
    try:
        location = catalog.resolve(settings, spec.image, cluster.name, partition.name)
    except catalog.ImageRefusal as exc:
        raise UsageError("--image: %s" % exc) from None
    mounts: Dict[str, object] = {}
    for text, source in [(m, "the site's containers.mounts") for m in settings.mounts] + \
                        [(m, "--mount") for m in spec.mounts]:
        try:
            mount = grammar.parse_mount(text)
        except ValueError as exc:
            raise UsageError("%s: %s" % (source, exc)) from None
        mounts[mount.target] = mount          # the user's over the site's, by target
    must_see = ["$PWD"]
    if spec.checkpoint_dir is not None:
        must_see.append(spec.checkpoint_dir)
        if settings.runtime != "oci" and not any(t == spec.checkpoint_dir for t in mounts):
            mounts[spec.checkpoint_dir] = grammar.Mount(spec.checkpoint_dir, spec.checkpoint_dir)
    # Exactly the variables the script sets (a runtime told to pass an unset one may set it empty).
    env = list(fabric_env) + list(spec.env)
    if template_name != "single":
        env += _RENDEZVOUS_VARIABLES
    if spec.checkpoint_dir is not None:
        env += _REQUEUE_VARIABLES + (("SLURMKIT_RESUME_FROM",) if spec.resume_from else ())
    env += [name for name in settings.env if name not in env]
    request = runtimes.Request(image=location, mounts=tuple(mounts.values()), env=tuple(dict.fromkeys(env)),
                               accelerator=partition.accelerator,
                               rdma=partition.fabric.type in ("infiniband", "roce"), options=settings.options)
    try:
        wrapped = runtimes.wrap(settings.runtime, request)
    except runtimes.RuntimeRefusal as exc:
        raise UsageError("%s (cluster %s, partition %s)" % (exc, cluster.name, partition.name)) from None
    srun = runtimes.words_text(wrapped.srun_options, shell_quote)
    checked = " ".join('"$PWD"' if d == "$PWD" else shell_quote(d) for d in must_see)
    task = "%sbash -c \"$slurmkit_in_image\" slurmkit-in-image %s \"$slurmkit_host_root\" \"$slurmkit_host_net\" %s --" % (
        runtimes.words_text(wrapped.prefix, shell_quote) + " " if wrapped.prefix else "", shell_quote(spec.image), checked)
    prologue = ['export USER="${USER:-$(id -un)}"'] if wrapped.needs_user else []
    if grammar.is_path(location):
        prologue.append('[[ -e %s ]] || { echo "slurmkit: error: image %s is not on node $SLURMD_NODENAME at %s: '
                        'copy it there or fix the site\'s containers.images" >&2; exit 1; }'
                        % (shell_quote(location), _in_double_quotes(spec.image), _in_double_quotes(location)))
    if wrapped.bind_targets and grammar.is_path(location):
        prologue.append(_bind_target_check(wrapped, spec.image, location))
    if wrapped.binary:
        prologue.append('command -v %s >/dev/null || { echo "slurmkit: error: runtime %s needs %s, which is not on '
                        'node $SLURMD_NODENAME (PATH=$PATH)" >&2; exit 1; }'
                        % (shell_quote(wrapped.binary), settings.runtime, wrapped.binary))
    prologue += [
        "# What the in-image check compares with: the host's root mount and network namespace.",
        "slurmkit_host_root=",
        "while read -r slurmkit_a _ _ _ slurmkit_m _; do [[ $slurmkit_m == / ]] && slurmkit_host_root=$slurmkit_a; "
        "done </proc/self/mountinfo",
        "slurmkit_host_net=$(readlink /proc/self/ns/net 2>/dev/null || true)",
        "slurmkit_in_image=" + shell_quote(IN_IMAGE_CHECK)]
    return ContainerLaunch(runtime=settings.runtime, image=spec.image, location=location,
                           srun=Trusted(srun + " " if srun else ""), task=Trusted(task),
                           prologue=tuple(Trusted(line) for line in prologue))


def _bind_target_check(wrapped, image: str, location: str) -> str:
    """One line of the batch script: in a directory image (a SquashFS file cannot be looked into before
    the runtime mounts it), every directory the runtime binds onto and cannot make is there, else one
    line naming it and what to do, before the runtime's own ``can't mkdir`` on every node."""
    from slurmkit.containers import runtimes

    targets = runtimes.words_text(wrapped.bind_targets, shell_quote)
    own = "".join(" || $slurmkit_t == %s/*" % shell_quote(d) for d in wrapped.host_dirs)
    return ('for slurmkit_t in %s; do [[ ! -d %s || -d %s$slurmkit_t%s ]] || { echo "slurmkit: error: image %s '
            'on node $SLURMD_NODENAME has no directory $slurmkit_t to mount onto, and its runtime cannot make one '
            'in the image: mount at a directory the image has (--mount SOURCE:/mnt) or add $slurmkit_t to the '
            'image" >&2; exit 1; }; done'
            % (targets, shell_quote(location), shell_quote(location), own, _in_double_quotes(image)))


def _in_double_quotes(text: str) -> str:
    """``text`` for the inside of a double-quoted shell string: nothing in it expands."""
    return re.sub(r'(["\\$`])', r"\\\1", text)


def _checked_script(site: Site, template_name: str, context: dict, spec: JobSpec, user_exports,
                    constraint: Optional[str]) -> str:
    """The template rendered, checked (the --env values survive, every directive reaches sbatch, one
    constraint), and ended with the trailer."""
    from slurmkit.slurm.commands import SCRIPT_TRAILER

    script = _render_template(site, template_name, context)
    _check_env_survives(script, user_exports, spec.env, template_name)
    _check_directives_reach_sbatch(script, context["directives"], template_name)
    if constraint:
        _check_one_constraint(script, "--constraint=" + sbatch_quote(constraint), template_name)
    # Every script ends with the trailer (also from a site's own templates): the
    # submit-once wrapper uses it to detect a script truncated in transit.
    if not script.endswith("\n"):
        script += "\n"
    if not script.endswith(SCRIPT_TRAILER + "\n"):
        script += SCRIPT_TRAILER + "\n"
    return script


def _render_template(site: Site, template_name: str, context: dict) -> str:
    """The template rendered; any way a template can fail is one UsageError naming it (and its line).

    Besides undefined values and syntax: a missing include, a file that is
    not UTF-8 or not a regular file, a runtime error in an expression, a
    template that extends or includes itself.  slurmkit's own errors raised
    while rendering (a refused value) pass through unchanged.
    """
    import jinja2

    from slurmkit.errors import ConfigError, SlurmkitError

    try:
        return _environment(site).get_template(template_name + TEMPLATE_SUFFIX).render(context)
    except SlurmkitError:
        raise
    except jinja2.UndefinedError as exc:
        raise ConfigError("template %r uses an undefined value: %s%s"
                          % (template_name, exc, _template_line(exc.__traceback__))) from None
    except jinja2.TemplateSyntaxError as exc:
        raise ConfigError("template %s line %s: %s" % (exc.filename or template_name, exc.lineno,
                                                       exc.message)) from None
    except jinja2.TemplateNotFound as exc:
        raise ConfigError("template %r includes or extends %r, which is in none of the template directories (%s)"
                          % (template_name, exc.name, ", ".join(template_dirs(site)))) from None
    except RecursionError:
        raise ConfigError("template %r extends or includes itself (directly or through another template)"
                          % template_name) from None
    except jinja2.TemplateError as exc:
        raise ConfigError("template %r: %s%s" % (template_name, exc.message or exc,
                                                 _template_line(exc.__traceback__))) from None
    except Exception as exc:  # an expression that fails at run time: 1/0, a call on a string, ...
        raise ConfigError("template %r failed: %s: %s%s" % (template_name, type(exc).__name__, exc,
                                                          _template_line(exc.__traceback__))) from None


def _template_line(tb) -> str:
    """`` (FILE line N)`` of the innermost template frame in a traceback (jinja2 rewrites frames to the
    template's file and line), or ""."""
    where = ""
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename.endswith(TEMPLATE_SUFFIX):
            where = " (%s line %d)" % (filename, tb.tb_lineno)
        tb = tb.tb_next
    return where


def _check_one_constraint(script: str, ours: str, template: str) -> None:
    """Refuse a template that prints a --constraint of its own beside slurmkit's:
    sbatch keeps only one of the two, so either the user's features or the
    switch group would be silently dropped."""
    for line in script.split("\n"):
        text = line.strip()
        if _CONSTRAINT_DIRECTIVE_RE.match(text) and text != "#SBATCH " + ours:
            raise ConfigError("template %s sets its own node constraint (%s) besides slurmkit's (#SBATCH %s); sbatch "
                              "would keep only one: remove it from the template and give it with --constraint "
                              "instead" % (template, text, ours))


def _check_directives_reach_sbatch(script: str, directives: Sequence[str], template: str) -> None:
    """Refuse a script where sbatch would not read every directive.

    sbatch reads ``#SBATCH`` lines only up to the first line that is neither
    blank nor a comment: a newline inside a value printed into the header
    (a site or cluster name, a template's own line) would make it silently
    ignore the partition, the time, the token -- the job would run elsewhere
    and be submitted twice on a retry.
    """
    read = set()
    for line in script.split("\n")[1:]:
        text = line.strip()
        if text and not text.startswith("#"):
            break
        if text.startswith("#SBATCH "):
            read.add(text[len("#SBATCH "):])
    lost = [d for d in directives if str(d) not in read]
    if lost:
        raise ConfigError("template %s puts a line that is not a comment before #SBATCH %s, so sbatch would ignore "
                          "it: every #SBATCH line must come before the first command" % (template, lost[0]))
