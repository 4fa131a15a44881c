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
from slurmkit.session import Session

if TYPE_CHECKING:  # annotations only: a submission never builds a JobInfo nor a GroupResult, status never renders
    from slurmkit.results import GroupResult
    from slurmkit.script.render import JobSpec, RenderedJob
    from slurmkit.slurm.types import JobInfo

# Whole-string patterns (fullmatch, ASCII): "$" would let a trailing newline
# through, and "\d" would take digits of every script.
# A job id is never 0 (Slurm's own commands read 0 as "every job": `scontrol show job 0` lists them all).
JOB_REF_PATTERN = r"(?:(?P<cluster>[A-Za-z0-9_.-]+):)?(?P<job>[1-9][0-9]*)"
_REF_RE = re.compile(JOB_REF_PATTERN, re.ASCII)
TOKEN_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}", re.ASCII)
# How long a submission waits for another one with the same token (same as
# the cluster-side wrapper's flock -w 60).
TOKEN_LOCK_WAIT_S = 60.0


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
                "constraint": self.rendered.constraint, "image": self.rendered.image,
                "runtime": self.rendered.runtime, "existed": self.existed, "warnings": list(self.rendered.warnings)}


def parse_ref(text: str, session: Session) -> JobRef:
    m = _REF_RE.fullmatch(text.strip(" "))
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
    elif not TOKEN_RE.fullmatch(spec.token):
        raise UsageError("--token %r: a token is 1-64 letters, digits, '.', '_' or '-'" % spec.token)
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
    from slurmkit.script.render import render   # here: status, wait and cancel never render

    return render_cached(site, target, part, spec, layout, render)


def submit(session: Session, spec: JobSpec, cluster: Optional[str] = None,
           partition: Optional[str] = None, fresh_token: bool = False) -> Submission:
    """Render and submit; with a caller's token, an existing job with it is returned instead.

    ``fresh_token``: the caller made the spec's token with :func:`new_token` just now (to name files by it
    before sbatch answers), so no job can carry it yet and the look for one, an ``squeue`` of all the user's
    jobs per submission, is skipped; a wrapper's own look on the login node still guards a retried sbatch."""
    token = spec.token
    caller_token = token is not None and not fresh_token
    if token is None:
        token = new_token()
        spec = spec._replace(token=token)
    rendered = prepare(session, spec, cluster, partition)
    check_output_place(session, rendered)
    backend = session.backend(rendered.cluster)
    # The caller may be retrying (or running the same command twice at once):
    # never create a second job for the same token.
    job_id, existed = submit_once(backend, rendered.cluster, rendered.script, token, look_first=caller_token,
                                  user=account_on(session.site.cluster(rendered.cluster)) if caller_token else None)
    return Submission(JobRef(rendered.cluster, job_id), rendered, token, existed=existed)


def submit_once(backend, cluster: str, script: str, token: str, look_first: bool = True,
                user: Optional[str] = None) -> Tuple[str, bool]:
    """Submit ``script`` unless a job with ``token`` exists; (job id, whether it existed).

    The look for the token and the sbatch are one critical section, however
    the cluster is reached: over SSH the cluster-side wrapper holds a
    per-user, per-token lock around both (``backend.submit_once``); for a
    cluster used from here, :func:`token_lock` does, so twenty processes
    submitting one token at once make one job and report it nineteen times.
    A fresh token (``look_first`` False) cannot have a job yet: no lock, no look.
    Only ``user``'s jobs count (as in the wrapper): another user's job with
    a guessed token must not stand in for this one.
    """
    if not look_first:
        return backend.submit(script, token=token), False
    if backend.submit_once:
        existing = job_with_token(backend, token, user)
        if existing is not None:
            return existing.job_id, True
        return backend.submit(script, token=token), False   # the wrapper looks again, under its lock
    with token_lock(cluster, token):
        existing = job_with_token(backend, token, user)
        if existing is not None:
            return existing.job_id, True
        return backend.submit(script, token=token), False


class token_lock:
    """An exclusive per-user, per-cluster, per-token lock on this machine (flock), for at most
    TOKEN_LOCK_WAIT_S; raises SlurmkitError when another submission holds it longer.

    The file is in the user's private cache directory (``locks/``); it is
    removed when released, and a holder checks that the file it locked is
    still the one at the path (else another process removed it in between
    and locks the new one), so removing never lets two holders in at once.
    """

    def __init__(self, cluster: str, token: str, wait: float = None):
        self.cluster, self.token = cluster, token
        self.wait = TOKEN_LOCK_WAIT_S if wait is None else wait
        self.fd = None
        self.path = None

    def _path(self) -> str:
        from slurmkit.cache import private_dir

        directory = private_dir("locks")
        if directory is None:  # no private cache directory: the same place the cluster-side wrapper uses
            import tempfile

            return os.path.join(tempfile.gettempdir(), "slurmkit-submit-%d-%s-%s.lock"
                                % (os.getuid(), self.cluster, self.token))
        return os.path.join(directory, "submit-%s-%s.lock" % (self.cluster, self.token))

    def __enter__(self):
        from .filelock import flock_until

        self.path = self._path()
        deadline = time.monotonic() + self.wait
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                if os.fstat(fd).st_uid != os.getuid():
                    raise SlurmkitError("lock file %s belongs to another user; remove it" % self.path)
                if not flock_until(fd, deadline, poll=0.02):
                    raise SlurmkitError(
                        "another submission with token %s to cluster %s is still running after %.0fs; "
                        "nothing was submitted: run the command again to get its job"
                        % (self.token, self.cluster, self.wait))
                try:
                    current = os.stat(self.path, follow_symlinks=False)
                except FileNotFoundError:
                    current = None
                mine = os.fstat(fd)
                if current is not None and (current.st_dev, current.st_ino) == (mine.st_dev, mine.st_ino):
                    self.fd, fd = fd, None
                    return self
            finally:
                if fd is not None:
                    os.close(fd)
            # The holder before us removed the file: lock the one now at the path.

    def __exit__(self, *exc):
        try:
            os.unlink(self.path)     # still holding the lock: nobody else can be inside
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None
        return False


def check_output_place(session: Session, rendered: RenderedJob, cwd: Optional[str] = None) -> None:
    """Refuse, before sbatch, an output file Slurm could not create (exit 2, naming ``--output/-o``).

    Only for a cluster used from this machine, where the job's working
    directory is this one and its file system is (on a real site, shared)
    the nodes': an output pattern into a directory that does not exist, one
    naming a directory, or a working directory the user cannot write would
    make Slurm fail the job without writing anything anywhere.  Parts that
    depend on the job (``%j``, ``%N``, ...) are not judged.  Over SSH
    nothing is known here; ``wait`` and ``status`` explain a missing file.

    A missing directory is refused on every Slurm release although 23.02
    and later create it on the node that runs the batch step (seen on 24.11
    and 26.05; 22.05 fails the job): the same script must behave the same on
    every cluster of a federation, and before and after a site's upgrade.
    """
    from slurmkit.session import reach

    if rendered.output is None or reach(session.site.cluster(rendered.cluster)) != "local":
        return
    if cwd is None:
        try:
            cwd = os.getcwd()
        except OSError as exc:   # the directory was removed under the shell
            raise UsageError("the working directory cannot be used (%s): cd to an existing directory, where the "
                             "job's output file goes" % (exc.strerror or exc)) from None
    problem = output_place_problem(rendered.output, cwd, rendered.name)
    if problem:
        raise UsageError(problem)


def output_place_problem(pattern: str, cwd: str, name: str = "") -> Optional[str]:
    """Why Slurm could not create the output file ``pattern`` for a job started in ``cwd``, or None."""
    import getpass

    where = "--output/-o %s" % pattern
    if "\\" in pattern:
        expanded = pattern.replace("\\", "")    # sbatch: a backslash turns the patterns off
    else:
        def known(m):
            # What is known before the job exists (%u, %x); %j, %N and the others stay, as unknown.
            letter = m.group(1)[-1]
            if letter == "%":
                return "%%"
            return {"u": getpass.getuser(), "x": name.replace("%", "%%")}.get(letter, m.group(0))

        expanded = re.sub(r"%(%|[0-9]*[A-Za-z])", known, pattern)
    path = os.path.join(cwd, expanded)
    directory = os.path.dirname(path)
    if "%" not in directory.replace("%%", ""):           # no part of it depends on the job
        directory = directory.replace("%%", "%")
        try:
            os.stat(directory)
        except FileNotFoundError:
            return ("%s: directory %s does not exist: Slurm 22.05 fails such a job without a trace (23.02 and "
                    "later create it on the node); create it first (mkdir -p %s)" % (where, directory, directory))
        except OSError as exc:   # EACCES on a directory above it, ELOOP, ...
            return "%s: directory %s cannot be reached (%s)" % (where, directory, exc.strerror or exc)
        if not os.path.isdir(directory):
            return "%s: %s is not a directory" % (where, directory)
        refused = _refuses_new_files(directory)
        if refused:
            if os.path.dirname(pattern):
                return "%s: directory %s %s" % (where, directory, refused)
            return ("the working directory %s %s, so Slurm could not create the job's output file there; "
                    "run from a directory you can write, or give --output/-o a path in one" % (directory, refused))
        if "%" not in expanded.replace("%%", "") and os.path.isdir(path.replace("%%", "%")):
            return ("%s names a directory; give a file name (e.g. %s/slurmkit-%%j.out)"
                    % (where, pattern.rstrip("/")))
    return None


def _refuses_new_files(directory: str) -> Optional[str]:
    """Why a new file cannot be made in ``directory`` ("is not writable by you", ...), or None.

    The permission bits are not the whole answer: root passes access(2) on /proc and /sys, a
    read-only mount may pass it, and Slurm then fails the job at launch (JobLaunchFailure) with
    no output anywhere.  So a file is made and removed, with a name nobody else uses."""
    import errno
    import secrets

    if not os.access(directory, os.W_OK | os.X_OK):
        return "is not writable by you"
    probe = os.path.join(directory, ".slurmkit-probe-%d-%s" % (os.getpid(), secrets.token_hex(4)))
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as exc:
        why = {errno.EROFS: "is on a read-only file system", errno.ENOENT: "takes no new files (a kernel file "
               "system such as /proc)", errno.EACCES: "is not writable by you", errno.EPERM: "takes no new files",
               errno.EDQUOT: "is over its disk quota", errno.ENOSPC: "is on a full file system"}
        return why.get(exc.errno, "takes no new files (%s)" % (exc.strerror or exc))
    try:
        os.unlink(probe)
    except OSError:
        pass
    return None


def job_with_token(backend, token: str, user: Optional[str] = None) -> Optional[JobInfo]:
    """The job submitted with ``token`` (its comment is exactly ``slurmkit:TOKEN``), if any; only
    ``user``'s jobs when given."""
    comment = "slurmkit:" + token
    return next((j for j in backend.find_by_token(comment, user=user)
                 if j.comment == comment and (user is None or j.user == user)), None)


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
    """Cancel jobs, one scancel per cluster; returns what was asked to cancel.

    No check that the jobs exist (scancel says nothing about an unknown id):
    for callers that know they do, such as the requeue daemon.  ``slurmkit
    cancel`` uses :func:`cancel_known`.
    """
    for cluster, ids in _group(refs).items():
        session.backend(cluster).cancel(ids)
    return list(refs)


class CancelReport(NamedTuple):
    cancelled: List[JobRef]             # alive when looked up, asked to cancel
    ended: List[Tuple[JobRef, str]]     # had already ended: (ref, final state)
    missing: List[JobRef]               # unknown to their cluster


def cancel_known(session: Session, refs: Sequence[JobRef]) -> CancelReport:
    """Look the jobs up first, then cancel only the live ones, one scancel per cluster.

    scancel answers an unknown id with silence and exit 0, so without the
    look "cancelled" would be printed for a job that never existed (a typo
    in the id: the real job keeps running).  The look is one squeue per
    cluster (only jobs it lists can be cancelled); ids it does not list are
    asked of accounting to tell "ended long ago" from "unknown", and when
    accounting cannot answer they count as unknown: that never stops the
    live jobs from being cancelled.
    """
    cancelled, ended, missing = [], [], []
    for cluster, ids in _group(list(dict.fromkeys(refs))).items():
        backend = session.backend(cluster)
        live = {j.job_id: j for j in backend.jobs(ids)}
        gone = [i for i in ids if i not in live]
        past = {}
        if gone:
            try:
                if backend.has_accounting():
                    past = {j.job_id: j for j in backend.accounting(gone)}
            except SlurmkitError:
                past = {}
        for job_id in ids:
            job = live.get(job_id) or past.get(job_id)
            ref = JobRef(cluster, job_id)
            if job is None:
                missing.append(ref)
            elif job.finished:
                ended.append((ref, job.state))
            else:
                cancelled.append(ref)
    cancel(session, cancelled)
    return CancelReport(cancelled, ended, missing)


def wait(session: Session, ref: JobRef, timeout: Optional[float] = None, clock=time,
         on_change=None) -> JobInfo:
    """Poll one job until it finishes, backing off from 1 s to 10 s between polls.

    Each poll is one ``jobs_by_id``: one squeue while Slurm still lists the
    job, and sacct (where there is accounting) once it no longer does, so a
    job that ended during a long pause is still found.  ``on_change(job)`` is
    called whenever the state changes.  Raises SlurmkitError when the job is
    unknown, and :class:`~slurmkit.errors.WaitTimeoutError` (never a
    connection error: Slurm did answer) when ``timeout`` passes first.
    ``clock``: ``monotonic()`` and ``sleep()`` (the time module; a FakeClock in tests).
    """
    from slurmkit.errors import WaitTimeoutError

    backend = session.backend(ref.cluster)
    deadline = None if timeout is None else clock.monotonic() + timeout
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
        if job.reason == "DependencyNeverSatisfied":
            # Slurm keeps such a job pending for ever (unless kill_invalid_depend): waiting is in vain.
            raise SlurmkitError("job %s can never start: its --dependency can never be met (a job it waits for "
                                "ended the wrong way); 'slurmkit why %s' says which, 'slurmkit cancel %s' removes "
                                "it" % (ref, ref, ref))
        if deadline is not None and clock.monotonic() + delay > deadline:
            raise WaitTimeoutError("job %s is still %s after %ss" % (ref, job.state, timeout), job=job)
        clock.sleep(delay)
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
    from slurmkit.session import reach

    cluster = session.site.cluster(ref.cluster)
    try:
        leaves = topology.leaves_of(session.layout(cluster), job.nodelist) if job.nodelist else []
    except SlurmkitError:
        leaves = []
    note = None
    if check_output and job.stdout:
        try:
            local = reach(cluster) == "local"
            note = output_note(job.stdout, job.state, lambda p: output_exists(session, ref.cluster, p),
                               reason=job.reason, signal=job.signal, refuses=_refuses_new_files if local else None)
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
            note = output_note(job.stdout, job.state, reason=job.reason, signal=job.signal,
                               refuses=_refuses_new_files)
            if note:
                notes.append("%s: %s" % (ref, note))
    return notes
