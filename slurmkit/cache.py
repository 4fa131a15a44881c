"""Where slurmkit keeps a user's files: private cache directories (the site, script and topology
caches) and the state directory (the requeue and sweep journals, the health state).

Start-up time matters: ``slurmkit submit`` runs as a fresh process for every
job, so parsed site configs, compiled and rendered templates are kept on
disk.  Some cached files are executable data (Jinja2's compiled templates
are Python bytecode), so a cache directory is used only when it is owned by
the current user and closed to others; anything else silently disables
caching rather than trusting the files.  The site cache itself is JSON.
Paths are plain strings: this module is on every submission's path.
"""

import os
import stat


def state_dir() -> str:
    """The user's state directory: ``$SLURMKIT_STATE_DIR``, else ``$XDG_STATE_HOME/slurmkit``
    (``~/.local/state/slurmkit``)."""
    return os.environ.get("SLURMKIT_STATE_DIR") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"), "slurmkit")


def cache_root() -> str:
    return os.environ.get("SLURMKIT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "slurmkit")


def private_dir(name: str) -> "str | None":   # a string: typing costs 2 ms, and --help is served in ~10
    """``<cache root>/<name>``, created 0700; None when it is not safely ours."""
    path = os.path.join(cache_root(), name)
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.stat(path)
    except OSError:
        return None
    if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None
    return path


def write_private(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically, readable by the user only; errors are ignored (it is a cache)."""
    from slurmkit.textfile import write_atomic

    try:
        write_atomic(path, text, mode=0o600)   # a concurrent reader sees the old file or the new one, never half
    except OSError:
        pass
