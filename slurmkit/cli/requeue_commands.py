"""Requeue commands: ``daemon run|once|jobs [stop]``.  Thin commands over :mod:`slurmkit.requeue`.

``slurmkit daemon jobs`` was the tracked-jobs listing's first name; beside ``status``
(the user's jobs on every cluster) and the ``jobs`` library module it made a
newcomer guess which jobs it meant, so it lives under ``daemon`` now, and the
old name stays as a hidden alias that says so.
"""

import click

from slurmkit.cli.commands import MovedGroup
from slurmkit.cli.options import CONTEXT, StrictFloat, StrictInt, json_option, print_json

_JOURNAL = click.option("--journal", metavar="FILE", envvar="SLURMKIT_JOURNAL",
                        help="The requeue journal (default: $SLURMKIT_STATE_DIR or ~/.local/state/slurmkit/"
                             "requeue.db).")


@click.group(context_settings=CONTEXT)
def daemon():
    """The requeue daemon: restarts tracked jobs (submit --auto-requeue) from their latest checkpoint.

    \b
    Examples:
      slurmkit daemon run                 # foreground; systemd units: systemd/ in the repository
      slurmkit daemon once                # one cycle, for cron
      slurmkit daemon jobs                # what it tracks, and why each was (not) restarted
    """


@daemon.command("run", context_settings=CONTEXT)
@_JOURNAL
@click.option("--interval", type=StrictFloat(min=1), default=5.0, show_default=True, metavar="SECONDS",
              help="Shortest time between polls (right after a change or near a job's time limit).")
@click.option("--max-interval", type=StrictFloat(min=1), default=60.0, show_default=True, metavar="SECONDS",
              help="Longest time between polls while nothing changes.")
def daemon_run(journal, interval, max_interval):
    """Run in the foreground until SIGTERM; SIGHUP reloads the site configs.

    \b
    Example:
      slurmkit daemon run --interval 5 --max-interval 60
    """
    import logging

    from slurmkit.sweep.autorequeue import open_daemon    # sweep tasks too (submit --sweep --auto-requeue)

    logging.basicConfig(level=logging.INFO, format="%(asctime)s slurmkit daemon: %(message)s")
    runner, sessions = open_daemon(journal, min_interval=interval, max_interval=max(interval, max_interval))
    runner.journal.exclusive()
    try:
        runner.run(on_reload=sessions.close)
    finally:
        sessions.close()
        runner.journal.close()


@daemon.command("once", context_settings=CONTEXT)
@_JOURNAL
@json_option
def daemon_once(journal, as_json):
    """One cycle: poll, decide, submit; for cron.  Exits 1 if a cluster could not be reached.

    \b
    Example:
      */2 * * * *  slurmkit daemon once >> ~/.local/state/slurmkit/daemon.log 2>&1
    """
    from slurmkit.cli import display
    from slurmkit.sweep.autorequeue import open_daemon    # sweep tasks too (submit --sweep --auto-requeue)

    runner, sessions = open_daemon(journal)
    runner.journal.exclusive()
    try:
        report = runner.cycle()
    finally:
        sessions.close()
        runner.journal.close()
    if as_json:
        print_json(report.__dict__)
    else:
        click.echo(display.cycle_text(report))
    return 1 if report.errors else 0


@daemon.group("jobs", context_settings=CONTEXT, invoke_without_command=True)
@_JOURNAL
@json_option
@click.option("--all", "show_all", is_flag=True, help="Also jobs that completed or were stopped.")
@click.pass_context
def daemon_jobs(ctx, journal, as_json, show_all):
    """Tracked jobs: attempts, states, checkpoints, and why each was (not) restarted.

    \b
    Examples:
      slurmkit daemon jobs
      slurmkit daemon jobs --all --json
      slurmkit daemon jobs stop 3 --cancel
    """
    ctx.obj = journal
    if ctx.invoked_subcommand is not None:
        return
    from slurmkit.cli import display
    from slurmkit.requeue.journal import Journal

    store = Journal(journal)
    try:
        tracked = store.jobs(state=None if show_all else "active")
    finally:
        store.close()
    if as_json:
        print_json([t.to_dict() for t in tracked])
    else:
        click.echo(display.tracked_text(tracked))


@daemon_jobs.command("stop", context_settings=CONTEXT)
@click.option("--cancel", is_flag=True, help="Also cancel the job's running or pending attempt.")
@click.argument("tracked_id", type=StrictInt(min=1), metavar="ID")
@click.pass_obj
def jobs_stop(journal, cancel, tracked_id):
    """Stop tracking a job: the daemon leaves it alone from now on.

    \b
    Example:
      slurmkit daemon jobs stop 3 --cancel
    """
    from slurmkit.requeue import tracking
    from slurmkit.requeue.daemon import SiteSessions
    from slurmkit.requeue.journal import Journal

    store, sessions = Journal(journal), SiteSessions()
    try:
        tracked = tracking.stop_tracking(store, sessions, tracked_id, cancel=cancel)
    finally:
        sessions.close()
        store.close()
    click.echo("job %d: %s" % (tracked.id, tracked.reason))


# The old name: hidden from help and the docs, one note on stderr, then the same group.
jobs = MovedGroup("jobs", "daemon jobs", daemon_jobs)
