"""Private per-user cache directories, and the cached site config.

Start-up time matters: ``slurmkit submit`` runs as a fresh process for every
job, so parsed site configs and compiled templates are kept on disk.  Cached
files are executable data (pickle, Python bytecode), so a cache directory is
used only when it is owned by the current user and closed to others;
anything else silently disables caching rather than trusting the files.
"""

import os
import pickle
import stat
from pathlib import Path
from typing import Optional


def cache_root() -> Path:
    base = os.environ.get("SLURMKIT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "slurmkit")
    return Path(base)


def private_dir(name: str) -> Optional[Path]:
    """``<cache root>/<name>``, created 0700; None when it is not safely ours."""
    path = cache_root() / name
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = path.stat()
    except OSError:
        return None
    if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None
    return path


def _trusted_file(path: Path) -> bool:
    try:
        info = path.stat()
    except OSError:
        return False
    return info.st_uid == os.getuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def load_site_cached(path: str):
    """The Site in ``path``, from the cache when the file is unchanged.

    The key is the file's real path, size and modification time plus the
    slurmkit version, so an edited config or an upgrade is loaded afresh.
    """
    from slurmkit import __version__

    real = os.path.realpath(path)
    directory = private_dir("sites")
    try:
        info = os.stat(real)
    except OSError:
        directory = None
    if directory is not None:
        key = "%s-%d-%d-%s" % (real, info.st_size, info.st_mtime_ns, __version__)
        entry = directory / ("".join(c if c.isalnum() else "_" for c in real)[-150:] + ".pickle")
        if _trusted_file(entry):
            try:
                with open(entry, "rb") as fh:
                    stored_key, site = pickle.load(fh)
                if stored_key == key:
                    return site
            except Exception:  # corrupt or from another Python: reload below
                pass
    from slurmkit.site.loader import load_site

    site = load_site(path)
    if directory is not None:
        tmp = entry.with_suffix(".tmp%d" % os.getpid())
        try:
            with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as fh:
                pickle.dump((key, site), fh, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, entry)
        except OSError:
            pass
    return site
