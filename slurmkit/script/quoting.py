"""Values a job script prints, made safe: for bash, and for sbatch's ``#SBATCH`` parser.

Safety model: every value a template prints is shell-quoted unless it is a
:class:`Trusted` string.  Trusted strings are built from validated data
(the ``#SBATCH`` directives, exported variables) or come from the site admin
(setup lines, template files), or are the user's own shell: the job's setup
lines (``JobSpec.setup``, the Python API's ``slurm_setup``), which the user
writes as they would write the batch script itself, like the command.  So a job name or argument such as
``$(touch /tmp/x)`` is passed literally and never executed.

``#SBATCH`` lines are parsed by sbatch, not by a shell: their values use
sbatch's own quoting (double quotes, backslash escapes), and values with
control characters are refused because a newline would end the directive.
Variables Slurm sets for the job (``SLURM_*``) and those the script's own
shell reads (``IFS``, ``BASH_ENV``, ...) are refused in ``--env``
(:func:`check_env_name`).
"""

import re
import shlex
from typing import Sequence

from slurmkit.errors import UsageError

# Patterns are matched whole (fullmatch) and in ASCII: with "^...$" a value
# ending in a newline matches too.
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_SBATCH_PLAIN_RE = re.compile(r"[A-Za-z0-9_.,:@%/+=-]+", re.ASCII)


class Trusted(str):
    """A string the renderer prints verbatim (already quoted or admin-written)."""


def check_env_name(key: str, source: str = "--env") -> None:
    """Refuse a variable name the job cannot be given (:func:`slurmkit.envnames.problem`; UsageError,
    prefixed with ``source`` when given)."""
    from slurmkit import envnames

    why = envnames.problem(key)
    if why:
        raise UsageError("%s%s" % ("%s: " % source if source else "", why))


def sbatch_quote(value, option: str = "") -> str:
    """Quote a value for a ``#SBATCH`` line the way sbatch's parser reads it."""
    text = str(value)
    if _CONTROL_RE.search(text):
        raise UsageError("%s%r contains a control character (such as a newline), which cannot go on an #SBATCH "
                         "line" % ("%s " % option if option else "", text))
    if text and _SBATCH_PLAIN_RE.fullmatch(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def shell_quote(value) -> str:
    return shlex.quote(str(value))


def shell_quote_line(value) -> str:
    """:func:`shell_quote`, on one line: a value with a control character (a newline) becomes ``$'...'``.

    For text bash reads a line at a time (a sweep's points table): the same word, never split over lines.
    """
    text = str(value)
    if not _CONTROL_RE.search(text):
        return shlex.quote(text)
    return "$'" + "".join("\\x%02x" % ord(c) if _CONTROL_RE.match(c) or c in "\\'" else c for c in text) + "'"



def in_double_quotes(text: str) -> str:
    """``text`` for the inside of a double-quoted shell string: nothing in it expands."""
    return re.sub(r'(["\\$`])', r"\\\1", text)


def check_setup_lines(lines: Sequence[str], source: str = "slurm_setup") -> None:
    """The job's own setup lines are printed as written, one each: a line break (or a NUL) inside one
    would make it several lines where one was given.  UsageError naming ``source``."""
    for line in lines:
        if _CONTROL_RE.search(line.replace("\t", "")):
            raise UsageError("%s: %r holds a line break or another control character; give each line as its own "
                             "item" % (source, line))
