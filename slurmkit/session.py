"""A Session: one site, and lazily opened backends for its clusters.

This is where a transport is wired to a backend (:func:`reach`,
:func:`make_backend`): ``slurmkit.slurm`` knows nothing of SSH and
``slurmkit.remote`` nothing of backends.

Commands create one Session, use it, and close it; connections to a cluster
(SSH to its login node) are opened on first use and reused for every later
call in the process.  Tests inject ``backend_factory`` to point a session at
their own backends.
"""

import os
import threading
from typing import Callable, Dict, Optional

from slurmkit.site.model import Cluster, Site
from slurmkit.slurm.backend import CommandBackend, SlurmBackend


class Session:
    def __init__(self, site: Site, backend_factory: Optional[Callable[[Cluster], SlurmBackend]] = None,
                 topology_cache=None):
        self.site = site
        self._factory = backend_factory
        self._backends: Dict[str, SlurmBackend] = {}
        self._lock = threading.Lock()
        self._topology_cache = topology_cache
        self._layouts: Dict[str, object] = {}   # per process: the disk cache is read once per cluster

    def backend(self, cluster_name: str) -> SlurmBackend:
        cluster = self.site.cluster(cluster_name)
        with self._lock:
            if cluster.name not in self._backends:
                if self._factory is None:
                    self._factory = make_backend
                self._backends[cluster.name] = self._factory(cluster)
            return self._backends[cluster.name]

    def files(self, cluster_name: str):
        """The cluster's files (:class:`slurmkit.clusterfiles.ClusterFiles`): here when it is reached
        locally, on its login node through its backend's connection otherwise."""
        from slurmkit.clusterfiles import ClusterFiles

        if reach(self.site.cluster(cluster_name)) == "local":
            return ClusterFiles()                        # plain file operations: no backend to open
        backend = self.backend(cluster_name)
        return ClusterFiles(backend.runner, backend.checked)

    def layout(self, cluster: Cluster, refresh: bool = False, nodes=None):
        """The cluster's switch layout, from the on-disk cache when fresh (read once per session).

        ``refresh``: read it from Slurm now (``nodes``, already read, saves one RPC) and store it in
        the cache, so later commands see a cluster that changed without waiting for the TTL.
        """
        from slurmkit.script import topology

        if self._topology_cache is None:
            self._topology_cache = topology.TopologyCache()
        key = "%s-%s-%s" % (self.site.name, cluster.name, reach(cluster))
        if refresh:
            layout = topology.load_layout(self.backend(cluster.name), nodes)
            self._topology_cache.put(key, layout)
            self._layouts[cluster.name] = layout
        elif cluster.name not in self._layouts:
            self._layouts[cluster.name] = self._topology_cache.get(
                key, lambda: topology.load_layout(self.backend(cluster.name)))
        return self._layouts[cluster.name]

    def close(self):
        with self._lock:
            backends, self._backends = list(self._backends.values()), {}
        for backend in backends:
            backend.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def reach(cluster) -> str:
    """'local' or 'ssh': how this process reaches ``cluster``.

    SLURMKIT_VIA=local|ssh forces it.  Otherwise a cluster whose ``slurm_conf``
    exists on this machine (or that has no login node) is used locally, and
    any other cluster through its login node.
    """
    forced = os.environ.get("SLURMKIT_VIA", "").strip().lower()
    if forced in ("local", "ssh"):
        if forced == "ssh" and cluster.login is None:
            from slurmkit.errors import ConfigError

            raise ConfigError("SLURMKIT_VIA=ssh but cluster %r has no login node in the site config" % cluster.name)
        return forced
    if cluster.login is None or (cluster.slurm_conf and os.path.exists(cluster.slurm_conf)):
        return "local"
    return "ssh"


def make_backend(cluster, prefer_pyslurm: bool = True) -> SlurmBackend:
    """The backend for ``cluster``, reached as :func:`reach` decides.

    Locally, pyslurm is used only when it imports and its MAJOR.MINOR equals
    the cluster's Slurm (``pyslurm_backend.unusable_reason`` checks); otherwise the
    Slurm commands.  That check waits for the first call that would use pyslurm
    (``PyslurmBackend``'s ``when_needed``): most commands never make one.
    SLURMKIT_BACKEND=commands|pyslurm forces a choice.
    """
    forced = os.environ.get("SLURMKIT_BACKEND", "").strip().lower()
    if reach(cluster) == "ssh":
        from slurmkit.remote.runner import SSHRunner

        return CommandBackend(SSHRunner(cluster.login, cluster.name), cluster.name, submit_once=True)
    from slurmkit.slurm.runner import LocalRunner

    if cluster.slurm_conf and not os.path.exists(cluster.slurm_conf):
        # Every Slurm command would retry for about a minute before saying so.
        from slurmkit.errors import SlurmUnavailableError

        raise SlurmUnavailableError("slurm_conf %s of cluster %s does not exist on this machine; run slurmkit where "
                                    "the cluster's Slurm config is, or give the cluster a login node"
                                    % (cluster.slurm_conf, cluster.name))
    runner = LocalRunner({"SLURM_CONF": cluster.slurm_conf} if cluster.slurm_conf else None)
    from slurmkit.slurm import pyslurm_installed

    if forced != "commands" and prefer_pyslurm and (forced == "pyslurm" or pyslurm_installed()):
        from slurmkit.slurm import pyslurm_backend

        if forced != "pyslurm":
            return pyslurm_backend.PyslurmBackend(cluster, runner, when_needed=True)
        reason = pyslurm_backend.unusable_reason(runner, cluster)
        if reason is not None:
            from slurmkit.errors import UsageError

            raise UsageError("SLURMKIT_BACKEND=pyslurm but pyslurm cannot be used: %s" % reason)
        return pyslurm_backend.PyslurmBackend(cluster, runner)
    return CommandBackend(runner, cluster.name)
