"""submitit's executors on slurmkit: ``submit(fn, *args)`` on any cluster of the site.

What a submission does, in order:

1. the parameters become a job request (:mod:`slurmkit.api.params`: refused by name if wrong);
2. the cluster: the one named, the site's default, or, for ``cluster="auto"`` (or ``"a,b"``),
   the federation planner's best by start estimate (the same placement as ``slurmkit submit``);
3. once per cluster and executor, the Python that will run the call there is asked for its
   version and cloudpickle's (on the login node for a cluster reached over SSH): another
   Python MAJOR.MINOR, or no cloudpickle, is refused before anything is queued;
4. the call, pickled, is written into the job's folder on the cluster, through the cluster's
   own connection (no shared filesystem assumed);
5. the job script is rendered and submitted as any slurmkit job (``jobs.submit``: the site's
   templates, the partition's checks, the token that keeps a retry from making two jobs):
   each task runs :data:`slurmkit.api.payload.BOOTSTRAP` with that Python.

The library layer is the CLI's: nothing here imports click or ``slurmkit.cli``.
"""

import contextlib
import hashlib
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from slurmkit.api import params
from slurmkit.api.job import Job, StateWatcher, cluster_paths
from slurmkit.errors import UsageError

# Asked of the cluster's Python before its first call: its version, cloudpickle's, and the home directory.
_PROBE = ("import json, os, sys\ntry:\n import cloudpickle; c = cloudpickle.__version__\nexcept ImportError:\n c = None\n"
          "print(json.dumps({'python': '%d.%d' % sys.version_info[:2], 'cloudpickle': c, "
          "'home': os.path.expanduser('~')}))")
# Seconds before the time limit that Slurm sends a checkpointable call's task USR1: submitit's.
CHECKPOINT_SIGNAL_S = 90
# submitit's AutoExecutor(cluster=...) names environments; these mean "the site's Slurm".
_SUBMITIT_SLURM = ("slurm",)
_SUBMITIT_OTHER = ("local", "debug")


def open_session(site=None):
    """A Session of ``site`` (a Session, used as it is; a Site, a name or a path; default ``$SLURMKIT_SITE``)."""
    from slurmkit.session import Session
    from slurmkit.site import find_site
    from slurmkit.site.model import Site

    if isinstance(site, Session):
        return site
    if isinstance(site, Site):
        return Session(site)
    name = site if site is not None else os.environ.get("SLURMKIT_SITE")
    if not name:
        raise UsageError("no site given: pass site=NAME|PATH to the executor, or set SLURMKIT_SITE")
    return Session(find_site(str(name)))


def id_independent(folder) -> Path:
    """The folder as an absolute path, up to its first part that names the job (submitit's ``%j``, ``%A``, ``%a``,
    ``%t``: its ``log_test/%j``): slurmkit names each job's files by a token of its own, and a ``%`` in the path of
    Slurm's log would be expanded by Slurm into a directory nobody made."""
    parts = Path(os.path.abspath(os.path.expanduser(str(folder)))).parts
    kept = []
    for part in parts:
        if "%" in part:
            break
        kept.append(part)
    return Path(*kept)


def checkpointable(fn) -> bool:
    """Whether ``fn`` answers submitit's checkpoint protocol (``__submitit_checkpoint__`` or
    ``checkpoint``, as :class:`slurmkit.helpers.Checkpointable` has)."""
    return callable(getattr(fn, "__submitit_checkpoint__", None) or getattr(fn, "checkpoint", None))


class ClusterPlace:
    """Where calls run on one cluster: the Python, and the folder of the jobs' files there."""

    def __init__(self, python: str, folder: str):
        self.python = python
        self.folder = folder


class Executor:
    """The executor of both vocabularies (see :class:`AutoExecutor`, :class:`SlurmExecutor`)."""

    generic = True

    def __init__(self, folder, cluster: Optional[str] = None, site=None, python: Optional[str] = None,
                 cluster_folder: Optional[str] = None, max_num_timeout: int = 3):
        if isinstance(max_num_timeout, bool) or not isinstance(max_num_timeout, int) or max_num_timeout < 0:
            raise UsageError("max_num_timeout=%r: give how many times a checkpointed call may be restarted after "
                             "its time limit (0 or more)" % (max_num_timeout,))
        if cluster in _SUBMITIT_OTHER:
            raise UsageError("cluster=%r: slurmkit runs calls on the site's Slurm clusters only; give a cluster "
                             "name, 'auto', or leave it out" % cluster)
        self.folder = id_independent(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.session = open_session(site)
        self.cluster = None if cluster in _SUBMITIT_SLURM else cluster
        if self.cluster is not None and self.cluster != "auto" and "," not in self.cluster:
            self.session.site.cluster(self.cluster)           # an unknown name fails here, not at submit
        self.python = python
        self.cluster_folder = cluster_folder
        self.max_num_timeout = max_num_timeout
        self.parameters: Dict[str, object] = {}
        self._places: Dict[str, ClusterPlace] = {}
        self._limits: Dict[str, object] = {}
        self._batch: Optional[list] = None       # inside batch(): the calls waiting for its end
        self._watcher = StateWatcher(self.session)

    def update_parameters(self, **kwargs) -> None:
        """Add or replace parameters (submitit's names); a wrong name or value is refused now."""
        if self._batch is not None:
            raise UsageError("update_parameters inside batch(): every job of a batch has the same parameters")
        merged = dict(self.parameters, **kwargs)
        params.request(merged, self.generic)
        self.parameters = merged

    # -- where ------------------------------------------------------------------------------------

    def _choose(self, spec, partition: Optional[str]) -> Tuple[str, Optional[str], Optional[str]]:
        """(cluster, partition, --begin) for the job: the named or default cluster, or the planner's best; with
        ``prefer`` cheap|green or a ``deadline``, the planner's window (a later one held by --begin)."""
        from slurmkit import federation

        request = params.request(self.parameters, self.generic)
        if not federation.is_federated(self.cluster, prefer=request.prefer, deadline=request.deadline):
            return self.session.site.cluster(self.cluster).name, partition, None
        outcome = federation.submit_anywhere(self.session, spec, self.cluster, partition, dry_run=True,
                                             prefer=request.prefer, deadline=request.deadline)
        chosen = outcome.placement.chosen
        if chosen is not None:
            from slurmkit.federation.windows import begin_text

            return chosen.cluster, chosen.candidate.partition, begin_text(chosen.start) if chosen.later else None
        for candidate in outcome.placement.candidates:
            if candidate.viable:
                return candidate.cluster, candidate.partition, None
        reasons = "; ".join("%s: %s" % (c.cluster, c.reason) for c in outcome.placement.candidates)
        raise UsageError("no cluster can run the call (%s)" % (reasons or "no candidates"))

    def _place(self, cluster: str) -> ClusterPlace:
        """The cluster's Python (checked once) and its folder for this executor's jobs (made once)."""
        if cluster in self._places:
            return self._places[cluster]
        from slurmkit.api.payload import python_version
        from slurmkit.session import reach

        target = self.session.site.cluster(cluster)
        local = reach(target) == "local"
        python = self.python or target.python or (sys.executable if local else "python3")
        where = "on this machine" if local else "on the login node of cluster %s" % cluster
        found = self._probe(cluster, local, python, where)
        if found["python"] != python_version():
            raise UsageError("cluster %s's Python (%s %s) is %s and this process's is %s: a call pickled here "
                             "cannot be unpickled there; name a Python %s for it (python= or the site's "
                             "clusters.%s.python)" % (cluster, python, where, found["python"], python_version(),
                                                       python_version(), cluster))
        if found["cloudpickle"] is None:
            raise UsageError("%s %s has no cloudpickle: install it there (pip install cloudpickle), or name "
                             "another Python with python= or the site's clusters.%s.python"
                             % (python, where, cluster))
        import cloudpickle

        if found["cloudpickle"] != cloudpickle.__version__:
            warnings.warn("cluster %s's cloudpickle is %s and this process's %s: pickles usually travel between "
                          "versions, but only the same one is promised" % (cluster, found["cloudpickle"],
                                                                           cloudpickle.__version__))
        if self.cluster_folder is not None:
            folder = self.cluster_folder
        elif local:
            folder = str(self.folder)
        else:   # the login node's own place for this executor's folder (its path here may not exist there)
            digest = hashlib.sha256(str(self.folder).encode()).hexdigest()[:12]
            folder = "%s/.cache/slurmkit/api/%s-%s" % (found["home"].rstrip("/"), self.folder.name, digest)
        if not folder.startswith("/"):
            raise UsageError("cluster_folder %r: give an absolute path on cluster %s" % (folder, cluster))
        self.session.files(cluster).make_dirs([folder])
        self._places[cluster] = ClusterPlace(python, folder)
        return self._places[cluster]

    def _probe(self, cluster: str, local: bool, python: str, where: str) -> dict:
        argv = [python, "-c", _PROBE]
        if local:
            import subprocess

            try:
                proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            except OSError as exc:
                raise UsageError("the Python %r for cluster %s cannot be run %s (%s): name one with python= or "
                                 "the site's clusters.%s.python" % (python, cluster, where, exc.strerror, cluster)) \
                    from None
            code, out, err = proc.returncode, proc.stdout, proc.stderr
        else:
            result = self.session.backend(cluster).runner.run(argv)
            code, out, err = result.returncode, result.stdout, result.stderr
        try:
            if code != 0:
                raise ValueError
            return json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise UsageError("the Python %r for cluster %s did not run %s (exit status %s: %s): name one with "
                             "python= or the site's clusters.%s.python"
                             % (python, cluster, where, code, (err.strip().splitlines() or ["no message"])[-1],
                                cluster)) from None

    # -- submitting ---------------------------------------------------------------------------------

    def submit(self, fn, *args, **kwargs) -> Job:
        """Run ``fn(*args, **kwargs)`` as a job (once per task); returns its :class:`Job` (inside
        :meth:`batch`, a :class:`BatchedJob` that becomes one when the batch is submitted)."""
        if self._batch is not None:
            if not callable(fn):
                raise UsageError("submit: %r is not callable" % (fn,))
            placeholder = BatchedJob()
            self._batch.append((fn, args, kwargs, placeholder))
            return placeholder
        return self._submit(fn, [(args, kwargs)], array=False)[0]

    def map_array(self, fn, *iterables) -> List[Job]:
        """``fn`` over the zipped ``iterables`` as Slurm job arrays, one array task per call, cut into
        arrays the cluster takes (its MaxArraySize and max_array_tasks, as a sweep is); a Job each, in
        order (``alpha:4012_7``)."""
        if self._batch is not None:
            raise UsageError("map_array inside batch(): submit each call with submit(), or map outside the batch")
        calls = [(args, {}) for args in zip(*iterables)]
        return self._submit(fn, calls, array=True) if calls else []

    @contextlib.contextmanager
    def batch(self):
        """submitit's ``with executor.batch():``: the calls submitted inside go as job arrays when the
        block ends (one array task each, in the arrays the cluster takes), and nothing is submitted if
        it raises.  Their jobs are usable after the block."""
        if self._batch is not None:
            raise UsageError("batch() blocks cannot be nested")
        self._batch = []
        try:
            yield self
        except BaseException:
            self._batch = None           # nothing was submitted
            raise
        pending, self._batch = self._batch, None
        if not pending:
            return
        # One array, each task's call with its own function (payload.dump_calls(None, ...)): a checkpointable
        # one is seen as such by the task that runs it, and asks for the array's --requeue and USR1.
        jobs = self._submit(None, [(fn, args, kwargs) for fn, args, kwargs, _ in pending], array=True)
        for (_, _, _, placeholder), job in zip(pending, jobs):
            placeholder._job = job

    def _shape(self, fn, each=()):
        """(the job's shape as a JobSpec with a stand-in command, its partition, tasks per call); ``fn`` None:
        the calls' own functions ``each`` (a batch), named after the first, checkpointable if one is."""
        from slurmkit.script.render import JobSpec

        fns = list(each) if fn is None else [fn]
        for one in fns:
            if not callable(one):
                raise UsageError("submit: %r is not callable" % (one,))
        fn = fns[0]
        request = params.request(self.parameters, self.generic)
        fields = dict(request.fields)
        fields.pop("array_parallelism", None)       # an array's, applied when it is queued (_submit)
        tasks_per_node = int(fields.pop("procs_per_node", 1))
        nodes = int(fields.get("nodes", 1))
        template = fields.pop("template", None) or ("single" if nodes * tasks_per_node == 1 else "srun")
        if template not in ("single", "srun"):
            raise UsageError("template=%r launches a program, not a call: a call runs once per task with template "
                             "srun (the rendezvous variables set) or single" % template)
        if template == "single" and nodes * tasks_per_node != 1:
            raise UsageError("template='single' runs one task, and the parameters ask for %d"
                             % (nodes * tasks_per_node))
        fields.setdefault("name", getattr(fn, "__name__", "call")[:64] or "call")
        fields.setdefault("gpus_per_node", 0)
        if fields.get("requeue") is not False and any(checkpointable(one) for one in fns):
            # Slurm's USR1 before the time limit, where the call's task gets it: the batch shell is the
            # task with template single (it execs the Python), srun's tasks are a step otherwise.
            fields["requeue"] = True
            fields["signal"] = "%sUSR1@%d" % ("B:" if template == "single" else "", CHECKPOINT_SIGNAL_S)
        shape = JobSpec(command=("true",), template=template,
                        procs_per_node=tasks_per_node if template == "srun" else None, **fields)
        return shape, request.partition, nodes * tasks_per_node

    def _submit(self, fn, calls, array: bool) -> List[Job]:
        """Queue ``calls`` (``(args, kwargs)`` each, of ``fn``; ``fn`` None: ``(function, args, kwargs)`` each)
        as one job, or as arrays the cluster takes; a Job per call, in order."""
        from slurmkit import jobs
        from slurmkit.api import payload

        shape, partition, tasks = self._shape(fn, [call[0] for call in calls] if fn is None else ())
        # auto_requeue=True on one call: the requeue daemon's (a new job for each restart, off the failed
        # nodes, within budgets), which sets the job's own --no-requeue and USR1.  An array's stays Slurm's.
        tracked = shape.requeue is True and self.parameters.get("auto_requeue") is True and not array
        if tracked:
            shape = shape._replace(requeue=None, signal=None)
        cluster, partition, begin = self._choose(shape._replace(token=jobs.new_token()), partition)
        if begin is not None:
            shape = shape._replace(begin=begin)      # a later, cheaper or cleaner window: Slurm holds it until then
        place = self._place(cluster)
        sizes = [1]
        if array:
            from slurmkit.sweep import arrays

            sizes = arrays.chunks(len(calls), self._array_limits(cluster))
        store = self.session.files(cluster)
        limit = self._time_limit_s(shape)
        parallel = params.request(self.parameters, self.generic).fields.get("array_parallelism") if array else None
        made: List[Job] = []
        start = 0
        for size in sizes:
            token = jobs.new_token()
            files = cluster_paths(place.folder, token, array=array)
            given = json.dumps({"cluster": cluster, "log": files["log"], "time_limit_s": limit,
                                "signal_s": CHECKPOINT_SIGNAL_S, "max_num_timeout": self.max_num_timeout},
                               sort_keys=True)
            spec = shape._replace(command=(place.python, "-c", payload.BOOTSTRAP, files["call"], files["result"],
                                           files["checkpoint"], given),
                                  output=files["log"], token=token, array="0-%d" % (size - 1) if array else None)
            store.write(files["call"], payload.dump_calls(fn, calls[start:start + size], array=array))
            requeue = None
            try:
                if tracked:
                    submission, requeue = self._submit_tracked(spec, cluster, partition)
                else:
                    submission = jobs.submit(self.session, spec, cluster, partition, fresh_token=True)
            except BaseException:
                store.remove([files["call"]])     # nothing queued from this file: nothing left behind
                raise
            if parallel is not None and parallel < size:
                # submitit's array_parallelism: Slurm's throttle of the array, set as soon as it is queued
                # (the job script's --array takes no %N here).
                self.session.backend(submission.ref.cluster).update_jobs([submission.ref.job_id],
                                                                         ArrayTaskThrottle=str(parallel))
            base = {"cluster": submission.ref.cluster, "token": token, "tasks": tasks, "folder": str(self.folder),
                    "cluster_folder": place.folder, "site": self.session.site.path}
            if requeue is not None:
                base["requeue"] = requeue
            for index in range(size) if array else [None]:
                record = dict(base, slurm_id=submission.ref.job_id if index is None
                              else "%s_%d" % (submission.ref.job_id, index),
                              files={k: v.replace("%a", str(index)) for k, v in files.items()})
                job = Job(record, self.session, self._watcher)
                job.save()
                made.append(job)
            start += size
        return made

    def _time_limit_s(self, shape) -> Optional[int]:
        """The job's time limit in seconds (the site's default time when none is asked; None: unlimited), which
        the task compares with when Slurm's USR1 comes, to count the restarts after a time limit."""
        from slurmkit.times import slurm_time_seconds

        try:
            return slurm_time_seconds(shape.time or self.session.site.defaults.time)
        except ValueError:
            return None

    def _submit_tracked(self, spec, cluster: str, partition: Optional[str]):
        """Submit ``spec`` under the requeue daemon, as ``slurmkit submit --auto-requeue`` does (the user's journal,
        ``$SLURMKIT_STATE_DIR``): (the first attempt's submission, the record's ``requeue`` entry).  The daemon's
        checkpoint directory is a folder of the executor's; the call's own checkpoint stays in its cluster folder."""
        from slurmkit.requeue import tracking
        from slurmkit.requeue.journal import Journal

        journal = Journal()
        try:
            directory = str(self.folder / "requeue" / spec.token)
            tracked_id, submission = tracking.submit_tracked(self.session, spec, journal, cluster, partition,
                                                             checkpoint_dir=directory)
            return submission, {"journal": journal.path, "tracked": tracked_id}
        finally:
            journal.close()

    def _array_limits(self, cluster: str):
        """The cluster's array limits, from one ``scontrol show config`` per executor."""
        if cluster not in self._limits:
            from slurmkit.sweep import arrays

            self._limits[cluster] = arrays.limits_from_config(self.session.backend(cluster).config(), cluster)
        return self._limits[cluster]

    def close(self) -> None:
        self.session.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class BatchedJob:
    """A call submitted inside :meth:`Executor.batch`: the :class:`Job` it becomes at the block's end."""

    def __init__(self):
        self._job: Optional[Job] = None

    def __getattr__(self, name):
        job = self.__dict__.get("_job")
        if job is None:
            raise UsageError("this job is submitted when its batch() block ends: use it after the block")
        return getattr(job, name)

    def __repr__(self):
        return repr(self._job) if self._job is not None else "Job<not submitted yet: in a batch>"


class AutoExecutor(Executor):
    """submitit's ``AutoExecutor``: generic parameter names (``timeout_min``, ``tasks_per_node``,
    ``mem_gb``, ...), Slurm's under ``slurm_`` (``slurm_partition``, ...), and slurmkit's own
    (``comm``, ``image``, ``mounts``, ``env``).  ``cluster``: a cluster of the site, ``"auto"``
    (placed by start estimate) or a comma list; submitit's ``"slurm"`` means the default one.

    submitit's executor arguments: ``slurm_max_num_timeout`` (how many times a checkpointed call is
    restarted after its time limit, 3), ``slurm_python`` (the Python on the nodes, as ``python=``),
    ``slurm_max_pickle_size_gb`` (taken, unused: calls travel as text, their size is the filesystem's);
    other executors' (``local_*``, ``debug_*``) are ignored, as submitit ignores them on Slurm."""

    generic = True

    def __init__(self, folder, cluster: Optional[str] = None, site=None, python: Optional[str] = None,
                 cluster_folder: Optional[str] = None, **kwargs):
        options = {}
        for key, value in kwargs.items():
            if key == "slurm_max_num_timeout":
                options["max_num_timeout"] = value
            elif key == "slurm_python":
                if python is not None:
                    raise UsageError("python= and slurm_python= both given: give one")
                python = _python_path(value)
            elif key == "slurm_max_pickle_size_gb" or key.startswith(("local_", "debug_")):
                continue
            else:
                raise UsageError("AutoExecutor(%s=...): unknown argument (slurmkit takes slurm_max_num_timeout, "
                                 "slurm_python, site, python, cluster_folder)" % key)
        super().__init__(folder, cluster=cluster, site=site, python=python, cluster_folder=cluster_folder, **options)


class SlurmExecutor(Executor):
    """submitit's ``SlurmExecutor``: Slurm's parameter names (``partition``, ``time`` in minutes or
    as Slurm writes it, ``ntasks_per_node``, ``mem``, ``job_name``, ``additional_parameters``,
    ``array_parallelism``), and its ``max_num_timeout`` (and ``max_pickle_size_gb``, taken, unused)."""

    generic = False

    def __init__(self, folder, max_num_timeout: int = 3, max_pickle_size_gb: float = 1.0,
                 python: Optional[str] = None, cluster: Optional[str] = None, site=None,
                 cluster_folder: Optional[str] = None):
        super().__init__(folder, cluster=cluster, site=site, python=_python_path(python) if python else None,
                         cluster_folder=cluster_folder, max_num_timeout=max_num_timeout)


def _python_path(value) -> str:
    """submitit's ``python`` is a shell command (``singularity exec img python``); slurmkit runs one program."""
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise UsageError("python %r: give the path of the Python on the nodes (slurmkit runs it without a shell; "
                         "a container is the executor's image= parameter)" % (value,))
    return value
