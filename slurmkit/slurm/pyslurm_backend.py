"""The optional pyslurm implementation of :class:`SlurmBackend`.

pyslurm links libslurm into this process, so job queries, submission and
cancellation are RPCs instead of ``squeue``/``sbatch``/``scancel`` processes.
It is used only where :func:`unusable_reason` says it is safe: pyslurm is
installed, offers the Job API, and was built for the very Slurm MAJOR.MINOR the
cluster runs (libslurm's RPC protocol changes with every major release).
Everything pyslurm does not offer (``sbatch --test-only``, topology,
partitions, nodes, version) is inherited from :class:`CommandBackend`, and so
is every case pyslurm cannot do faithfully: a script with a directive that
has no exact pyslurm equivalent (``--switches`` above all) is submitted with
sbatch, and accounting falls back to sacct where ``pyslurm.db`` cannot answer.

The pyslurm API used here was read in pyslurm's own source (PySlurm/pyslurm),
in the 22.5.x branch and in the current 25.11 tree.  CHANGELOG.md: 22.5.0
and 22.5.1 only have the old ``pyslurm.job`` class; the Job API arrived in
22.5.2 (``db.JobSearchFilter``), 22.5.3 renamed it ``db.JobFilter`` and made
collections ``MultiClusterMap``; nothing used here changed from there to
25.11.0.

- ``pyslurm/__init__.py``: ``__version__``; ``Job``, ``Jobs``,
  ``JobSubmitDescription`` and ``RPCError`` at top level; ``slurm_init()`` is
  called at import, so libslurm reads ``SLURM_CONF`` then and never again.
- ``pyslurm/core/job/job.pyx`` (+ ``job.pxd`` docs): ``Jobs.load()`` is one
  ``slurm_load_jobs`` RPC.  22.5.2 returns a ``dict`` keyed by job id; from
  22.5.3/23.2.2 on it is a ``xcollections.MultiClusterMap`` keyed by cluster,
  then id, whose ``values()`` yields every job.  ``Job(id).cancel()`` sends
  SIGKILL and ignores "already done" and "invalid job id".  Job attributes
  are the same in every version: ``id`` (not ``job_id``), ``name``,
  ``state``, ``state_reason``, ``partition``, ``num_nodes``,
  ``allocated_nodes``, ``start_time`` (unix seconds, None when unset),
  ``time_limit`` (minutes, None for NO_VAL *and* INFINITE), ``user_name``,
  ``comment``, ``exit_code`` and ``exit_code_signal`` (utils/helpers.pyx
  ``_get_exit_code``: 0 while running, and 128 taken off an exit status of
  128 or more, as sacct prints it), ``cluster``, ``standard_output``.  The
  deprecated ``job`` class still prints the status whole (``"E:S"``), and the
  deprecated ``slurmdb_jobs`` gives the raw wait status (``exitcode``).
- ``pyslurm/core/job/submission.pyx``/``.pxd``: ``JobSubmitDescription(**kw)``,
  ``.script`` (a path or the script text), ``.submit()`` returns the job id.
  Attribute names differ from sbatch's: ``partitions``, ``time_limit``,
  ``standard_output``, ``gres_per_node``; there is no ``gpus_per_node``, and
  ``switches`` is accepted but never sent (``_set_switches`` is not called).
- ``pyslurm/core/job/sbatch_opts.pyx``: ``load_sbatch_options()`` exists in
  every version but is not usable for slurmkit's scripts: it needs the script
  as a *file path*, takes one option per ``#SBATCH`` line, cuts values at
  ``#``/``=``, ignores quoting, and maps ``--partition``/``--gpus-per-node``
  to attributes the class does not have (``partition``, ``gpus_per_node``),
  which raises AttributeError.  So :func:`sbatch_directives` parses the
  directives here, the way sbatch does.
- ``pyslurm/db/job.pyx``: ``db.Jobs.load(filter)``; the filter class is
  ``JobSearchFilter`` in 22.5.2 and ``JobFilter`` from 22.5.3 on (an alias
  of the old name is kept in some versions).  The collection is a ``dict``,
  a ``list`` or a ``MultiClusterMap`` depending on the version.  ``db.Job``
  has ``nodelist`` instead of ``allocated_nodes``, ``time_limit`` may be the
  string ``"PartitionLimit"``, and in 22.5.2 ``exit_code`` is a stub that
  always returns 0.
- ``pyslurm/core/error.pyx``: ``RPCError(Exception)`` with ``.errno`` and
  ``.msg`` (Slurm's own error string).
"""

import importlib
import importlib.util
import math
import os
import re
import socket
import sys
import threading
from dataclasses import replace
from datetime import datetime
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from slurmkit.errors import SlurmCommandError, SlurmkitError, SlurmUnavailableError
from slurmkit import times
from slurmkit.slurm import commands, directives, parsers, pyslurm_installed
from slurmkit.slurm.backend import UNREACHABLE_RE, CommandBackend
from slurmkit.slurm.runner import LocalRunner, Runner
from slurmkit.slurm.types import FINISHED_STATES, JobInfo


# ---------------------------------------------------------------------------
# Whether pyslurm may be used
# ---------------------------------------------------------------------------

_LOCK = threading.RLock()
# (cluster name, SLURM_CONF) -> reason or None.  The answer depends only on
# what is installed and which Slurm the cluster runs, so it holds for the
# whole process; one `scontrol --version` per cluster is enough.
_CACHE: Dict[Tuple[str, str], Optional[str]] = {}
# The SLURM_CONF libslurm was initialised with when *we* imported pyslurm
# ("" = Slurm's default lookup).  None while we have not imported it.
_initialised_conf: Optional[str] = None


def versions_match(pyslurm_version: str, slurm_version: str) -> bool:
    """pyslurm ``22.5.2`` fits Slurm ``22.05.8``: same MAJOR.MINOR, patch ignored.

    pyslurm numbers its releases SLURM_MAJOR.PYSLURM_PATCH (pyslurm/version.py),
    so its first two numbers name the Slurm release it was built against.
    """
    ours, theirs = parsers.major_minor(pyslurm_version or ""), parsers.major_minor(slurm_version or "")
    return ours is not None and ours == theirs


def _installed_version() -> Optional[str]:
    """The installed distribution's version, read without importing pyslurm.

    Importing a pyslurm built for another Slurm can fail in odd ways (missing
    libslurm.so.NN) or load a libslurm that speaks another protocol, so the
    version is compared before the import where the metadata allows it.
    """
    try:
        from importlib import metadata
    except ImportError:  # pragma: no cover - Python < 3.8
        return None
    try:
        return metadata.version("pyslurm")
    except Exception:  # PackageNotFoundError, or broken metadata: fall back to __version__
        return None


def _effective_conf(cluster) -> str:
    """The SLURM_CONF the Slurm commands would use for ``cluster`` ("" = Slurm's default)."""
    return cluster.slurm_conf or os.environ.get("SLURM_CONF", "") or ""


def conf_conflict(wanted: str, initialised: Optional[str]) -> Optional[str]:
    """Why a pyslurm initialised with ``initialised`` cannot serve ``wanted`` (None: it can).

    Both are SLURM_CONF paths, "" meaning Slurm's default lookup; None for
    ``initialised`` means pyslurm is not initialised in this process yet.
    """
    if initialised is None or initialised == wanted:
        return None
    return ("pyslurm was already initialised in this process with SLURM_CONF=%s, and libslurm "
            "reads its configuration only once; this cluster uses SLURM_CONF=%s"
            % (initialised or "(Slurm default)", wanted or "(Slurm default)"))


def _initialised() -> Optional[str]:
    """The SLURM_CONF the pyslurm of this process was initialised with, None if not imported."""
    if "pyslurm" not in sys.modules:
        return None
    if _initialised_conf is not None:
        return _initialised_conf
    # Someone else imported pyslurm; libslurm read SLURM_CONF at that moment,
    # which can only be assumed to be the current environment.
    return os.environ.get("SLURM_CONF", "") or ""


def _import_pyslurm(conf: str):
    """Import pyslurm so that libslurm initialises with ``conf``.

    pyslurm's ``__init__`` calls ``slurm_init()``, which reads SLURM_CONF from
    the environment right then.  The variable is set only around the import
    and restored afterwards: left in ``os.environ`` it would silently point
    every later local Slurm command of this process (for other clusters) at
    this cluster.  The job environment gets SLURM_CONF explicitly at submit.
    """
    global _initialised_conf
    if "pyslurm" in sys.modules:
        return sys.modules["pyslurm"]
    saved = os.environ.get("SLURM_CONF")
    if conf:
        os.environ["SLURM_CONF"] = conf
    try:
        module = importlib.import_module("pyslurm")
        try:  # inside the same window, in case a build initialises anything in pyslurm.db
            importlib.import_module("pyslurm.db")
        except Exception:
            pass  # no database API in this build: accounting() uses sacct
    finally:
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved
    _initialised_conf = conf
    return module


def _missing_api(module) -> List[str]:
    wanted = {"Job": getattr(module, "Job", None), "Jobs": getattr(module, "Jobs", None),
              "JobSubmitDescription": getattr(module, "JobSubmitDescription", None),
              "RPCError": getattr(module, "RPCError", None)}
    return [name for name, value in wanted.items() if value is None]


def _jobs_loader(module):
    """``Jobs.load`` (every release); the pre-release Job API loaded in ``Jobs()`` itself."""
    return getattr(module.Jobs, "load", None) or module.Jobs


def unusable_reason(runner: Runner, cluster) -> Optional[str]:
    """None when pyslurm can serve ``cluster`` in this process, else why not.

    Order matters: nothing imports pyslurm before ``scontrol --version`` has
    succeeded with the cluster's SLURM_CONF, because libslurm's initialisation
    calls ``fatal()`` (exits the process) when it finds no configuration.
    """
    with _LOCK:
        if not pyslurm_installed():
            return "pyslurm is not installed"
        conf = _effective_conf(cluster)
        conflict = conf_conflict(conf, _initialised())
        if conflict:
            return conflict
        key = (cluster.name, conf)
        if key not in _CACHE:
            _CACHE[key] = _check(runner, conf)
        return _CACHE[key]


def _check(runner: Runner, conf: str) -> Optional[str]:
    try:
        result = runner.run(commands.version())
    except SlurmkitError as exc:
        return "cannot read the Slurm version: %s" % exc
    if not result.ok:
        return "cannot read the Slurm version (scontrol --version): %s" % parsers.first_error_line(
            result.stderr or result.stdout)
    try:
        slurm_version = parsers.parse_version(result.stdout)
    except SlurmkitError as exc:
        return str(exc)
    installed = _installed_version()
    if installed and not versions_match(installed, slurm_version):
        return "pyslurm %s does not match Slurm %s" % (installed, slurm_version)
    try:
        module = _import_pyslurm(conf)
    except Exception as exc:  # ImportError, or whatever a broken build raises
        return "pyslurm cannot be imported: %s: %s" % (type(exc).__name__, exc)
    version = str(getattr(module, "__version__", "") or installed or "")
    if not versions_match(version, slurm_version):
        return "pyslurm %s does not match Slurm %s" % (version or "(unknown version)", slurm_version)
    missing = _missing_api(module)
    if missing:
        return ("pyslurm %s lacks %s (the Job API arrived in pyslurm 22.5.2)"
                % (version, ", ".join(missing)))
    return None


# ---------------------------------------------------------------------------
# Pure conversions (unit-tested without pyslurm)
# ---------------------------------------------------------------------------

def _attr(obj, *names, default=None):
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
    code, signal = _attr(obj, "exit_code"), _attr(obj, "exit_code_signal")
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
    job_id = _attr(obj, "id", "job_id")  # "id" in every pyslurm version read
    num_nodes = _attr(obj, "num_nodes")
    state = _attr(obj, "state") or "UNKNOWN"
    # core Job: allocated_nodes; db.Job: nodelist (None while pending, and
    # "None assigned" in the database for a job that never ran, as in sacct)
    nodelist = _attr(obj, "allocated_nodes", "nodelist") or ""
    if nodelist == "None assigned":
        nodelist = ""
    exit_code, signal = parsers.ended_exit(state, bool(nodelist),
                                           pyslurm_exit(obj) if exit_text is None else exit_text)
    values = dict(
        job_id=str(job_id),
        name=_attr(obj, "name") or "",
        state=state,
        partition=_attr(obj, "partition") or "",
        node_count=int(num_nodes) if num_nodes else 0,
        nodelist=nodelist,
        start_time=_start_time(_attr(obj, "start_time")),
        time_limit=_time_limit(_attr(obj, "time_limit")),
        user=_attr(obj, "user_name") or "",
        reason=_attr(obj, "state_reason") or "",
        comment=_attr(obj, "comment") or "",
        exit_code=exit_code,
        signal=signal,
        cluster=_attr(obj, "cluster") or "",
        stdout=_attr(obj, "standard_output") or "",
        # As squeue --json: a live job's end_time is its time limit's, not an end.
        end_time=_start_time(_attr(obj, "end_time")) if state in FINISHED_STATES else None,
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


def _submit_environment(extra_env, options=(), release=(22, 5), mpi_params="") -> Dict[str, str]:
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


# ---------------------------------------------------------------------------
# The backend
# ---------------------------------------------------------------------------

class PyslurmBackend(CommandBackend):
    """Jobs through pyslurm in-process; the rest through the Slurm commands."""

    name = "pyslurm"

    def __init__(self, cluster, runner: Optional[Runner] = None):
        # What a job needs on top of this process's environment: the cluster's SLURM_CONF (the
        # commands get it from their runner; the job gets it here, whatever the runner is).
        self._extra_env = {"SLURM_CONF": cluster.slurm_conf} if cluster.slurm_conf else {}
        runner = runner or LocalRunner(self._extra_env or None)
        super().__init__(runner, cluster.name)
        self.cluster = cluster
        reason = unusable_reason(runner, cluster)
        if reason is not None:
            raise SlurmUnavailableError("pyslurm cannot be used for cluster %s: %s" % (cluster.name, reason))
        self._pyslurm = sys.modules["pyslurm"]
        # The Slurm release pyslurm was built for (it matches the controller's: unusable_reason).
        self._release = parsers.major_minor(getattr(self._pyslurm, "__version__", "") or "") or (0, 0)
        self._config_value: Optional[Dict[str, str]] = None
        self.last_submit_via = None  # "pyslurm" or "sbatch": which path the last submit took

    def _conf(self, key: str) -> str:
        """One value of the controller's configuration, read once per backend ("" for (null))."""
        if self._config_value is None:
            self._config_value = self.config()
        value = self._config_value.get(key, "") or ""
        return "" if value == "(null)" else value

    def _mpi_params(self) -> str:
        """slurm.conf's MpiParams (24.05+ may disable the Hydra variables)."""
        return self._conf("MpiParams") if self._release >= (24, 5) else ""

    def _profile(self) -> Optional[str]:
        """The ``profile_types`` to send, or None where only sbatch submits faithfully.

        pyslurm sends a job without ``--profile`` as profile NO_VAL
        (core/job/util.pyx, 22.5 and 24.11 alike).  22.05 reads that as not
        set; 24.11 as every type: the job gets
        SLURM_PROFILE=Energy,Lustre,Network,Task (tests/integration/
        test_backend_parity.py) and, with a profile plugin, would be
        profiled for all of them.  sbatch sends "not set", which pyslurm
        cannot express; where the cluster gathers no profiles
        (AcctGatherProfileType none), "none" has the same effect (the job
        sees SLURM_PROFILE=None); elsewhere the script goes to sbatch.
        """
        if self._release < (24, 11):
            return ""
        plugin = self._conf("AcctGatherProfileType")
        return "none" if plugin in ("", "acct_gather_profile/none") else None

    def describe(self):
        return "pyslurm %s, %s" % (getattr(self._pyslurm, "__version__", "?"), self.runner.describe())

    # -- errors ----------------------------------------------------------------

    def _rpc(self, what: str, call):
        """Run a pyslurm call; its RPCError becomes slurmkit's error, with Slurm's message."""
        try:
            return call()
        except self._pyslurm.RPCError as exc:
            raise self._error(what, exc) from None

    def _error(self, what, exc) -> SlurmkitError:
        message = getattr(exc, "msg", None) or str(exc) or type(exc).__name__
        where = " on cluster %s" % self.cluster_name
        if UNREACHABLE_RE.search(message):
            return SlurmUnavailableError("slurmctld%s does not answer (%s): %s" % (where, what, message))
        return SlurmCommandError("%s failed%s: %s" % (what, where, message), argv=["pyslurm", what],
                                 returncode=getattr(exc, "errno", None), stderr=message)

    # -- jobs ------------------------------------------------------------------

    def submit(self, script, token=None):
        kw = None
        options = directives.sbatch_directives(script)
        if not any(k.startswith("SBATCH_") or k in directives.SBATCH_INPUT_ENV for k in os.environ):
            # sbatch's input variables (SBATCH_*, SLURM_CLUSTERS, SLURM_HINT)
            # override directives; only sbatch itself applies them faithfully.
            kw = submit_description(options)
        if kw is not None:
            profile = self._profile()
            if profile is None:
                kw = None
            elif profile:
                kw["profile_types"] = profile
        if kw is None:
            self.last_submit_via = "sbatch"
            return super().submit(script, token)
        kw["script"] = script
        kw["environment"] = _submit_environment(self._extra_env, options, self._release, self._mpi_params())
        try:
            desc = self._pyslurm.JobSubmitDescription(**kw)
        except (AttributeError, TypeError):
            # An attribute this pyslurm build does not have: let sbatch do it.
            self.last_submit_via = "sbatch"
            return super().submit(script, token)
        with _LibslurmStderr() as said:
            try:
                job_id = self._rpc("submit", desc.submit)
            except ValueError as exc:  # pyslurm's own validation, e.g. "Not a valid Batch script"
                raise SlurmCommandError("submit refused on cluster %s: %s" % (self.cluster_name, exc),
                                        argv=["pyslurm", "submit"], stderr=str(exc)) from None
        if said.text:
            # Not an error (that raised above): a warning of libslurm's, shown as sbatch shows it.
            sys.stderr.write(said.text)
        self.last_submit_via = "pyslurm"
        return str(job_id)

    def jobs(self, job_ids=None, user=None):
        job_ids = [str(j) for j in job_ids] if job_ids is not None else None
        if job_ids == []:
            return []
        if (job_ids is not None and len(job_ids) == 1) or user:
            # One job, or a user's: squeue --Format --local (the command backend's).  One job is one
            # REQUEST_JOB_INFO_SINGLE, where slurm_load_jobs packs every job of the cluster and
            # pyslurm's Job.load costs four RPCs (two federation look-ups, the job, its steps: 10 ms
            # of slurmctld per poll in bench_scale); a user's jobs are filtered by squeue in C (and,
            # for a user other than root, by slurmctld: REQUEST_JOB_USER_INFO), where converting
            # 10,000 other people's records here took 0.4 s.
            return super().jobs(job_ids, user)
        # One slurm_load_jobs RPC whatever the number of ids.
        collection = self._rpc("load jobs", _jobs_loader(self._pyslurm))
        records = records_of(collection)
        if job_ids is not None:
            # Convert only the wanted jobs: the RPC returns every job of the
            # cluster, and user_name costs a passwd lookup per job.
            wanted = set(job_ids)
            records = [r for r in records if str(_attr(r, "id", "job_id")) in wanted]
        infos = self._filter([job_to_info(r) for r in records], job_ids, user)
        return [self._exact_exit(i) if exit_is_ambiguous(i) else i for i in infos]

    def _exact_exit(self, info: JobInfo) -> JobInfo:
        """``info`` with the exit status pyslurm's Job API may have cut by 128.

        The deprecated ``pyslurm.job`` class (pyslurm.pyx in 22.5) prints
        ``WEXITSTATUS`` whole as ``"E:S"``: one ``slurm_load_job`` RPC per job
        that ended with a non-zero status, which is few jobs (a COMPLETED or
        signalled job needs none).  Its ``S`` is not used: that class carries
        it over from the previous field.  24.11's (deprecated.pyx) raises
        TypeError for any job ("an integer is required", with an int id as
        with a string): there ``scontrol show job``, whose ``ExitCode=E:S`` is
        whole on every release, answers instead.  Where both fail, pyslurm's
        own value stays.
        """
        legacy = getattr(self._pyslurm, "job", None)
        try:
            records = legacy().find_id(info.job_id) if callable(legacy) else []
            text = str(records[0]["exit_code"]) if records else ""
            code = int(text.partition(":")[0])
        except (ValueError, KeyError, TypeError, IndexError, AttributeError):
            return self._exit_from_scontrol(info)
        exit_code, signal = parsers.decode_exit("%d:0" % code)
        return replace(info, exit_code=exit_code, signal=signal)

    def _exit_from_scontrol(self, info: JobInfo) -> JobInfo:
        try:
            result = self._run(commands.show_job(info.job_id))
        except SlurmkitError:
            return info
        kv = parsers.parse_key_values(result.stdout) if result.ok else {}
        if kv.get("JobId") != info.job_id or "ExitCode" not in kv:
            return info
        try:
            exit_code, signal = parsers.ended_exit(kv.get("JobState", info.state), bool(info.nodelist),
                                                   kv["ExitCode"])
        except ValueError:
            return info
        return replace(info, exit_code=exit_code, signal=signal)

    def cancel(self, job_ids):
        """SIGKILL each job; a job that already ended or is unknown is not an error.

        That is pyslurm's ``Job.cancel()`` (job.pyx ``send_signal`` ignores
        ESLURM_ALREADY_DONE and, for SIGKILL, ESLURM_INVALID_JOB_ID), where
        scancel would complain.  Ids pyslurm cannot name (array tasks such as
        ``12_3``) go to scancel.
        """
        other = []
        for job_id in job_ids:
            text = str(job_id)
            if not text.isdigit():
                other.append(text)
                continue
            self._rpc("cancel job %s" % text, lambda jid=int(text): self._pyslurm.Job(jid).cancel())
        if other:
            super().cancel(other)

    def accounting(self, job_ids: Sequence[str]) -> List[JobInfo]:
        """Finished jobs from slurmdbd through pyslurm.db; sacct where that cannot answer.

        Where pyslurm's database API is missing or fails (no slurmdbd, as with
        AccountingStorageType=none; or a pyslurm whose db API moved, as on the
        unreleased 25.11.x branch where db/connection.pyx grew a JobsAPI), the
        inherited sacct path answers, so the result never depends on which
        pyslurm is installed: empty where accounting is off, as with sacct.
        """
        ids = [int(j) for j in job_ids if str(j).isdigit()]
        if not ids:
            return []
        db = getattr(self._pyslurm, "db", None) or sys.modules.get("pyslurm.db")
        filter_cls = getattr(db, "JobFilter", None) or getattr(db, "JobSearchFilter", None)
        loader = getattr(getattr(db, "Jobs", None), "load", None)
        if filter_cls is None or loader is None:
            return super().accounting(job_ids)
        failures = tuple(c for c in (self._pyslurm.RPCError, getattr(self._pyslurm, "PyslurmError", None))
                         if isinstance(c, type)) + (ValueError, TypeError)
        try:
            records = loader(filter_cls(ids=ids))
        except failures:
            return super().accounting(job_ids)
        # 22.5.2's db.Job.exit_code is a stub returning 0 (db/job.pyx "TODO");
        # that version is the one without JobFilter.
        exit_code_known = getattr(db, "JobFilter", None) is not None
        raw = self._raw_db_exit_codes(ids, failures)
        wanted = {str(i) for i in ids}
        by_id: Dict[str, JobInfo] = {}
        for record in records_of(records):
            job_id = str(_attr(record, "id", "job_id"))
            if job_id not in wanted:
                continue
            info = job_to_info(record, raw.get(job_id))
            if job_id not in raw and not exit_code_known:
                info = replace(info, exit_code=None, signal=None)
            by_id[info.job_id] = info
        return list(by_id.values())

    def _raw_db_exit_codes(self, ids: List[int], failures) -> Dict[str, int]:
        """{job id: raw wait status} from slurmdbd, one query for all ``ids``.

        db.Job's exit attributes take 128 off, as sacct does; the deprecated
        ``slurmdb_jobs`` class hands out the stored wait status untouched
        (``exitcode``), which :func:`parsers.decode_exit` decodes exactly.
        Empty where that class is missing or fails: db.Job's values stay.
        """
        legacy = getattr(self._pyslurm, "slurmdb_jobs", None)
        if not callable(legacy):
            return {}
        try:
            found = legacy().get(jobids=ids)
        except failures:
            return {}
        out = {}
        for job_id, record in (found or {}).items():
            if not isinstance(record, dict) or not isinstance(record.get("exitcode"), int):
                continue
            # The batch step's status first, as parsers.parse_sacct does: the
            # job's own row says 0 for a while after a cancel.
            batch = (record.get("steps") or {}).get(0xFFFFFFFB) or {}   # slurm.h SLURM_BATCH_SCRIPT
            raw = batch.get("exitcode")
            out[str(job_id)] = raw if isinstance(raw, int) else record["exitcode"]
        return out


class _LibslurmStderr:
    """Collects what libslurm writes to file descriptor 2 while a submission runs.

    libslurm logs its own complaint before returning an error ("python:
    error: invalid partition specified: ghost"), straight to fd 2, where sbatch
    prints it as part of its own output that slurmkit reads; in this process
    it would land on the user's terminal next to slurmkit's one ``Error:``
    line.  So fd 2 points at a temporary file for the duration of the call;
    ``text`` is what was written.  Used only around submit, which the CLI
    calls from one thread.
    """

    def __enter__(self):
        import tempfile

        self.text = ""
        sys.stderr.flush()
        self._file = tempfile.TemporaryFile()
        self._saved = os.dup(2)
        os.dup2(self._file.fileno(), 2)
        return self

    def __exit__(self, *exc):
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._file.seek(0)
        self.text = self._file.read().decode("utf-8", "replace")
        self._file.close()
        return False


def _reset_for_tests():
    """Forget cached answers (tests only; the import itself cannot be undone)."""
    with _LOCK:
        _CACHE.clear()
