"""The ``slurmkit`` command line: thin click commands over the library.

Nothing outside this package imports click.  :func:`main` is the one error
boundary: library exceptions become a single ``Error: ...`` line on stderr
and an exit code (1 failed operation, 2 bad usage or config); ``--debug``
shows the traceback instead.  Arguments that are not UTF-8 (Python hands
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


def main(argv=None):
    import click

    from slurmkit.cli.commands import cli
    from slurmkit.errors import SlurmkitError

    args = list(sys.argv[1:] if argv is None else argv)
    debug = debug_requested(args) or bool(os.environ.get("SLURMKIT_DEBUG"))
    bad = undecodable_argument(args)
    if bad is not None:
        click.echo("Error: argument %d (%s) is not valid UTF-8 text; slurmkit passes arguments on as UTF-8, so "
                   "give it in UTF-8 (e.g. convert the file name with convmv)" % bad, err=True)
        return 2
    try:
        result = cli.main(args=args, prog_name="slurmkit", standalone_mode=False)
        code = result if isinstance(result, int) else 0
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except click.exceptions.Abort:
        click.echo("Error: aborted", err=True)
        code = 1
    except click.UsageError as exc:
        if debug:
            raise
        hint = " (see '%s --help')" % exc.ctx.command_path if exc.ctx is not None else ""
        click.echo("Error: %s%s" % (exc.format_message(), hint), err=True)
        code = 2
    except click.ClickException as exc:
        if debug:
            raise
        click.echo("Error: %s" % exc.format_message(), err=True)
        code = exc.exit_code
    except SlurmkitError as exc:
        if debug:
            raise
        click.echo("Error: %s" % exc, err=True)
        code = exc.exit_code
    except KeyboardInterrupt:
        click.echo("Error: interrupted", err=True)
        code = 130
    except BrokenPipeError:
        code = 1   # a reader that stopped early (| head): nothing more to say to it
    except OSError as exc:
        if debug:
            raise
        # Writing the answer failed (a full disk behind stdout): one line, exit 1.
        click.echo("Error: could not write the output: %s" % (exc.strerror or exc), err=True)
        code = 1
    except Exception as exc:  # a bug: still one line, with the way to see more
        if debug:
            raise
        click.echo("Error: internal error: %s: %s (rerun with --debug for the traceback)"
                   % (type(exc).__name__, exc), err=True)
        code = 1
    try:
        sys.stdout.flush()
    except OSError as exc:
        if code == 0 and not isinstance(exc, BrokenPipeError):
            click.echo("Error: could not write the output: %s" % (exc.strerror or exc), err=True)
        code = code or 1
        _silence_stdout()   # what is still buffered would fail again at exit
    return code


def run():
    """Console-script entry point."""
    sys.exit(main())
