"""Several independent clusters as one.

- ``survey``: every cluster's state in one round trip each (``slurmkit clusters``);
- ``planner``: place a job on the cluster where it starts soonest, failing over;
- ``cooldown``: skip clusters that keep failing for a while.

:func:`submit_anywhere` is the one entry point of ``slurmkit submit``; it
imports the planner only when a job really has several candidate clusters,
so a plain single-cluster submission stays cheap.
"""

from typing import NamedTuple, Optional


class SubmitOutcome(NamedTuple):
    """What :func:`submit_anywhere` did: the submission (None when only planning)
    and, for a multi-cluster submission, the placement with every candidate."""

    submission: Optional[object]          # a jobs.Submission
    placement: Optional[object] = None      # a federation.planner.Placement

    def to_dict(self):
        if self.placement is not None:
            return self.placement.to_dict()
        return self.submission.to_dict()


def is_federated(cluster: Optional[str], accel: Optional[str] = None, plan_only: bool = False,
                 prefer: Optional[str] = None, deadline: Optional[str] = None) -> bool:
    """Whether a submission goes through the federation planner.

    ``--cluster auto`` or a comma list, accelerator search (``--accel``),
    planning (``--explain``/``--dry-run``) and placement in time
    (``--prefer cheap|green``, ``--deadline``) need the candidates of several
    clusters or windows; a single named (or the default) cluster does not.
    """
    return bool(plan_only or accel or (prefer not in (None, "soon")) or deadline is not None
                or (cluster and (cluster.strip() == "auto" or "," in cluster)))


def check_held_or_chained(spec, cluster: Optional[str], accel: Optional[str] = None, prefer: Optional[str] = None,
                          deadline=None) -> None:
    """Refuse what a job's own ``--begin`` or ``--dependency`` cannot be combined with.

    ``--begin`` is a start time of the user's, and ``--prefer cheap|green`` and ``--deadline`` choose the start
    themselves.  ``--dependency`` names job ids, which mean something on one cluster only: the job must go to
    that cluster, not to the best of several.
    """
    from slurmkit.errors import UsageError

    if spec.begin is not None and (prefer in ("cheap", "green") or deadline is not None):
        raise UsageError("--begin holds the job until a time of yours, and --prefer cheap|green and --deadline "
                         "choose its start themselves: give one or the other")
    if spec.dependency is not None and is_federated(cluster, accel):
        raise UsageError("--dependency names jobs of one cluster: send the job there with --cluster NAME (not "
                         "'auto', a list or --accel)")


def submit_anywhere(session, spec, cluster: Optional[str] = None,
                    partition: Optional[str] = None, accel: Optional[str] = None,
                    plan_only: bool = False, dry_run: bool = False, prefer: Optional[str] = None,
                    deadline: Optional[str] = None, clock=None) -> SubmitOutcome:
    """The one entry point of ``slurmkit submit``: one cluster, or the best of several.

    ``cluster`` is what the user wrote: a name, ``auto`` (every cluster of the
    site) or ``a,b``.  ``plan_only`` asks for the candidates (``--explain``);
    ``dry_run`` plans and submits nothing.  ``prefer`` (soon, cheap, green)
    and ``deadline`` (text: ``2026-12-05T08:00``, ``08:00``, ``+8h``) place
    the job in place and time (:mod:`slurmkit.federation.windows`).  Only a
    multi-cluster submission imports the federation planner.
    """
    check_held_or_chained(spec, cluster, accel, prefer, deadline)
    if not is_federated(cluster, accel, plan_only or dry_run, prefer, deadline):
        from slurmkit import jobs

        return SubmitOutcome(jobs.submit(session, spec, cluster, partition))
    from slurmkit.federation import planner

    names = None if cluster is None or cluster.strip() == "auto" else [c.strip() for c in cluster.split(",")]
    if names is not None and not all(names):
        # "a,,b" or "," is a slip: read as "every cluster" it would send the job anywhere.
        from slurmkit.errors import UsageError

        raise UsageError("--cluster %r has an empty name; give cluster names separated by commas, or 'auto'"
                         % cluster)
    wanted = planner.parse_accel(accel)
    if accel is not None and (not wanted or len(wanted) != len(accel.split(","))):
        from slurmkit.errors import UsageError

        raise UsageError("--accel %r has an empty name; give models or vendors separated by commas, e.g. h100,a100"
                         % accel)
    import time
    from datetime import datetime

    clock = clock or time
    when = None
    if deadline is not None:
        from slurmkit.federation.windows import parse_deadline

        when = parse_deadline(deadline, datetime.fromtimestamp(clock.time()))
    placement = planner.submit_best(session, spec, names, partition, wanted, dry_run=dry_run, clock=clock,
                                    prefer=prefer or "soon", deadline=when)
    return SubmitOutcome(placement.submission, placement)
