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
  ``.script`` (a path or the script text: it tries the text as a path first, which
  raises for a run of more than 255 bytes without a slash, so slurmkit always hands
  it a file), ``.submit()`` returns the job id.
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

import contextlib
import importlib
import importlib.util
import os
import sys
import threading
from dataclasses import replace
from typing import Dict, List, Optional, Sequence, Tuple

from slurmkit.errors import SlurmCommandError, SlurmkitError, SlurmUnavailableError
from slurmkit.slurm import commands, directives, parsers, pyslurm_installed
from slurmkit.slurm.backend import UNREACHABLE_RE, CommandBackend
from slurmkit.slurm.runner import LocalRunner, Runner
from slurmkit.slurm.pyslurm_rules import (attr_of, exit_is_ambiguous, job_to_info, records_of, submit_description,
                                          submit_environment)
from slurmkit.slurm.types import JobInfo


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


def installed_version() -> Optional[str]:
    """The installed distribution's version, read without importing pyslurm.

    Importing a pyslurm built for another Slurm can fail in odd ways (missing
    libslurm.so.NN) or load a libslurm that speaks another protocol, so the
    version is compared before the import where the metadata allows it.  The
    ``pyslurm-VERSION.dist-info`` directory beside the package is read first:
    ``importlib.metadata`` scans every distribution of the environment, about
    40 ms of every local slurmkit command.
    """
    import glob
    import importlib.util

    try:
        spec = importlib.util.find_spec("pyslurm")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        site = os.path.dirname(os.path.dirname(spec.origin))
        found = sorted(glob.glob(os.path.join(glob.escape(site), "pyslurm-*.dist-info")))
        if len(found) == 1:
            return os.path.basename(found[0])[len("pyslurm-"):-len(".dist-info")]
    try:
        from importlib import metadata

        return metadata.version("pyslurm")
    except Exception:  # PackageNotFoundError, or broken metadata: fall back to __version__
        return None


def effective_conf(cluster) -> str:
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


def initialised_conf() -> Optional[str]:
    """The SLURM_CONF the pyslurm of this process was initialised with, None if not imported."""
    if "pyslurm" not in sys.modules:
        return None
    if _initialised_conf is not None:
        return _initialised_conf
    # Someone else imported pyslurm; libslurm read SLURM_CONF at that moment,
    # which can only be assumed to be the current environment.
    return os.environ.get("SLURM_CONF", "") or ""


def import_pyslurm(conf: str):
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
        conf = effective_conf(cluster)
        conflict = conf_conflict(conf, initialised_conf())
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
    installed = installed_version()
    if installed and not versions_match(installed, slurm_version):
        return "pyslurm %s does not match Slurm %s" % (installed, slurm_version)
    try:
        module = import_pyslurm(conf)
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
# The backend
# ---------------------------------------------------------------------------

class PyslurmBackend(CommandBackend):
    """Jobs through pyslurm in-process; the rest through the Slurm commands.

    ``when_needed``: whether pyslurm can serve the cluster is decided at the first call that would
    use it, and where it cannot, that call and every later one goes to the Slurm commands.  Most
    commands never get there (one job's or one user's jobs are asked with squeue, see :meth:`jobs`),
    and the decision costs an ``scontrol --version`` and pyslurm's import, about 30 ms, which
    ``status``, ``logs`` and ``why`` would otherwise pay for nothing.  Without it the decision is
    made here, and an unusable pyslurm is an error (what ``SLURMKIT_BACKEND=pyslurm`` asks for).
    """

    name = "pyslurm"

    def __init__(self, cluster, runner: Optional[Runner] = None, when_needed: bool = False):
        # What a job needs on top of this process's environment: the cluster's SLURM_CONF (the
        # commands get it from their runner; the job gets it here, whatever the runner is).
        self._extra_env = {"SLURM_CONF": cluster.slurm_conf} if cluster.slurm_conf else {}
        runner = runner or LocalRunner(self._extra_env or None)
        super().__init__(runner, cluster.name)
        self.cluster = cluster
        self._pyslurm = None          # the module, once pyslurm is known to serve this cluster
        self._decided = False
        self.last_submit_via = None  # "pyslurm" or "sbatch": which path the last submit took
        if not when_needed:
            reason = unusable_reason(runner, cluster)
            if reason is not None:
                raise SlurmUnavailableError("pyslurm cannot be used for cluster %s: %s" % (cluster.name, reason))
            self._usable()

    def _usable(self) -> bool:
        """Whether pyslurm serves this cluster, decided (and pyslurm imported) on the first call."""
        if not self._decided:
            if unusable_reason(self.runner, self.cluster) is None:
                self._pyslurm = sys.modules["pyslurm"]
                # The Slurm release pyslurm was built for (it matches the controller's: unusable_reason).
                self._release = parsers.major_minor(getattr(self._pyslurm, "__version__", "") or "") or (0, 0)
            self._decided = True
        return self._pyslurm is not None

    def _mpi_params(self) -> str:
        """slurm.conf's MpiParams (24.05+ may disable the Hydra variables)."""
        return self.setting("MpiParams") if self._release >= (24, 5) else ""

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
        plugin = self.setting("AcctGatherProfileType")
        return "none" if plugin in ("", "acct_gather_profile/none") else None

    def describe(self):
        if not self._usable():
            return super().describe()
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
        if self._usable() and not any(k.startswith("SBATCH_") or k in directives.SBATCH_INPUT_ENV
                                      for k in os.environ):
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
        kw["environment"] = submit_environment(self._extra_env, options, self._release, self._mpi_params())
        with _script_file(script) as path:
            kw["script"] = path
            try:
                desc = self._pyslurm.JobSubmitDescription(**kw)
            except (AttributeError, TypeError):
                # An attribute this pyslurm build does not have: let sbatch do it.
                self.last_submit_via = "sbatch"
                return super().submit(script, token)
            with LibslurmStderr() as said:
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
        if not self._usable():
            return super().jobs(job_ids, user)
        # One slurm_load_jobs RPC whatever the number of ids.
        collection = self._rpc("load jobs", _jobs_loader(self._pyslurm))
        records = records_of(collection)
        if job_ids is not None:
            # Convert only the wanted jobs: the RPC returns every job of the
            # cluster, and user_name costs a passwd lookup per job.
            wanted = set(job_ids)
            records = [r for r in records if str(attr_of(r, "id", "job_id")) in wanted]
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
        if any(str(j).isdigit() for j in job_ids) and not self._usable():
            return super().cancel(job_ids)
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
        if not self._usable():
            return super().accounting(job_ids)
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
            job_id = str(attr_of(record, "id", "job_id"))
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


@contextlib.contextmanager
def _script_file(text: str):
    """The job script in a private file, for pyslurm to read.  Handed the text itself, pyslurm first
    asks whether it names a file (``Path(script).is_file()``, submission.pyx), which raises
    ENAMETOOLONG for a text with more than 255 bytes between two slashes: one long line of a
    rendered script is enough (the torchrun template's check of the named Python is one)."""
    import tempfile   # here: 5 ms of imports that only a submission through pyslurm needs

    fd, path = tempfile.mkstemp(prefix="slurmkit-job-", suffix=".sh")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(text)
        yield path
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


class LibslurmStderr:
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


def forget_answers():
    """Forget the cached answers about pyslurm's usability, so that the next call asks again
    (what a test that changes the answer needs; the import itself cannot be undone)."""
    with _LOCK:
        _CACHE.clear()
