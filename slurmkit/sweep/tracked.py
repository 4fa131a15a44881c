"""Sweep points under the requeue daemon's care (``submit --sweep ... --auto-requeue``): registering, superseding.

Each task of such a sweep is one tracked job of the requeue journal
(``requeue.db``, the user's default one), named ``SWEEP/POINT``: its
checkpoint directory is the point's own (``<sweep dir>/points/<id>/checkpoint``),
its budget the submission's (``--max-restarts``, ``--transient-exit``,
``--checkpoint-convention``, ``--hang-timeout``: :func:`slurmkit.requeue.tracking.budget_overrides`), and its spec carries ``sweep: {id, point}``,
by which the daemon (:mod:`slurmkit.sweep.autorequeue`) knows to poll it
through the sweep and to restart it as a one-task array of the sweep.  The
first attempt is registered once Slurm has the array (attempt 1 is already
``submitted``: task ``A_I``).

A point placed again by the user (``sweep rerun``, a resubmission, ``sweep
move``) or cancelled (``sweep cancel``) stops the tracking of its earlier
placement, under the sweep's lock, so the daemon never restarts a point
that runs elsewhere or that a person stopped.
"""

import os
from typing import Iterable, List, Optional, Tuple

# The key of a tracked job's spec that names its sweep and point.
MARK = "sweep"


def point_of(tracked) -> Optional[Tuple[str, str]]:
    """(sweep id, point id) of a tracked job that is a sweep's point; None for any other job."""
    mark = tracked.spec.get(MARK) if isinstance(tracked.spec, dict) else None
    if not isinstance(mark, dict):
        return None
    return mark.get("id"), mark.get("point")


def checkpoint_dir(sweep_dir: str, point_id: str) -> str:
    return os.path.join(sweep_dir, "points", point_id, "checkpoint")


def register(sweep, *, cluster: str, partition: str, array_token: str, job_id: str,
             rows: Iterable[Tuple[int, str]], spec: dict, requeue_budget: dict) -> List[int]:
    """Track the tasks of a submitted array (``rows``: (index, point id)), in one transaction."""
    from slurmkit.requeue.journal import Journal

    jobs = [dict(name="%s/%s" % (sweep.id, point_id), site=sweep.site, cluster=cluster, partition=partition,
                 spec=dict(spec, **{MARK: {"id": sweep.id, "point": point_id}}),
                 checkpoint_dir=checkpoint_dir(sweep.sweep_dir, point_id), budget=requeue_budget,
                 token="%s-%d" % (array_token, index), job_id="%s_%d" % (job_id, index))
            for index, point_id in rows]
    if not jobs:
        return []
    journal = Journal()
    try:
        return journal.track_submitted(jobs)
    finally:
        journal.close()


def supersede(sweep_id: str, point_ids: Optional[Iterable[str]], reason: str) -> int:
    """Stop tracking the earlier placements of these points (None: every point of the sweep); how many.

    Nothing is opened or created for a user who never used the requeue journal.
    """
    from slurmkit.requeue.journal import Journal, default_path

    if not os.path.exists(default_path()):
        return 0
    wanted = None if point_ids is None else set(point_ids)
    journal = Journal()
    try:
        ids = []
        for job in journal.jobs(state="active"):
            where = point_of(job)
            if where is not None and where[0] == sweep_id and (wanted is None or where[1] in wanted):
                ids.append(job.id)
        if ids:
            journal.stop_many(ids, reason)
        return len(ids)
    finally:
        journal.close()
