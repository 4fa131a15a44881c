"""Finding site config files by name on the site search path.

Kept apart from the loader so that resolving a name, listing sites and shell
completion never import YAML or the schema.
"""

import difflib
import os
from pathlib import Path
from typing import Dict, List

from slurmkit.errors import ConfigError, UsageError

SITE_SUFFIXES = (".yaml", ".yml")


def _repo_site_configs():
    # <checkout>/site_configs, next to the slurmkit package (development
    # checkouts only; an installed package has none and skips it).
    return Path(__file__).resolve().parent.parent.parent / "site_configs"


def site_search_path():
    # type: () -> List[Path]
    """Directories searched for ``<name>.yaml``, first match wins."""
    dirs = [Path(entry).expanduser() for entry in os.environ.get("SLURMKIT_SITE_PATH", "").split(os.pathsep)
            if entry]
    try:
        dirs.append(Path.home() / ".config" / "slurmkit" / "sites")
    except (KeyError, RuntimeError):  # no home directory (some batch environments)
        pass
    dirs.append(Path("/etc/slurmkit/sites"))
    repo = _repo_site_configs()
    if repo.is_dir():
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
            files = sorted(directory.iterdir())
        except OSError:
            continue  # missing or unreadable directory: nothing there for us
        for file in files:
            if file.suffix in SITE_SUFFIXES and not file.name.startswith(".") and file.is_file():
                found.setdefault(file.stem, str(file))
    return found


def _looks_like_path(text):
    return "/" in text or os.sep in text or text.endswith(SITE_SUFFIXES)


def resolve_site_path(name_or_path):
    # type: (object) -> str
    """The file of a site given by file path or by name (``<name>.yaml`` on the search path)."""
    text = str(name_or_path)
    path = Path(text).expanduser()
    if path.is_file() or _looks_like_path(text):
        if not path.exists():
            raise ConfigError("site config file %s does not exist" % text)
        return text
    for directory in site_search_path():
        for suffix in SITE_SUFFIXES:
            candidate = directory / (text + suffix)
            if candidate.is_file():
                return str(candidate)
    searched = ", ".join(str(d) for d in site_search_path())
    available = sorted(list_sites())
    if not available:
        raise UsageError("unknown site %r: no site config files found (searched %s); "
                         "add %s.yaml to one of those directories, set SLURMKIT_SITE_PATH, "
                         "or give the path of a site YAML file" % (text, searched, text))
    close = difflib.get_close_matches(text, available, n=1)
    raise UsageError("unknown site %r%s; available sites: %s (searched %s)"
                     % (text, " (did you mean %r?)" % close[0] if close else "", ", ".join(available), searched))
