"""Job commands: render, submit, status, wait, cancel.  Each parses options, calls one library function, prints."""

import click

from slurmkit.cli.options import (CONTEXT, cluster_option, job_options, job_spec_from, json_option, pass_session,
                                  print_json, site_option, warn)
from slurmkit.cli.display import format_table


@click.command(context_settings=CONTEXT)
@site_option
@cluster_option
@job_options
@pass_session
def render(session, cluster, **kwargs):
    """Print the sbatch script that 'submit' would send, without submitting.

    \b
    Example:
      slurmkit render --site mysite -p gpu -N 4 --comm heavy -- python train.py --lr 3e-4
    """
    from slurmkit import jobs

    rendered = jobs.prepare(session, job_spec_from(kwargs), cluster, kwargs.pop("partition"))
    warn(rendered.warnings)
    click.echo(rendered.script, nl=False)


@click.command(context_settings=CONTEXT)
@site_option
@click.option("--cluster", "-M", metavar="NAME|auto|A,B",
              help="Cluster of the site; 'auto' (all clusters) or a comma list picks the one where the job "
                   "starts soonest, failing over when one is down (default: the site's default cluster).")
@click.option("--accel", metavar="MODEL[,MODEL]",
              help="Accelerators the job accepts, e.g. h100,a100 or ascend910b (models, vendors or 'none'); "
                   "searches every matching partition.")
@click.option("--explain", is_flag=True, help="Print the candidate clusters with estimate, price and why each "
                                               "was skipped (on stderr).")
@click.option("--dry-run", is_flag=True, help="Only plan: print the candidates, submit nothing.")
@job_options
@json_option
@pass_session
def submit(session, cluster, accel, explain, dry_run, as_json, **kwargs):
    """Render a job for the site and submit it; prints CLUSTER:JOBID.

    \b
    Examples:
      slurmkit submit --site mysite --partition gpu --nodes 4 --gpus-per-node 8 \\
          --time 12:00:00 --comm heavy -- python train.py --lr 3e-4
      slurmkit submit --cluster auto --accel h100,a100 --explain -N 2 -- python train.py
    """
    from slurmkit import jobs

    partition = kwargs.pop("partition")
    spec = job_spec_from(kwargs)
    if not (explain or dry_run or accel or (cluster and (cluster == "auto" or "," in cluster))):
        submission = jobs.submit(session, spec, cluster, partition)
        warn(submission.rendered.warnings)
        if as_json:
            print_json(submission.to_dict())
        else:
            click.echo(str(submission.ref))
        return 0
    from slurmkit.federation import planner
    from slurmkit.cli import display  # only multi-cluster submissions pay for these imports

    names = None if cluster in (None, "auto") else [c.strip() for c in cluster.split(",") if c.strip()]
    placement = planner.submit_best(session, spec, names, partition, planner.parse_accel(accel),
                                       dry_run=dry_run)
    if explain or (dry_run and not as_json):
        # With --dry-run the table is the result (stdout); with --explain it is commentary (stderr).
        click.echo(display.candidates_table(placement), err=explain)
    if placement.submission is None:
        if as_json:
            print_json(placement.to_dict())
        return 0
    warn(placement.submission.rendered.warnings)
    for failed, why in placement.failovers:
        warn(["cluster %s failed, used the next one: %s" % (failed, why)])
    if as_json:
        print_json(placement.to_dict())
    else:
        click.echo(str(placement.submission.ref))


@click.command(context_settings=CONTEXT)
@site_option
@click.option("--user", "-u", metavar="USER",
              help="Without JOB ids: list this user's slurmkit jobs (default: your own).")
@json_option
@click.argument("job_ids", nargs=-1, metavar="[JOB]...")
@pass_session
def status(session, user, as_json, job_ids):
    """Show jobs (CLUSTER:JOBID or JOBID); without ids, your slurmkit jobs on every cluster.

    Exits 1 when a job id is unknown to its cluster.
    """
    from slurmkit import jobs

    refs = [jobs.parse_ref(j, session) for j in job_ids]
    found, missing, unreachable = jobs.status(session, refs, user=user)
    warn("cluster %s not reachable: %s" % pair for pair in unreachable)
    if as_json:
        print_json({"jobs": [dict(j.to_dict(), id=str(ref), cluster=ref.cluster) for ref, j in found],
                     "missing": [str(ref) for ref in missing],
                     "unreachable": [{"cluster": c, "reason": r} for c, r in unreachable]})
    else:
        rows = [[str(ref), j.name, j.state, j.partition, j.node_count,
                 j.nodelist if j.nodelist else "(%s)" % j.reason,
                 j.start_time.strftime("%Y-%m-%dT%H:%M:%S") if j.start_time else "-"] for ref, j in found]
        if rows:
            click.echo(format_table(rows, ["ID", "NAME", "STATE", "PARTITION", "NODES", "NODELIST(REASON)", "START"]))
        for ref in missing:
            click.echo("Error: job %s is not known to cluster %s" % (ref, ref.cluster), err=True)
    return 1 if missing else 0


@click.command(context_settings=CONTEXT)
@site_option
@click.option("--timeout", type=click.FloatRange(min=0), metavar="SECONDS", help="Give up after this long.")
@json_option
@click.argument("job_id", metavar="JOB")
@pass_session
def wait(session, timeout, as_json, job_id):
    """Follow a job to its end; print its final state, output file and leaf switches.

    Exits 1 unless the job COMPLETED.
    """
    from slurmkit import jobs
    from slurmkit.cli import display

    ref = jobs.parse_ref(job_id, session)
    final = jobs.wait(session, ref, timeout=timeout,
                      on_change=None if as_json else lambda j: click.echo("%s %s" % (ref, j.state), err=True))
    summary = display.job_summary(session, ref, final)
    if as_json:
        print_json(summary)
    else:
        click.echo("%s %s on %s under leaf switch(es) %s" % (ref, final.state, final.nodelist or "-",
                                                            ", ".join(summary["leaf_switches"]) or "-"))
        click.echo("output: %s" % (final.stdout or "-"))
    return 0 if final.state == "COMPLETED" else 1


@click.command(context_settings=CONTEXT)
@site_option
@click.argument("job_ids", nargs=-1, required=True, metavar="JOB...")
@pass_session
def cancel(session, job_ids):
    """Cancel jobs (CLUSTER:JOBID or JOBID)."""
    from slurmkit import jobs

    for ref in jobs.cancel(session, [jobs.parse_ref(j, session) for j in job_ids]):
        click.echo("cancelled %s" % (ref,))
