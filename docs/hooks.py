"""MkDocs hook (mkdocs.yml ``hooks:``) for the command reference, docs/reference/.

mkdocs-click documents a group together with every subcommand, and the root
``slurmkit`` group lists all of them lazily.  Each top-level command has its
own page (``:module: slurmkit.cli.<module>``, ``:command: <object>``), so the
root page, docs/reference/index.md, documents the root group alone: its usage,
help and global options, from ``slurmkit_docs:cli``, a group made here with
the root group's own name, help, parameters and context settings and no
subcommands.

The help texts keep their examples in click's ``\\b`` paragraphs (printed as
they are written, not rewrapped).  mkdocs-click drops the ``\\b`` and leaves
the lines to Markdown, which joins them into one paragraph (and reads a cron
line's ``*`` as emphasis); here such a paragraph becomes a code block, as
``--help`` shows it.  Nothing is written by hand: all of it comes from the
commands, so none of it can drift.
"""

import inspect
import sys
import types


def root_group_alone():
    import click

    from slurmkit.cli.commands import cli

    return click.Group(name="slurmkit", params=list(cli.params), help=cli.help,
                       context_settings=dict(cli.context_settings),
                       options_metavar=cli.options_metavar, no_args_is_help=cli.no_args_is_help)


def description_lines(help_text):
    """Markdown for a command's help: ``\\b`` paragraphs as code blocks, the others as text."""
    paragraphs, current = [], []
    for line in inspect.cleandoc(help_text).splitlines():
        if line.strip():
            current.append(line)
        elif current:
            paragraphs.append(current)
            current = []
    if current:
        paragraphs.append(current)
    for lines in paragraphs:
        if lines[0].strip() == "\b":
            block = lines[1:]
            if block and block[0].rstrip().endswith(":") and not block[0].startswith(" "):
                yield "*%s*" % block[0].strip()
                yield ""
                block = block[1:]
            if block:
                indent = min(len(line) - len(line.lstrip()) for line in block)
                yield "```text"
                yield from (line[indent:] for line in block)
                yield "```"
                yield ""
        else:
            yield from lines
            yield ""


def _make_description(ctx, remove_ascii_art=False):
    help_text = ctx.command.help or ctx.command.short_help
    if help_text:
        yield from description_lines(help_text)


def on_config(config, **kwargs):
    module = types.ModuleType("slurmkit_docs")
    module.__doc__ = "The root slurmkit group without its subcommands (docs/hooks.py)."
    module.cli = root_group_alone()
    sys.modules["slurmkit_docs"] = module
    try:
        from mkdocs_click import _docs
    except ImportError:
        return config
    # mkdocs-click's own description maker (0.8, 0.9), replaced only where it is the one expected.
    original = getattr(_docs, "_make_description", None)
    if original is not None and list(inspect.signature(original).parameters)[:2] == ["ctx", "remove_ascii_art"]:
        _docs._make_description = _make_description
    return config
