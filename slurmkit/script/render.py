"""Render sbatch scripts from Jinja2 templates and the site config: :func:`render`.

What the user asked for (:class:`JobSpec`) becomes a checked script
(:class:`RenderedJob`) here; the concerns it draws on have modules of their
own beside it: ``templates`` (finding, loading and rendering the Jinja2
templates), ``quoting`` (values made safe for bash and for ``#SBATCH``
lines: the safety model), ``sbatch_header`` (the fit on the partition, the
switches, the directives) and ``container_launch`` (tasks started in a
container image).

The command reaches its launcher safely: ``exec --``, ``srun ... --`` and
``torchrun ... --`` end the launchers' options, so a command whose first
word starts with ``-`` is run, not read as an option.
"""

import os
import re
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from slurmkit.script import collective
from slurmkit import times
from slurmkit.errors import JobDoesNotFitError, UsageError
from slurmkit.script.container_launch import container_launch
from slurmkit.script.quoting import Trusted, check_env_name, check_setup_lines, sbatch_quote, shell_quote
from slurmkit.script.sbatch_header import (build_directives, check_directives_reach_sbatch, check_fit,
                                           check_one_constraint, gres_name, group_constraint, output_file_name,
                                           switch_wait)
from slurmkit.script.templates import available_templates, render_template
from slurmkit.site.model import Cluster, Partition, Site

COMM_MODES = ("heavy", "light")
# An interpreter by name or path: python, python3, python3.11, /opt/venv/bin/python
# (matched whole and in ASCII).
_PYTHON_RE = re.compile(r"python[0-9.]*", re.ASCII)


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
    # sbatch --begin, in sbatch's grammar: the user's, or the federation's --prefer cheap|green putting a job
    # in a later, cheaper or cleaner window (YYYY-MM-DDTHH:MM:SS) by holding it until then (reason BeginTime).
    begin: Optional[str] = None
    dependency: Optional[str] = None         # sbatch --dependency, job ids of the job's own cluster
    reservation: Optional[str] = None        # sbatch --reservation
    # The --prefer the federation placed the job by (cheap, green; None otherwise): it picks the site's GPU
    # frequency for the job (energy.gpu_freq), rendered as sbatch --gpu-freq unless gpu_freq says otherwise.
    prefer: Optional[str] = None
    gpu_freq: Optional[str] = None           # sbatch --gpu-freq, the caller's own (overrides the site's)

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
    fabric_env, user_exports, requeue_exports, user_sets = _job_environment(spec, cluster, partition, template_name,
                                                                                  warnings)
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
        "nvml": _nvml_sampling(cluster, partition, gpus),
    }
    script = _checked_script(site, template_name, context, spec, user_exports, constraint)
    warnings.extend(user_sets.warnings)
    return RenderedJob(script=script, warnings=tuple(warnings), template=template_name,
                       cluster=cluster.name, partition=partition.name, switches=switches,
                       switch_wait=wait, output=spec.output or output_file_name(name), name=name,
                       constraint=constraint, image=container.location if container else None,
                       runtime=container.runtime if container else None)


def _nvml_sampling(cluster: Cluster, partition: Partition, gpus: int) -> Optional[dict]:
    """Where the job writes its GPUs' NVML energy counters and with which Python (the nodes' Python the
    site names for the API's calls, else python3 on the nodes' PATH); None where nothing is sampled: a
    partition without NVIDIA GPUs, a job without GPUs, or a cluster whose site entry sets no
    energy.nvml_samples."""
    if partition.accelerator != "nvidia" or not gpus or not cluster.energy.nvml_samples:
        return None
    return {"dir": Trusted(shell_quote(cluster.energy.nvml_samples.rstrip("/") or "/")),
            "python": Trusted(shell_quote(cluster.python or "python3"))}


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


def _job_environment(spec: JobSpec, cluster: Cluster, partition: Partition, template_name: str,
                     warnings: List[str]):
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
        for key in ("SLURMKIT_CHECKPOINT_DIR", "SLURMKIT_ATTEMPT", "SLURMKIT_RESUME_FROM", "SLURMKIT_CLUSTER"):
            if key in spec.env:
                raise UsageError("--env %s: the requeue daemon sets it for each attempt" % key)
        # The cluster too: a restart may run on another cluster than the one the command was written for
        # (the API's call names its first one), and the job's global id is the cluster it runs on.
        requeue_env = {"SLURMKIT_CHECKPOINT_DIR": spec.checkpoint_dir, "SLURMKIT_ATTEMPT": str(spec.attempt or 1),
                       "SLURMKIT_CLUSTER": cluster.name}
        if spec.resume_from:
            requeue_env["SLURMKIT_RESUME_FROM"] = spec.resume_from
        requeue_exports = _exports(requeue_env, "requeue")
    return fabric_env, user_exports, requeue_exports, _UserEnv(spec.env, template_name)

def _checked_script(site: Site, template_name: str, context: dict, spec: JobSpec, user_exports,
                    constraint: Optional[str]) -> str:
    """The template rendered, checked (the --env values survive, every directive reaches sbatch, one
    constraint), and ended with the trailer."""
    from slurmkit.slurm.commands import SCRIPT_TRAILER

    script = render_template(site, template_name, context)
    _check_env_survives(script, user_exports, spec.env, template_name)
    check_directives_reach_sbatch(script, context["directives"], template_name)
    if constraint:
        check_one_constraint(script, "--constraint=" + sbatch_quote(constraint), template_name)
    # Every script ends with the trailer (also from a site's own templates): the
    # submit-once wrapper uses it to detect a script truncated in transit.
    if not script.endswith("\n"):
        script += "\n"
    if not script.endswith(SCRIPT_TRAILER + "\n"):
        script += SCRIPT_TRAILER + "\n"
    return script
