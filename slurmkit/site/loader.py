"""Load, validate and find site config files.

A site file is read with ``yaml.compose`` (the C loader when available), so
every value keeps the line it came from, and the node tree is then checked
against the declarative schema in :mod:`slurmkit.site.schema` by one generic
walker; :mod:`slurmkit.site.build` makes the model of a file that passed.  Scalars are turned into Python values by PyYAML's
``SafeConstructor``: no tag can construct arbitrary objects, and nothing in
this module loads YAML unsafely.

The walker reports *every* problem it finds (the admin fixes a file in one
round, not one error at a time), each as a :class:`Problem` with file, line
and dotted key path.  Only a file without problems is turned into the typed
:class:`~slurmkit.site.model.Site`.

Reading is bounded, so a hostile or broken file answers at once: only a
regular file of at most :data:`SITE_FILE_LIMIT` bytes is read (never a FIFO,
a device such as ``/dev/zero``, a directory), merge keys are expanded once
per mapping (a chain of ``<<: [*a, *a]`` doubles nothing), a mapping that
merges itself is a problem, and the walk stops after :data:`MAX_VALUES`
values, however aliases multiply them.  Values that would validate but break
later are refused here: numbers that are not finite (``.nan``, ``.inf``),
text with control characters (a newline in a name would end a script line),
times with spaces, and tags on mappings and lists (PyYAML's safe constructor
refuses unknown scalar tags; collections are never constructed, so their tags
are checked here).
"""

import difflib
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from slurmkit.errors import ConfigError
from slurmkit.site import checkers, schema
from slurmkit.site.build import build_site
from slurmkit.site.checkers import INVALID

try:  # the libyaml parser is much faster; both give the same nodes and marks
    from yaml import CSafeLoader as YamlLoader
except ImportError:  # pragma: no cover - depends on how PyYAML was built
    from yaml import SafeLoader as YamlLoader

__all__ = ["Problem", "load_site", "validate_files"]

PathLike = Union[str, "os.PathLike[str]"]

_MERGE_TAG = "tag:yaml.org,2002:merge"
_NULL_TAG = "tag:yaml.org,2002:null"
_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"

# A site file is a few kilobytes; anything this large is a mistake or an attack.
SITE_FILE_LIMIT = 1 << 20
# Values the walker checks, counting every use of an alias: a real site has a
# few thousand; an alias bomb has billions.
MAX_VALUES = 100000
# Characters YAML itself refuses (C0 controls but tab/newline/CR, DEL, C1 but NEL,
# lone surrogates, non-characters); found before parsing, so the line is exact.
_YAML_FORBIDDEN_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x84\x86-\x9f\ud800-\udfff\ufffe\uffff]")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


class _TooManyValues(Exception):
    """The walk passed MAX_VALUES: stop, with one problem."""


# The tags plain YAML resolves to (what an untagged value gets) and the explicit
# ones that mean the same (!!str, !!int, ...); anything else (!!python/object,
# !!set, a local !tag) is refused wherever it is, also under ignored x- keys.
_PLAIN_TAGS = frozenset("tag:yaml.org,2002:" + t for t in
                        ("str", "int", "float", "bool", "null", "timestamp", "merge", "map", "seq"))


def _tag_problems(root, file):
    """A Problem for every node of the document with a tag outside _PLAIN_TAGS (each node once)."""
    problems, seen, stack = [], set(), [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.tag not in _PLAIN_TAGS:
            problems.append(Problem(file, _line(node), "", "tag %s is not allowed; site files are plain YAML "
                                                         "(write the value without a tag)" % node.tag))
        if isinstance(node, MappingNode):
            for key, value in node.value:
                stack.extend((key, value))
        elif isinstance(node, SequenceNode):
            stack.extend(node.value)
    return problems



@dataclass(frozen=True)
class Problem:
    """One thing wrong with a site file.

    ``str(problem)`` is the line ``slurmkit site validate`` prints, in the
    ``FILE:LINE: KEY: MESSAGE`` form editors and CI annotators understand.
    """

    file: str
    line: Optional[int]     # 1-based; None when the problem has no place (missing file)
    key: str                # dotted key path, e.g. clusters.alpha.partitions.gpu.max_time; "" for the file
    message: str

    def __str__(self):
        where = self.file if self.line is None else "%s:%d" % (self.file, self.line)
        if self.key:
            return "%s: %s: %s" % (where, self.key, self.message)
        return "%s: %s" % (where, self.message)


def format_key(path):
    """("clusters", "a", "price_per_gpu_hour", 1, "hours") -> "clusters.a.price_per_gpu_hour[1].hours"."""
    text = ""
    for part in path:
        if isinstance(part, int):
            text += "[%d]" % part
        else:
            part = str(part)
            if not part.isprintable():  # a key with a newline would split the one-line problem
                part = ascii(part)
            text += ("." if text else "") + part
    return text


def _line(node):
    return node.start_mark.line + 1


class _Walker(object):
    """Checks one composed document against a schema spec, collecting problems."""

    def __init__(self, file, base_dir):
        self.file = file
        self.base_dir = base_dir
        self.problems = []          # type: List[Problem]
        self._seen = set()
        # key path -> line of that key; for problems about missing keys
        # (reported at the parent's line) and cross-key rules.
        self.lines = {}             # type: Dict[tuple, int]
        self._constructor = SafeConstructor()
        self._itemized = {}         # id(mapping node) -> its entries, merges expanded (None while expanding)
        self._visited = 0           # values checked, aliases counted at every use

    # -- reporting ---------------------------------------------------------

    def add(self, path, line, message, node=None):
        # An aliased node (*anchor) is checked once per use; report a
        # mistake in it once, at its own place.
        mark = (line, node.start_mark.column if node is not None else None, message)
        if node is not None and mark in self._seen:
            return
        self._seen.add(mark)
        self.problems.append(Problem(self.file, line, format_key(path), message))

    def line_of(self, path):
        """The line of ``path``'s key, else of its nearest ancestor that has one."""
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get(())

    # -- scalars -----------------------------------------------------------

    def construct(self, node, path):
        try:
            return self._constructor.construct_object(node, deep=True)
        except Exception as exc:  # ConstructorError for unknown/unsafe tags, ValueError for "!!int x"
            problem = getattr(exc, "problem", None) or str(exc)
            self.add(path, _line(node), "cannot read this value: %s" % problem, node)
            return INVALID

    @staticmethod
    def describe(node, value=None):
        """How a wrong value reads in "expected X, got Y"."""
        if isinstance(node, MappingNode):
            return "a mapping"
        if isinstance(node, SequenceNode):
            return "a list"
        if value is None:
            return "null" if node.value else "nothing"
        if isinstance(value, bool):
            written = node.value
            if written.lower() in ("true", "false"):
                return written.lower()
            return "%s (YAML reads it as %s)" % (written, str(value).lower())
        if isinstance(value, str):
            return repr(value)
        return node.value

    @staticmethod
    def coerce(node, value, kind):
        """``value`` as type ``kind``, or INVALID when it is not one (no report)."""
        if kind == "str":
            return value if isinstance(value, str) else INVALID
        if kind == "int":
            return value if isinstance(value, int) and not isinstance(value, bool) else INVALID
        if kind == "number":
            return value if isinstance(value, (int, float)) and not isinstance(value, bool) else INVALID
        if kind == "bool":
            return value if isinstance(value, bool) else INVALID
        if kind == "time":
            if isinstance(value, str):
                return value
            # YAML 1.1 reads unquoted 24:00:00 as the base-60 integer 86400
            # and 30 as an int: the written text is the Slurm time meant.
            if isinstance(value, int) and not isinstance(value, bool):
                return node.value
            return INVALID
        raise ValueError("unknown scalar type %r in schema" % kind)

    def check_scalar(self, node, spec, path):
        kind = spec["type"]
        if not isinstance(node, ScalarNode):
            self.add(path, _line(node), "expected %s, got %s" % (schema.expected(spec), self.describe(node)), node)
            return INVALID
        value = self.construct(node, path)
        if value is INVALID:
            return INVALID
        if isinstance(value, float) and not math.isfinite(value):
            # .nan passes every "min" check (all comparisons are false) and ranks first; .inf never ends.
            self.add(path, _line(node), "must be a finite number, got %s" % node.value, node)
            return INVALID
        if isinstance(value, str) and kind in ("str", "time") and not spec.get("multiline") \
                and _CONTROL_RE.search(value):
            self.add(path, _line(node), "%r contains a control character (a newline, tab, ...); it would break "
                                        "the line of the job script or command it goes into" % value, node)
            return INVALID
        if kind == "time" and isinstance(value, str) and value != value.strip():
            self.add(path, _line(node), "%r has leading or trailing spaces, which sbatch does not accept" % value,
                     node)
            return INVALID
        typed = self.coerce(node, value, kind)
        if typed is INVALID:
            message = "expected %s, got %s" % (schema.expected(spec), self.describe(node, value))
            if kind == "str" and value is not None and not node.style:  # plain (unquoted) scalar
                message += "; put it in quotes to use it as text"
            self.add(path, _line(node), message, node)
            return INVALID
        value = typed
        if spec.get("as_text"):
            value = node.value  # keep what the admin wrote: 022 stays "022", not 18
        if "choices" in spec and value not in spec["choices"]:
            close = difflib.get_close_matches(str(value), [str(c) for c in spec["choices"]], n=1)
            self.add(path, _line(node), "expected one of %s; got %r%s"
                     % (", ".join(spec["choices"]), value, "; did you mean %r?" % close[0] if close else ""),
                     node)
            return INVALID
        if "min" in spec and value < spec["min"]:
            self.add(path, _line(node), "must be at least %s, got %s" % (spec["min"], value), node)
            return INVALID
        if "above" in spec and value <= spec["above"]:
            self.add(path, _line(node), "must be more than %s, got %s" % (spec["above"], value), node)
            return INVALID
        if "max" in spec and value > spec["max"]:
            self.add(path, _line(node), "must be at most %s, got %s" % (spec["max"], value), node)
            return INVALID
        checks = [spec["checker"]] if "checker" in spec else []
        if kind == "time":
            checks.insert(0, checkers.check_time)
        for checker in checks:
            message = checker(value)
            if message:
                self.add(path, _line(node), message, node)
                return INVALID
        if spec.get("path") or (spec.get("path_like") and value.startswith(("/", "~", "./", "../"))):
            value = self.resolve_path(value)
        return value

    def resolve_path(self, value):
        # Relative paths mean "next to the config file", wherever slurmkit runs.
        return os.path.normpath(os.path.join(self.base_dir, os.path.expanduser(value)))

    # -- mappings ----------------------------------------------------------

    def items(self, node, path):
        """A mapping node's entries as {key: (key node, value node)}.

        Reports what PyYAML would silently accept: a duplicate key (it keeps
        the last) and keys that are not strings.  ``<<: *anchor`` merge keys
        are expanded; keys written in the mapping itself win over merged ones.
        """
        if id(node) in self._itemized:
            done = self._itemized[id(node)]
            if done is None:  # still expanding this very mapping: it merges itself
                self.add(path, _line(node), "this mapping merges itself ('<<' through its own anchor)", node)
                return {}
            return done       # once per mapping, however often an alias or a merge uses it
        self._itemized[id(node)] = None
        entries = {}
        merges = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                merges.append(value_node)
                continue
            if not isinstance(key_node, ScalarNode):
                self.add(path, _line(key_node), "a key must be a plain string, not %s" % self.describe(key_node),
                         key_node)
                continue
            key = self.construct(key_node, path)
            if key is INVALID:
                continue
            if not isinstance(key, str):
                self.add(path + (key_node.value,), _line(key_node),
                         "a key must be a string, got %s; put it in quotes"
                         % self.describe(key_node, key), key_node)
                continue
            if key in entries:
                self.add(path + (key,), _line(key_node),
                         "duplicate key %r (first at line %d); YAML would silently keep only the last one"
                         % (key, _line(entries[key][0])), key_node)
            entries[key] = (key_node, value_node)
        for merge in merges:
            sources = merge.value if isinstance(merge, SequenceNode) else [merge]
            for source in sources:
                if not isinstance(source, MappingNode):
                    self.add(path, _line(source), "'<<' merges a mapping or a list of mappings (*anchors), not %s"
                             % self.describe(source, self._peek(source)), source)
                    continue
                for key, entry in self.items(source, path).items():
                    entries.setdefault(key, entry)
        self._itemized[id(node)] = entries
        return entries

    def _peek(self, node):
        if isinstance(node, ScalarNode):
            try:
                return self._constructor.construct_object(node)
            except Exception:
                return node.value
        return None

    @staticmethod
    def is_null(node):
        return isinstance(node, ScalarNode) and node.tag == _NULL_TAG

    def check_mapping(self, node, spec, path):
        if not isinstance(node, MappingNode):
            self.add(path, _line(node), "expected a mapping, got %s" % self.describe(node, self._peek(node)), node)
            return INVALID
        keys = spec["keys"]
        extension = spec.get("extension_prefix")
        entries = self.items(node, path)
        out = {}
        for name, (key_node, value_node) in entries.items():
            sub_path = path + (name,)
            self.lines[sub_path] = _line(key_node)
            sub = keys.get(name)
            if sub is None:
                if extension and name.startswith(extension):
                    continue
                self.add(sub_path, _line(key_node), self.unknown_key_message(name, keys), key_node)
                continue
            if self.is_null(value_node) and not sub.get("required"):
                continue  # null means "not set": the default applies
            out[name] = self.check(value_node, sub, sub_path)
        for name, sub in keys.items():
            if name in out:
                continue
            if sub.get("required"):
                if name not in entries:
                    what = ("one of %s" % ", ".join(sub["choices"])) if "choices" in sub else schema.expected(sub)
                    self.add(path + (name,), self.line_of(path), "required key is missing (expected %s)" % what)
            elif "default" in sub:
                out[name] = self.default(sub)
        self.run_rules(spec, out, path)
        return out

    @staticmethod
    def unknown_key_message(name, keys):
        close = difflib.get_close_matches(name, list(keys), n=1, cutoff=0.6)
        if close:
            return "unknown key %r; did you mean %r?" % (name, close[0])
        return "unknown key %r; valid keys here: %s" % (name, ", ".join(keys))

    def default(self, spec):
        if spec["type"] == "mapping":
            # An absent section gets the defaults of its own keys.
            return {name: self.default(sub) for name, sub in spec["keys"].items() if "default" in sub}
        value = spec["default"]
        return list(value) if isinstance(value, list) else value

    def check_map_of(self, node, spec, path):
        if not isinstance(node, MappingNode):
            self.add(path, _line(node), "expected a mapping, got %s" % self.describe(node, self._peek(node)), node)
            return INVALID
        entries = self.items(node, path)
        key_checker = spec.get("key_checker")
        out = {}
        for name, (key_node, value_node) in entries.items():
            sub_path = path + (name,)
            self.lines[sub_path] = _line(key_node)
            message = key_checker(name) if key_checker else None
            if message:
                self.add(sub_path, _line(key_node), message, key_node)
            out[name] = self.check(value_node, spec["values"], sub_path)
        if len(entries) < spec.get("min_items", 0):
            self.add(path, self.line_of(path), "needs at least %d entr%s"
                     % (spec["min_items"], "y" if spec["min_items"] == 1 else "ies"), node)
        self.run_rules(spec, out, path)
        return out

    def check_list(self, node, spec, path):
        if not isinstance(node, SequenceNode):
            self.add(path, _line(node), "expected %s, got %s" % (schema.expected(spec),
                                                                 self.describe(node, self._peek(node))), node)
            return INVALID
        out = []
        for index, item in enumerate(node.value):
            self.lines[path + (index,)] = _line(item)
            out.append(self.check(item, spec["items"], path + (index,)))
        if len(out) < spec.get("min_items", 0):
            self.add(path, self.line_of(path), "needs at least %d item%s"
                     % (spec["min_items"], "" if spec["min_items"] == 1 else "s"), node)
        self.run_rules(spec, out, path)
        return out

    def check_one_of(self, node, spec, path):
        alternatives = spec["alternatives"]
        if isinstance(node, ScalarNode):
            value = self.construct(node, path)
            if value is INVALID:
                return INVALID
            for alt in alternatives:
                if alt["type"] not in ("mapping", "map_of", "list", "one_of") \
                        and self.coerce(node, value, alt["type"]) is not INVALID:
                    return self.check_scalar(node, alt, path)
        else:
            shape = "list" if isinstance(node, SequenceNode) else "mapping"
            for alt in alternatives:
                if alt["type"] == shape or (shape == "mapping" and alt["type"] == "map_of"):
                    return self.check(node, alt, path)
        value = self._peek(node)
        self.add(path, _line(node), "expected %s, got %s" % (schema.expected(spec), self.describe(node, value)), node)
        return INVALID

    def run_rules(self, spec, value, path):
        rule = spec.get("checker")
        if rule is None or value is INVALID:
            return
        for relative, message in rule(value):
            full = path + tuple(relative)
            self.add(full, self.line_of(full), message)

    def check(self, node, spec, path):
        self._visited += 1
        if self._visited > MAX_VALUES:
            raise _TooManyValues()
        kind = spec["type"]
        if kind == "mapping":
            return self.check_mapping(node, spec, path)
        if kind == "map_of":
            return self.check_map_of(node, spec, path)
        if kind == "list":
            return self.check_list(node, spec, path)
        if kind == "one_of":
            return self.check_one_of(node, spec, path)
        return self.check_scalar(node, spec, path)


# ---------------------------------------------------------------------------
# Reading files

def _check_file(path):
    """(problems, validated plain value or None) for one file."""
    shown = str(path)
    path = Path(path).expanduser()
    base_dir = os.path.dirname(os.path.abspath(str(path)))
    walker = _Walker(shown, base_dir)

    def fail(message, line=None):
        return [Problem(shown, line, "", message)], None

    from slurmkit import textfile

    try:
        text = textfile.read_text(path, SITE_FILE_LIMIT)
    except textfile.FileProblem as exc:
        return fail(str(exc), exc.line)
    bad = _YAML_FORBIDDEN_RE.search(text)
    if bad:
        return fail("invalid YAML: character %r is not allowed in a YAML file (only tab, newline and printable "
                    "characters are)" % bad.group(), text.count("\n", 0, bad.start()) + 1)
    try:
        root = yaml.compose(text, Loader=YamlLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = "invalid YAML: %s" % (exc.problem or exc.context or "syntax error")
        if exc.context and exc.problem and exc.context_mark is not None:
            message += " (%s started at line %d)" % (exc.context, exc.context_mark.line + 1)
        # At end of input libyaml points one line past the last one; name the last line instead.
        line = None if mark is None else min(mark.line + 1, max(1, len(text.splitlines())))
        return fail(message, line)
    except yaml.YAMLError as exc:  # e.g. ReaderError: a control character in the file
        return fail("invalid YAML: %s" % exc)
    if root is None:
        return fail("file is empty")
    if not isinstance(root, MappingNode):
        return fail("the top level must be a mapping (site:, clusters:, ...), not %s" % walker.describe(
            root, walker._peek(root)), _line(root))
    walker.lines[()] = _line(root)
    try:
        value = walker.check(root, schema.SITE, ())
    except _TooManyValues:
        return fail("the file expands to more than %d values through its aliases (an alias bomb?); a site file "
                    "holds far fewer" % MAX_VALUES, _line(root))
    except RecursionError:
        return fail("the file nests too deeply", _line(root))
    # Tags the walker did not already refuse where it constructs a scalar (with its key path); on one
    # line the tag comes first: it is why the value looks wrong.
    refused = {p.line for p in walker.problems if "tag" in p.message}
    tagged = [p for p in _tag_problems(root, shown) if p.line not in refused]
    # Problems in file order: rules run after their section was walked.
    problems = sorted(tagged + walker.problems, key=lambda p: p.line or 0)
    return problems, value


def validate_files(paths):
    # type: (Iterable[PathLike]) -> List[Problem]
    """Every problem in every file, in file then line order; [] when all are valid."""
    problems = []
    for path in paths:
        problems.extend(_check_file(path)[0])
    return problems


def _config_error(problems, path):
    first = str(problems[0])
    more = len(problems) - 1
    if more:
        first += " (and %d more problem%s; run `slurmkit site validate %s`)" % (more, "" if more == 1 else "s", path)
    error = ConfigError(first)
    error.problems = list(problems)
    return error


def load_site(path):
    # type: (PathLike) -> Site
    """Validate and load one site file; ConfigError (first problem) when invalid."""
    problems, value = _check_file(path)
    if problems:
        raise _config_error(problems, path)
    return build_site(value, os.path.abspath(os.path.expanduser(str(path))))
