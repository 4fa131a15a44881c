"""Leaf-switch arithmetic, the layout cache and the tree drawing."""

import json

import pytest

from slurmkit.script import topology
from slurmkit.errors import JobDoesNotFitError
from slurmkit.slurm.types import NodeInfo, Switch, Topology
from slurmkit.testing import FakeClock

TREE = Topology((Switch("leaf1", 0, "an[1-2]", ""), Switch("leaf2", 0, "an[3-4]", ""),
                 Switch("spine", 1, "an[1-4]", "leaf[1-2]")))
LAYOUT = topology.ClusterLayout(TREE, {"gpu": "an[1-4]", "small": "an[1,3]"})


@pytest.mark.parametrize("sizes,count,expected", [
    ([2, 2], 1, 1), ([2, 2], 2, 1), ([2, 2], 3, 2), ([2, 2], 4, 2),
    ([4, 16, 8], 16, 1), ([4, 16, 8], 17, 2), ([4, 16, 8], 25, 3)])
def test_min_leaf_switches(sizes, count, expected):
    assert topology.min_leaf_switches(sizes, count) == expected


def test_min_leaf_switches_refuses_too_many_nodes():
    with pytest.raises(JobDoesNotFitError, match="needs 5 nodes but the partition has only 4"):
        topology.min_leaf_switches([2, 2], 5)


def test_switches_count_only_the_partitions_nodes():
    assert topology.switches_for(LAYOUT, "gpu", 2) == 1
    assert topology.switches_for(LAYOUT, "gpu", 3) == 2
    assert topology.switches_for(LAYOUT, "small", 2) == 2  # one node of it under each leaf


def test_no_tree_topology_gives_none():
    assert topology.switches_for(topology.ClusterLayout(Topology(()), {"gpu": "an[1-4]"}), "gpu", 2) is None


def test_leaves_of():
    assert topology.leaves_of(LAYOUT, "an[2-3]") == ["leaf1", "leaf2"]
    assert topology.leaves_of(LAYOUT, "an1") == ["leaf1"]


def test_cache_loads_once_then_reuses_until_stale(tmp_path):
    clock = FakeClock()
    cache = topology.TopologyCache(tmp_path, ttl=60, clock=clock)
    calls = []

    def load():
        calls.append(1)
        return LAYOUT

    assert cache.get("alpha", load) == LAYOUT
    assert cache.get("alpha", load) == LAYOUT
    assert len(calls) == 1
    clock.advance(61)
    cache.get("alpha", load)
    assert len(calls) == 2


def test_cache_survives_a_corrupt_file(tmp_path):
    cache = topology.TopologyCache(tmp_path)
    (tmp_path / "alpha.json").write_text("{not json")
    assert cache.get("alpha", lambda: LAYOUT) == LAYOUT
    assert json.loads((tmp_path / "alpha.json").read_text())["layout"]["partition_nodes"]["gpu"] == "an[1-4]"


def test_slurmkit_topology_stores_what_it_read_so_the_next_submit_sees_a_changed_cluster(tmp_path):
    """`slurmkit topology` asks Slurm anyway: a node added since the cached layout (10-minute TTL) is
    in the layout the next command reads, not after the TTL."""
    from slurmkit.cli.display import topology_report
    from slurmkit.session import Session
    from slurmkit.testing import FakeNode, FakeSlurm, fake_site

    fake = FakeSlurm("alpha", nodes=("n1", "n2"))
    site = fake_site("alpha")

    def session():
        return Session(site, backend_factory=lambda cluster: fake, topology_cache=topology.TopologyCache(tmp_path))

    def gpu_nodes(layout):
        return topology.hostlist.expand(layout.partition_nodes["gpu"])

    assert gpu_nodes(session().layout(site.cluster("alpha"))) == ["n1", "n2"]
    fake.nodes_table["n3"] = FakeNode("n3", ("gpu",), "gpu:h100:8", 4)
    assert gpu_nodes(session().layout(site.cluster("alpha"))) == ["n1", "n2"]   # cached, still fresh
    assert topology_report(session(), "alpha").startswith("cluster alpha")
    assert gpu_nodes(session().layout(site.cluster("alpha"))) == ["n1", "n2", "n3"]


def test_draw_shows_states_and_free_gpus():
    nodes = [NodeInfo("an1", "IDLE", gres={"gpu:h100": 8}), NodeInfo("an2", "MIXED", gres={"gpu:h100": 8},
                                                                       gres_used={"gpu:h100": 6}),
             NodeInfo("an3", "DOWN", gres={"gpu:h100": 8}), NodeInfo("an4", "IDLE", gres={"gpu:h100": 8})]
    text = topology.draw(LAYOUT, nodes)
    lines = text.splitlines()
    assert lines[0] == "spine (level 1, 18 gpu free)"   # an3 is down: its GPUs do not count
    assert any("leaf1 (level 0, 10 gpu free)" in ln for ln in lines)
    assert any("an2" in ln and "mixed" in ln and "2/8 gpu free" in ln for ln in lines)
    assert any("an3" in ln and "down" in ln for ln in lines)
