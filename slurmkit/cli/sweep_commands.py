"""Sweep commands: ``sweep submit|status|rerun|cancel|throttle|list``, and ``submit --sweep``.

Thin commands over :mod:`slurmkit.sweep.submission`, :mod:`~slurmkit.sweep.state` and
:mod:`~slurmkit.sweep.actions`.  ``submit`` takes the sweep
options through :func:`sweep_options` (the same decorator as ``sweep
submit``) and hands a sweep to :func:`submit_sweep`.  The commands after
submission open the site the sweep was submitted with unless ``--site``
names another.
"""

import functools

import click

from slurmkit.cli.options import (COMMAND_CONTEXT, CONTEXT, StrictInt, cluster_option, job_options, job_spec_from,
                                  json_option, log_options, option_group, print_json, requeue_options, site_option,
                                  text_value, timed, warn, when_options)

SWEEP_OPTIONS = [
    click.option("--sweep", "sweep", multiple=True, metavar="NAME=V1,V2|NAME=A..B", callback=text_value,
                 help="A parameter of the sweep and its values (repeatable: the grid is every combination). "
                      "A..B is every integer from A to B. {NAME} in the command takes each point's value; every "
                      "task also gets it as $SLURMKIT_SWEEP_NAME."),
    click.option("--sweep-file", metavar="FILE.jsonl|FILE.csv", callback=text_value,
                 help="Points as rows: JSON lines of {name: value} objects, or CSV with a header of names "
                      "(crossed with any --sweep)."),
    click.option("--sweep-name", metavar="NAME", callback=text_value,
                 help="Name of the sweep (default: the job name); with the command and --env it makes the "
                      "sweep's id, so submitting again continues the same sweep."),
    click.option("--sweep-dir", metavar="DIR", callback=text_value,
                 help="Where each point's output and checkpoint directory go (default: ./slurmkit-sweeps/ID)."),
    click.option("--max-running", type=StrictInt(min=1), metavar="N",
                 help="At most N tasks of the sweep at once (the array's %N throttle, split between clusters)."),
    click.option("--canary", type=StrictInt(min=1), metavar="K",
                 help="Start with one task at a time; widen when one passes; hold the rest when the first K "
                      "failures share an exit status."),
]


sweep_options = option_group(SWEEP_OPTIONS, "The sweep options, for ``sweep submit`` and ``submit``.")


def sweeping(kwargs) -> bool:
    """Whether ``submit`` was given a sweep (else its other sweep options must be unused)."""
    if kwargs.get("sweep") or kwargs.get("sweep_file"):
        return True
    given = [name for name in ("sweep_name", "sweep_dir", "max_running", "canary") if kwargs.get(name) is not None]
    if given:
        from slurmkit.errors import UsageError

        raise UsageError("--%s applies to sweeps: add --sweep NAME=VALUES or --sweep-file FILE"
                         % given[0].replace("_", "-"))
    return False


def pop_sweep_options(kwargs) -> dict:
    return {name: kwargs.pop(name, None) for name in ("sweep", "sweep_file", "sweep_name", "sweep_dir",
                                                      "max_running", "canary")}


def requeue_budget(auto_requeue, max_restarts, transient_exit, conventions, hang_timeout, hang_startup=None):
    """The requeue budget of a job or sweep submitted with --auto-requeue (None without it)."""
    if auto_requeue:
        from slurmkit.requeue.tracking import budget_overrides

        return budget_overrides(max_restarts, transient_exit, conventions, hang_timeout, hang_startup)
    if max_restarts is not None or transient_exit or conventions or hang_timeout is not None \
            or hang_startup is not None:
        from slurmkit.errors import UsageError

        raise UsageError("--max-restarts, --checkpoint-convention, --transient-exit, --hang-timeout and "
                         "--hang-startup need --auto-requeue")
    return None


def submit_sweep(session, cluster, partition, sweep_kwargs, spec, as_json, not_with=None, requeue=None, prefer=None,
                 deadline=None):
    """Submit a sweep: the sweep id on stdout (or the JSON report), what was submitted on stderr.

    ``not_with``: ``submit``'s options that a sweep does not take, by name, as given; ``requeue``: the
    requeue budget with ``--auto-requeue`` (each task tracked by the requeue daemon); ``prefer`` and
    ``deadline`` (text): the window the sweep goes to.
    """
    from slurmkit.errors import UsageError
    from slurmkit.sweep import submission

    given = [name for name, value in (not_with or {}).items() if value]
    if given:
        raise UsageError("--%s does not apply to a sweep%s" % (given[0].replace("_", "-"), {
            "checkpoint_dir": ": each point checkpoints into its own directory (SLURMKIT_CHECKPOINT_DIR, "
                              "<sweep dir>/points/<id>/checkpoint)",
            "accel": ": name the clusters with --cluster and the partition with -p",
            "explain": "", "dry_run": ": render one task's job with 'slurmkit render'",
        }.get(given[0], "")))
    when = None
    if timed(prefer, deadline, requeue is not None, "a task") and deadline is not None:
        import datetime

        from slurmkit.federation.windows import parse_deadline

        when = parse_deadline(deadline, datetime.datetime.now())

    request = submission.SweepRequest(spec=spec, grid=tuple(sweep_kwargs.get("sweep") or ()),
                                      points_file=sweep_kwargs.get("sweep_file"), name=sweep_kwargs.get("sweep_name"),
                                      cluster=cluster, partition=partition, sweep_dir=sweep_kwargs.get("sweep_dir"),
                                      max_running=sweep_kwargs.get("max_running"), canary=sweep_kwargs.get("canary"),
                                      auto_requeue=requeue, prefer=prefer, deadline=when)
    report = submission.submit(session, request)
    warn(report.warnings)
    if as_json:
        print_json(report.to_dict())
        return
    click.echo(report.sweep_id)
    for array in report.arrays:
        click.echo("%s %s: %d task(s), array %s" % (
            {"new": "submitted", "rerun": "resubmitted", "requeue": "requeued"}[array.kind], array.ref, array.tasks,
            array.indices), err=True)
    skipped = []
    if report.completed:
        skipped.append("%d completed earlier" % report.completed)
    if report.queued:
        skipped.append("%d still queued or running" % report.queued)
    click.echo("sweep %s: %d point(s), %d submitted%s; points in %s; 'slurmkit sweep status %s' follows it"
               % (report.sweep_id, report.points, sum(a.tasks for a in report.arrays),
                  " (skipped: %s)" % ", ".join(skipped) if skipped else "", report.sweep_dir, report.sweep_id),
               err=True)
    if requeue is not None:
        click.echo("its tasks are tracked: the requeue daemon (slurmkit daemon run) restarts node failures, "
                   "preemptions and time limits of single tasks from their checkpoints", err=True)


@click.group("sweep", context_settings=CONTEXT)
def sweep():
    """Hyper-parameter sweeps as job arrays: submit, follow, rerun what failed.

    \b
    Examples:
      slurmkit submit --sweep lr=1e-3,3e-4,1e-4 --sweep seed=0..4 -- python train.py --lr {lr} --seed {seed}
      slurmkit sweep status train-1a2b3c4d --failed
      slurmkit sweep rerun train-1a2b3c4d --failed
      slurmkit sweep cancel train-1a2b3c4d
    """


@sweep.command("submit", context_settings=COMMAND_CONTEXT)
@site_option
@cluster_option(metavar="NAME|auto|A,B",
                help="Cluster of the site; 'auto' (all) or a comma list splits the points between the clusters "
                     "in proportion to what each can run soonest.")
@sweep_options
@when_options
@requeue_options
@job_options
@json_option
def sweep_submit(site, cluster, as_json, prefer, deadline, auto_requeue, max_restarts, conventions, transient_exit,
                 hang_timeout, hang_startup, **kwargs):
    """Submit a sweep as job arrays; prints the sweep id (same as 'slurmkit submit --sweep ...').

    \b
    Example:
      slurmkit sweep submit --sweep lr=1e-3,3e-4 --sweep seed=0..4 --max-running 8 \\
          -p gpu --gpus-per-node 1 -- python train.py --lr {lr} --seed {seed}

    Options end at the first word of the command: everything after it is the command's.
    """
    sweep_kwargs = pop_sweep_options(kwargs)
    if not (sweep_kwargs["sweep"] or sweep_kwargs["sweep_file"]):
        from slurmkit.errors import UsageError

        raise UsageError("a sweep needs --sweep NAME=VALUES (repeatable) or --sweep-file FILE")
    partition = kwargs.pop("partition")
    requeue = requeue_budget(auto_requeue, max_restarts, transient_exit, conventions, hang_timeout, hang_startup)
    with _open_session(site) as session:
        submit_sweep(session, cluster, partition, sweep_kwargs, job_spec_from(kwargs), as_json, requeue=requeue,
                     prefer=prefer, deadline=deadline)


class _open_session:
    """The site named by --site, else the one the sweep was submitted with."""

    def __init__(self, site, sweep=None):
        from slurmkit.session import Session
        from slurmkit.site import find_site

        if not site and sweep is not None:
            site = sweep.site
        from slurmkit.cli.options import require_site

        self.session = Session(find_site(require_site(site)))

    def __enter__(self):
        return self.session

    def __exit__(self, *exc):
        self.session.close()


def _with_sweep(func):
    """Open the journal, find the sweep (id or unique prefix) and its site; close both afterwards."""

    @functools.wraps(func)
    def wrapper(site, sweep_id, **kwargs):
        from slurmkit.sweep.journal import Journal

        with Journal() as journal:
            record = journal.find(sweep_id)
            with _open_session(site, record) as session:
                return func(session, journal, record, **kwargs)

    return wrapper


def _point_dict(status, point, tail=None):
    array = status.array_of(point)
    data = {"point": point.point_id, "values": point.values, "state": point.state, "exit_code": point.exit_code,
            "signal": point.signal, "reason": point.reason, "task": status.task_name(point) or None,
            "cluster": array.cluster if array else None, "nodes": point.nodes, "restarts": point.restarts}
    if tail is not None:
        data["error_tail"] = tail
    return data


def _ended(point) -> str:
    if point.signal is not None:
        return "signal %d" % point.signal
    if point.exit_code is not None:
        return "exit %d" % point.exit_code
    return ""


@sweep.command("status", context_settings=CONTEXT)
@site_option
@click.option("--failed", is_flag=True, help="Every point that ended without completing (failed, timed out, "
                                             "cancelled ...), with its values, exit status or signal, reason and "
                                             "the tail of its error output.")
@click.option("--output", "-o", "output", metavar="FILE.jsonl", callback=text_value,
              help="With --failed: write those points as a points file (for --sweep-file); '-' for stdout.")
@json_option
@click.argument("sweep_id", metavar="ID")
@_with_sweep
def sweep_status(session, journal, record, failed, output, as_json):
    """A sweep's tasks by state (one query per cluster), and what failed.

    \b
    Examples:
      slurmkit sweep status train-1a2b3c4d
      slurmkit sweep status train-1a2b3c4d --failed --output failed.jsonl
    """
    from slurmkit.errors import UsageError
    from slurmkit.sweep import actions
    from slurmkit.sweep import state

    if output and not failed:
        raise UsageError("--output writes the failed points: add --failed")
    status = state.status(session, record.id, journal=journal)
    warn("cluster %s not reachable: %s (its tasks are shown as last seen)" % kv for kv in status.unreachable.items())
    verdicts = state.canary_verdicts(session, status)
    bad = [p for p in status.points if p.state in state.FAILED_STATES]
    shown = bad if failed else bad[:10]
    tails = state.error_tails(session, status, [p.point_id for p in shown])
    if output:
        count = actions.write_points_file(output, bad)
        if output != "-":
            click.echo("wrote %d failed point(s) to %s" % (count, output), err=True)
        return
    if as_json:
        points = bad if failed else status.points
        print_json({"sweep": record.id, "name": record.name, "sweep_dir": record.sweep_dir,
                    "parameters": record.params, "counts": status.counts(), "total": len(status.points),
                    "arrays": [{"id": "%s:%s" % (a.cluster, a.job_id), "cluster": a.cluster, "job_id": a.job_id,
                                "indices": a.indices, "throttle": a.throttle, "phase": a.phase, "note": a.note}
                               for a in status.arrays],
                    "points": [_point_dict(status, p, tails.get(p.point_id) if p.state in state.FAILED_STATES
                                           else None) for p in points],
                    "canary_holds": verdicts, "unreachable": status.unreachable})
        return
    click.echo("sweep %s: %d point(s) in %s" % (record.id, len(status.points), record.sweep_dir))
    click.echo("  " + "  ".join("%s %d" % kv for kv in status.counts().items()))
    live = [a for a in status.arrays if a.phase == "submitted"]
    if live:
        click.echo("  arrays: " + ", ".join("%s:%s (%s%s)" % (a.cluster, a.job_id, a.indices,
                                                              "%%%d" % a.throttle if a.throttle else "")
                                            for a in live[-12:]) + (" ..." if len(live) > 12 else ""))
    for ref, verdict in verdicts.items():
        click.echo("  canary held %s: %s" % (ref, verdict))
    if bad:
        click.echo("ended without completing: %d point(s)%s" % (len(bad), "" if failed or len(bad) <= 10 else
                                                                " (the first 10; --failed lists all)"))
        for p in shown:
            values = " ".join("%s=%s" % kv for kv in p.vals)
            click.echo("  %s  %s  %s %s  %s%s" % (p.point_id, values, p.state, _ended(p), status.task_name(p),
                                                  "  (%s)" % p.reason if p.reason else ""))
            for line in (tails.get(p.point_id) or "").splitlines():
                click.echo("      | %s" % line)
        click.echo("rerun them: slurmkit sweep rerun %s --failed" % record.id)


@sweep.command("logs", context_settings=CONTEXT)
@site_option
@log_options
@click.argument("sweep_id", metavar="ID")
@click.argument("point_ref", metavar="POINT")
@_with_sweep
def sweep_logs(session, journal, record, point_ref, follow, lines, err, rank, attempt, journal_path):
    """A sweep point's output (POINT: its id, a unique prefix, or #N for the N-th point): its program's
    output.log (--err: error.log), every attempt's, followed with -f while its task runs.

    \b
    Examples:
      slurmkit sweep logs train-1a2b3c4d 3f9a
      slurmkit sweep logs -f train-1a2b3c4d '#7'
    """
    from slurmkit.cli.views import show_logs
    from slurmkit.observe import logs
    from slurmkit.sweep import state

    if rank is not None or attempt is not None:
        raise click.UsageError("a point's output.log holds every attempt of its one task: --rank and --attempt "
                               "do not apply (slurmkit logs CLUSTER:ARRAY_TASK reads Slurm's own files)")
    cluster, array_id, index, point_id = state.point_task(journal, record, point_ref)
    ref = logs.LogRef(cluster, array_id, index)
    stream = "err" if err else "out"
    located = logs.locate_file(session, ref, state.point_log(record, point_id, stream), stream)
    return show_logs(session, ref, follow, lines, stream, rank, attempt, journal_path, located=located)


@sweep.command("rerun", context_settings=CONTEXT)
@site_option
@click.option("--failed", "failed", is_flag=True, default=True,
              help="The points that ended without completing (the default).")
@click.option("--points", "point_ids", metavar="ID[,ID...]", callback=text_value,
              help="These points (ids or unique prefixes, as 'sweep status' shows them) instead.")
@json_option
@click.argument("sweep_id", metavar="ID")
@_with_sweep
def sweep_rerun(session, journal, record, failed, point_ids, as_json):
    """Run failed points again, each at its own index: Slurm's own requeue while it still has the
    task, else a sparse array of the same points table.  Releases what a canary held.

    \b
    Examples:
      slurmkit sweep rerun train-1a2b3c4d
      slurmkit sweep rerun train-1a2b3c4d --points 9f2c01,77ab3e
    """
    from slurmkit.sweep import actions

    ids = [p.strip() for p in (point_ids or "").split(",") if p.strip()]
    report = actions.rerun(session, record.id, failed=not ids, point_ids=ids, journal=journal)
    warn(report.warnings)
    warn("point %s is still queued or running; not rerun" % p for p in report.skipped_live)
    if as_json:
        print_json(report.to_dict())
        return
    for array in report.arrays:
        click.echo("%s %s: %d task(s), array %s" % ("requeued" if array.kind == "requeue" else "resubmitted",
                                                    array.ref, array.tasks, array.indices))
    for ref in report.released:
        click.echo("released %s" % ref)
    if not report.arrays and not report.released:
        click.echo("nothing to rerun in sweep %s" % record.id, err=True)


@sweep.command("cancel", context_settings=CONTEXT)
@site_option
@click.argument("sweep_id", metavar="ID")
@_with_sweep
def sweep_cancel(session, journal, record):
    """Cancel every queued or running task of a sweep (one scancel per cluster).

    \b
    Example:
      slurmkit sweep cancel train-1a2b3c4d
    """
    from slurmkit.sweep import actions

    report = actions.cancel(session, record.id, journal=journal)
    warn(report.warnings)
    if report.cancelled:
        click.echo("cancelled %d task(s) of sweep %s: %s" % (report.tasks, record.id, ", ".join(report.cancelled)))
    else:
        click.echo("sweep %s has no queued or running tasks" % record.id, err=True)


@sweep.command("move", context_settings=CONTEXT)
@site_option
@click.option("--from", "source", required=True, metavar="CLUSTER", callback=text_value,
              help="The cluster whose pending tasks move.")
@click.option("--to", "target", metavar="NAME|auto|A,B", callback=text_value,
              help="Where they go (default: every other cluster of the site, split as a new submission is).")
@click.option("--partition", "-p", metavar="NAME", callback=text_value,
              help="Partition there (default: each cluster's default).")
@json_option
@click.argument("sweep_id", metavar="ID")
@_with_sweep
def sweep_move(session, journal, record, source, target, partition, as_json):
    """Move a sweep's pending tasks off a cluster that stays blocked: cancelled there, and only those
    Slurm confirms ended are submitted elsewhere (never two copies of a point at once).

    \b
    Example:
      slurmkit sweep move train-1a2b3c4d --from beta --to alpha
    """
    from slurmkit.sweep import actions

    report = actions.move(session, record.id, source, target, partition, journal=journal)
    warn(report.warnings)
    if as_json:
        print_json(report.to_dict())
        return
    for array in report.arrays:
        click.echo("submitted %s: %d task(s), array %s" % (array.ref, array.tasks, array.indices))
    click.echo("moved %d pending point(s) off %s" % (len(report.moved), source), err=True)


@sweep.command("throttle", context_settings=CONTEXT)
@site_option
@click.argument("sweep_id", metavar="ID")
@click.argument("max_running", type=StrictInt(min=1), metavar="N")
@_with_sweep
def sweep_throttle(session, journal, record, max_running):
    """Let at most N tasks of the sweep run at once from now on (split between its live arrays).

    \b
    Example:
      slurmkit sweep throttle train-1a2b3c4d 16
    """
    from slurmkit.sweep import actions

    for ref, share in actions.throttle(session, record.id, max_running, journal=journal).items():
        click.echo("%s: at most %d at once" % (ref, share))


@sweep.command("eff", context_settings=CONTEXT)
@site_option
@json_option
@click.argument("sweep_id", metavar="ID")
@_with_sweep
def sweep_eff(session, journal, record, as_json):
    """What the sweep used, summed over its points and every attempt: GPU-hours, kWh (and where they come
    from), cost and gCO2e, from each cluster's accounting.

    \b
    Examples:
      slurmkit sweep eff train-1a2b3c4d
      slurmkit sweep eff --json train-1a2b3c4d
    """
    from slurmkit.sweep.usage import sweep_usage

    result = sweep_usage(session, journal, record.id)
    if as_json:
        print_json(result.to_dict())
        return
    for line in result.lines():
        click.echo(line)


@sweep.command("list", context_settings=CONTEXT)
@json_option
def sweep_list(as_json):
    """The sweeps in the journal (no Slurm query), newest last.

    \b
    Example:
      slurmkit sweep list --json
    """
    import datetime

    from slurmkit.sweep.journal import Journal

    with Journal() as journal:
        rows = [(s, journal.points(s.id)) for s in journal.sweeps()]
    if as_json:
        print_json([{"sweep": s.id, "name": s.name, "points": len(p), "sweep_dir": s.sweep_dir, "site": s.site,
                     "created": s.created, "parameters": s.params} for s, p in rows])
        return
    for s, p in rows:
        when = datetime.datetime.fromtimestamp(s.created).strftime("%Y-%m-%d %H:%M")
        done = sum(1 for x in p if x.state == "COMPLETED")
        click.echo("%s  %s  %d/%d completed (as last seen)  %s" % (s.id, when, done, len(p), s.sweep_dir))
