"""The entry point's fast path: ``status``, ``logs``, ``why`` and ``eff`` in their plain forms, without click.

Why it exists: these commands are typed dozens of times a day, and importing
click and building the command tree costs about 40 ms, more than the lookup
itself (issue 21, docs/benchmarks.md).  The click commands stay the
reference.  This dispatcher serves only an argv it understands completely --
the command's own options, spelled ``--name VALUE``, ``--name=VALUE`` or a
lone short letter, with values click would take unchanged -- and calls the
very bodies the click commands call (:mod:`slurmkit.cli.views`).  For
anything else (``--help``, an option before the command, ``--``, an unknown
or malformed option or value, a missing or extra JOB, shell completion) it
answers None and click parses the argv as before, with its own messages.
``--help`` of the group and of these commands is click's own text, kept on
disk (see :func:`_help`).  tests/unit/test_fast_path.py holds the two paths
to the same output and exit status.
"""

import os

# No regular expressions here: importing re costs about 5 ms, a quarter of what --help may take.

# Option kinds: how a value is read; None means the value is not one this path is sure of (click decides).
_FLAG = "flag"


def _as_given(value):
    return value            # click takes any text for --site and --journal; the library judges it


def _text(value):
    """What options.text_value accepts unchanged (non-empty, no control characters, no edge spaces)."""
    plain = all(" " <= ch != "\x7f" for ch in value)
    return value if plain and value.strip() and value == value.strip() else None


def _at_least(low):
    def read(value):
        return int(value) if value.isascii() and value.isdigit() and int(value) >= low else None
    return read


# command -> (option spellings -> (parameter, kind), environment defaults, name of the JOB parameter, many JOBs?)
_SITE = {"--site": ("site", _as_given)}
COMMANDS = {
    "status": (dict(_SITE, **{"--user": ("user", _text), "-u": ("user", _text), "--json": ("as_json", _FLAG)}),
               {}, "job_ids", True),
    "logs": (dict(_SITE, **{"--follow": ("follow", _FLAG), "-f": ("follow", _FLAG),
                            "--lines": ("lines", _at_least(0)), "-n": ("lines", _at_least(0)),
                            "--err": ("err", _FLAG), "--rank": ("rank", _at_least(0)),
                            "--attempt": ("attempt", _at_least(1)), "--journal": ("journal_path", _as_given)}),
             {"journal_path": "SLURMKIT_JOURNAL"}, "job_id", False),
    "why": (dict(_SITE, **{"--here": ("here", _FLAG), "--journal": ("journal", _as_given),
                           "--json": ("as_json", _FLAG)}),
            {"journal": "SLURMKIT_JOURNAL"}, "job_id", False),
    "eff": (dict(_SITE, **{"--journal": ("journal", _as_given), "--json": ("as_json", _FLAG)}),
            {"journal": "SLURMKIT_JOURNAL"}, "job_id", False),
}


def parse(args):
    """``(command, keyword arguments)`` when this path fully understands ``args``, else None."""
    if not args or args[0] not in COMMANDS:
        return None
    command = args[0]
    options, env_defaults, job_param, many = COMMANDS[command]
    kwargs = {param: (False if kind is _FLAG else None) for param, kind in options.values()}
    kwargs["site"] = os.environ.get("SLURMKIT_SITE") or None
    for param, variable in env_defaults.items():
        kwargs[param] = os.environ.get(variable) or None
    jobs = []
    rest = iter(args[1:])
    for arg in rest:
        if not arg.startswith("-"):
            jobs.append(arg)
            continue
        name, equals, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name not in options:
            return None
        param, kind = options[name]
        if kind is _FLAG:
            if equals:
                return None
            kwargs[param] = True
            continue
        if not equals:
            value = next(rest, None)
            if value is None or value.startswith("-"):
                return None
        read = kind(value)
        if read is None:
            return None
        kwargs[param] = read
    if many:
        kwargs[job_param] = tuple(jobs)
    elif len(jobs) == 1:
        kwargs[job_param] = jobs[0]
    else:
        return None
    return command, kwargs


def serve(args):
    """Run ``args`` here and return the exit status, or None when click must parse them."""
    if os.environ.get("_SLURMKIT_COMPLETE"):      # the shell asks click to complete a word
        return None
    if _is_help(args):
        return _help(args)
    parsed = parse(args)
    if parsed is None:
        return None
    command, kwargs = parsed
    from slurmkit.cli import views

    body = getattr(views, command)
    with views.open_session(kwargs.pop("site")) as session:
        code = body(session, **kwargs)
    return code if isinstance(code, int) else 0


# --help: click's own text, rendered once per terminal width and kept with the signature of every
# source file it could come from (slurmkit's and click's: name, size, modification time).  Any change
# of either renders it again, so the kept text cannot drift from click's; tests/unit/test_fast_path.py
# compares the two.
_HELP_FLAGS = ("--help", "-h")


def _is_help(args):
    return (len(args) == 1 and args[0] in _HELP_FLAGS) or (
        len(args) == 2 and args[0] in COMMANDS and args[1] in _HELP_FLAGS)


def _columns():
    """The terminal's width as click's help formatter reads it (shutil.get_terminal_size's rule, without
    importing shutil: 8 ms)."""
    import sys

    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


def _signature():
    """One line naming every .py file of slurmkit and click with its size and modification time."""
    import sys
    from importlib.machinery import PathFinder

    click = PathFinder.find_spec("click")
    roots = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    if click is not None and click.submodule_search_locations:
        roots += list(click.submodule_search_locations)
    parts = [sys.version.split()[0]]
    for root in roots:
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".py"):
                    info = os.stat(os.path.join(folder, name))
                    parts.append("%s/%s:%d:%d" % (folder, name, info.st_size, info.st_mtime_ns))
    return " ".join(parts)


def _help(args):
    import sys

    from slurmkit.cache import private_dir, write_private

    columns = _columns()
    folder = private_dir("help")
    path = folder and os.path.join(folder, "%s-%d.txt" % ("-".join(a.strip("-") for a in args), columns))
    signature = _signature()
    text = None
    if path:
        try:
            with open(path, encoding="utf-8") as kept:
                first, _, text = kept.read().partition("\n")
            text = text if first == signature else None
        except OSError:
            pass
    if text is None:
        from slurmkit.cli.commands import help_text

        text = help_text(args)
        if path:
            write_private(path, signature + "\n" + text)
    sys.stdout.write(text)
    return 0
