"""A small site of fake clusters, and a Session whose backends are FakeSlurm."""

from typing import Optional

from slurmkit.testing.fakeslurm import FakeSlurm


def fake_site(*names: str, gpus_per_node: int = 8, gpu_model: str = "h100", max_nodes: Optional[int] = None):
    """A site of local clusters ``names`` (default: alpha, beta), each with one ``gpu`` partition."""
    from slurmkit.site.model import Cluster, Defaults, Partition, Site

    names = names or ("alpha", "beta")
    clusters = {}
    for name in names:
        part = Partition(name="gpu", accelerator="nvidia", gpu_model=gpu_model, gpus_per_node=gpus_per_node,
                         max_nodes=max_nodes)
        clusters[name] = Cluster(name=name, partitions={"gpu": part}, default_partition="gpu")
    return Site(name="fake", path="/dev/null", clusters=clusters, defaults=Defaults(cluster=names[0]))


def fake_session(site=None, **backends: FakeSlurm):
    """A Session whose clusters are the given FakeSlurm backends (by cluster name).

    ``fake_session(alpha=FakeSlurm("alpha"), beta=FakeSlurm("beta"))`` builds
    the site too.  A cluster without a backend raises when used.
    """
    from slurmkit.session import Session

    site = site or fake_site(*backends)

    def factory(cluster):
        if cluster.name not in backends:
            raise KeyError("no FakeSlurm given for cluster %r" % cluster.name)
        return backends[cluster.name]

    return Session(site, backend_factory=factory, topology_cache=_NoCache())


class _NoCache:
    """A topology cache that never stores: every session asks its backend."""

    def get(self, key, load):
        return load()

    def put(self, key, layout):
        pass
