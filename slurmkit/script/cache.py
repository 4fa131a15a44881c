"""Rendered scripts kept on disk, so resubmitting the same job skips Jinja2.

Researchers and daemons submit the same job again and again (retries,
requeues, repeated runs); importing and running Jinja2 is most of a
submission's start-up time.  A rendered script is stored with its token
replaced by a placeholder, under a key made of everything that shapes it:
the slurmkit version, the site file, every template file (path, size,
mtime), the cluster, partition, switch layout (with the cluster's cap on the
switch wait) and the job spec without its token.  The full key is stored in
the entry and compared, so a file-name collision can never return another
job's script.  Entries are JSON in the private cache directory.

Putting the token back is exact by construction: each entry has its own
random placeholder (so no user argument can contain it), the placeholder
must occur exactly once in the script, inside the one ``#SBATCH
--comment=slurmkit:...`` line, and only that line is replaced.  A script
where that does not hold (a site template printing the token elsewhere) is
rendered afresh with the real token and not cached.
"""

import json
import os
import zlib
from typing import Callable, Optional, Tuple

from slurmkit.cache import private_dir, write_private
from slurmkit.script.render import RenderedJob
from slurmkit.script.templates import TEMPLATE_SUFFIX, template_dirs

PLACEHOLDER_PREFIX = "slurmkit-cache-placeholder-"


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


def new_placeholder() -> str:
    return PLACEHOLDER_PREFIX + os.urandom(12).hex()


def _comment_line(token: str) -> str:
    # The directive build_directives writes (a token needs no sbatch quoting).
    return "#SBATCH --comment=slurmkit:%s\n" % token


def put_token(script: str, placeholder: str, token: str) -> Optional[str]:
    """``script`` with its one ``--comment`` line carrying ``token`` instead of ``placeholder``;
    None unless the placeholder occurs exactly once, in that line."""
    line = _comment_line(placeholder)
    if script.count(placeholder) != 1 or script.count(line) != 1:
        return None
    return script.replace(line, _comment_line(token), 1)


def render_cached(site, cluster, partition, spec, layout, render_fn: Callable[..., RenderedJob]) -> RenderedJob:
    """``render_fn(site, cluster, partition, spec, layout=layout)``, from the cache when possible."""
    directory = private_dir("rendered")
    if directory is None or spec.token is None:
        return render_fn(site, cluster, partition, spec, layout=layout)
    key = cache_key(site, cluster, partition, spec, layout)
    entry = os.path.join(directory, "%08x-%d.json" % (zlib.crc32(key.encode()), len(key)))
    hit = _read(entry, key)
    if hit is not None:
        rendered, placeholder = hit
        script = put_token(rendered.script, placeholder, spec.token)
        if script is not None:
            return rendered._replace(script=script)
    placeholder = new_placeholder()
    rendered = render_fn(site, cluster, partition, spec._replace(token=placeholder), layout=layout)
    script = put_token(rendered.script, placeholder, spec.token)
    if script is None:
        return render_fn(site, cluster, partition, spec, layout=layout)
    _write(entry, key, rendered, placeholder)
    return rendered._replace(script=script)


def _read(entry, key) -> Optional[Tuple[RenderedJob, str]]:
    try:
        with open(entry, encoding="utf-8") as fh:
            data = json.load(fh)
        if data["key"] != key or not str(data["placeholder"]).startswith(PLACEHOLDER_PREFIX):
            return None
        r = data["rendered"]
        return RenderedJob(script=r["script"], warnings=tuple(r["warnings"]), template=r["template"],
                           cluster=r["cluster"], partition=r["partition"], switches=r["switches"],
                           switch_wait=r["switch_wait"], output=r["output"], name=r["name"],
                           constraint=r["constraint"], image=r["image"], runtime=r["runtime"]), data["placeholder"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write(entry, key, rendered: RenderedJob, placeholder: str) -> None:
    write_private(entry, json.dumps({"key": key, "placeholder": placeholder, "rendered": rendered._asdict()}))
