"""What the pyslurm backend computes without pyslurm: its job records as :class:`JobInfo`, a job
script's directives as a ``JobSubmitDescription``'s fields (or None where pyslurm cannot submit it
faithfully), and the environment sbatch would have given the job.

Pure functions, unit-tested without pyslurm or Slurm (``tests/unit/test_pyslurm_rules.py``); the
backend (:mod:`slurmkit.slurm.pyslurm_backend`), the only importer of pyslurm, applies them.  The
attribute names and version differences they rely on are listed in that module's docstring.
"""

import math
import os
import re
import socket
from datetime import datetime
from typing import Dict, Iterable, Optional, Tuple

from slurmkit import times
from slurmkit.errors import SlurmkitError
from slurmkit.slurm import directives, parsers
from slurmkit.slurm.types import FINISHED_STATES, JobInfo


def attr_of(obj, *names, default=None):
    """The first of ``names`` that ``obj`` has (attribute names moved between versions)."""
    for name in names:
        try:
            value = getattr(obj, name)
        except AttributeError:
            continue
        return value
    return default


def _time_limit(value) -> str:
    # Job.time_limit is minutes, or None for both NO_VAL and INFINITE
    # (utils/ctime.pyx _raw_time); a running job always has a real limit, so
    # None reads as UNLIMITED, as the squeue --json parser does.  db.Job may
    # give the string "PartitionLimit" (db/job.pyx): passed through.
    if isinstance(value, str) and not value.isdigit():
        return value
    return parsers.time_limit_text(None if value is None else int(value))


def _start_time(value) -> Optional[datetime]:
    if isinstance(value, datetime):
        return value
    return parsers.epoch_datetime(value)  # unix seconds; None or 0 means not known yet


def pyslurm_exit(obj) -> Optional[str]:
    """A pyslurm Job's end as ``"E:S"`` text for :func:`parsers.decode_exit`.

    pyslurm decodes the wait status itself (utils/helpers.pyx
    ``_get_exit_code``, every version read up to 24.11) into ``exit_code``
    and ``exit_code_signal``, copying sacct's habit of taking 128 off an exit
    status of 128 or more: a script that exited 137 reads 9.  So the pair is
    exact when a signal is set, or when the status cannot have been cut
    (:func:`exit_is_ambiguous` is False); otherwise the backend asks for the
    exact value (:meth:`PyslurmBackend.jobs`).
    """
    code, signal = attr_of(obj, "exit_code"), attr_of(obj, "exit_code_signal")
    if code is None and signal is None:
        return None
    return "%d:%d" % (int(code or 0), int(signal or 0))


def exit_is_ambiguous(info: JobInfo) -> bool:
    """Whether pyslurm's exit status for this ended job may be 128 short.

    A COMPLETED job exited 0 (Slurm marks any other status FAILED), and a
    signal is reported as it is; any other exit status E may have been E+128.
    """
    return info.exit_code is not None and info.state != "COMPLETED"


def job_to_info(obj, exit_text=None) -> JobInfo:
    """A pyslurm ``Job`` (or ``db.Job``) as a :class:`JobInfo`; only reads attributes.

    Values are converted exactly as :func:`parsers.parse_squeue_json` converts
    squeue's, so both backends describe a job alike.  ``exit_text`` (``E:S``
    or a raw wait status) replaces what pyslurm's own exit attributes say.
    """
    job_id = attr_of(obj, "id", "job_id")  # "id" in every pyslurm version read
    num_nodes = attr_of(obj, "num_nodes")
    state = attr_of(obj, "state") or "UNKNOWN"
    # core Job: allocated_nodes; db.Job: nodelist (None while pending, and
    # "None assigned" in the database for a job that never ran, as in sacct)
    nodelist = attr_of(obj, "allocated_nodes", "nodelist") or ""
    if nodelist == "None assigned":
        nodelist = ""
    exit_code, signal = parsers.ended_exit(state, bool(nodelist),
                                           pyslurm_exit(obj) if exit_text is None else exit_text)
    values = dict(
        job_id=str(job_id),
        name=attr_of(obj, "name") or "",
        state=state,
        partition=attr_of(obj, "partition") or "",
        node_count=int(num_nodes) if num_nodes else 0,
        nodelist=nodelist,
        start_time=_start_time(attr_of(obj, "start_time")),
        time_limit=_time_limit(attr_of(obj, "time_limit")),
        user=attr_of(obj, "user_name") or "",
        reason=attr_of(obj, "state_reason") or "",
        comment=attr_of(obj, "comment") or "",
        exit_code=exit_code,
        signal=signal,
        cluster=attr_of(obj, "cluster") or "",
        stdout=attr_of(obj, "standard_output") or "",
        # As squeue --json: a live job's end_time is its time limit's, not an end.
        end_time=_start_time(attr_of(obj, "end_time")) if state in FINISHED_STATES else None,
    )
    return JobInfo(**values)


def records_of(collection) -> list:
    """The job objects of any pyslurm job collection.

    ``dict`` by id (22.5.2), ``MultiClusterMap`` by cluster then id (22.5.3+;
    its ``values()`` walks every cluster, xcollections.pyx) or ``list``
    (some ``db.Jobs`` versions): iterating a map would yield keys, not jobs.
    """
    values = getattr(collection, "values", None)
    if callable(values):
        return list(values())
    return list(collection)


class _Unsupported(Exception):
    """A directive pyslurm cannot express faithfully: submit with sbatch instead."""


_GRES_ITEM_RE = re.compile(r"^(?P<name>[A-Za-z][\w.-]*)(?::(?P<type>[A-Za-z_][\w.-]*))?(?::(?P<count>\d+))?$")


def _gres_dict(value: str, prefix: Optional[str] = None) -> Dict[str, int]:
    """``gpu:h100:8,npu:2`` -> {"gpu:h100": 8, "npu": 2}; ``h100:8`` with prefix gpu -> {"gpu:h100": 8}.

    A dict is what every pyslurm version turns into ``gres:NAME[:TYPE]:COUNT``
    (utils/cstr.pyx ``from_gres_dict``; the 22.5 version returns "" for a
    string, so a string is never passed).
    """
    out: Dict[str, int] = {}
    for item in value.split(","):
        if prefix:
            item = "%s:%s" % (prefix, item)
        m = _GRES_ITEM_RE.match(item)
        if not m:
            raise _Unsupported(item)
        key = m.group("name") + (":" + m.group("type") if m.group("type") else "")
        out[key] = out.get(key, 0) + int(m.group("count") or 1)
    return out


def _minutes(value: str):
    """``--time`` as pyslurm wants it: int minutes, or "UNLIMITED".

    pyslurm's ``timestr_to_mins`` returns a digit *string* unchanged, which
    then fails to convert to uint32 (utils/ctime.pyx), so ints are passed.
    Seconds round up and 0 means no limit, as in sbatch.
    """
    try:
        minutes = times.parse_minutes(value)
    except SlurmkitError:
        raise _Unsupported(value) from None
    if minutes is None or minutes == 0:
        return "UNLIMITED"
    return int(math.ceil(minutes))


def _dev_null(value: str) -> str:
    # sbatch turns --output/--error "none" into /dev/null (src/sbatch/opt.c).
    return "/dev/null" if value.lower() == "none" else value


def _ascii_digits(value) -> bool:
    """Digits as sbatch reads them: str.isdigit() and int() also take '٣' and '³', which sbatch refuses."""
    text = str(value)
    return text.isascii() and text.isdigit()


def _positive_int(value: str) -> int:
    if not _ascii_digits(value) or int(value) < 1:
        raise _Unsupported(value)
    return int(value)


def submit_description(options: Iterable[Tuple[str, object]]) -> Optional[dict]:
    """``JobSubmitDescription`` keyword arguments for these directives.

    None when any directive has no faithful pyslurm equivalent (``--switches``
    is silently dropped by every pyslurm version; an unknown option may change
    anything): the script then goes to sbatch unchanged.
    """
    kw: dict = {}
    gres: Dict[str, int] = {}
    seen = set()
    try:
        for name, value in options:
            if value is directives.UNSUPPORTED:
                return None
            if name in seen:
                return None  # sbatch: the last one wins; rare enough to leave to sbatch
            seen.add(name)
            if name == "job-name":
                kw["name"] = value
            elif name == "partition":
                kw["partitions"] = value
            elif name == "nodes":
                if not re.fullmatch(r"[0-9]+(-[0-9]+)?", value, re.ASCII):
                    return None   # sbatch decides (and refuses what it does not read)
                kw["nodes"] = int(value) if _ascii_digits(value) else value
            elif name == "ntasks":
                kw["ntasks"] = _positive_int(value)
            elif name == "ntasks-per-node":
                kw["ntasks_per_node"] = _positive_int(value)
            elif name == "cpus-per-task":
                kw["cpus_per_task"] = _positive_int(value)
            elif name == "time":
                kw["time_limit"] = _minutes(value)
            elif name in ("account", "qos", "comment"):
                kw[name] = value
            elif name == "output":
                kw["standard_output"] = _dev_null(value)
            elif name == "error":
                kw["standard_error"] = _dev_null(value)
            elif name == "chdir":
                kw["working_directory"] = value
            elif name == "mem":
                kw["memory_per_node"] = value
            elif name == "mem-per-cpu":
                kw["memory_per_cpu"] = value
            elif name == "nodelist":
                if "/" in value:
                    return None  # sbatch reads the names from that file
                kw["required_nodes"] = value  # submission.pyx: req_nodes, a hostlist as sbatch sends it
            elif name == "exclusive":
                kw["resource_sharing"] = "no"  # submission.pxd: "no" is sbatch's --exclusive
            elif name == "gres":
                if gres:
                    return None
                gres = _gres_dict(value)
            elif name == "gpus-per-node":
                if gres:
                    return None  # --gres and --gpus-per-node together: leave the merge to sbatch
                # submission.pxd: "use gres_per_node if you want to specify GPUs per node"
                gres = _gres_dict(value, prefix="gpu")
            else:
                return None
    except _Unsupported:
        return None
    if "mem" in seen and "mem-per-cpu" in seen:
        return None
    # sbatch names a script read from standard input (as CommandBackend
    # submits) "sbatch", without putting that name in SLURM_JOB_NAME;
    # pyslurm would leave the name empty.
    kw.setdefault("name", "sbatch")
    if gres:
        kw["gres_per_node"] = gres
    # pyslurm forces ntasks=1 when unset (_set_defaults); sbatch derives it
    # from --ntasks-per-node (ntasks = min nodes x per node) and otherwise
    # leaves it unset.  Unset is not the same as 1, even on one node: a job
    # with a task count gets SLURM_NTASKS and SLURM_NPROCS from slurmd, and
    # srun inside it reads them (seen in tests/integration/test_backend_parity.py).
    # pyslurm cannot send "unset" (NO_VAL breaks its min_cpus product), so
    # such a script goes to sbatch; slurmkit's templates always give
    # --ntasks-per-node.
    if "ntasks" not in kw:
        if "ntasks_per_node" not in kw:
            return None
        min_nodes = int(str(kw.get("nodes", 1)).split("-")[0])
        kw["ntasks"] = min_nodes * kw["ntasks_per_node"]
    return kw


# What sbatch itself writes into the job's environment for the options
# submit_description accepts (src/sbatch/opt.c): the value as given, even
# over the same variable inherited from the submitting environment (a job
# submitted from inside another job).  Nothing else differs: checked by
# submitting the same scripts both ways (tests/integration/test_backend_parity.py).
# Without it `%x` in an output name becomes "(null)" (slurmstepd takes the
# name from SLURM_JOB_NAME) and templates that read SLURM_CPUS_PER_TASK
# under `set -u` die.
_SBATCH_SETS = {"job-name": "SLURM_JOB_NAME", "ntasks-per-node": "SLURM_NTASKS_PER_NODE",
                "cpus-per-task": "SLURM_CPUS_PER_TASK", "gpus-per-node": "SLURM_GPUS_PER_NODE"}


def sbatch_option_environment(options: Iterable[Tuple[str, object]], release=(22, 5)) -> Dict[str, str]:
    """The variables sbatch sets in the job's environment for these directives.

    ``release`` is the Slurm (MAJOR, MINOR): from 23.11 on, sbatch also sets
    ``SLURM_TRES_PER_TASK=cpu=N`` for ``--cpus-per-task`` (its NEWS says
    "cpu:N"; the 24.11 and 26.05 sbatch write "cpu=N").
    """
    env = {}
    for name, value in options:
        if name in _SBATCH_SETS and isinstance(value, str):
            # sbatch prints the counts with %d: "-c 04" arrives as 4
            env[_SBATCH_SETS[name]] = str(int(value)) if _ascii_digits(value) else value
            if name == "cpus-per-task" and tuple(release) >= (23, 11):
                env["SLURM_TRES_PER_TASK"] = "cpu=" + env[_SBATCH_SETS[name]]
    return env


_EXTERNAL_LAUNCHER = "--external-launcher"


def mpi_launcher_environment(env: Dict[str, str], release, mpi_params: str = "") -> Dict[str, str]:
    """What sbatch 23.11 and later add for MPI launchers started inside the job.

    mpirun and mpiexec (Open MPI's PRRTE, MPICH's and Intel MPI's Hydra)
    then start their daemons with ``srun --external-launcher``, as a step of
    the job instead of over SSH.  Per Slurm's NEWS: the Hydra pairs are left
    out where the user chose another bootstrap (``I_MPI_HYDRA_BOOTSTRAP`` or
    ``HYDRA_BOOTSTRAP`` not "slurm") and where slurm.conf's ``MpiParams``
    has ``disable_slurm_hydra_bootstrap`` (24.05+).  ``env`` is the
    submitting environment; a value the user set is kept.
    """
    if tuple(release) < (23, 11):
        return {}
    add = {"OMPI_MCA_plm_slurm_args": _EXTERNAL_LAUNCHER, "PRTE_MCA_plm_slurm_args": _EXTERNAL_LAUNCHER}
    if "disable_slurm_hydra_bootstrap" not in (mpi_params or "").split(","):
        for bootstrap, extra in (("I_MPI_HYDRA_BOOTSTRAP", "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS"),
                                 ("HYDRA_BOOTSTRAP", "HYDRA_LAUNCHER_EXTRA_ARGS")):
            if env.get(bootstrap, "slurm") == "slurm":
                add[bootstrap], add[extra] = "slurm", _EXTERNAL_LAUNCHER
    return {k: v for k, v in add.items() if k not in env}


def submit_environment(extra_env, options=(), release=(22, 5), mpi_params="") -> Dict[str, str]:
    """The environment sbatch would send: all of ours, plus what sbatch adds.

    sbatch exports its whole environment (--export=ALL), sets
    SLURM_SUBMIT_DIR, SLURM_SUBMIT_HOST, SLURM_UMASK and SLURM_PRIO_PROCESS
    (src/sbatch/sbatch.c), from 23.11 on those of :func:`mpi_launcher_environment`,
    and the variables of :func:`sbatch_option_environment`
    for the script's directives ``options``; jobs and srun inside them rely
    on those and on SLURM_CONF, which this process does not keep in its own
    environment.
    """
    env = dict(os.environ)
    env.update(extra_env or {})
    env.update(mpi_launcher_environment(env, release, mpi_params))
    env.update(sbatch_option_environment(options, release))
    env.setdefault("SLURM_SUBMIT_DIR", os.getcwd())
    env.setdefault("SLURM_SUBMIT_HOST", socket.gethostname())
    mask = os.umask(0)
    os.umask(mask)
    env.setdefault("SLURM_UMASK", "%04o" % mask)
    try:
        env.setdefault("SLURM_PRIO_PROCESS", str(os.getpriority(os.PRIO_PROCESS, 0)))
    except (AttributeError, OSError):
        pass
    return env


