"""The parsed site config, kept on disk between processes.

``slurmkit submit`` runs as a fresh process for every job; parsing YAML and
validating the schema would be most of its start-up.  The cache is JSON in
the user's private cache directory (never pickle: no code from the cache dir
is ever unpickled).
"""

import json
import os


def load_site_cached(path: str):
    """The Site in ``path``, from the cache when the file is unchanged.

    The key is the file's real path, size and modification time plus the
    slurmkit version, so an edited config or an upgrade is loaded afresh.
    """
    from slurmkit import __version__
    from slurmkit.cache import private_dir, write_private
    from slurmkit.site.model import as_plain, site_from_plain

    real = os.path.realpath(path)
    directory = private_dir("sites")
    try:
        info = os.stat(real)
    except OSError:
        directory = None
    if directory is not None:
        key = [real, info.st_size, info.st_mtime_ns, __version__]
        entry = os.path.join(directory, "".join(c if c.isalnum() else "_" for c in real)[-150:] + ".json")
        try:
            with open(entry) as fh:
                data = json.load(fh)
            if data["key"] == key:
                return site_from_plain(data["site"])
        except (OSError, ValueError, KeyError, TypeError):
            pass  # missing, corrupt or from another version: load the file below
    from slurmkit.site.loader import load_site

    site = load_site(path)
    if directory is not None:
        write_private(entry, json.dumps({"key": key, "site": as_plain(site)}))
    return site
