"""Job commands: render, submit, status, wait, cancel.  Each parses options, calls one library function, prints."""

import click

from slurmkit.cli.options import (COMMAND_CONTEXT, CONTEXT, StrictFloat, cluster_option, job_options,
                                  job_spec_from, json_option, pass_session, print_json, requeue_options, site_option,
                                  text_value, timed, warn, when_options)
from slurmkit.cli import sweep_commands


@click.command(context_settings=COMMAND_CONTEXT)
@site_option
@cluster_option
@job_options
@json_option
@pass_session
def render(session, cluster, as_json, **kwargs):
    """Print the sbatch script that 'submit' would send, without submitting.

    \b
    Example:
      slurmkit render --site mysite -p gpu -N 4 --comm heavy -- python train.py --lr 3e-4

    Options end at the first word of the command (as with sbatch and srun):
    everything after it, options included, is the command's.
    """
    from slurmkit import jobs

    rendered = jobs.prepare(session, job_spec_from(kwargs), cluster, kwargs.pop("partition"))
    warn(rendered.warnings)
    if as_json:
        print_json(dict(rendered.to_dict(), script=rendered.script))
    else:
        click.echo(rendered.script, nl=False)


@click.command(context_settings=COMMAND_CONTEXT)
@site_option
@cluster_option(metavar="NAME|auto|A,B",
                help="Cluster of the site; 'auto' (all clusters) or a comma list picks the one where the job "
                     "starts soonest, failing over when one is down (default: the site's default cluster).")
@click.option("--accel", metavar="MODEL[,MODEL]", callback=text_value,
              help="Accelerators the job accepts, e.g. h100,a100 or ascend910b (models, vendors or 'none'); "
                   "searches every matching partition.")
@click.option("--explain", is_flag=True, help="Print the candidate clusters with estimate, price and why each "
                                               "was skipped (on stderr).")
@click.option("--dry-run", is_flag=True, help="Only plan: print the candidates, submit nothing.")
@when_options
@requeue_options
@click.option("--checkpoint-dir", metavar="DIR", callback=text_value,
              help="With --auto-requeue: the job's checkpoint directory, exported as SLURMKIT_CHECKPOINT_DIR "
                   "(default: the site's requeue.checkpoint_root, else ./checkpoints, plus the job name; a "
                   "sweep's points each have their own).")
@sweep_commands.sweep_options
@job_options
@json_option
@pass_session
def submit(session, cluster, accel, explain, dry_run, prefer, deadline, auto_requeue, max_restarts, checkpoint_dir,
           conventions, transient_exit, hang_timeout, hang_startup, as_json, **kwargs):
    """Render a job for the site and submit it; prints CLUSTER:JOBID.

    \b
    Examples:
      slurmkit submit --site mysite --partition gpu --nodes 4 --gpus-per-node 8 \\
          --time 12:00:00 --comm heavy -- python train.py --lr 3e-4
      slurmkit submit --cluster auto --accel h100,a100 --explain -N 2 -- python train.py
      slurmkit submit --cluster auto --prefer green --deadline +12h --time 2:00:00 --explain -- python eval.py
      slurmkit submit --auto-requeue --checkpoint-dir /shared/ckpt/run1 -N 2 -- .venv/bin/python train.py

    Options end at the first word of the command (as with sbatch and srun):
    everything after it, options included, is the command's.
    """
    from slurmkit.federation import submit_anywhere

    partition = kwargs.pop("partition")
    sweep = sweep_commands.pop_sweep_options(kwargs)
    if sweep_commands.sweeping(sweep):
        requeue = sweep_commands.requeue_budget(auto_requeue, max_restarts, transient_exit, conventions, hang_timeout,
                                                hang_startup)
        return sweep_commands.submit_sweep(session, cluster, partition, sweep, job_spec_from(kwargs), as_json,
                                           not_with=dict(accel=accel, explain=explain, dry_run=dry_run,
                                                         checkpoint_dir=checkpoint_dir), requeue=requeue,
                                           prefer=prefer, deadline=deadline)
    if auto_requeue:
        timed(prefer, deadline, auto_requeue, "the job")
        return _submit_tracked(session, job_spec_from(kwargs), cluster, partition, accel or explain or dry_run,
                               checkpoint_dir, sweep_commands.requeue_budget(
                                   auto_requeue, max_restarts, transient_exit, conventions, hang_timeout,
                                   hang_startup), as_json)
    if checkpoint_dir:
        from slurmkit.errors import UsageError

        raise UsageError("--checkpoint-dir needs --auto-requeue")
    sweep_commands.requeue_budget(auto_requeue, max_restarts, transient_exit, conventions, hang_timeout, hang_startup)
    outcome = submit_anywhere(session, job_spec_from(kwargs), cluster, partition, accel,
                              plan_only=explain, dry_run=dry_run, prefer=prefer, deadline=deadline)
    if outcome.placement is not None:
        warn(outcome.placement.warnings)
    if outcome.placement is not None and (explain or (dry_run and not as_json)):
        from slurmkit.cli import display  # only multi-cluster submissions pay for this import

        # With --dry-run the table is the result (stdout); with --explain it is commentary (stderr).
        click.echo(display.candidates_table(outcome.placement), err=explain)
    if outcome.submission is not None:
        warn(outcome.submission.rendered.warnings)
    if outcome.placement is not None:
        warn("cluster %s failed, used the next one: %s" % pair for pair in outcome.placement.failovers)
    if outcome.submission is None:
        if as_json:
            print_json(outcome.to_dict())
        return
    with _saying_the_job_on_failure(outcome.submission.ref):
        if as_json:
            print_json(outcome.to_dict())
        else:
            click.echo(str(outcome.submission.ref))


class _saying_the_job_on_failure:
    """Around printing a submitted job's id: if stdout cannot take it (a full disk, a closed pipe), the job
    still exists, so its id goes to stderr in the one error line (exit 1) instead of being lost."""

    def __init__(self, ref):
        self.ref = ref

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is None or not isinstance(exc, OSError):
            return False
        from slurmkit.errors import SlurmkitError

        raise SlurmkitError("job %s was submitted, but its id could not be printed (%s); it exists: see "
                            "'slurmkit status %s'" % (self.ref, exc.strerror or exc, self.ref)) from None


def _submit_tracked(session, spec, cluster, partition, planning, checkpoint_dir, budget, as_json):
    from slurmkit.errors import UsageError
    from slurmkit.requeue.journal import Journal
    from slurmkit.requeue.tracking import submit_tracked

    if planning or (cluster and ("," in cluster or cluster.strip() == "auto")):
        raise UsageError("--auto-requeue submits to one cluster: name it with --cluster (restarts may move to "
                         "clusters listed in the site's requeue.shared_checkpoint_clusters)")
    journal = Journal()
    try:
        tracked_id, submission = submit_tracked(session, spec, journal, cluster, partition, checkpoint_dir, budget)
    finally:
        journal.close()
    warn(submission.rendered.warnings)
    with _saying_the_job_on_failure(submission.ref):
        if as_json:
            print_json(dict(submission.to_dict(), tracked_id=tracked_id))
        else:
            click.echo(str(submission.ref))
    if not as_json:
        click.echo("tracked as job %d: the requeue daemon (slurmkit daemon run) restarts it; slurmkit daemon jobs "
                   "shows it" % tracked_id, err=True)


@click.command(context_settings=CONTEXT)
@site_option
@click.option("--user", "-u", metavar="USER", callback=text_value,
              help="Without JOB ids: list this user's slurmkit jobs (default: your own).")
@json_option
@click.argument("job_ids", nargs=-1, metavar="[JOB]...")
@pass_session
def status(session, user, as_json, job_ids):
    """Show jobs (CLUSTER:JOBID or JOBID); without ids, your slurmkit jobs on every cluster.

    Exits 1 when a job id is unknown to its cluster.

    \b
    Examples:
      slurmkit status                    # your slurmkit jobs on every cluster
      slurmkit status alpha:1234 beta:77 --json
    """
    from slurmkit.cli import views

    views.status(session, user, as_json, job_ids)


@click.command(context_settings=CONTEXT)
@site_option
@click.option("--timeout", type=StrictFloat(min=0), metavar="SECONDS",
              help="Give up after this long (default: wait as long as the job runs).")
@json_option
@click.argument("job_id", metavar="JOB")
@pass_session
def wait(session, timeout, as_json, job_id):
    """Follow a job to its end; print its final state, output file and leaf switches.

    Exits 1 unless the job COMPLETED.

    \b
    Example:
      slurmkit wait alpha:1234 --timeout 3600
    """
    from slurmkit import jobs
    from slurmkit.cli import display

    ref = jobs.parse_ref(job_id, session)
    final = jobs.wait(session, ref, timeout=timeout,
                      on_change=None if as_json else lambda j: click.echo("%s %s" % (ref, j.state), err=True))
    summary = jobs.summary(session, ref, final)
    if as_json:
        print_json(summary)
    else:
        click.echo(display.wait_text(summary))
    if summary["output_note"]:
        warn([summary["output_note"]])
    return 0 if final.state == "COMPLETED" else 1


@click.command(context_settings=CONTEXT)
@site_option
@click.argument("job_ids", nargs=-1, required=True, metavar="JOB...")
@pass_session
def cancel(session, job_ids):
    """Cancel jobs (CLUSTER:JOBID or JOBID): one scancel per cluster (with pyslurm, one call per job).

    Exits 1 when a job id is unknown to its cluster (the others are still
    cancelled); a job that had already ended is a warning.

    \b
    Example:
      slurmkit cancel alpha:1234 beta:77
    """
    from slurmkit import jobs
    from slurmkit.cli import display
    from slurmkit.errors import SlurmkitError

    report = jobs.cancel_known(session, [jobs.parse_ref(j, session) for j in job_ids])
    warn("%s had already ended (%s); nothing to cancel" % (ref, state) for ref, state in report.ended)
    try:
        for ref in report.cancelled:
            click.echo("cancelled %s" % (ref,))
    except OSError as exc:
        raise SlurmkitError("cancelled %s, but could not print it (%s)"
                            % (", ".join(map(str, report.cancelled)), exc.strerror or exc)) from None
    if report.missing:
        raise SlurmkitError(display.missing_jobs_message(report.missing))
