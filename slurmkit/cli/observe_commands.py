"""The researcher's day after submit: ``logs``, ``why`` and ``eff``.  Thin: each parses its
options, calls ``slurmkit.observe``, prints."""

import sys

import click

from slurmkit.cli.options import CONTEXT, json_option, log_options, pass_session, print_json, site_option


@click.command(context_settings=CONTEXT)
@site_option
@log_options
@click.argument("job_id", metavar="JOB")
@pass_session
def logs(session, follow, lines, err, rank, attempt, journal_path, job_id):
    """Print a job's output (CLUSTER:JOBID or CLUSTER:JOBID_TASK), found the way Slurm names it.

    Over SSH the file is read on the login node in bounded chunks on the
    cluster's existing connection.  An array without a task lists its tasks.

    \b
    Examples:
      slurmkit logs alpha:1234 -n 50
      slurmkit logs -f beta:48213_7
      slurmkit logs --attempt 1 --err alpha:1234
    """
    from slurmkit.observe import logs as library

    return show_logs(session, library.parse_log_ref(job_id, session), follow, lines, "err" if err else "out", rank,
                     attempt, journal_path)


def show_logs(session, ref, follow, lines, stream, rank, attempt, journal, located=None):
    """``logs``'s body, also ``sweep logs``'s (which gives the point's file as ``located``): print, or
    follow; the exit status."""
    from slurmkit.observe import logs as library

    out = _writer()
    say = lambda line: click.echo("slurmkit: %s" % line, err=True)   # noqa: E731
    try:
        located = located or library.locate(session, ref, stream=stream, attempt=attempt, rank=rank,
                                            journal_path=journal)
    except library.ArrayNeedsTask as exc:
        if follow:
            raise
        for row in exc.table():
            click.echo("%-20s %-12s %s" % row)
        return 0
    if located.note:
        say(located.note)
    if located.attempts > 1 and located.attempt is not None:
        say("%s: attempt %d of %d" % (located.ref, located.attempt, located.attempts))
    if follow:
        try:
            return library.follow(session, located, out, say, lines=lines, journal_path=journal,
                                  stream=stream, rank=rank)
        except KeyboardInterrupt:   # the user's way to stop following: not an error
            return 130
    if not library.show(session, located, out, lines=lines):
        say("%s has no output file yet (%s; it is %s%s)" % (
            located.ref, located.expected, located.record.state,
            ", %s" % located.record.reason if located.record.reason else ""))
        return 1
    return 0


def _writer():
    """Write to stdout as text arrives (a log read in chunks must not wait for a buffer to fill)."""
    def out(text):
        sys.stdout.write(text)
        sys.stdout.flush()
    return out


@click.command(context_settings=CONTEXT)
@site_option
@click.option("--here", is_flag=True, help="Do not ask the site's other clusters when they would start it.")
@click.option("--journal", metavar="FILE", envvar="SLURMKIT_JOURNAL",
                 help="The requeue journal that knows whether the daemon restarted it (default: the daemon's).")
@json_option
@click.argument("job_id", metavar="JOB")
@pass_session
def why(session, here, journal, as_json, job_id):
    """Why a job (CLUSTER:JOBID[_TASK]) has not started, or what ended it.

    Pending: Slurm's reason in plain words and what to do, the start
    estimate, its priority and place in the partition, the --switches wait
    left, and when every other cluster of the site would start the same job
    (sbatch --test-only). Ended: what ended it, the last lines of its error
    output, and whether the requeue daemon restarted it.

    \b
    Examples:
      slurmkit why alpha:1234
      slurmkit why --json beta:48213_7
    """
    from slurmkit.observe import logs as logs_library
    from slurmkit.observe import why as library

    ref = logs_library.parse_log_ref(job_id, session)
    answer = library.why(session, ref, journal_path=journal, ask_elsewhere=not here)
    if as_json:
        print_json(answer.data)
    else:
        for line in answer.lines:
            click.echo(line)
    return 0


@click.command(context_settings=CONTEXT)
@site_option
@click.option("--journal", metavar="FILE", envvar="SLURMKIT_JOURNAL",
                 help="The requeue journal that knows a restarted job's attempts (default: the daemon's).")
@json_option
@click.argument("job_id", metavar="JOB")
@pass_session
def eff(session, journal, as_json, job_id):
    """What a job (CLUSTER:JOBID[_TASK], or an array's id) used against what it asked for.

    Elapsed against the limit, CPU efficiency, peak memory, GPU-hours, GPU
    utilisation and energy where the cluster's accounting records them,
    summed over every attempt of a restarted job, with a verdict.

    \b
    Examples:
      slurmkit eff alpha:1234
      slurmkit eff --json beta:48213
    """
    from slurmkit.observe import eff as library
    from slurmkit.observe import logs as logs_library

    ref = logs_library.parse_log_ref(job_id, session)
    result = library.efficiency(session, ref, journal_path=journal)
    if as_json:
        print_json(result.data)
        return 0
    for line in result.lines:
        click.echo(line)
    for verdict in result.verdicts:
        click.echo("verdict: %s" % verdict)
    return 0
