"""The ``#SBATCH`` header of a job script: whether the job fits its partition (:func:`check_fit`),
the leaf switches and their wait, the switch group's ``--constraint``, the directives themselves
(quoted for sbatch's parser), and the checks that sbatch will really read them.

Every rendered script is checked to have all its directives where sbatch
reads them (before the first line that is not a comment), so no value, the
site's or a template's, can make sbatch ignore them.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

from slurmkit import times
from slurmkit.errors import ConfigError, JobDoesNotFitError, UsageError
from slurmkit.script.quoting import sbatch_quote
from slurmkit.site.model import Cluster, Partition, Site

if TYPE_CHECKING:   # the job spec is the renderer's, which imports this module
    from slurmkit.script.render import JobSpec

# Patterns are matched whole (fullmatch) and in ASCII: with "^...$" a value
# ending in a newline matches too.
_UNSAFE_FILE_CHARS_RE = re.compile(r"[^A-Za-z0-9._-]+", re.ASCII)
_SIGNAL_RE = re.compile(r"(?:B:)?USR[12]@[0-9]{1,5}", re.ASCII)
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


# The values of the sbatch options a user gives as text, each checked here once (the CLI calls these for
# its options' own error lines; the renderer for every job spec, whoever built it), then passed to sbatch
# literally: sbatch's own grammar, so what a researcher knows from sbatch works as it does there.
MEM_RE = re.compile(r"[1-9][0-9]{0,8}[KMGT]?", re.ASCII)
# sbatch --begin: an ISO date and time, a date, a time of day, now+COUNT[UNIT], or one of Slurm's words.
_BEGIN_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}(?:T[0-9]{2}:[0-9]{2}(?::[0-9]{2})?)?|[0-9]{2}:[0-9]{2}(?::[0-9]{2})?"
                       r"|now(?:\+[0-9]{1,7}(?:(?:second|minute|hour|day|week)s?)?)?"
                       r"|midnight|noon|elevenses|fika|teatime|today|tomorrow", re.ASCII)
# sbatch --dependency: singleton, or TYPE:JOBID[:JOBID...] (after's ids may carry +MINUTES), joined by ','
# (all of them) or '?' (any of them), never both.
_DEPENDENCY_ONE = (r"(?:singleton|(?:after|afterany|afterok|afternotok|aftercorr|afterburstbuffer)"
                   r"(?::[1-9][0-9]{0,9}(?:_[0-9]{1,7})?(?:\+[0-9]{1,6})?)+)")
_DEPENDENCY_RE = re.compile(r"%s(?:,%s)*|%s(?:\?%s)+" % ((_DEPENDENCY_ONE,) * 4), re.ASCII)
_RESERVATION_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}(?:,[A-Za-z0-9_.-]{1,64})*", re.ASCII)


def check_mem(text: str) -> str:
    """sbatch --mem's value (memory per node): 16G, 512M, 4096 (MB)."""
    if not MEM_RE.fullmatch(text):
        raise UsageError("--mem %r: give the memory per node as a size such as 16G, 512M or 4096 (MB)" % text)
    return text


def mem_megabytes(text: str) -> int:
    """A checked --mem value in MB, as Slurm counts it (K rounds up)."""
    unit = text[-1] if text[-1] in "KMGT" else "M"
    number = int(text.rstrip("KMGT"))
    return {"K": -(-number // 1024), "M": number, "G": number * 1024, "T": number * 1024 * 1024}[unit]


def check_begin(text: str) -> str:
    """sbatch --begin's value, in sbatch's own grammar (the controller's local time)."""
    if not _BEGIN_RE.fullmatch(text):
        raise UsageError("--begin %r: give a time as sbatch takes it: 2026-12-05T08:00[:00], 2026-12-05, 08:00, "
                         "now+2hours (seconds, minutes, hours, days, weeks), midnight, noon, teatime, tomorrow"
                         % text)
    return text


def check_dependency(text: str) -> str:
    """sbatch --dependency's value: numeric job ids of the job's own cluster."""
    if not _DEPENDENCY_RE.fullmatch(text):
        raise UsageError("--dependency %r: give TYPE:JOBID[:JOBID...] (after, afterany, afterok, afternotok, "
                         "aftercorr, afterburstbuffer), or singleton; several joined by ',' (all) or '?' (any), "
                         "with the job ids of the cluster the job goes to (1234, not alpha:1234)" % text)
    return text


def check_reservation(text: str) -> str:
    if not _RESERVATION_RE.fullmatch(text):
        raise UsageError("--reservation %r: give a reservation's name (letters, digits, '_', '.', '-'; several "
                         "joined by ',')" % text)
    return text


def gpu_freq(cluster: Cluster, spec: JobSpec) -> Optional[str]:
    """The job's sbatch --gpu-freq: the caller's, else the one the site sets for the --prefer that placed it."""
    from slurmkit.site.checkers import check_gpu_freq

    value = spec.gpu_freq if spec.gpu_freq is not None else cluster.energy.gpu_freq.get(spec.prefer or "")
    if value is not None:
        problem = check_gpu_freq(value)
        if problem:
            raise UsageError("--gpu-freq: %s" % problem)
    return value


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
        check_mem(spec.mem)
        if partition.memory_mb and mem_megabytes(spec.mem) > partition.memory_mb:
            raise JobDoesNotFitError("the job asks for --mem=%s per node, but the nodes of partition %s on cluster "
                                     "%s have %d MB" % (spec.mem, partition.name, cluster.name, partition.memory_mb))
        opts.append(("--mem", spec.mem))
    opts.append(("--time", time))
    if spec.begin is not None:
        opts.append(("--begin", check_begin(spec.begin)))
    if spec.dependency is not None:
        opts.append(("--dependency", check_dependency(spec.dependency)))
    if spec.reservation is not None:
        opts.append(("--reservation", check_reservation(spec.reservation)))
    freq = gpu_freq(cluster, spec)
    if freq is not None and gpus:
        opts.append(("--gpu-freq", freq))
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


def check_one_constraint(script: str, ours: str, template: str) -> None:
    """Refuse a template that prints a --constraint of its own beside slurmkit's:
    sbatch keeps only one of the two, so either the user's features or the
    switch group would be silently dropped."""
    for line in script.split("\n"):
        text = line.strip()
        if _CONSTRAINT_DIRECTIVE_RE.match(text) and text != "#SBATCH " + ours:
            raise ConfigError("template %s sets its own node constraint (%s) besides slurmkit's (#SBATCH %s); sbatch "
                              "would keep only one: remove it from the template and give it with --constraint "
                              "instead" % (template, text, ours))


def check_directives_reach_sbatch(script: str, directives: Sequence[str], template: str) -> None:
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
