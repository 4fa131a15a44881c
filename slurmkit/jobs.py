"""Submitting, querying and cancelling jobs of a site.

Job ids shown to users are global: ``CLUSTER:JOBID``.  A bare id means the
site's default cluster.  Every submission carries a unique token in its
``--comment``, so a retried submission can first ask Slurm whether the job
already exists instead of creating it twice.
"""

from __future__ import annotations

import os
import re
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Dict, List, NamedTuple, Optional, Sequence, Tuple

from slurmkit.errors import SlurmkitError, UsageError
from slurmkit.script.render import JobSpec, RenderedJob, render
from slurmkit.session import Session

if TYPE_CHECKING:  # annotations only: a submission never builds a JobInfo
    from slurmkit.slurm.types import JobInfo

_REF_RE = re.compile(r"^(?:(?P<cluster>[A-Za-z0-9_.-]+):)?(?P<job>\d+)$")
TOKEN_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class JobRef(NamedTuple):
    cluster: str
    job_id: str

    def __str__(self):
        return "%s:%s" % (self.cluster, self.job_id)


class Submission(NamedTuple):
    ref: JobRef
    rendered: RenderedJob
    token: str
    existed: bool = False   # the token already had a job: nothing new was created

    def to_dict(self):
        return {"id": str(self.ref), "cluster": self.ref.cluster, "job_id": self.ref.job_id,
                "token": self.token, "partition": self.rendered.partition, "template": self.rendered.template,
                "switches": self.rendered.switches, "existed": self.existed,
                "warnings": list(self.rendered.warnings)}


def parse_ref(text: str, session: Session) -> JobRef:
    m = _REF_RE.match(text.strip())
    if not m:
        raise UsageError("%r is not a job id; use JOBID or CLUSTER:JOBID (e.g. alpha:1234)" % text)
    cluster = session.site.cluster(m.group("cluster")).name  # validates the cluster name
    return JobRef(cluster, m.group("job"))


def new_token() -> str:
    return os.urandom(8).hex()  # 64 random bits; os.urandom avoids importing hashlib via secrets


def prepare(session: Session, spec: JobSpec, cluster: Optional[str] = None,
            partition: Optional[str] = None) -> RenderedJob:
    """Render the job for one cluster (reads the topology, cached, for heavy jobs).

    A job without a token gets a fresh one, so what ``render`` prints is what
    ``submit`` sends (give ``--token`` to make the two identical).
    """
    if spec.token is None:
        spec = spec._replace(token=new_token())
    elif not TOKEN_RE.match(spec.token):
        raise UsageError("--token must be 1-64 letters, digits, '.', '_' or '-'")
    site = session.site
    target = site.cluster(cluster)
    part = site.partition(target, partition)
    layout = None
    if spec.comm == "heavy" and spec.switches is None:
        try:
            layout = session.layout(target)
        except SlurmkitError as exc:
            raise UsageError("--comm heavy needs the topology of cluster %s, which could not be read (%s); "
                             "give the leaf switch count with --switches N" % (target.name, exc)) from None
    from slurmkit.script.cache import render_cached

    return render_cached(site, target, part, spec, layout, render)


def submit(session: Session, spec: JobSpec, cluster: Optional[str] = None,
           partition: Optional[str] = None) -> Submission:
    """Render and submit; with a caller's token, an existing job with it is returned instead."""
    token = spec.token
    caller_token = token is not None
    if token is None:
        token = new_token()
        spec = spec._replace(token=token)
    rendered = prepare(session, spec, cluster, partition)
    backend = session.backend(rendered.cluster)
    if caller_token:
        # The caller may be retrying: never create a second job for the same token.
        existing = job_with_token(backend, token)
        if existing is not None:
            return Submission(JobRef(rendered.cluster, existing.job_id), rendered, token, existed=True)
    job_id = backend.submit(rendered.script, token=token)
    return Submission(JobRef(rendered.cluster, job_id), rendered, token)


def job_with_token(backend, token: str) -> Optional[JobInfo]:
    """The job submitted with ``token`` (its comment is exactly ``slurmkit:TOKEN``), if any."""
    comment = "slurmkit:" + token
    return next((j for j in backend.find_by_token(comment) if j.comment == comment), None)


def _group(refs: Sequence[JobRef]) -> "OrderedDict[str, List[str]]":
    grouped: "OrderedDict[str, List[str]]" = OrderedDict()
    for ref in refs:
        grouped.setdefault(ref.cluster, []).append(ref.job_id)
    return grouped


def status(session: Session, refs: Sequence[JobRef] = (), user: Optional[str] = None
           ) -> Tuple[List[Tuple[JobRef, JobInfo]], List[JobRef], List[Tuple[str, str]]]:
    """(found, missing, unreachable clusters with the reason).

    With refs: one squeue per cluster involved, whatever the number of jobs.
    Without: the user's slurmkit jobs (comment ``slurmkit:...``) on every
    cluster of the site, asked in parallel; a cluster that cannot be reached
    is reported, not fatal.  The user is ``user``, else the account slurmkit
    uses on that cluster (the login node's user over SSH, else this one).
    """
    from concurrent.futures import ThreadPoolExecutor

    found: List[Tuple[JobRef, JobInfo]] = []
    missing: List[JobRef] = []
    unreachable: List[Tuple[str, str]] = []
    if not refs:
        names = list(session.site.clusters)

        def mine(cluster):
            try:
                backend = session.backend(cluster)
                jobs_there = backend.jobs(user=user or account_on(session.site.clusters[cluster]))
                return [j for j in jobs_there if j.comment.startswith("slurmkit:")], None
            except SlurmkitError as exc:
                return [], str(exc)

        with ThreadPoolExecutor(max_workers=min(8, len(names))) as pool:
            for cluster, (jobs_there, error) in zip(names, pool.map(mine, names)):
                if error:
                    unreachable.append((cluster, error))
                found.extend((JobRef(cluster, j.job_id), j) for j in jobs_there)
        return found, missing, unreachable
    for cluster, ids in _group(refs).items():
        backend = session.backend(cluster)
        by_id: Dict[str, JobInfo] = {j.job_id: j for j in backend.jobs(ids)}
        unknown = [i for i in ids if i not in by_id]
        if unknown and hasattr(backend, "accounting"):
            by_id.update({j.job_id: j for j in backend.accounting(unknown)})
        for job_id in ids:
            if job_id in by_id:
                found.append((JobRef(cluster, job_id), by_id[job_id]))
            else:
                missing.append(JobRef(cluster, job_id))
    return found, missing, unreachable


def account_on(cluster) -> str:
    """The user name slurmkit's commands run as on ``cluster``."""
    import getpass

    from slurmkit.session import reach

    if reach(cluster) == "ssh" and cluster.login.user:
        return cluster.login.user
    return getpass.getuser()


def cancel(session: Session, refs: Sequence[JobRef]) -> List[JobRef]:
    """Cancel jobs, one scancel per cluster; returns what was asked to cancel."""
    for cluster, ids in _group(refs).items():
        session.backend(cluster).cancel(ids)
    return list(refs)


def wait(session: Session, ref: JobRef, timeout: Optional[float] = None, clock=time.monotonic,
         sleep=time.sleep, on_change=None) -> JobInfo:
    """Poll one job until it finishes; one squeue per poll, backing off to 10 s.

    ``on_change(job)`` is called whenever the state changes.  Raises
    SlurmkitError when the job disappears or ``timeout`` passes.
    """
    from slurmkit.errors import ConnectTimeoutError

    backend = session.backend(ref.cluster)
    deadline = None if timeout is None else clock() + timeout
    delay, last_state = 1.0, None
    while True:
        found = backend.jobs([ref.job_id])
        if not found:
            raise SlurmkitError("job %s is not known to cluster %s" % (ref, ref.cluster))
        job = found[0]
        if job.state != last_state:
            last_state = job.state
            if on_change:
                on_change(job)
        if job.finished:
            return job
        if deadline is not None and clock() + delay > deadline:
            raise ConnectTimeoutError("job %s is still %s after %ss" % (ref, job.state, timeout))
        sleep(delay)
        delay = min(delay * 1.5, 10.0)
