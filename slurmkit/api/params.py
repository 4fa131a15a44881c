"""submitit's executor parameters, as slurmkit's job request.

A pure translation: names and values in, a :class:`Request` (the job spec's fields, the
partition) out, or a :class:`~slurmkit.errors.UsageError` naming the parameter.  Two
vocabularies, as in submitit: :class:`~slurmkit.api.executor.AutoExecutor` takes the
generic names (``timeout_min``, ``tasks_per_node``, ``mem_gb``, ...) and Slurm's under
``slurm_``; :class:`~slurmkit.api.executor.SlurmExecutor` takes Slurm's without it
(``time``, ``ntasks_per_node``, ``mem``, ...).  Plus what slurmkit adds: ``comm``,
``template``, ``image``, ``mounts``, ``env``, and ``auto_requeue`` (True: the requeue daemon
restarts a call, as a new job off the failed nodes and within its budgets, after a node failure,
a preemption, or a checkpoint saved on USR1, as ``slurmkit submit --auto-requeue`` does; a
``map_array`` or ``batch`` array gets Slurm's own ``--requeue`` instead; False: ``--no-requeue``,
and no checkpoint is asked for; not given: the cluster's default, and a checkpointable call asks
for ``--requeue``: Slurm restarts the same job id from its checkpoint), and ``prefer`` (soon, cheap,
green) with ``deadline``, which place a call in place and time as ``submit --prefer --deadline`` does.

``slurm_setup`` (``setup`` for the SlurmExecutor), as in submitit: lines of shell that the batch
script runs before the call starts (``module load``, ``source venv/bin/activate``), printed as
they are written: they are the user's own shell, like the command of ``slurmkit submit``.  Each
is one line; a newline inside one is refused (it would be two lines, and the check of what
the script holds would see one).

``slurm_additional_parameters`` cannot pass arbitrary ``#SBATCH`` lines: the ones slurmkit
knows what to do with are taken (``account``, ``qos``, ``constraint``, ``exclude``,
``nodelist``, ``exclusive``, ``dependency``, ``begin``, ``reservation``: the last three in
sbatch's own forms, checked as ``slurmkit submit`` checks them), any other is refused, so that
nothing reaches sbatch unchecked.
"""

from typing import Dict, NamedTuple, Optional, Tuple

from slurmkit.errors import UsageError

# Generic (AutoExecutor) name -> Slurm (SlurmExecutor) name.
GENERIC = {"timeout_min": "time", "nodes": "nodes", "tasks_per_node": "ntasks_per_node",
           "gpus_per_node": "gpus_per_node", "cpus_per_task": "cpus_per_task", "mem_gb": "mem",
           "name": "job_name"}
# Slurm names this translation takes (the SlurmExecutor's, AutoExecutor's with "slurm_").
SLURM = ("partition", "time", "nodes", "ntasks_per_node", "gpus_per_node", "cpus_per_task", "mem", "job_name",
         "account", "qos", "constraint", "exclude", "nodelist", "exclusive", "additional_parameters", "setup",
         "array_parallelism")
# slurmkit's own, the same in both.
OWN = ("comm", "template", "image", "mounts", "env", "auto_requeue", "prefer", "deadline")
ADDITIONAL = ("account", "qos", "constraint", "exclude", "nodelist", "exclusive", "dependency", "begin", "reservation")


class Request(NamedTuple):
    """The job spec's fields (JobSpec keyword arguments but the command), the partition, and where in time the
    call goes: ``prefer`` (soon, cheap, green) and ``deadline`` (``submit --deadline``'s text), as the CLI's."""

    fields: Dict[str, object]
    partition: Optional[str]
    prefer: Optional[str] = None
    deadline: Optional[str] = None


def slurm_names(parameters: Dict[str, object], generic: bool) -> Dict[str, object]:
    """``parameters`` under Slurm's names; an unknown name is refused with the ones there are."""
    out: Dict[str, object] = {}
    for key, value in parameters.items():
        if key in OWN:
            name = key
        elif generic and key in GENERIC:
            name = GENERIC[key]
        elif generic and key.startswith("slurm_") and key[len("slurm_"):] in SLURM:
            name = key[len("slurm_"):]
        elif not generic and key in SLURM:
            name = key
        else:
            known = sorted(list(GENERIC) + ["slurm_" + s for s in SLURM] if generic else SLURM) + sorted(OWN)
            raise UsageError("unknown executor parameter %r (known: %s)" % (key, ", ".join(known)))
        if name in out:
            raise UsageError("executor parameter %r given twice (as %s too)" % (key, name))
        out[name] = value
    return out


def _int(name: str, value, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise UsageError("executor parameter %s=%r: give a whole number of at least %d" % (name, value, low))
    return value


def _text(name: str, value) -> str:
    if not isinstance(value, str) or not value or any(c in value for c in "\n\r\0"):
        raise UsageError("executor parameter %s=%r: give a non-empty string of one line" % (name, value))
    return value


def _minutes(value) -> str:
    """submitit's ``timeout_min`` (minutes) as Slurm's time."""
    minutes = _int("timeout_min", value)
    return "%d:%02d:00" % divmod(minutes, 60)


def _mem(value, generic: bool) -> str:
    if generic:          # mem_gb: a number of GB
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise UsageError("executor parameter mem_gb=%r: give a positive number of GB" % (value,))
        return "%dM" % max(1, round(value * 1024))
    from slurmkit.script.sbatch_header import MEM_RE

    text = str(value)
    if not MEM_RE.fullmatch(text):
        raise UsageError("executor parameter mem=%r: give a size such as 16G, 512M or 4096 (MB)" % (value,))
    return text


def request(parameters: Dict[str, object], generic: bool) -> Request:
    """The job request of an executor's ``parameters`` (``generic``: AutoExecutor's vocabulary)."""
    named = slurm_names(parameters, generic)
    extra = named.pop("additional_parameters", None) or {}
    if not isinstance(extra, dict):
        raise UsageError("executor parameter additional_parameters: give a dict of sbatch options")
    for key, value in extra.items():
        if key not in ADDITIONAL:
            raise UsageError("additional_parameters: %r is not passed to sbatch by slurmkit (it takes %s); an "
                             "option of the job's shape has its own parameter" % (key, ", ".join(ADDITIONAL)))
        if key in named:
            raise UsageError("%s given both as a parameter and in additional_parameters" % key)
        named[key] = value
    fields: Dict[str, object] = {}
    partition = _text("partition", named.pop("partition")) if "partition" in named else None
    prefer, deadline = _when(named.pop("prefer", None), named.pop("deadline", None), named.get("auto_requeue"))
    if prefer in ("cheap", "green"):
        fields["prefer"] = prefer             # the site's GPU frequency for it (energy.gpu_freq)
    for key, value in named.items():
        if key == "time":
            fields["time"] = _minutes(value) if generic or isinstance(value, int) else _text("time", value)
        elif key == "array_parallelism":
            fields["array_parallelism"] = _int(key, value)
        elif key in ("nodes", "gpus_per_node", "cpus_per_task"):
            fields[key] = _int(key, value, 0 if key == "gpus_per_node" else 1)
        elif key == "ntasks_per_node":
            fields["procs_per_node"] = _int(key, value)
        elif key == "mem":
            fields["mem"] = _mem(value, generic)
        elif key == "job_name":
            fields["name"] = _text(key, value)
        elif key in ("account", "qos", "constraint", "nodelist", "comm", "template", "image"):
            fields[key] = _text(key, value)
        elif key == "exclude":
            fields["exclude"] = tuple(_text(key, n) for n in (value.split(",") if isinstance(value, str) else value))
        elif key == "exclusive":
            fields["exclusive"] = bool(value)
        elif key in ("dependency", "begin", "reservation"):
            from slurmkit.script import sbatch_header

            fields[key] = getattr(sbatch_header, "check_" + key)(_text(key, value))
        elif key == "mounts":
            fields["mounts"] = _strings(key, value)
        elif key == "auto_requeue":
            if not isinstance(value, bool):
                raise UsageError("executor parameter auto_requeue=%r: give True (the requeue daemon restarts the "
                                 "call after a node failure, a preemption or a checkpoint) or False (never)" % (value,))
            fields["requeue"] = value
        elif key == "setup":
            fields["setup"] = _lines(value)
        elif key == "env":
            if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                      for k, v in value.items()):
                raise UsageError("executor parameter env: give a dict of strings")
            fields["env"] = dict(value)
    return Request(fields, partition, prefer, deadline)


def _when(prefer, deadline, auto_requeue) -> Tuple[Optional[str], Optional[str]]:
    """``prefer`` and ``deadline`` checked: a preference of the CLI's, a deadline as ``submit --deadline`` takes
    it (text) or a ``datetime`` (this machine's local time, as Slurm's)."""
    import datetime

    if prefer is not None and prefer not in ("soon", "cheap", "green"):
        raise UsageError("executor parameter prefer=%r: choose one of soon, cheap, green" % (prefer,))
    if isinstance(deadline, datetime.datetime):
        if deadline.tzinfo is not None:
            deadline = deadline.astimezone().replace(tzinfo=None)
        deadline = deadline.replace(microsecond=0).isoformat()
    elif deadline is not None:
        deadline = _text("deadline", deadline)
    if auto_requeue is True and (prefer in ("cheap", "green") or deadline is not None):
        raise UsageError("executor parameters prefer cheap|green and deadline do not apply to auto_requeue=True "
                         "yet: its restarts start when the call fails")
    return prefer, deadline


def _lines(value) -> Tuple[str, ...]:
    """``slurm_setup``: a list of shell lines (a single string is one line)."""
    items = (value,) if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(line, str) for line in items):
        raise UsageError("executor parameter slurm_setup=%r: give a list of shell lines (strings)" % (value,))
    from slurmkit.script.quoting import check_setup_lines

    check_setup_lines(items, "executor parameter slurm_setup")
    return tuple(items)


def _strings(name: str, value) -> Tuple[str, ...]:
    items = (value,) if isinstance(value, str) else tuple(value or ())
    return tuple(_text(name, item) for item in items)
