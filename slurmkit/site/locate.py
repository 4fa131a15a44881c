"""Finding site config files by name on the site search path.

Kept apart from the loader so that resolving a name, listing sites and shell
completion never import YAML or the schema.  Paths are plain strings: this
runs at the start of every submission.
"""

import os

from slurmkit.errors import ConfigError, UsageError

SITE_SUFFIXES = (".yaml", ".yml")


def _repo_site_configs():
    # <checkout>/site_configs, next to the slurmkit package (development
    # checkouts only; an installed package has none and skips it).
    here = os.path.dirname(os.path.realpath(__file__))
    return os.path.join(os.path.dirname(os.path.dirname(here)), "site_configs")


def site_search_path():
    # type: () -> list
    """Directories searched for ``<name>.yaml``, first match wins."""
    dirs = [os.path.expanduser(entry) for entry in os.environ.get("SLURMKIT_SITE_PATH", "").split(os.pathsep)
            if entry]
    home = os.path.expanduser("~")
    if home != "~":  # no home directory (some batch environments): skip the user's directory
        dirs.append(os.path.join(home, ".config", "slurmkit", "sites"))
    dirs.append("/etc/slurmkit/sites")
    repo = _repo_site_configs()
    if os.path.isdir(repo):
        dirs.append(repo)
    return dirs


def list_sites():
    # type: () -> Dict[str, str]
    """Site name (file stem) -> path of every site file on the search path.

    A name found in several directories maps to the first one, the one
    :func:`find_site` loads.
    """
    found = {}
    for directory in site_search_path():
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue  # missing or unreadable directory: nothing there for us
        for name in names:
            stem, suffix = os.path.splitext(name)
            path = os.path.join(directory, name)
            # A name with control characters (a newline) could not be typed as --site and would break the
            # one-line messages that list sites; a FIFO or device is no site file (os.path.isfile is False).
            if suffix in SITE_SUFFIXES and not name.startswith(".") and name.isprintable() \
                    and os.path.isfile(path):
                found.setdefault(stem, path)
    return found


def _looks_like_path(text):
    return "/" in text or os.sep in text or text.endswith(SITE_SUFFIXES)


def resolve_site_path(name_or_path):
    # type: (object) -> str
    """The file of a site given by file path or by name (``<name>.yaml`` on the search path)."""
    text = str(name_or_path)
    path = os.path.expanduser(text)
    if os.path.isfile(path) or _looks_like_path(text):
        if not os.path.exists(path):
            raise ConfigError("site config file %s does not exist" % text)
        return text
    for directory in site_search_path():
        for suffix in SITE_SUFFIXES:
            candidate = os.path.join(directory, text + suffix)
            if os.path.isfile(candidate):
                return candidate
    searched = ", ".join(str(d) for d in site_search_path())
    available = sorted(list_sites())
    if not available:
        raise UsageError("unknown site %r: no site config files found (searched %s); "
                         "add %s.yaml to one of those directories, set SLURMKIT_SITE_PATH, "
                         "or give the path of a site YAML file" % (text, searched, text))
    import difflib  # only for this error message

    close = difflib.get_close_matches(text, available, n=1)
    raise UsageError("unknown site %r%s; available sites: %s (searched %s)"
                     % (text, " (did you mean %r?)" % close[0] if close else "", ", ".join(available), searched))
