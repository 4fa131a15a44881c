"""The ``slurmkit`` command line: thin click commands over the library.

Nothing outside this package imports click.  :func:`main` is the one error
boundary: library exceptions become a single ``Error: ...`` line on stderr
and an exit code (1 failed operation, 2 bad usage or config); ``--debug``
shows the traceback instead.  Before click is imported, the fast path
(:mod:`slurmkit.cli.fast`) serves the plain forms of status, logs and why.  Arguments that are not UTF-8 (Python hands
them over as lone surrogates) are refused up front with their position: a
job script, a JSON answer and an SSH command line are all text, and a value
that silently changed on the way would run something else.
"""

import os
import sys

# The options of the ``slurmkit`` group itself that take a value: where --debug is looked for, they are skipped.
_GROUP_VALUE_OPTIONS = ("--site",)


def debug_requested(args) -> bool:
    """Whether ``--debug`` is among the group's own options, before the subcommand.

    Only there: ``slurmkit submit -- python train.py --debug`` passes
    ``--debug`` to train.py and must not change how slurmkit reports errors.
    """
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == "--debug":
            return True
        if arg == "--" or not arg.startswith("-"):
            return False          # the subcommand (or the end of options): the rest is not ours to read
        skip = arg in _GROUP_VALUE_OPTIONS
    return False


def undecodable_argument(args):
    """The first argument that was not valid UTF-8 as ``(position, shown)``, else None."""
    for position, arg in enumerate(args, 1):
        if any("\udc80" <= ch <= "\udcff" for ch in arg):
            shown = arg.encode("utf-8", "surrogateescape").decode("ascii", "backslashreplace")
            return position, shown
    return None


def _silence_stdout():
    """After a failed write to stdout (full disk, closed pipe): point it at /dev/null, so the
    interpreter's last flush cannot print a second error."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def _say(message):
    """One line on stderr (the error boundary's own output, with or without click)."""
    sys.stderr.write("%s\n" % message)
    sys.stderr.flush()


def main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    debug = debug_requested(args) or bool(os.environ.get("SLURMKIT_DEBUG"))
    bad = undecodable_argument(args)
    if bad is not None:
        _say("Error: argument %d (%s) is not valid UTF-8 text; slurmkit passes arguments on as UTF-8, so "
             "give it in UTF-8 (e.g. convert the file name with convmv)" % bad)
        return 2
    from slurmkit.errors import SlurmkitError

    try:
        from slurmkit.cli import fast

        code = fast.serve(args)       # the commands typed all day, without importing click
        if code is None:
            code = _click_main(args, debug)
    except SlurmkitError as exc:
        if debug:
            raise
        _say("Error: %s" % exc)
        code = exc.exit_code
    except KeyboardInterrupt:
        _say("Error: interrupted")
        code = 130
    except BrokenPipeError:
        code = 1   # a reader that stopped early (| head): nothing more to say to it
    except OSError as exc:
        if debug:
            raise
        # Writing the answer failed (a full disk behind stdout): one line, exit 1.
        _say("Error: could not write the output: %s" % (exc.strerror or exc))
        code = 1
    except Exception as exc:  # a bug: still one line, with the way to see more
        if debug:
            raise
        _say("Error: internal error: %s: %s (rerun with --debug for the traceback)" % (type(exc).__name__, exc))
        code = 1
    try:
        sys.stdout.flush()
    except OSError as exc:
        if code == 0 and not isinstance(exc, BrokenPipeError):
            _say("Error: could not write the output: %s" % (exc.strerror or exc))
        code = code or 1
        _silence_stdout()   # what is still buffered would fail again at exit
    return code


def _click_main(args, debug):
    """Parse and run ``args`` with click; click's own exceptions become their line and exit status here,
    the library's go on to :func:`main`."""
    import click

    from slurmkit.cli.commands import cli

    try:
        result = cli.main(args=args, prog_name="slurmkit", standalone_mode=False)
        return result if isinstance(result, int) else 0
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.Abort:
        _say("Error: aborted")
        return 1
    except click.UsageError as exc:
        if debug:
            raise
        hint = " (see '%s --help')" % exc.ctx.command_path if exc.ctx is not None else ""
        _say("Error: %s%s" % (exc.format_message(), hint))
        return 2
    except click.ClickException as exc:
        if debug:
            raise
        _say("Error: %s" % exc.format_message())
        return exc.exit_code


def run():
    """Console-script entry point."""
    sys.exit(main())
