"""The points of a sweep: the grid, points files, each point's identity, placeholders (pure).

A point is an ordered mapping of parameter names to values, all text: the
grid's values as typed (``lr=1e-3`` stays ``1e-3``), a points file's values
as written (a JSON number by its JSON text).  Its id is a hash of its
values alone, so the same values are the same point in every submission of
the sweep, whatever grid it came from and wherever it sat in it: that is
what lets a resubmitted, edited grid skip the points that already completed.

Placeholders: in every word of the command, ``{name}`` is replaced by the
point's value of ``name``.  The word reaches the program as one argument
with the value inside it, whatever the value holds (quotes, ``$(...)``,
spaces); in a word that is shell code (the argument of ``sh -c``/``bash -c``)
the value goes in shell-quoted, so that shell reads it as one literal word
too.  ``{{name}}`` is a literal ``{name}``; ``${NAME}`` is left to the
shell; braces around anything that is not a name are not placeholders.
"""

import csv
import hashlib
import io
import json
import math
import os
import re
import shlex
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from slurmkit.errors import UsageError

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
_RANGE_RE = re.compile(r"(-?[0-9]+)\.\.(-?[0-9]+)", re.ASCII)
# {name} not preceded by '$' or another '{' and not followed by '}': ${HOME} and {{lr}} are not placeholders.
_PLACEHOLDER_RE = re.compile(r"(?<![{$])\{([A-Za-z_][A-Za-z0-9_]*)\}(?!\})", re.ASCII)
_ESCAPED_RE = re.compile(r"\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}", re.ASCII)
# What every task is given besides its values (SLURMKIT_SWEEP_<NAME>): a parameter may not take these names.
RESERVED = frozenset({"ID", "POINT", "POINT_DIR", "DIR", "INDEX", "STAGE"})
# Shells whose -c argument is shell code: a value placed there is shell-quoted.
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox"})
# A sweep beyond this is a typo in a range (0..1000000), not an experiment.
MAX_POINTS = 100000
# A points file is a table a researcher wrote or generated; more than this is a mistake.
FILE_LIMIT = 64 << 20


class Point(NamedTuple):
    id: str
    values: Tuple[Tuple[str, str], ...]     # (name, value) in the sweep's parameter order

    @property
    def mapping(self) -> Dict[str, str]:
        return dict(self.values)

    def to_dict(self):
        return {"id": self.id, "values": self.mapping}


def point_id(values: Sequence[Tuple[str, str]]) -> str:
    """The id of a point: 12 hex digits of the SHA-256 of its values (names sorted, as JSON)."""
    text = json.dumps(sorted(values), separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def make_point(values: Sequence[Tuple[str, str]]) -> Point:
    values = tuple((str(k), str(v)) for k, v in values)
    return Point(point_id(values), values)


def env_name(name: str) -> str:
    """The variable a task finds a parameter's value in: ``lr`` -> ``SLURMKIT_SWEEP_LR``."""
    return "SLURMKIT_SWEEP_" + name.upper()


def check_names(names: Sequence[str], source: str) -> None:
    """Refuse names that are not identifiers, repeat, collide once upper-cased, or are reserved."""
    seen: Dict[str, str] = {}
    for name in names:
        if not NAME_RE.fullmatch(name):
            raise UsageError("%s: %r is not a parameter name (letters, digits and '_', not starting with a digit); "
                             "it names the placeholder {name} and the variable SLURMKIT_SWEEP_NAME" % (source, name))
        upper = name.upper()
        if upper in RESERVED:
            raise UsageError("%s: parameter %r would be exported as %s, which slurmkit sets for every task; "
                             "rename it" % (source, name, env_name(name)))
        if upper in seen:
            what = "given twice" if seen[upper] == name else "and %r are both exported as %s" % (seen[upper],
                                                                                               env_name(name))
            raise UsageError("%s: parameter %r %s" % (source, name, what))
        seen[upper] = name


def _values_of(name: str, text: str, option: str) -> List[str]:
    values: List[str] = []
    for item in text.split(","):
        m = _RANGE_RE.fullmatch(item)
        if m:
            lo, hi = int(m.group(1)), int(m.group(2))
            if lo > hi:
                raise UsageError("%s %s=%s: range %s counts down; write it as %d..%d" % (option, name, text, item,
                                                                                         hi, lo))
            if hi - lo + 1 > MAX_POINTS:
                raise UsageError("%s %s=%s: range %s has %d values; a sweep has at most %d points"
                                 % (option, name, text, item, hi - lo + 1, MAX_POINTS))
            values.extend(str(v) for v in range(lo, hi + 1))
        elif not item:
            raise UsageError("%s %s=%s: an empty value (two commas, or a comma at an end); for an empty string "
                             "use --sweep-file" % (option, name, text))
        else:
            values.append(item)
    repeated = sorted(v for v, n in _counts(values).items() if n > 1)
    if repeated:
        raise UsageError("%s %s=%s: %s given more than once" % (option, name, text, ", ".join(repeated[:5])))
    return values


def _counts(values):
    counts: Dict[str, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return counts


def parse_grid(specs: Sequence[str], option: str = "--sweep") -> List[Tuple[str, List[str]]]:
    """``["lr=1e-3,3e-4", "seed=0..4"]`` -> ``[("lr", ["1e-3", "3e-4"]), ("seed", ["0", ..., "4"])]``.

    Values are separated by commas; ``A..B`` is every integer from A to B
    (both included).  A value with a comma in it belongs in a points file.
    """
    grid: List[Tuple[str, List[str]]] = []
    for spec in specs:
        name, sep, text = spec.partition("=")
        if not sep:
            raise UsageError("%s %r: write NAME=V1,V2,... or NAME=A..B (e.g. %s lr=1e-3,3e-4 %s seed=0..4)"
                             % (option, spec, option, option))
        name = name.strip()
        check_names([name], "%s %s" % (option, spec))
        grid.append((name, _values_of(name, text, option)))
    check_names([n for n, _ in grid], option)
    return grid


def _cell(value, where: str) -> str:
    """A points-file value as text: strings as they are, numbers and booleans by their JSON text."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise UsageError("%s: %r is not a finite number" % (where, value))
        return json.dumps(value)
    raise UsageError("%s: values are strings, numbers or booleans, not %s" % (where, type(value).__name__))


def read_points_file(path: str) -> Tuple[List[str], List[List[Tuple[str, str]]]]:
    """(parameter names, rows of (name, value)) of a ``.jsonl`` (one JSON object a line) or ``.csv``
    (a header row of names) file; every row must name the same parameters."""
    from slurmkit import textfile

    lower = path.lower()
    kind = "csv" if lower.endswith(".csv") else "jsonl" if lower.endswith((".jsonl", ".ndjson", ".json")) else None
    if kind is None:
        raise UsageError("--sweep-file %s: name a .jsonl file (one JSON object per line) or a .csv file (a header "
                         "row of parameter names)" % path)
    try:
        text = textfile.read_text(path, FILE_LIMIT)
    except textfile.FileProblem as exc:
        raise UsageError("--sweep-file %s%s: %s" % (path, ":%d" % exc.line if exc.line else "", exc)) from None
    rows: List[List[Tuple[str, str]]] = []
    names: Optional[List[str]] = None
    if kind == "jsonl":
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            where = "--sweep-file %s:%d" % (path, number)
            try:
                obj = json.loads(line)
            except ValueError as exc:
                raise UsageError("%s: not JSON (%s)" % (where, exc)) from None
            if not isinstance(obj, dict) or not obj:
                raise UsageError("%s: each line is one JSON object of parameter values, e.g. {\"lr\": 0.001}" % where)
            row = [(str(k), _cell(v, "%s: %s" % (where, k))) for k, v in obj.items()]
            names = _same_names(names, [k for k, _ in row], where)
            rows.append(row)
    else:
        reader = csv.reader(io.StringIO(text, newline=""))
        header = None
        for record in reader:
            number = reader.line_num
            where = "--sweep-file %s:%d" % (path, number)
            if header is None:
                if not record or not any(c.strip() for c in record):
                    continue
                header = [c.strip() for c in record]
                check_names(header, where)
                names = header
                continue
            if not record:
                continue
            if len(record) != len(header):
                raise UsageError("%s: %d values for the %d columns of the header (%s)"
                                 % (where, len(record), len(header), ", ".join(header)))
            rows.append(list(zip(header, record)))
    if not rows or names is None:
        raise UsageError("--sweep-file %s has no points" % path)
    check_names(names, "--sweep-file %s" % path)
    return names, rows


def _same_names(names, row_names, where):
    if names is None:
        return row_names
    if set(row_names) != set(names):
        missing = [n for n in names if n not in row_names]
        extra = [n for n in row_names if n not in names]
        raise UsageError("%s: every row names the same parameters as the first (%s)%s%s"
                         % (where, ", ".join(names), "; missing: " + ", ".join(missing) if missing else "",
                            "; not in the first: " + ", ".join(extra) if extra else ""))
    return names


def build_points(grid: Sequence[Tuple[str, List[str]]] = (),
                 file_rows: Optional[Tuple[List[str], List[List[Tuple[str, str]]]]] = None
                 ) -> Tuple[List[str], List[Point], List[str]]:
    """(parameter names, points in order, warnings): every file row crossed with the grid.

    The grid is a product with the last ``--sweep`` varying fastest; a
    repeated point (a file row given twice) is kept once, with a warning.
    """
    import itertools

    names = list(file_rows[0]) if file_rows else []
    clash = [n for n, _ in grid if n in names]
    if clash:
        raise UsageError("parameter %s is both in --sweep-file and given with --sweep" % clash[0])
    names += [n for n, _ in grid]
    check_names(names, "the sweep")
    rows = file_rows[1] if file_rows else [[]]
    total = len(rows)
    for _, values in grid:
        total *= len(values)
    if total > MAX_POINTS:
        raise UsageError("the sweep has %d points; at most %d are allowed (split it into several sweeps)"
                         % (total, MAX_POINTS))
    if total == 0:
        raise UsageError("the sweep has no points; give --sweep NAME=VALUES or --sweep-file FILE")
    points: List[Point] = []
    seen: Dict[str, int] = {}
    warnings: List[str] = []
    order = {n: i for i, n in enumerate(names)}
    for number, row in enumerate(rows, 1):
        for combo in itertools.product(*[[(n, v) for v in values] for n, values in grid]):
            values = sorted(list(row) + list(combo), key=lambda kv: order[kv[0]])
            point = make_point(values)
            if point.id in seen:
                if file_rows:
                    warnings.append("--sweep-file: row %d repeats row %d; the point runs once" % (number,
                                                                                                 seen[point.id]))
                continue
            seen[point.id] = number
            points.append(point)
    return names, points, warnings


# -- placeholders ------------------------------------------------------------

def placeholders(word: str) -> List[str]:
    """The parameter names ``word`` refers to, in order."""
    return _PLACEHOLDER_RE.findall(word)


def is_shell_code(command: Sequence[str], index: int) -> bool:
    """Whether ``command[index]`` is the code of ``sh -c``/``bash -c`` (and the like)."""
    if index < 2 or os.path.basename(command[0]) not in _SHELLS:
        return False
    options = command[1:index]
    return all(o.startswith("-") for o in options) and re.fullmatch(r"-[A-Za-z]*c[A-Za-z]*", options[-1]) is not None


def check_command(command: Sequence[str], names: Sequence[str]) -> Dict[int, List[str]]:
    """{word index: the parameters it names}; refuses unknown names and a placeholder as the program."""
    known = set(names)
    used: Dict[int, List[str]] = {}
    for index, word in enumerate(command):
        found = placeholders(word)
        if not found:
            continue
        unknown = [n for n in found if n not in known]
        if unknown:
            raise UsageError("placeholder {%s} in the command is not a sweep parameter (the sweep has: %s); for a "
                             "literal {%s} write {{%s}}" % (unknown[0], ", ".join(names) or "none", unknown[0],
                                                             unknown[0]))
        if index == 0:
            raise UsageError("the command's first word (the program) cannot hold a placeholder; pass the value as "
                             "an argument, or read $%s in a script" % env_name(found[0]))
        used[index] = found
    return used


def substitute(word: str, values: Dict[str, str], shell_code: bool = False) -> str:
    """``word`` with each placeholder replaced by its value (shell-quoted in shell code), ``{{x}}`` made ``{x}``."""
    def value(m):
        text = values[m.group(1)]
        return shlex.quote(text) if shell_code else text

    parts = []
    at = 0
    # Escapes first, without touching what they protect; then placeholders in the text between them.
    for m in _ESCAPED_RE.finditer(word):
        parts.append(_PLACEHOLDER_RE.sub(value, word[at:m.start()]))
        parts.append("{%s}" % m.group(1))
        at = m.end()
    parts.append(_PLACEHOLDER_RE.sub(value, word[at:]))
    return "".join(parts)


def point_words(command: Sequence[str], used: Dict[int, List[str]], point: Point) -> List[str]:
    """The words of the command that hold placeholders, as this point runs them (in word order)."""
    values = point.mapping
    return [substitute(command[i], values, is_shell_code(command, i)) for i in sorted(used)]


def literal_command(command: Sequence[str]) -> Tuple[str, ...]:
    """The command with only the ``{{x}}`` escapes undone (its words without placeholders, as they run)."""
    return tuple(_ESCAPED_RE.sub(lambda m: "{%s}" % m.group(1), w) if not placeholders(w) else w for w in command)
