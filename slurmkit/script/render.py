"""Render sbatch scripts from Jinja2 templates and the site config.

Safety model: every value a template prints is shell-quoted unless it is a
:class:`Trusted` string.  Trusted strings are built here from validated data
(the ``#SBATCH`` directives, exported variables) or come from the site admin
(setup lines, template files).  So a job name or argument such as
``$(touch /tmp/x)`` is passed literally and never executed.

``#SBATCH`` lines are parsed by sbatch, not by a shell: their values use
sbatch's own quoting (double quotes, backslash escapes), and values with
control characters are refused because a newline would end the directive.
"""

import os
import re
import shlex
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from slurmkit.script import collective
from slurmkit.slurm import times
from slurmkit.errors import JobDoesNotFitError, UsageError
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
COMM_MODES = ("heavy", "light")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


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


class RenderedJob(NamedTuple):
    script: str
    warnings: Tuple[str, ...]
    template: str
    cluster: str
    partition: str
    switches: Optional[int]


def sbatch_quote(value) -> str:
    """Quote a value for a ``#SBATCH`` line the way sbatch's parser reads it."""
    text = str(value)
    if _CONTROL_RE.search(text):
        raise UsageError("%r contains a control character (such as a newline), which cannot go on an #SBATCH line"
                         % text)
    if text and re.match(r"^[A-Za-z0-9_.,:@%/+=-]+$", text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def shell_quote(value) -> str:
    return shlex.quote(str(value))


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
            if filename.endswith(TEMPLATE_SUFFIX) and not name.startswith("_"):
                found.setdefault(name, os.path.join(directory, filename))
    return found


def template_description(path: str) -> str:
    """The first ``{# ... #}`` comment of a template, for `slurmkit templates`."""
    with open(path) as fh:
        m = re.search(r"\{#\s*(.*?)\s*#\}", fh.read(), re.S)
    return " ".join(m.group(1).split()) if m else ""


def _environment(site: Optional[Site]):
    import jinja2  # lazy: only rendering needs it

    from slurmkit.cache import private_dir

    # Compiled templates are cached (keyed by jinja2 on name and source checksum):
    # compiling them is most of a fresh process's rendering time.
    cache_dir = private_dir("templates")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(template_dirs(site)),
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
    if partition.max_nodes is not None and spec.nodes > partition.max_nodes:
        raise JobDoesNotFitError("the job asks for %d nodes but %s has %d"
                                 % (spec.nodes, where, partition.max_nodes))
    if gpus and partition.accelerator == "none":
        raise JobDoesNotFitError("the job asks for %d GPUs per node but %s has no accelerators" % (gpus, where))
    if gpus > partition.gpus_per_node:
        raise JobDoesNotFitError("the job asks for %d %s per node but %s has %d per node"
                                 % (gpus, partition.gres_name or "gpu", where, partition.gpus_per_node))
    if spec.cpus_per_task is not None and spec.cpus_per_task > partition.cpus_per_node:
        raise JobDoesNotFitError("the job asks for %d CPUs per task but %s has %d CPUs per node"
                                 % (spec.cpus_per_task, where, partition.cpus_per_node))
    asked = times.parse_minutes(time)
    limit = times.parse_minutes(partition.max_time) if partition.max_time else None
    if limit is not None and (asked is None or asked > limit):
        raise JobDoesNotFitError("the job asks for --time=%s but the time limit of %s is %s"
                                 % (time, where, partition.max_time))


def gres_name(partition: Partition) -> str:
    """The gres a job requests; "gpu" names the (absent) accelerators of a CPU partition in messages."""
    return partition.effective_gres_name or "gpu"


def build_directives(site: Site, cluster: Cluster, partition: Partition, spec: JobSpec, *, name: str,
                     gpus: int, time: str, ntasks_per_node: int, switches: Optional[int]) -> List[str]:
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
    if spec.cpus_per_task:
        opts.append(("--cpus-per-task", spec.cpus_per_task))
    opts.append(("--time", time))
    if switches is not None:
        opts.append(("--switches", "%d@%s" % (switches, site.switch_wait(cluster))))
    account = spec.account or site.defaults.account
    qos = spec.qos or site.defaults.qos
    if account:
        opts.append(("--account", account))
    if qos:
        opts.append(("--qos", qos))
    if spec.exclusive:
        opts.append(("--exclusive", None))
    opts.append(("--output", spec.output or "slurmkit-%x-%j.out"))
    if spec.token:
        opts.append(("--comment", "slurmkit:" + spec.token))
    return ["%s=%s" % (k, sbatch_quote(v)) if v is not None else k for k, v in opts]


def _exports(env: Dict[str, str], source: str) -> List[Trusted]:
    lines = []
    for key, value in env.items():
        if not _ENV_NAME_RE.match(key):
            raise UsageError("%s: %r is not a valid environment variable name" % (source, key))
        lines.append(Trusted("export %s=%s" % (key, shell_quote(value))))
    return lines


def launcher_command(command: Sequence[str]) -> Tuple[Tuple[str, ...], bool]:
    """For torchrun: (arguments, runs_python).

    torchrun starts Python itself, so ``python train.py`` becomes ``train.py``;
    anything that is not a Python script is run with ``--no-python``.
    """
    argv = tuple(command)
    if argv and re.match(r"^(.*/)?python[0-9.]*$", argv[0]) and len(argv) > 1 and not argv[1].startswith("-"):
        return argv[1:], True
    if argv and argv[0].endswith(".py"):
        return argv, True
    return argv, False


def render(site: Site, cluster: Cluster, partition: Partition, spec: JobSpec,
           layout=None) -> RenderedJob:
    """Render the script ``submit`` would send.

    ``layout`` (a :class:`slurmkit.script.topology.ClusterLayout`) is needed only for
    ``comm='heavy'`` without an explicit ``spec.switches``.
    """
    import jinja2

    if not spec.command:
        raise UsageError("no command given; put it after '--', e.g. slurmkit submit -- python train.py")
    if spec.comm not in COMM_MODES:
        raise UsageError("--comm must be one of: %s" % ", ".join(COMM_MODES))
    template_name = spec.template or site.defaults.template
    templates = available_templates(site)
    if template_name not in templates:
        raise UsageError("unknown template %r; choose one of: %s" % (template_name, ", ".join(sorted(templates))))
    gpus = partition.gpus_per_node if spec.gpus_per_node is None else spec.gpus_per_node
    time = spec.time or site.defaults.time
    check_fit(spec, partition, cluster, gpus, time)
    if template_name == "single" and spec.nodes != 1:
        raise UsageError("template 'single' runs one process on one node; use --nodes 1 or template 'srun'")

    switches = None
    if spec.comm == "heavy":
        if spec.switches is not None:
            switches = spec.switches
        elif layout is not None:
            from slurmkit.script import topology

            switches = topology.switches_for(layout, partition.name, spec.nodes)
        else:
            raise UsageError("--comm heavy needs the cluster's topology; it could not be read, "
                             "so give the leaf switch count with --switches N")
    ntasks = 1 if template_name in ("torchrun", "single") else max(gpus, 1)
    if ntasks * (spec.cpus_per_task or 1) > partition.cpus_per_node:
        raise JobDoesNotFitError(
            "template %s starts %d tasks per node x %d CPUs each, but partition %s on cluster %s has %d CPUs per node"
            % (template_name, ntasks, spec.cpus_per_task or 1, partition.name, cluster.name, partition.cpus_per_node))
    launch_args, runs_python = launcher_command(spec.command)
    # `python train.py` is job "train", not "python".
    script_name = os.path.basename(launch_args[0] if runs_python else spec.command[0])
    name = spec.name or (os.path.splitext(script_name)[0] if runs_python else script_name)
    warnings = collective.lint(partition, "partition %s" % partition.name)
    context = {
        "site": site, "cluster": cluster, "partition": partition, "job": spec, "name": name,
        "gpus_per_node": gpus, "ntasks_per_node": ntasks, "switches": switches,
        "directives": [Trusted(d) for d in build_directives(
            site, cluster, partition, spec, name=name, gpus=gpus, time=time,
            ntasks_per_node=ntasks, switches=switches)],
        "modules": list(site.modules), "setup": [Trusted(s) for s in site.setup],
        "fabric_exports": _exports(collective.collective_env(partition), "site config"),
        "user_exports": _exports(spec.env, "--env"),
        "command": Trusted(" ".join(shell_quote(a) for a in spec.command)),
        "launch_args": Trusted(" ".join(shell_quote(a) for a in launch_args)),
        "launch_prefix": Trusted("" if runs_python else "--no-python "),
        "nproc_per_node": max(gpus, 1), "rdzv_port": 29500,
    }
    try:
        script = _environment(site).get_template(template_name + TEMPLATE_SUFFIX).render(context)
    except jinja2.UndefinedError as exc:
        raise UsageError("template %r uses an undefined value: %s" % (template_name, exc)) from None
    except jinja2.TemplateSyntaxError as exc:
        raise UsageError("template %s line %s: %s" % (exc.filename or template_name, exc.lineno, exc.message)) from None
    from slurmkit.slurm.commands import SCRIPT_TRAILER

    # Every script ends with the trailer (also from a site's own templates): the
    # submit-once wrapper uses it to detect a script truncated in transit.
    if not script.endswith("\n"):
        script += "\n"
    if not script.endswith(SCRIPT_TRAILER + "\n"):
        script += SCRIPT_TRAILER + "\n"
    return RenderedJob(script=script, warnings=tuple(warnings), template=template_name,
                       cluster=cluster.name, partition=partition.name, switches=switches)
