"""Switch groups: a heavy job over several leaves kept within one group of leaves (a spine).

``clusters.<c>.switch_group_features`` names node features that each mark a
group; the renderer adds Slurm's matching OR ``--constraint=[a|b|...]``,
offering only groups that can hold the job, and combines it with the user's
own ``--constraint``.  The same on a real 256-node cluster:
tests/integration/test_scale.py.
"""

import json
from pathlib import Path

import pytest

from slurmkit.cli import main
from slurmkit.errors import ConfigError, UsageError
from slurmkit.script import render, topology
from slurmkit.script.topology import ClusterLayout
from slurmkit.site import load_site
from slurmkit.slurm import parsers
from slurmkit.slurm.types import NodeInfo, Switch, Topology

from harness import assert_golden

ROOT = Path(__file__).resolve().parents[2]
IB = ROOT / "site_configs" / "example-infiniband.yaml"
SPEC = render.JobSpec(command=("python", "train.py"), nodes=4, comm="heavy", token="0123456789abcdef")


def _layout(groups, nodes_per_leaf=3, extra=None):
    """Leaves of ``nodes_per_leaf`` nodes; ``groups``: feature -> its number of leaves, in order;
    ``extra``: feature -> node names also carrying it."""
    switches, features, names = [], {}, []
    for feature, count in groups:
        for _ in range(count):
            leaf = ["n%d" % (len(names) + i) for i in range(nodes_per_leaf)]
            names += leaf
            switches.append(Switch("leaf%d" % len(switches), 0, ",".join(leaf), ""))
            features.setdefault(feature, []).extend(leaf)
    for feature, members in (extra or {}).items():
        features[feature] = list(members)
    nodes = [NodeInfo(n, "IDLE", features=tuple(f for f, m in sorted(features.items()) if n in m)) for n in names]
    return ClusterLayout(Topology(tuple(switches)), {"gpu": ",".join(names)}, 3600, topology.features_of(nodes))


def _site(features=("spine1", "spine2")):
    site = load_site(str(IB))
    cluster = site.cluster()
    cluster = cluster._replace(switch_group_features=tuple(features))
    return site._replace(clusters=dict(site.clusters, **{cluster.name: cluster}))


def _render(spec=SPEC, layout=None, site=None, **changes):
    site = site or _site()
    cluster = site.cluster()
    return render.render(site, cluster, site.partition(cluster), spec._replace(**changes), layout=layout)


TWO_SPINES = [("spine1", 2), ("spine2", 2)]   # 4 leaves of 3 nodes, 2 per spine


def test_golden_heavy_job_over_two_leaves_gets_the_matching_or_of_the_groups():
    rendered = _render(layout=_layout(TWO_SPINES))
    assert_golden(rendered.script, "infiniband-torchrun-switch-groups.sh")
    assert '#SBATCH --switches=2@00:30:00\n#SBATCH --constraint="[spine1|spine2]"\n' in rendered.script
    assert rendered.constraint == "[spine1|spine2]" and rendered.warnings == ()
    assert rendered.to_dict()["constraint"] == "[spine1|spine2]"


def test_a_job_under_one_leaf_needs_no_group():
    rendered = _render(layout=_layout(TWO_SPINES), nodes=3)
    assert rendered.switches == 1 and rendered.constraint is None and "--constraint" not in rendered.script


def test_only_groups_that_hold_the_job_are_offered():
    # spine1 has 2 leaves (6 nodes), spine2 3 leaves (9): 7 nodes fit only under spine2, as one plain feature.
    rendered = _render(layout=_layout([("spine1", 2), ("spine2", 3)]), nodes=7)
    assert rendered.switches == 3 and "#SBATCH --constraint=spine2\n" in rendered.script
    # A group that fits the nodes only in more leaves than --switches asks is left out too.
    layout = _layout([("spine1", 2), ("spine2", 1), ("spine3", 1)], nodes_per_leaf=3)
    wide = ClusterLayout(layout.topology, layout.partition_nodes, 3600,
                         dict(layout.node_features, spine2="n6,n7,n8,n9,n10,n11"))
    assert _render(layout=wide, site=_site(("spine1", "spine2", "spine3")), nodes=6).constraint == "[spine1|spine2]"


def test_a_group_feature_no_node_carries_any_more_is_not_offered():
    # The site still names spine3 (its nodes were retired); a matching OR naming a feature that no
    # node has would be refused by sbatch, so only the groups the layout shows are offered.
    rendered = _render(layout=_layout(TWO_SPINES), site=_site(("spine1", "spine2", "spine3")))
    assert rendered.constraint == "[spine1|spine2]" and rendered.warnings == ()
    # With every group gone the job goes without a constraint, and says why.
    alone = _render(layout=_layout(TWO_SPINES), site=_site(("spine3",)))
    assert alone.constraint is None and "--constraint" not in alone.script
    assert alone.warnings and "no switch group of partition gpu (spine3)" in alone.warnings[0]


def test_no_group_holds_the_job_warns_and_adds_no_constraint():
    rendered = _render(layout=_layout(TWO_SPINES), nodes=9)
    assert rendered.switches == 3 and "--constraint" not in rendered.script
    assert rendered.warnings == ("no switch group of partition gpu (spine1, spine2) holds 9 nodes under 3 leaf "
                                 "switches; the job is not kept within one group",)


def test_light_jobs_and_sites_without_groups_get_only_the_users_constraint():
    assert "#SBATCH --constraint=a100\n" in _render(layout=_layout(TWO_SPINES), comm="light",
                                                    constraint="a100").script
    rendered = _render(layout=_layout(TWO_SPINES), site=_site(()), constraint="a100&ib")
    assert '#SBATCH --constraint="a100&ib"\n' in rendered.script and rendered.switches == 2


def test_the_users_features_are_anded_with_the_groups_that_have_them():
    # Only spine2's nodes have 'ib': spine1 is no longer offered.
    layout = _layout(TWO_SPINES, extra={"ib": ["n%d" % i for i in range(6, 12)]})
    assert _render(layout=layout, constraint="ib").constraint == "ib&spine2"
    assert _render(layout=_layout(TWO_SPINES, extra={"ib": ["n%d" % i for i in range(12)]}),
                   constraint="ib").constraint == "ib&[spine1|spine2]"
    # A group named by the user is the user's choice, kept as it is.
    assert _render(layout=layout, constraint="spine1").constraint == "spine1"


@pytest.mark.parametrize("constraint", ["a|b", "[a|b]", "a*2", "(a&b)", "a,b"])
def test_a_constraint_that_cannot_be_combined_with_the_group_is_refused(constraint):
    with pytest.raises(UsageError, match="cannot be combined with --comm heavy on cluster hopper.*a&b"):
        _render(layout=_layout(TWO_SPINES), constraint=constraint)
    # ... but passes through for a light job, quoted for sbatch.
    assert "#SBATCH --constraint=" in _render(layout=None, comm="light", constraint=constraint).script


@pytest.mark.parametrize("constraint", ["", " a100", "a100 "])
def test_an_empty_or_padded_constraint_is_refused(constraint):
    with pytest.raises(UsageError, match="--constraint"):
        _render(layout=None, comm="light", constraint=constraint)


def test_without_the_layout_an_explicit_switch_count_gets_every_group():
    rendered = _render(layout=None, switches=2)
    assert rendered.constraint == "[spine1|spine2]" and rendered.switch_wait == "00:30:00"


def test_a_template_with_its_own_constraint_is_refused(tmp_path):
    (tmp_path / "pinned.sh.j2").write_text(
        '{% extends "torchrun.sh.j2" %}{% block template_name %}pinned\n#SBATCH -C rack7{% endblock %}')
    site = _site()._replace(template_dirs=(str(tmp_path),))
    with pytest.raises(ConfigError, match=r"template pinned sets its own node constraint \(#SBATCH -C rack7\)"):
        _render(layout=_layout(TWO_SPINES), site=site, template="pinned")
    # Without a constraint of slurmkit's, the template's own stands.
    assert "#SBATCH -C rack7" in _render(layout=None, site=site, template="pinned", comm="light").script


def test_node_features_from_scontrol_and_the_layout_cache():
    text = ("NodeName=sn0001 State=IDLE AvailableFeatures=spine01,h100 ActiveFeatures=spine01,h100\n"
            "NodeName=sn0002 State=IDLE AvailableFeatures=spine01,h100 ActiveFeatures=spine01,h100\n"
            "NodeName=sn0129 State=IDLE AvailableFeatures=(null) ActiveFeatures=(null)\n")
    nodes = parsers.parse_nodes(text)
    assert [n.features for n in nodes] == [("spine01", "h100"), ("spine01", "h100"), ()]
    assert topology.features_of(nodes) == {"h100": "sn[0001-0002]", "spine01": "sn[0001-0002]"}
    layout = _layout(TWO_SPINES)
    assert ClusterLayout.from_dict(json.loads(json.dumps(layout.to_dict()))) == layout
    old = layout.to_dict()
    del old["node_features"]  # an entry of an older slurmkit: a miss, loaded afresh
    with pytest.raises(KeyError):
        ClusterLayout.from_dict(old)


def test_load_layout_reads_the_features_once():
    class Backend:
        calls = []

        def partitions(self):
            self.calls.append("partitions")
            return {"gpu": {"Nodes": "n[0-1]"}}

        def topology(self):
            self.calls.append("topology")
            return Topology((Switch("leaf0", 0, "n[0-1]", ""),))

        def config(self):
            self.calls.append("config")
            return {}

        def nodes(self):
            self.calls.append("nodes")
            return [NodeInfo("n0", "IDLE", features=("s1",)), NodeInfo("n1", "IDLE", features=("s1",))]

    backend = Backend()
    assert topology.load_layout(backend).node_features == {"s1": "n[0-1]"}
    assert sorted(backend.calls) == ["config", "nodes", "partitions", "topology"]
    del backend.calls[:]
    given = [NodeInfo("n0", "IDLE", features=("s2",))]
    assert topology.load_layout(backend, given).node_features == {"s2": "n0"} and "nodes" not in backend.calls


@pytest.mark.parametrize("value,message", [
    ("[]", "needs at least 1 item"),
    ("[spine1, 'a|b']", "'a|b' is not a node feature name"),
    ("[spine1, spine1]", "'spine1' is listed twice"),
])
def test_bad_switch_group_features_are_config_errors(tmp_path, capsys, value, message):
    text = IB.read_text().replace("    default_partition: gpu\n",
                                  "    default_partition: gpu\n    switch_group_features: %s\n" % value, 1)
    assert "switch_group_features" in text
    path = tmp_path / "site.yaml"
    path.write_text(text)
    code = main(["site", "validate", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and "switch_group_features" in err and message in err, err


def test_the_cli_passes_constraint_to_the_script(capsys):
    code = main(["render", "--site", str(IB), "--constraint", "a100&ib", "--", "python", "train.py"])
    out = capsys.readouterr().out
    assert code == 0 and '#SBATCH --constraint="a100&ib"\n' in out
