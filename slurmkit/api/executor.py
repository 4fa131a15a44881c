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

import hashlib
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Dict, Optional, Tuple

from slurmkit.api import params
from slurmkit.api.job import Job, StateWatcher, cluster_paths
from slurmkit.errors import UsageError

# Asked of the cluster's Python before its first call: its version, cloudpickle's, and the home directory.
_PROBE = ("import json, os, sys\ntry:\n import cloudpickle; c = cloudpickle.__version__\nexcept ImportError:\n c = None\n"
          "print(json.dumps({'python': '%d.%d' % sys.version_info[:2], 'cloudpickle': c, "
          "'home': os.path.expanduser('~')}))")
# submitit's AutoExecutor(cluster=...) names environments; these mean "the site's Slurm".
_SUBMITIT_SLURM = ("slurm",)
_SUBMITIT_OTHER = ("local", "debug")


def open_session(site=None):
    """A Session of ``site`` (a Site, a name or a path; default ``$SLURMKIT_SITE``)."""
    from slurmkit.session import Session
    from slurmkit.site import find_site
    from slurmkit.site.model import Site

    if isinstance(site, Site):
        return Session(site)
    name = site if site is not None else os.environ.get("SLURMKIT_SITE")
    if not name:
        raise UsageError("no site given: pass site=NAME|PATH to the executor, or set SLURMKIT_SITE")
    return Session(find_site(str(name)))


class ClusterPlace:
    """Where calls run on one cluster: the Python, and the folder of the jobs' files there."""

    def __init__(self, python: str, folder: str):
        self.python = python
        self.folder = folder


class Executor:
    """The executor of both vocabularies (see :class:`AutoExecutor`, :class:`SlurmExecutor`)."""

    generic = True

    def __init__(self, folder, cluster: Optional[str] = None, site=None, python: Optional[str] = None,
                 cluster_folder: Optional[str] = None):
        if cluster in _SUBMITIT_OTHER:
            raise UsageError("cluster=%r: slurmkit runs calls on the site's Slurm clusters only; give a cluster "
                             "name, 'auto', or leave it out" % cluster)
        self.folder = Path(os.path.abspath(str(folder)))
        self.folder.mkdir(parents=True, exist_ok=True)
        self.session = open_session(site)
        self.cluster = None if cluster in _SUBMITIT_SLURM else cluster
        if self.cluster is not None and self.cluster != "auto" and "," not in self.cluster:
            self.session.site.cluster(self.cluster)           # an unknown name fails here, not at submit
        self.python = python
        self.cluster_folder = cluster_folder
        self.parameters: Dict[str, object] = {}
        self._places: Dict[str, ClusterPlace] = {}
        self._watcher = StateWatcher(self.session)

    def update_parameters(self, **kwargs) -> None:
        """Add or replace parameters (submitit's names); a wrong name or value is refused now."""
        merged = dict(self.parameters, **kwargs)
        params.request(merged, self.generic)
        self.parameters = merged

    # -- where ------------------------------------------------------------------------------------

    def _choose(self, spec, partition: Optional[str]) -> Tuple[str, Optional[str]]:
        """(cluster, partition) for the job: the named or default cluster, or the planner's best."""
        from slurmkit import federation

        if not federation.is_federated(self.cluster):
            return self.session.site.cluster(self.cluster).name, partition
        outcome = federation.submit_anywhere(self.session, spec, self.cluster, partition, dry_run=True)
        for candidate in outcome.placement.candidates:
            if candidate.viable:
                return candidate.cluster, candidate.partition
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
        """Run ``fn(*args, **kwargs)`` as a job (once per task); returns its :class:`Job`."""
        from slurmkit import jobs
        from slurmkit.api import payload
        from slurmkit.script.render import JobSpec

        if not callable(fn):
            raise UsageError("submit: %r is not callable" % (fn,))
        request = params.request(self.parameters, self.generic)
        fields = dict(request.fields)
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
        token = jobs.new_token()
        shape = JobSpec(command=("true",), template=template, procs_per_node=tasks_per_node if template == "srun"
                        else None, token=token, **fields)
        cluster, partition = self._choose(shape, request.partition)
        place = self._place(cluster)
        files = cluster_paths(place.folder, token)
        spec = shape._replace(command=(place.python, "-c", payload.BOOTSTRAP, files["call"], files["result"]),
                              output=files["log"])
        text = payload.dump_call(fn, args, kwargs)
        store = self.session.files(cluster)
        store.write(files["call"], text)
        try:
            submission = jobs.submit(self.session, spec, cluster, partition)
        except BaseException:
            store.remove([files["call"]])     # nothing queued: nothing left behind
            raise
        record = {"cluster": submission.ref.cluster, "slurm_id": submission.ref.job_id, "token": token,
                  "tasks": nodes * tasks_per_node, "folder": str(self.folder), "cluster_folder": place.folder,
                  "files": files, "site": self.session.site.path}
        job = Job(record, self.session, self._watcher)
        job.save()
        return job

    def close(self) -> None:
        self.session.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class AutoExecutor(Executor):
    """submitit's ``AutoExecutor``: generic parameter names (``timeout_min``, ``tasks_per_node``,
    ``mem_gb``, ...), Slurm's under ``slurm_`` (``slurm_partition``, ...), and slurmkit's own
    (``comm``, ``image``, ``mounts``, ``env``).  ``cluster``: a cluster of the site, ``"auto"``
    (placed by start estimate) or a comma list; submitit's ``"slurm"`` means the default one."""

    generic = True


class SlurmExecutor(Executor):
    """submitit's ``SlurmExecutor``: Slurm's parameter names (``partition``, ``time`` in minutes or
    as Slurm writes it, ``ntasks_per_node``, ``mem``, ``job_name``, ``additional_parameters``)."""

    generic = False
