"""topology.draw_summary: one line per switch, what `slurmkit topology` shows above 64 nodes."""

from slurmkit.script import topology
from slurmkit.slurm.types import NodeInfo, Switch, Topology


def three_levels(n_nodes=64):
    """16 nodes per leaf, 2 leaves per spine, one core: the shape of devcluster/scale.py, smaller."""
    leaves, spines = [], []
    for k in range(n_nodes // 16):
        leaves.append(Switch("leaf%02d" % (k + 1), 0, "sn[%04d-%04d]" % (16 * k + 1, 16 * k + 16), ""))
    for s in range(len(leaves) // 2):
        a, b = leaves[2 * s], leaves[2 * s + 1]
        spines.append(Switch("spine%d" % (s + 1), 1, "sn[%04d-%04d]" % (32 * s + 1, 32 * s + 32),
                             "%s,%s" % (a.name, b.name)))
    core = Switch("core", 2, "sn[0001-%04d]" % n_nodes, ",".join(s.name for s in spines))
    return topology.ClusterLayout(Topology(tuple(leaves + spines + [core])), {"gpu": "sn[0001-%04d]" % n_nodes})


def test_summary_has_one_line_per_switch_with_states_and_free_gpus():
    layout = three_levels(64)
    nodes = [NodeInfo("sn%04d" % i, "IDLE", gres={"gpu:h100": 8}) for i in range(1, 65)]
    nodes[0] = NodeInfo("sn0001", "MIXED", gres={"gpu:h100": 8}, gres_used={"gpu:h100": 6})
    nodes[20] = NodeInfo("sn0021", "DOWN+DRAIN", gres={"gpu:h100": 8})
    lines = topology.draw_summary(layout, nodes).splitlines()
    assert len(lines) == 1 + 2 + 4                       # core, 2 spines, 4 leaves; no node lines
    assert lines[0].split()[:2] == ["core", "64"]
    # 64 x 8 = 512 GPUs; sn0001 has 6 in use, sn0021 is down: 512 - 6 - 8 free.
    assert "498/512" in lines[0] and "62 idle, 1 mixed, 1 down" in lines[0]
    leaf1 = [ln for ln in lines if "leaf01" in ln][0]
    assert "122/128" in leaf1 and "sn[0001-0016]" in leaf1 and "15 idle, 1 mixed" in leaf1
    leaf2 = [ln for ln in lines if "leaf02" in ln][0]
    assert "120/128" in leaf2 and "15 idle, 1 down" in leaf2
    # The numbers start in the same column at every depth.
    assert len({ln.index(" nodes") for ln in lines}) == 1


def test_summary_of_a_cluster_without_a_tree():
    layout = topology.ClusterLayout(Topology(()), {"gpu": "an1"})
    assert "no switch topology" in topology.draw_summary(layout, [NodeInfo("an1", "IDLE")])
