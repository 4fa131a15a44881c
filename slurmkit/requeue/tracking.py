"""Jobs under the daemon's care: registering a submission, each attempt's job script, stopping.

``slurmkit submit --auto-requeue`` calls :func:`submit_tracked`: the job is
written to the journal and its first attempt's intent (with its token) is
written *before* sbatch runs, the job id after; a crash in between is
reconciled by the daemon through the token.  Every attempt is the same job
spec plus what the daemon decides: the attempt number, the checkpoint to
resume from, the nodes to avoid.
"""

import os
from typing import Collection, Optional, Sequence, Tuple

from slurmkit.errors import UsageError
from slurmkit.requeue.journal import Attempt, Journal, Tracked

DEFAULT_SIGNAL_GRACE_S = 120      # USR1 this long before the time limit: time to write a checkpoint


def spec_to_plain(spec) -> dict:
    data = spec._asdict()
    data["command"] = list(spec.command)
    data["env"] = dict(spec.env)
    data["exclude"] = list(spec.exclude)
    data["mounts"] = list(spec.mounts)
    data["setup"] = list(spec.setup)
    for per_attempt in ("token", "checkpoint_dir", "attempt", "resume_from"):
        data.pop(per_attempt, None)
    return data


def spec_from_plain(data: dict):
    from slurmkit.script.render import JobSpec

    values = dict(data)
    values["command"] = tuple(values["command"])
    values["exclude"] = tuple(values.get("exclude") or ())
    values["mounts"] = tuple(values.get("mounts") or ())
    values["setup"] = tuple(values.get("setup") or ())
    known = set(JobSpec._fields)
    return JobSpec(**{k: v for k, v in values.items() if k in known})


def attempt_spec(tracked: Tracked, attempt: Attempt, partition_nodes: Optional[int] = None,
                 cluster_nodes: Optional[Collection[str]] = None):
    """The job spec of one attempt: the tracked spec plus attempt, checkpoint and exclusions.

    Excluded nodes accumulate over failures; with ``partition_nodes`` known,
    only the most recent ones are kept that still leave the job room to run
    (a job must never become impossible because every node once failed).
    With ``cluster_nodes`` (the nodes of the cluster the attempt goes to, when
    the job has run or goes elsewhere than where it was submitted), only the
    excluded nodes that cluster has are kept: node names are a cluster's own,
    and Slurm refuses a job excluding a node it does not know ("Invalid node
    name specified").
    """
    spec = spec_from_plain(tracked.spec)
    if cluster_nodes is not None:
        spec = spec._replace(exclude=tuple(n for n in spec.exclude if n in cluster_nodes))
    excluded = [n for n in tracked.excluded if n not in spec.exclude
                and (cluster_nodes is None or n in cluster_nodes)]
    if partition_nodes is not None:
        room = max(0, partition_nodes - spec.nodes - len(spec.exclude))
        # The newest `room` of them (all when fewer: a negative start would keep only the last).
        excluded = excluded[max(0, len(excluded) - room):] if room else []
    if attempt.number > 1:
        # The user's --begin and --dependency held the first attempt; a restart starts now (and may go to
        # another cluster, where the dependency's job ids mean other jobs).
        spec = spec._replace(begin=None, dependency=None)
    return spec._replace(token=attempt.token, checkpoint_dir=tracked.checkpoint_dir, attempt=attempt.number,
                         resume_from=attempt.resume_from, exclude=tuple(spec.exclude) + tuple(excluded))


def submit_attempt(session_for, tracked: Tracked, attempt: Attempt, cluster: str) -> Tuple[str, str]:
    """Submit one attempt on ``cluster``; (cluster, job id).  Used by the daemon."""
    from slurmkit import jobs

    session = session_for(tracked.site)
    partition = tracked.partition if cluster == tracked.cluster else None
    part = session.site.partition(session.site.cluster(cluster), partition)
    known = None
    if cluster != tracked.cluster or any(a.cluster != cluster for a in tracked.attempts):
        # The exclusions may name another cluster's nodes: one query for this one's (a move is rare).
        known = {node.name for node in session.backend(cluster).nodes()}
    submission = jobs.submit(session, attempt_spec(tracked, attempt, part.max_nodes, known), cluster, partition)
    return submission.ref.cluster, submission.ref.job_id


def budget_overrides(max_restarts: Optional[int] = None, transient_exit_codes: Sequence[int] = (),
                     checkpoint_conventions: Sequence[str] = (), hang_timeout: Optional[str] = None,
                     hang_startup: Optional[str] = None) -> dict:
    """A tracked job's own budget and settings, as the journal keeps them (``submit --auto-requeue``
    and each point of ``sweep submit --auto-requeue``); ``hang_timeout`` and ``hang_startup`` in Slurm's
    time format."""
    out = {}
    if max_restarts is not None:
        if max_restarts < 0:
            raise UsageError("--max-restarts must be 0 or more")
        out["max_restarts"] = int(max_restarts)
    if transient_exit_codes:
        out["transient_exit_codes"] = sorted(int(c) for c in transient_exit_codes)
    if checkpoint_conventions:
        out["checkpoint_conventions"] = list(checkpoint_conventions)
    if hang_timeout is not None:
        out["hang_timeout_s"] = _duration("--hang-timeout", hang_timeout, "0: never")
    if hang_startup is not None:
        out["hang_startup_s"] = _duration("--hang-startup", hang_startup, "0: the hang timeout")
    return out


def _duration(option: str, value: str, zero: str) -> int:
    """Seconds of a duration given as for --time (UNLIMITED is not one)."""
    from slurmkit.times import TIME_FORMATS_TEXT, slurm_time_seconds

    try:
        seconds = slurm_time_seconds(value)
    except ValueError:
        seconds = -1
    if seconds is None or seconds < 0:
        raise UsageError("%s %s: give a time as for --time (%s; %s), e.g. 30 (minutes) or 0:45 (seconds)"
                         % (option, value, TIME_FORMATS_TEXT.replace(" or UNLIMITED", ""), zero))
    return seconds


def submit_tracked(session, spec, journal: Journal, cluster: Optional[str] = None, partition: Optional[str] = None,
                   checkpoint_dir: Optional[str] = None, budget: Optional[dict] = None):
    """Register the job for the requeue daemon and submit its first attempt.

    Returns (tracked id, jobs.Submission).  ``checkpoint_dir`` defaults to
    ``<site checkpoint root>/<job name>-<tracked id>``; it must be on a
    filesystem the job's nodes share (the daemon reads it too).  ``budget``:
    :func:`budget_overrides`.
    """
    from slurmkit import jobs

    site = session.site
    target = site.cluster(cluster)
    part = site.partition(target, partition)
    name = spec.name or _default_name(spec)
    budget = dict(budget or {})
    directory = checkpoint_dir or os.path.join(site.requeue.checkpoint_root or os.path.join(os.getcwd(),
                                                                                            "checkpoints"), name)
    directory = os.path.abspath(os.path.expanduser(directory))
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise UsageError("--checkpoint-dir %s cannot be created: %s" % (directory, exc.strerror)) from None
    shared = [c for c in site.requeue.shared_checkpoint_clusters if c != target.name]
    tracked_id = journal.track(name=name, site=site.path, cluster=target.name, partition=part.name,
                               spec=spec_to_plain(spec), checkpoint_dir=directory,
                               shared_clusters=shared, budget=budget)
    token = spec.token or jobs.new_token()
    attempt_id = journal.begin_attempt(tracked_id, 1, token, target.name)
    tracked = journal.job(tracked_id)
    submission = jobs.submit(session, attempt_spec(tracked, tracked.attempts[0]), target.name, part.name)
    journal.submitted(attempt_id, submission.ref.job_id, cluster=submission.ref.cluster)
    return tracked_id, submission


def _default_name(spec) -> str:
    from slurmkit.script.render import launcher_command

    return launcher_command(spec.command).name


def stop_tracking(journal: Journal, session_for, tracked_id: int, cancel: bool = False) -> Tracked:
    """End tracking (the daemon leaves the job alone from now on); optionally cancel its live attempt."""
    tracked = journal.job(tracked_id)
    if tracked.state != "active":
        raise UsageError("job %d is not tracked any more (%s)" % (tracked_id, tracked.state))
    current = tracked.current
    if cancel and current is not None and current.job_id and current.phase == "submitted":
        from slurmkit import jobs

        session = session_for(tracked.site)
        jobs.cancel(session, [jobs.JobRef(current.cluster, current.job_id)])
    journal.stop(tracked_id, "stopped by the user" + (" (cancelled)" if cancel else ""))
    return journal.job(tracked_id)

