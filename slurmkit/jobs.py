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
from typing import TYPE_CHECKING, List, NamedTuple, Optional, Sequence, Tuple

from slurmkit.errors import SlurmkitError, UsageError
from slurmkit.script.render import JobSpec, RenderedJob, render
from slurmkit.session import Session

if TYPE_CHECKING:  # annotations only: a submission never builds a JobInfo nor a GroupResult
    from slurmkit.results import GroupResult
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
                "switches": self.rendered.switches, "switch_wait": self.rendered.switch_wait,
                "existed": self.existed, "warnings": list(self.rendered.warnings)}


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
    if spec.comm == "heavy":
        # The layout also carries the cluster's cap on the switch wait, so it is read
        # (cached) even when --switches gives the count.
        try:
            layout = session.layout(target)
        except SlurmkitError as exc:
            if spec.switches is None:
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


class StatusReport(NamedTuple):
    """What :func:`status` found: jobs by ref, refs no cluster knows, and every cluster's outcome.

    ``clusters`` is a :class:`~slurmkit.results.GroupResult`: for each
    cluster asked, the jobs found there (a list of JobInfo) or the error that
    kept it from answering (only ever an error when listing without refs).
    """

    found: List[Tuple[JobRef, JobInfo]]
    missing: List[JobRef]
    clusters: GroupResult


def lookup(session: Session, refs: Sequence[JobRef], max_workers: int = 8) -> GroupResult:
    """Jobs by ref, finished ones included: ``cluster -> {job_id: JobInfo}`` or that cluster's error.

    One :meth:`~slurmkit.slurm.backend.SlurmBackend.jobs_by_id` per cluster
    (at most two RPCs, whatever the number of jobs), clusters asked in
    parallel.  An id missing from its cluster's dict is unknown there.  This
    is the poll of the requeue daemon: an unreachable cluster is an entry of
    the result, never a reason to drop the others.
    """
    from slurmkit import results

    grouped = _group(refs)
    return results.each(grouped, lambda cluster: session.backend(cluster).jobs_by_id(grouped[cluster]),
                        max_workers=max_workers)


def status(session: Session, refs: Sequence[JobRef] = (), user: Optional[str] = None) -> StatusReport:
    """The jobs ``refs`` (finished ones too), or without refs the user's slurmkit jobs everywhere.

    With refs: one :func:`lookup`; a cluster that cannot be asked raises (the
    user named its jobs: there is no answer without it), as itself when it
    is the only one, as a :class:`~slurmkit.results.GroupError` otherwise.
    Without: the user's slurmkit jobs (comment ``slurmkit:...``) on every
    cluster of the site, asked in parallel; a cluster that cannot be reached
    is reported in ``clusters.failed``, not fatal.  The user is ``user``,
    else the account slurmkit uses on that cluster (the login node's user
    over SSH, else this one).
    """
    from slurmkit import results

    found: List[Tuple[JobRef, JobInfo]] = []
    missing: List[JobRef] = []
    if not refs:
        def mine(cluster):
            jobs_there = session.backend(cluster).jobs(user=user or account_on(session.site.clusters[cluster]))
            return [j for j in jobs_there if j.comment.startswith("slurmkit:")]

        per_cluster = results.each(session.site.clusters, mine)
        for cluster, jobs_there in per_cluster.succeeded.items():
            found.extend((JobRef(cluster, j.job_id), j) for j in jobs_there)
        return StatusReport(found, missing, per_cluster)
    by_cluster = lookup(session, refs).raise_failed("jobs could not be looked up")
    for ref in refs:
        job = by_cluster[ref.cluster].get(ref.job_id)
        if job is None:
            missing.append(ref)
        else:
            found.append((ref, job))
    return StatusReport(found, missing,
                        results.GroupResult((c, list(jobs.values())) for c, jobs in by_cluster.items()))


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
    """Poll one job until it finishes, backing off from 1 s to 10 s between polls.

    Each poll is one ``jobs_by_id``: one squeue while Slurm still lists the
    job, and sacct (where there is accounting) once it no longer does, so a
    job that ended during a long pause is still found.  ``on_change(job)`` is
    called whenever the state changes.  Raises SlurmkitError when the job is
    unknown, and :class:`~slurmkit.errors.WaitTimeoutError` (never a
    connection error: Slurm did answer) when ``timeout`` passes first.
    """
    from slurmkit.errors import WaitTimeoutError

    backend = session.backend(ref.cluster)
    deadline = None if timeout is None else clock() + timeout
    delay, last_state = 1.0, None
    while True:
        job = backend.jobs_by_id([ref.job_id]).get(ref.job_id)
        if job is None:
            raise SlurmkitError("job %s is not known to cluster %s" % (ref, ref.cluster))
        if job.state != last_state:
            last_state = job.state
            if on_change:
                on_change(job)
        if job.finished:
            return job
        if deadline is not None and clock() + delay > deadline:
            raise WaitTimeoutError("job %s is still %s after %ss" % (ref, job.state, timeout), job=job)
        sleep(delay)
        delay = min(delay * 1.5, 10.0)


def output_exists(session: Session, cluster: str, path: str) -> bool:
    """Whether ``path`` exists where the job wrote it: here, or on the cluster's login node over SSH."""
    from slurmkit.session import reach

    if reach(session.site.cluster(cluster)) == "local":
        return os.path.exists(path)
    return session.backend(cluster).runner.run(["test", "-e", path]).returncode == 0


def summary(session: Session, ref: JobRef, job: "JobInfo", check_output: bool = True) -> dict:
    """A job as ``wait``/``status --json`` show it: its record, the leaf switches its nodes sit
    under, and ``output_note`` when its output file is not where Slurm says (None otherwise)."""
    from slurmkit.outputs import output_note
    from slurmkit.script import topology

    cluster = session.site.cluster(ref.cluster)
    try:
        leaves = topology.leaves_of(session.layout(cluster), job.nodelist) if job.nodelist else []
    except SlurmkitError:
        leaves = []
    note = None
    if check_output and job.stdout:
        try:
            note = output_note(job.stdout, job.state, lambda p: output_exists(session, ref.cluster, p))
        except SlurmkitError:
            note = None     # cannot look: say nothing rather than something wrong
    return dict(job.to_dict(), id=str(ref), leaf_switches=leaves, output_note=note)


def output_notes(session: Session, found) -> List[str]:
    """For ``status``: a line per ended job whose output file is missing, on clusters used locally
    (over SSH that would cost a command per job; ``wait`` checks there)."""
    from slurmkit.outputs import output_note
    from slurmkit.session import reach

    notes = []
    for ref, job in found:
        if job.finished and job.stdout and reach(session.site.cluster(ref.cluster)) == "local":
            note = output_note(job.stdout, job.state)
            if note:
                notes.append("%s: %s" % (ref, note))
    return notes
