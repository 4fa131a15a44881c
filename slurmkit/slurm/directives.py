"""The ``#SBATCH`` directives of a job script, read the way sbatch reads them (pure).

pyslurm's own ``load_sbatch_options`` cannot read slurmkit's scripts, so the
pyslurm backend parses them here; an option this module cannot map comes
back marked :data:`UNSUPPORTED` and the backend hands that script to sbatch.
"""

from typing import List, Tuple

# sbatch's short options that slurmkit may meet, as long names.
_SHORT = {"J": "job-name", "p": "partition", "N": "nodes", "n": "ntasks", "c": "cpus-per-task",
          "t": "time", "A": "account", "q": "qos", "o": "output", "e": "error", "D": "chdir",
          "w": "nodelist"}
# Long options that take a value, and flags, that submit_description maps.
_WITH_VALUE = frozenset({"job-name", "partition", "nodes", "ntasks", "ntasks-per-node", "cpus-per-task",
                         "time", "account", "qos", "output", "error", "chdir", "comment", "gres",
                         "gpus-per-node", "mem", "mem-per-cpu", "nodelist"})
_FLAGS = frozenset({"exclusive"})
# Input environment variables of sbatch that do not start with SBATCH_ (src/sbatch/opt.c env_vars).
SBATCH_INPUT_ENV = frozenset({"SLURM_CLUSTERS", "SLURM_HINT"})
UNSUPPORTED = object()


def directive_args(text: str) -> List[str]:
    """Split what follows ``#SBATCH`` into arguments the way sbatch does.

    Mirrors sbatch's ``_get_argument`` (src/sbatch/opt.c): whitespace
    separates arguments, double quotes group (single quotes are ordinary
    characters), a backslash escapes the next character, and an unescaped
    ``#`` ends the line even inside quotes.  An empty argument (``""``) ends
    the line too.  This is the quoting ``slurmkit.script.quoting.sbatch_quote`` writes.
    """
    args: List[str] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            return args
        current, quoted, escape = [], False, False
        while i < n and (quoted or not text[i].isspace()):
            ch = text[i]
            i += 1
            if escape:
                current.append(ch)
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == '"':
                quoted = not quoted
            elif ch == "#":
                i = n  # the rest of the line is a comment
                break
            else:
                current.append(ch)
        if not current:
            return args
        args.append("".join(current))


def sbatch_directives(script: str) -> List[Tuple[str, object]]:
    """The ``#SBATCH`` options of ``script`` as ``(long name, value)`` pairs.

    Like sbatch, directives are read from the top of the script until the
    first line that is neither blank nor a comment (sbatch(1): "sbatch will
    stop processing further #SBATCH directives once the first non-comment
    non-whitespace line has been reached").  A flag's value is None;
    an option this module cannot map, or cannot tell the arguments of, comes
    back as ``(text, UNSUPPORTED)`` so the caller falls back to sbatch.
    """
    out: List[Tuple[str, object]] = []
    for line in script.splitlines()[1:]:  # line 1 is the #! line
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break  # sbatch stops at the first command
        if not line.startswith("#SBATCH"):
            continue
        args = directive_args(line[len("#SBATCH"):])
        i = 0
        while i < len(args):
            arg = args[i]
            i += 1
            if arg.startswith("--"):
                name, eq, value = arg[2:].partition("=")
                if name in _FLAGS and not eq:
                    out.append((name, None))
                    continue
                if name not in _WITH_VALUE:
                    out.append((arg, UNSUPPORTED))
                    continue
                needs_next = not eq
            elif arg.startswith("-") and len(arg) > 1 and arg[1] in _SHORT:
                name, value = _SHORT[arg[1]], arg[2:]
                needs_next = not value
            else:
                out.append((arg, UNSUPPORTED))
                continue
            if needs_next:  # "--time 5" / "-t 5": the value is the next argument
                if i >= len(args):
                    out.append((arg, UNSUPPORTED))
                    continue
                value = args[i]
                i += 1
            out.append((name, value))
    return out
