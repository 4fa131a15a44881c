"""The entry point's fast path: ``status``, ``logs`` and ``why`` in their plain forms, without click.

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
tests/unit/test_fast_path.py holds the two to the same output and exit status.
"""

import os
import re

_DIGITS = re.compile(r"[0-9]+", re.ASCII)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# Option kinds: how a value is read; None means the value is not one this path is sure of (click decides).
_FLAG = "flag"


def _site(value):
    return value                                  # click takes any text; the site lookup judges it


def _text(value):
    """What options.text_value accepts unchanged (non-empty, no control characters, no edge spaces)."""
    return value if value.strip() and value == value.strip() and not _CONTROL.search(value) else None


def _at_least(low):
    def read(value):
        return int(value) if _DIGITS.fullmatch(value) and int(value) >= low else None
    return read


# command -> (option spellings -> (parameter, kind), environment defaults, name of the JOB parameter, many JOBs?)
_SITE = {"--site": ("site", _site)}
COMMANDS = {
    "status": (dict(_SITE, **{"--user": ("user", _text), "-u": ("user", _text), "--json": ("as_json", _FLAG)}),
               {}, "job_ids", True),
    "logs": (dict(_SITE, **{"--follow": ("follow", _FLAG), "-f": ("follow", _FLAG),
                            "--lines": ("lines", _at_least(0)), "-n": ("lines", _at_least(0)),
                            "--err": ("err", _FLAG), "--rank": ("rank", _at_least(0)),
                            "--attempt": ("attempt", _at_least(1)), "--journal": ("journal_path", _site)}),
             {"journal_path": "SLURMKIT_JOURNAL"}, "job_id", False),
    "why": (dict(_SITE, **{"--here": ("here", _FLAG), "--journal": ("journal", _site), "--json": ("as_json", _FLAG)}),
            {"journal": "SLURMKIT_JOURNAL"}, "job_id", False),
}


def parse(args):
    """``(command, keyword arguments)`` when this path fully understands ``args``, else None."""
    if not args or args[0] not in COMMANDS or os.environ.get("_SLURMKIT_COMPLETE"):
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
    parsed = parse(args)
    if parsed is None:
        return None
    command, kwargs = parsed
    from slurmkit.cli import views

    body = getattr(views, command)
    with views.open_session(kwargs.pop("site")) as session:
        code = body(session, **kwargs)
    return code if isinstance(code, int) else 0
