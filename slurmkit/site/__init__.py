"""Site configs: one YAML file per site describes its clusters and partitions.

``load_site(path)`` validates and loads a file into :class:`model.Site`;
``find_site(name_or_path)`` also looks names up on the site search path;
``validate_files(paths)`` lists every problem without raising; ``list_sites()``
maps the names on the search path to their files.
"""

from slurmkit.site.loader import Problem, find_site, list_sites, load_site, site_search_path, validate_files

__all__ = ["Problem", "find_site", "list_sites", "load_site", "site_search_path", "validate_files"]
