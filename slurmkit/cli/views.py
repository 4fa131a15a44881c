"""The bodies of the commands typed all day (``status``, ``logs``, ``why``), without click.

Each is called by its click command and by the entry point's fast path
(:mod:`slurmkit.cli.fast`), which serves the plainest forms of these commands
without importing click: one body per command, so the two cannot print
different things.  Output helpers used by every command live here too, for
the same reason.
"""

import json
import sys
from contextlib import contextmanager


def echo(text, err=False):
    """One line on stdout (or stderr), flushed at once as click.echo does."""
    stream = sys.stderr if err else sys.stdout
    stream.write("%s\n" % text)
    stream.flush()


def warn(warnings):
    """Each warning as one ``Warning: ...`` line on stderr."""
    for warning in warnings:
        echo("Warning: %s" % warning, err=True)


def print_json(data):
    echo(json.dumps(data, indent=2, sort_keys=True))


def require_site(site):
    if site:
        return site
    from slurmkit.errors import UsageError
    from slurmkit.site import list_sites

    names = sorted(list_sites())
    raise UsageError("no site given; use --site NAME|PATH or set SLURMKIT_SITE (available: %s)"
                     % (", ".join(names) or "none found"))


@contextmanager
def open_session(site):
    """The --site value (a name or a path; None: none given) as an open Session, closed at the end."""
    from slurmkit.session import Session
    from slurmkit.site import find_site

    with Session(find_site(require_site(site))) as session:
        yield session


def status(session, user, as_json, job_ids):
    """``status``'s body: print the jobs; raise when one is unknown to its cluster."""
    from slurmkit import jobs
    from slurmkit.cli import display
    from slurmkit.errors import SlurmkitError

    refs = [jobs.parse_ref(j, session) for j in job_ids]
    found, missing, clusters = jobs.status(session, refs, user=user)
    unreachable = [(cluster, str(error)) for cluster, error in clusters.failed.items()]
    warn("cluster %s not reachable: %s" % pair for pair in unreachable)
    if as_json:
        print_json(display.status_dict(found, missing, unreachable))
    elif found:
        echo(display.status_table(found))
    warn(jobs.output_notes(session, found))
    if missing:
        raise SlurmkitError(display.missing_jobs_message(missing))


def logs(session, follow, lines, err, rank, attempt, journal_path, job_id):
    """``logs``'s body: print (or follow) one job's output; the exit status."""
    from slurmkit.observe import logs as library

    return show_logs(session, library.parse_log_ref(job_id, session), follow, lines, "err" if err else "out", rank,
                     attempt, journal_path)


def show_logs(session, ref, follow, lines, stream, rank, attempt, journal, located=None):
    """``logs``'s body, also ``sweep logs``'s (which gives the point's file as ``located``): print, or
    follow; the exit status."""
    from slurmkit.observe import logs as library

    out = _writer()
    say = lambda line: echo("slurmkit: %s" % line, err=True)   # noqa: E731
    try:
        located = located or library.locate(session, ref, stream=stream, attempt=attempt, rank=rank,
                                            journal_path=journal)
    except library.ArrayNeedsTask as exc:
        if follow:
            raise
        for row in exc.table():
            echo("%-20s %-12s %s" % row)
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


def why(session, here, journal, as_json, job_id):
    """``why``'s body: print why the job has not started, or what ended it."""
    from slurmkit.observe import logs as logs_library
    from slurmkit.observe import why as library

    ref = logs_library.parse_log_ref(job_id, session)
    answer = library.why(session, ref, journal_path=journal, ask_elsewhere=not here)
    if as_json:
        print_json(answer.data)
    else:
        for line in answer.lines:
            echo(line)
    return 0


def eff(session, journal, as_json, job_id):
    """``eff``'s body: print what the job used against what it asked for, and the verdicts."""
    from slurmkit.observe import eff as library
    from slurmkit.observe import logs as logs_library

    ref = logs_library.parse_log_ref(job_id, session)
    result = library.efficiency(session, ref, journal_path=journal)
    if as_json:
        print_json(result.data)
        return 0
    for line in result.lines:
        echo(line)
    for verdict in result.verdicts:
        echo("verdict: %s" % verdict)
    return 0
