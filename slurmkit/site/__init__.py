"""Site configs: one YAML file per site describes its clusters and partitions.

``find_site(name_or_path)`` returns the :class:`model.Site` (validated, and
cached on disk while the file is unchanged); ``load_site(path)`` always
validates afresh; ``validate_files(paths)`` lists every problem without
raising; ``list_sites()`` maps the names on the search path to their files.
The YAML loader is imported only when a file really has to be parsed.
"""

from slurmkit.site.locate import list_sites, resolve_site_path, site_search_path

__all__ = ["Problem", "find_site", "list_sites", "load_site", "resolve_site_path", "site_search_path",
           "validate_files"]


def find_site(name_or_path):
    from slurmkit.site.cache import load_site_cached

    return load_site_cached(resolve_site_path(name_or_path))


def load_site(path):
    from slurmkit.site.loader import load_site as _load

    return _load(path)


def validate_files(paths):
    from slurmkit.site.loader import validate_files as _validate

    return _validate(paths)


def __getattr__(name):  # Problem lives with the loader; import it only when asked for
    if name == "Problem":
        from slurmkit.site.loader import Problem

        return Problem
    raise AttributeError(name)
