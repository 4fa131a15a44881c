"""The ``slurmkit`` command line: thin click commands over the library.

Nothing outside this package imports click.  :func:`main` is the one error
boundary: library exceptions become a single ``Error: ...`` line on stderr
and an exit code (1 failed operation, 2 bad usage or config); ``--debug``
shows the traceback instead.
"""

import os
import sys


def main(argv=None):
    import click

    from slurmkit.cli.commands import cli
    from slurmkit.errors import SlurmkitError

    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or bool(os.environ.get("SLURMKIT_DEBUG"))
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
        code = 1
    except Exception as exc:  # a bug: still one line, with the way to see more
        if debug:
            raise
        click.echo("Error: internal error: %s: %s (rerun with --debug for the traceback)"
                   % (type(exc).__name__, exc), err=True)
        code = 1
    sys.stdout.flush()
    return code


def run():
    """Console-script entry point."""
    sys.exit(main())
