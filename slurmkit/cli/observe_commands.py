"""The researcher's day after submit: ``logs``, ``why`` and ``eff``.  Thin: each parses its
options, calls ``slurmkit.observe``, prints."""

import click

from slurmkit.cli import views
from slurmkit.cli.options import CONTEXT, json_option, log_options, pass_session, site_option


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
    return views.logs(session, follow, lines, err, rank, attempt, journal_path, job_id)


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
    return views.why(session, here, journal, as_json, job_id)


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
    return views.eff(session, journal, as_json, job_id)
