"""A Session: one site, and lazily opened backends for its clusters.

Commands create one Session, use it, and close it; connections to a cluster
(SSH to its login node) are opened on first use and reused for every later
call in the process.  Tests inject ``backend_factory`` to point a session at
their own backends.
"""

import threading
from typing import Callable, Dict, Optional

from slurmkit.site.model import Cluster, Site
from slurmkit.slurm.backend import SlurmBackend


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
                    from slurmkit.slurm import make_backend

                    self._factory = make_backend
                self._backends[cluster.name] = self._factory(cluster)
            return self._backends[cluster.name]

    def layout(self, cluster: Cluster):
        """The cluster's switch layout, from the on-disk cache when fresh (read once per session)."""
        from slurmkit import slurm, topology

        if cluster.name not in self._layouts:
            if self._topology_cache is None:
                self._topology_cache = topology.TopologyCache()
            key = "%s-%s-%s" % (self.site.name, cluster.name, slurm.reach(cluster))
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
