"""``site check --live``'s comparison (pure): a site file against facts Slurm and the probe job gave.

Each drift the issue names has its own test: the site file is written here
as an admin would, the cluster as scontrol prints it (22.05, --oneliner) and
the probe as the probe script prints it; the real clusters' drifts are in
tests/integration/test_site_init.py.
"""

import pytest

from harness import one_error_line, run_main

from slurmkit.discovery import check, facts, init, nodeprobe
from slurmkit.errors import SlurmkitError, UsageError
from slurmkit.site import load_site
from slurmkit.slurm import parsers
from slurmkit.testing import FakeSlurm

SITE = """site: hopper-site
clusters:
  hopper:
    max_switch_wait: "00:05:00"
    switch_group_features: [spine1, spine2]
    partitions:
      gpu:
        accelerator: nvidia
        gpu_model: h100
        gpus_per_node: 8
        cpus_per_node: 64
        memory_mb: 512000
        max_nodes: 4
        max_time: "24:00:00"
        fabric: {type: infiniband, hcas: ["=mlx5_0:1"], socket_ifname: ens1f0}
"""

NODES = "\n".join(
    "NodeName=g%d CPUTot=64 AvailableFeatures=%s ActiveFeatures=%s Gres=gpu:h100:8 NodeAddr=g%d RealMemory=512000 "
    "State=IDLE Partitions=gpu" % (i, spine, spine, i)
    for i, spine in ((1, "spine1"), (2, "spine1"), (3, "spine2"), (4, "spine2")))
PARTITIONS = "PartitionName=gpu Default=YES MaxNodes=UNLIMITED MaxTime=1-00:00:00 Nodes=g[1-4] State=UP TotalNodes=4"
TOPOLOGY = "SwitchName=leaf1 Level=0 Nodes=g[1-2]\nSwitchName=leaf2 Level=0 Nodes=g[3-4]\n"
CONFIG = {"ClusterName": "hopper", "SchedulerParameters": "max_switch_wait=600"}

PROBED = """node g1
addr g1 10.1.0.1
route 10.1.0.1 dev ens1f0 src 10.1.0.1
iface lo|0x9|unknown
iface ens1f0|0x1003|up
rdma mlx5_0:1|4: ACTIVE|InfiniBand|400 Gb/sec (4X NDR)
rdma mlx5_1:1|1: DOWN|InfiniBand|400 Gb/sec (4X NDR)
devices nvidia 8
end
"""


def site_of(tmp_path, text=SITE):
    path = tmp_path / "site.yaml"
    path.write_text(text)
    return load_site(str(path))


def live(nodes=NODES, partitions=PARTITIONS, config=None):
    return facts.cluster_facts("hopper", "22.05.8", dict(CONFIG, **(config or {})),
                               parsers.parse_partitions(partitions), parsers.parse_nodes(nodes),
                               parsers.parse_topology(TOPOLOGY))


def probes_of(got, text=PROBED):
    """Every node type of ``got`` probed with ``text`` (what the probe script printed on one of its nodes)."""
    return init.Probes({k.key: nodeprobe.parse_probe(text) for k in got.node_types}, {}, [])


def findings(tmp_path, text=SITE, probe_text=PROBED, **live_args):
    site = site_of(tmp_path, text)
    got = live(**live_args)
    return check.compare(site, site.clusters["hopper"], got, probes_of(got, probe_text))


def keyed(found):
    return [(f.severity, f.key) for f in found]


def test_a_file_that_says_what_the_cluster_is_has_no_findings(tmp_path):
    assert findings(tmp_path) == []


def test_a_partition_the_cluster_no_longer_has_fails(tmp_path):
    found = findings(tmp_path, partitions=PARTITIONS.replace("PartitionName=gpu", "PartitionName=gpu2"),
                     nodes=NODES.replace("Partitions=gpu", "Partitions=gpu2"))
    assert keyed(found) == [("fail", "partitions.gpu"), ("warning", "partitions.gpu2")]
    assert found[0].line() == ("fail: clusters.hopper.partitions.gpu: the cluster has no partition gpu (it has: gpu2): "
                               "jobs there are refused; remove it or rename it")


def test_a_gres_type_the_nodes_do_not_carry_fails(tmp_path):
    found = findings(tmp_path, nodes=NODES.replace("gpu:h100:8", "gpu:a100:8"))
    assert keyed(found) == [("fail", "partitions.gpu.gpu_model")]
    assert "set gpu_model: a100" in found[0].message


def test_more_gpus_than_the_nodes_carry_fails_fewer_is_slower(tmp_path):
    more = findings(tmp_path, nodes=NODES.replace("gpu:h100:8", "gpu:h100:4"))
    assert keyed(more) == [("fail", "partitions.gpu.gpus_per_node")]
    assert more[0].message.endswith("set gpus_per_node: 4")
    fewer = findings(tmp_path, text=SITE.replace("gpus_per_node: 8", "gpus_per_node: 4"))
    assert keyed(fewer) == [("slower", "partitions.gpu.gpus_per_node")]


def test_an_hca_no_probed_node_has_is_slower_and_names_the_active_ports(tmp_path):
    found = findings(tmp_path, text=SITE.replace("=mlx5_0:1", "=mlx5_4:1"))
    assert keyed(found) == [("slower", "partitions.gpu.fabric.hcas")]
    assert found[0].message == ("no probed node (g1) has HCA mlx5_4:1: NCCL falls back to sockets and jobs run "
                                "slower; set hcas to the active ports: =mlx5_0:1")


def test_an_hca_whose_port_is_down_is_slower(tmp_path):
    found = findings(tmp_path, text=SITE.replace("=mlx5_0:1", "=mlx5_1:1"))
    assert keyed(found) == [("slower", "partitions.gpu.fabric.hcas")]
    assert found[0].message.startswith("HCA mlx5_1:1 is not active on the probed nodes (g1)")


def test_hca_prefixes_match_as_nccl_matches_them(tmp_path):
    # Without '=' NCCL takes a prefix: "mlx5" names every mlx5 device.
    assert findings(tmp_path, text=SITE.replace('["=mlx5_0:1"]', '["mlx5"]')) == []
    assert keyed(findings(tmp_path, text=SITE.replace('["=mlx5_0:1"]', '["=mlx5"]'))) == \
        [("slower", "partitions.gpu.fabric.hcas")]


def test_a_socket_interface_the_nodes_do_not_have_fails_with_the_routed_one(tmp_path):
    found = findings(tmp_path, text=SITE.replace("socket_ifname: ens1f0", "socket_ifname: ib0"))
    assert keyed(found) == [("fail", "partitions.gpu.fabric.socket_ifname")]
    assert found[0].message.endswith("set socket_ifname: ens1f0 (the interface that carries the nodes' addresses)")
    # A prefix and an exclusion are NCCL's too: "ens" names ens1f0, "^docker" names nothing that must exist.
    assert findings(tmp_path, text=SITE.replace("socket_ifname: ens1f0", "socket_ifname: ens")) == []
    # an interface the nodes have but whose link is down carries nothing either (sysfs, as health reads it)
    down = PROBED.replace("iface ens1f0|0x1003|up", "iface ens1f0|0x1003|down")
    found = findings(tmp_path, probe_text=down)
    assert keyed(found) == [("fail", "partitions.gpu.fabric.socket_ifname")]
    assert found[0].message.startswith("ens1f0 names no interface that is up on the probed nodes (g1)")
    assert found[0].message.endswith("bring ens1f0 up on the nodes (it carries their addresses; its link is down)")
    assert findings(tmp_path, text=SITE.replace("socket_ifname: ens1f0", 'socket_ifname: "^docker"')) == []


def test_rdma_ports_on_an_ethernet_fabric_are_slower(tmp_path):
    text = SITE.replace('{type: infiniband, hcas: ["=mlx5_0:1"], socket_ifname: ens1f0}',
                        '{type: ethernet, socket_ifname: ens1f0}')
    assert keyed(findings(tmp_path, text=text)) == [("slower", "partitions.gpu.fabric.type")]


def test_a_switch_group_feature_no_node_carries_fails(tmp_path):
    found = findings(tmp_path, nodes=NODES.replace("spine2", "rack2"))
    assert ("fail", "switch_group_features") in keyed(found)
    line = next(f.message for f in found if f.severity == "fail")
    assert line.startswith("no node carries feature spine2") and "now: rack2, spine1" in line


def test_a_feature_that_no_longer_marks_whole_leaves_is_slower(tmp_path):
    found = findings(tmp_path, nodes=NODES.replace("AvailableFeatures=spine2", "AvailableFeatures=spine1", 1))
    assert ("slower", "switch_group_features") in keyed(found)


def test_limits_above_slurms_fail(tmp_path):
    found = findings(tmp_path, partitions=PARTITIONS.replace("MaxNodes=UNLIMITED", "MaxNodes=2")
                     .replace("MaxTime=1-00:00:00", "MaxTime=12:00:00"))
    assert sorted(keyed(found)) == [("fail", "partitions.gpu.max_nodes"), ("fail", "partitions.gpu.max_time")]
    assert any(f.message.endswith('set max_time: "12:00:00"') for f in found)
    # Below Slurm's is the site's choice: nothing to say.
    assert findings(tmp_path, text=SITE.replace('"24:00:00"', '"02:00:00"').replace("max_nodes: 4", "max_nodes: 2")) \
        == []


def test_a_switch_wait_above_slurms_cap_is_a_warning_only(tmp_path):
    found = findings(tmp_path, text=SITE.replace('"00:05:00"', '"00:20:00"'))
    assert keyed(found) == [("warning", "max_switch_wait")]
    assert "caps the wait for fewer leaf switches at 600 s" in found[0].message
    assert not check.CheckResult(found, ["hopper"]).harmful


def test_without_probes_the_fabric_is_not_checked(tmp_path):
    site = site_of(tmp_path, SITE.replace("socket_ifname: ens1f0", "socket_ifname: ib0"))
    assert check.compare(site, site.clusters["hopper"], live(), None) == []


def test_hostile_names_in_slurms_output_stay_one_printable_line(tmp_path):
    nodes = NODES.replace("spine2", "spine2,x\x1b[2J\u202e") + "\nNodeName=h1 CPUTot=1 RealMemory=1 " \
        "Partitions=bad\x1b]0;owned\x07 State=IDLE"
    partitions = PARTITIONS + "\nPartitionName=bad\x1b]0;owned\x07 Nodes=h1 TotalNodes=1"
    found = findings(tmp_path, nodes=nodes, partitions=partitions,
                     probe_text=PROBED.replace("iface lo|", "iface $(reboot)\x1b|0x1|up\niface lo|"))
    assert found, "the hostile partition is said to be left out"
    for finding in found:
        assert all(0x20 <= ord(c) < 0x7f for c in finding.line()), finding.line()


def fake_hopper():
    fake = FakeSlurm("hopper", nodes=("g1", "g2"), partitions=("gpu",))
    two = PARTITIONS.replace("TotalNodes=4", "TotalNodes=2").replace("g[1-4]", "g[1-2]")
    fake.answer(["scontrol", "--oneliner", "show", "partition"], stdout=two + "\n")
    return fake


def test_check_site_reaches_each_cluster_as_init_does(tmp_path):
    fake = fake_hopper()
    fake.answer(["srun"], stderr="srun: error: Unable to allocate resources: Requested nodes are busy\n", returncode=1)
    site = site_of(tmp_path, SITE.replace("    switch_group_features: [spine1, spine2]\n", ""))
    result = check.check_site(site, backend_factory=lambda c: fake, probe_wait=5)
    # A probe that never starts leaves the fabric unchecked: a warning naming the partition, not a failure.
    assert [f.severity for f in result.findings if f.key == "partitions.gpu.fabric"] == ["warning"]
    assert "the probe job in partition gpu did not start within 5 s" in result.to_dict()["findings"][-1]["message"]
    assert result.clusters == ["hopper"]


def test_a_cluster_that_does_not_answer_is_named(tmp_path):
    fake = fake_hopper()
    fake.answer(["scontrol", "show", "config"], stderr="Unable to contact slurm controller (connect failure)\n",
                returncode=1)
    with pytest.raises(SlurmkitError, match="^cluster hopper did not answer: "):
        check.check_site(site_of(tmp_path), backend_factory=lambda c: fake)


def test_a_check_needs_a_site():
    with pytest.raises(UsageError, match="site check needs the site to check"):
        check.check_site(None)


def test_the_site_is_named_as_an_argument_or_with_site_but_once(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SLURMKIT_SITE", raising=False)
    path = tmp_path / "site.yaml"
    path.write_text(SITE)
    assert run_main(capsys, "site", "check", path)[:2] == (0, "%s: ok (validated only; --live compares it with "
                                                              "the clusters)\n" % path)
    code, _, err = run_main(capsys, "site", "check", "--site", "other", path)
    assert code == 2 and one_error_line(err) == "Error: the site is named twice (--site other and %s): give it " \
                                                "once" % path
    code, _, err = run_main(capsys, "site", "check")
    assert code == 2 and "name it (SITE or --site NAME|PATH)" in one_error_line(err)


def test_a_cpu_named_partition_given_the_nodes_gpus_is_right(tmp_path):
    # site init drafts a partition named for CPU jobs without accelerator; a file that gives it the GPUs is
    # not wrong for that: the check counts the nodes' gres, not the draft's guess.
    text = SITE.replace("      gpu:\n", "      cpu:\n")
    found = findings(tmp_path, text=text, partitions=PARTITIONS.replace("PartitionName=gpu", "PartitionName=cpu"),
                     nodes=NODES.replace("Partitions=gpu", "Partitions=cpu"))
    assert found == []


def test_a_gres_name_the_nodes_do_not_have_says_theirs(tmp_path):
    found = findings(tmp_path, text=SITE.replace("        gpu_model: h100\n", "        gpu_model: h100\n"
                                                                             "        gres_name: accel\n"))
    assert keyed(found) == [("fail", "partitions.gpu.gres_name")]
    assert found[0].message.endswith("set gres_name: gpu")


def test_a_gres_on_some_nodes_only_fails(tmp_path):
    found = findings(tmp_path, nodes=NODES.replace("Gres=gpu:h100:8", "Gres=(null)", 1))
    assert keyed(found) == [("fail", "partitions.gpu.accelerator")]
    assert found[0].message.startswith("gpu:h100 in the file, some nodes of the partition carry no gpu:h100")
