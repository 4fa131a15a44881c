"""The job templates: where they are found (the site's directories, then the built-ins), how
Jinja2 loads and renders them, and the plain-bash parts other scripts reuse (:func:`script_part`).

jinja2 is imported here alone, and only when a template is really rendered: a
resubmission that comes from the cache of rendered scripts never loads it.
Every value a template prints is shell-quoted unless it is
:class:`~slurmkit.script.quoting.Trusted` (``finalize``).
"""

import os
import re
from typing import Dict, List, Optional, Sequence, Tuple

from slurmkit.errors import ConfigError, UsageError
from slurmkit.script.quoting import Trusted, shell_quote
from slurmkit.site.model import Site

TEMPLATE_SUFFIX = ".sh.j2"
# Paths are plain strings here: this module is on every submission's path and
# pathlib costs a fresh process several milliseconds to import.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def _builtin_templates() -> str:
    """The built-in templates: ``slurmkit/templates`` in an installed wheel (setup.cfg maps
    the top-level ``templates/`` there), else ``templates/`` of the source checkout."""
    installed = os.path.join(_PACKAGE_DIR, "templates")
    return installed if os.path.isdir(installed) else os.path.join(os.path.dirname(_PACKAGE_DIR), "templates")


BUILTIN_TEMPLATES = _builtin_templates()
_PART_COMMENT_RE = re.compile(r"\A\{#.*?#\}\n", re.S)
_parts: Dict[Tuple[str, int, int], str] = {}


def script_part(name: str, site: Optional[Site] = None) -> str:
    """A template part that is plain bash after its first ``{# ... #}`` comment (the supervise
    loop, ``_supervise.sh.j2``), as Jinja renders it for the templates that include it: found the
    way Jinja's include finds it, in the site's template directories first, then the built-ins, so
    a site that overrides the part changes every script that runs it (a sweep's array script too).
    Read without Jinja, so a sweep's array script, built around an already rendered (cached) job,
    does not load it."""
    path = template_file(name, template_dirs(site)) or os.path.join(BUILTIN_TEMPLATES, name)
    try:
        stamp = os.stat(path)
    except OSError as exc:
        raise ConfigError("template part %s: cannot read: %s" % (path, exc.strerror or exc)) from None
    # Keyed as Jinja's loader checks a template (path and modification time): a daemon that runs
    # for weeks sees a part the site changed.
    key = (path, stamp.st_mtime_ns, stamp.st_size)
    if key not in _parts:
        from slurmkit import textfile

        try:
            source = textfile.read_text(path, TEMPLATE_LIMIT)
        except textfile.FileProblem as exc:
            raise ConfigError("template part %s: %s" % (path, exc)) from None
        text = _PART_COMMENT_RE.sub("", source, count=1)
        if re.search(r"\{[{%#]", text):
            raise ConfigError("template part %s holds Jinja beyond its first comment; it must be plain bash" % path)
        _parts[key] = text
    return _parts[key]



def _finalize(value):
    if isinstance(value, Trusted):
        return value
    if value is None:
        raise UsageError("a template printed an empty value")
    return shell_quote(value)


def template_dirs(site: Optional[Site]) -> List[str]:
    """The template directories, searched in order: the site's own, then the built-ins."""
    return [str(d) for d in (site.template_dirs if site else ())] + [BUILTIN_TEMPLATES]


def available_templates(site: Optional[Site] = None) -> Dict[str, str]:
    """Template name -> file; a site's own directories shadow the built-ins."""
    found: Dict[str, str] = {}
    for directory in template_dirs(site):
        try:
            names = sorted(os.listdir(directory))
        except OSError:  # a missing template directory adds nothing
            continue
        for filename in names:
            name = filename[:-len(TEMPLATE_SUFFIX)]
            path = os.path.join(directory, filename)
            # A FIFO or device named like a template would block or flood whoever reads it.
            if filename.endswith(TEMPLATE_SUFFIX) and not name.startswith("_") and os.path.isfile(path):
                found.setdefault(name, path)
    return found


def template_description(path: str) -> str:
    """The first ``{# ... #}`` comment of a template, for `slurmkit templates`."""
    from slurmkit import textfile

    try:
        text = textfile.read_text(path, TEMPLATE_LIMIT)
    except textfile.FileProblem as exc:
        return "(unreadable: %s)" % exc
    m = re.search(r"\{#\s*(.*?)\s*#\}", text, re.S)
    return " ".join(m.group(1).split()) if m else ""


# A template is a page of shell; a larger file is a mistake (or /dev/zero).
TEMPLATE_LIMIT = 1 << 20


def template_file(name: str, directories: Sequence[str]) -> Optional[str]:
    """The first of ``directories`` holding ``name`` (a relative path with '/'), as that file's path, or None:
    how Jinja's loader and :func:`script_part` find a template or a part (a dangling link counts: reading it
    then says so)."""
    for directory in directories:
        path = os.path.join(directory, *name.split("/"))
        if os.path.lexists(path):
            return path
    return None


def _bounded_loader(jinja2, searchpath):
    """jinja2's FileSystemLoader, reading every file (templates, includes, parents) with
    :func:`slurmkit.textfile.read_text`: a FIFO, a device, a huge or non-UTF-8 file is one
    ConfigError naming it, never a hang or a crash."""
    from slurmkit import textfile
    from jinja2.loaders import split_template_path

    class BoundedLoader(jinja2.FileSystemLoader):
        def get_source(self, environment, template):
            filename = template_file("/".join(split_template_path(template)), self.searchpath)
            if filename is None:
                raise jinja2.TemplateNotFound(template)
            try:
                source = textfile.read_text(filename, TEMPLATE_LIMIT)
                mtime = os.path.getmtime(filename)
            except textfile.FileProblem as exc:
                raise ConfigError("template file %s%s: %s" % (
                    filename, ":%d" % exc.line if exc.line else "", exc)) from None
            except OSError as exc:
                raise ConfigError("template file %s: cannot read: %s" % (filename, exc.strerror or exc)) from None

            def uptodate(filename=filename, mtime=mtime):
                try:
                    return os.path.getmtime(filename) == mtime
                except OSError:
                    return False

            return source, os.path.normpath(filename), uptodate

    return BoundedLoader(searchpath)


def _environment(site: Optional[Site]):
    import jinja2  # lazy: only rendering needs it

    from slurmkit.cache import private_dir

    # Compiled templates are cached (keyed by jinja2 on name and source checksum):
    # compiling them is most of a fresh process's rendering time.
    cache_dir = private_dir("templates")
    env = jinja2.Environment(
        loader=_bounded_loader(jinja2, template_dirs(site)),
        bytecode_cache=jinja2.FileSystemBytecodeCache(str(cache_dir)) if cache_dir else None,
        undefined=jinja2.StrictUndefined, finalize=_finalize, autoescape=False,
        keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    env.filters["trusted"] = Trusted
    env.filters["q"] = lambda v: Trusted(shell_quote(v))
    env.filters["argv"] = lambda items: Trusted(" ".join(shell_quote(i) for i in items))
    return env

def render_template(site: Site, template_name: str, context: dict) -> str:
    """The template rendered; any way a template can fail is one UsageError naming it (and its line).

    Besides undefined values and syntax: a missing include, a file that is
    not UTF-8 or not a regular file, a runtime error in an expression, a
    template that extends or includes itself.  slurmkit's own errors raised
    while rendering (a refused value) pass through unchanged.
    """
    import jinja2

    from slurmkit.errors import ConfigError, SlurmkitError

    try:
        return _environment(site).get_template(template_name + TEMPLATE_SUFFIX).render(context)
    except SlurmkitError:
        raise
    except jinja2.UndefinedError as exc:
        raise ConfigError("template %r uses an undefined value: %s%s"
                          % (template_name, exc, _template_line(exc.__traceback__))) from None
    except jinja2.TemplateSyntaxError as exc:
        raise ConfigError("template %s line %s: %s" % (exc.filename or template_name, exc.lineno,
                                                       exc.message)) from None
    except jinja2.TemplateNotFound as exc:
        raise ConfigError("template %r includes or extends %r, which is in none of the template directories (%s)"
                          % (template_name, exc.name, ", ".join(template_dirs(site)))) from None
    except RecursionError:
        raise ConfigError("template %r extends or includes itself (directly or through another template)"
                          % template_name) from None
    except jinja2.TemplateError as exc:
        raise ConfigError("template %r: %s%s" % (template_name, exc.message or exc,
                                                 _template_line(exc.__traceback__))) from None
    except Exception as exc:  # an expression that fails at run time: 1/0, a call on a string, ...
        raise ConfigError("template %r failed: %s: %s%s" % (template_name, type(exc).__name__, exc,
                                                          _template_line(exc.__traceback__))) from None


def _template_line(tb) -> str:
    """`` (FILE line N)`` of the innermost template frame in a traceback (jinja2 rewrites frames to the
    template's file and line), or ""."""
    where = ""
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename.endswith(TEMPLATE_SUFFIX):
            where = " (%s line %d)" % (filename, tb.tb_lineno)
        tb = tb.tb_next
    return where

