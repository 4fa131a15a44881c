"""Rendered scripts kept on disk, so resubmitting the same job skips Jinja2.

Researchers and daemons submit the same job again and again (retries,
requeues, repeated runs); importing and running Jinja2 is most of a
submission's start-up time.  A rendered script is stored with its token
replaced by a placeholder, under a key made of everything that shapes it:
the slurmkit version, the site file, every template file (path, size,
mtime), the cluster, partition, switch layout (with the cluster's cap on the
switch wait) and the job spec without its token.  On a hit only the token is put back.  The full key is stored in the
entry and compared, so a file-name collision can never return another job's
script.  Entries are JSON in the private cache directory.
"""

import json
import os
import zlib
from typing import Callable, Optional

from slurmkit.cache import private_dir, write_private
from slurmkit.script.render import TEMPLATE_SUFFIX, RenderedJob, template_dirs

PLACEHOLDER = "SLURMKIT-TOKEN-PLACEHOLDER"


def _stat(path: str):
    try:
        info = os.stat(path)
        return [path, info.st_size, info.st_mtime_ns]
    except OSError:
        return [path, None, None]


def _templates_fingerprint(site):
    files = []
    for directory in template_dirs(site):
        try:
            names = sorted(n for n in os.listdir(directory) if n.endswith(TEMPLATE_SUFFIX))
        except OSError:
            continue
        files.extend(_stat(os.path.join(directory, n)) for n in names)
    return files


def cache_key(site, cluster, partition, spec, layout) -> str:
    from slurmkit import __version__

    job = spec._replace(token=None)._asdict()
    return json.dumps({
        "version": __version__, "site": _stat(os.path.realpath(site.path)), "templates": _templates_fingerprint(site),
        "cluster": cluster.name, "partition": partition.name, "job": job,
        "layout": layout.to_dict() if layout is not None else None,
    }, sort_keys=True, default=str)


def render_cached(site, cluster, partition, spec, layout, render_fn: Callable[..., RenderedJob]) -> RenderedJob:
    """``render_fn(site, cluster, partition, spec, layout=layout)``, from the cache when possible."""
    directory = private_dir("rendered")
    if directory is None or spec.token is None:
        return render_fn(site, cluster, partition, spec, layout=layout)
    key = cache_key(site, cluster, partition, spec, layout)
    entry = os.path.join(directory, "%08x-%d.json" % (zlib.crc32(key.encode()), len(key)))
    hit = _read(entry, key)
    if hit is not None:
        return hit._replace(script=hit.script.replace(PLACEHOLDER, spec.token))
    rendered = render_fn(site, cluster, partition, spec._replace(token=PLACEHOLDER), layout=layout)
    if rendered.script.count(PLACEHOLDER) == 1:  # only then is putting the token back exact
        _write(entry, key, rendered)
    return rendered._replace(script=rendered.script.replace(PLACEHOLDER, spec.token))


def _read(entry, key) -> Optional[RenderedJob]:
    try:
        with open(entry) as fh:
            data = json.load(fh)
        if data["key"] != key:
            return None
        r = data["rendered"]
        return RenderedJob(script=r["script"], warnings=tuple(r["warnings"]), template=r["template"],
                           cluster=r["cluster"], partition=r["partition"], switches=r["switches"],
                           switch_wait=r["switch_wait"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write(entry, key, rendered: RenderedJob) -> None:
    write_private(entry, json.dumps({"key": key, "rendered": rendered._asdict()}))
