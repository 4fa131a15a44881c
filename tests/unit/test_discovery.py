"""``site init``'s pure parts: Slurm's answers -> facts -> a draft the site loader accepts.

Slurm's output is written here as scontrol prints it (22.05, ``--oneliner``);
the real clusters' drafts are compared with local.yaml in
tests/integration/test_site_init.py.
"""

import os
from pathlib import Path

import pytest

from slurmkit.discovery import facts, init, nodeprobe, sitefile
from slurmkit.errors import SlurmkitError, UsageError
from slurmkit.site import load_site
from slurmkit.slurm import parsers
from slurmkit.testing import FakeSlurm

LOCAL_SITE = Path(__file__).resolve().parents[2] / "site_configs" / "local.yaml"


def node(name, partitions="gpu", gres="gpu:h100:8", cpus=64, memory=512000, features="(null)", addr=None):
    return ("NodeName=%s CPUAlloc=0 CPUTot=%d AvailableFeatures=%s ActiveFeatures=%s Gres=%s NodeAddr=%s "
            "RealMemory=%d State=IDLE Partitions=%s" % (name, cpus, features, features, gres, addr or name, memory,
                                                        partitions))


def partition(name, nodes, max_time="1-00:00:00", max_nodes="UNLIMITED", total=None, default="NO"):
    return ("PartitionName=%s Default=%s MaxNodes=%s MaxTime=%s Nodes=%s State=UP TotalNodes=%d"
            % (name, default, max_nodes, max_time, nodes, total or 4))


TOPOLOGY = ("SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=g[1-2]\nSwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=g[3-4]\n"
            "SwitchName=spine Level=1 LinkSpeed=1 Nodes=g[1-4] Switches=leaf1,leaf2\n")
CONFIG = {"ClusterName": "hopper", "SchedulerParameters": "bf_interval=5,max_switch_wait=600",
          "AccountingStorageType": "accounting_storage/slurmdbd", "MaxArraySize": "4001",
          "TopologyPlugin": "topology/tree"}


def cluster(node_lines, partition_lines, topology=TOPOLOGY, config=None):
    return facts.cluster_facts("hopper", "22.05.8", dict(CONFIG, **(config or {})),
                               parsers.parse_partitions("\n".join(partition_lines)),
                               parsers.parse_nodes("\n".join(node_lines)), parsers.parse_topology(topology))


def test_a_gpu_partition_is_read_as_a_site_file_describes_it():
    got = cluster([node("g%d" % i) for i in range(1, 5)], [partition("gpu", "g[1-4]", default="YES")])
    part = got.partitions["gpu"]
    assert (part.accelerator, part.gpu_model, part.gres_name, part.gpus_per_node) == ("nvidia", "h100", "gpu", 8)
    assert (part.cpus_per_node, part.memory_mb, part.max_nodes, part.max_time) == (64, 512000, 4, "1-00:00:00")
    assert got.default_partition == "gpu" and got.switch_wait_cap == 600 and got.accounting
    assert not part.guesses and not part.notes


def test_npus_are_ascend_and_their_gres_is_npu():
    got = cluster([node("g%d" % i, partitions="npu", gres="npu:ascend910b:8") for i in range(1, 3)],
                  [partition("npu", "g[1-2]", max_time="UNLIMITED", max_nodes="1", total=2)])
    part = got.partitions["npu"]
    assert (part.accelerator, part.gpu_model, part.gres_name, part.max_time, part.max_nodes) == \
        ("ascend", "ascend910b", "npu", "UNLIMITED", 1)


def test_a_cpu_partition_on_gpu_nodes_is_a_marked_guess():
    got = cluster([node("g1", partitions="gpu,cpu")], [partition("gpu", "g1"), partition("cpu", "g1")])
    assert got.partitions["gpu"].accelerator == "nvidia"
    cpu = got.partitions["cpu"]
    assert cpu.accelerator == "none" and cpu.gpus_per_node == 0
    assert len(cpu.guesses) == 1 and cpu.guesses[0].startswith("guess: written without accelerator")


def test_a_mixed_partition_gets_the_least_of_each_and_a_proposed_split():
    lines = [node("g1"), node("g2"), node("g3", gres="gpu:a100:4", cpus=32, memory=256000)]
    part = cluster(lines, [partition("gpu", "g[1-3]")]).partitions["gpu"]
    # No one gres type is on every node: no GPU request fits them all, which the draft says.
    assert (part.accelerator, part.cpus_per_node, part.memory_mb) == ("none", 32, 256000)
    assert part.guesses == ("guess: some nodes have no gpu:h100: written without accelerator",)
    assert any("mixes 2 node types" in n for n in part.notes)
    assert any(n.startswith("proposed split: gpu_1 (Nodes=g[1-2]), gpu_2 (Nodes=g3)") for n in part.notes)


def test_switch_group_features_are_those_that_mark_whole_leaves():
    lines = [node("g1", features="spine1,h100"), node("g2", features="spine1,h100"),
             node("g3", features="spine2,h100"), node("g4", features="spine2,h100,bigmem")]
    got = cluster(lines, [partition("gpu", "g[1-4]")])
    # h100: every node (no group); bigmem: part of a leaf (no group).
    assert got.switch_group_features == ("spine1", "spine2")


def test_no_switch_groups_without_several_leaves():
    lines = [node("g1", features="spine1"), node("g2", features="spine2")]
    got = cluster(lines, [partition("gpu", "g[1-2]")], topology="SwitchName=s Level=0 Nodes=g[1-2]\n")
    assert got.switch_group_features == ()


def test_hostile_partition_names_are_left_out_with_a_note():
    lines = [node("g1", partitions="gpu,bad$(reboot)")]
    got = cluster(lines, [partition("gpu", "g1"), partition("bad$(reboot)", "g1")])
    assert list(got.partitions) == ["gpu"]
    assert got.notes == ("partition 'bad$(reboot)' left out: a site file names partitions with letters, digits, "
                         "'-' and '_'",)


def test_comments_hold_one_printable_line_whatever_slurm_printed():
    assert facts.printable("a\nb\x1b[31mc\u00e9") == "a?b?[31mc?"
    assert len(facts.printable("x" * 1000)) == 200


def _draft_file(tmp_path, got, **kwargs):
    text = sitefile.site_text("hopper", [sitefile.ClusterDraft(facts=got, **kwargs)], "on a test day")
    path = tmp_path / "draft.yaml"
    path.write_text(text)
    return text, load_site(str(path))


def test_the_draft_loads_with_what_the_facts_say(tmp_path):
    lines = [node("g1", partitions="gpu,cpu", features="spine1"), node("g2", partitions="gpu,cpu", features="spine1"),
             node("g3", partitions="gpu,cpu", features="spine2"), node("g4", partitions="gpu,cpu", features="spine2")]
    got = cluster(lines, [partition("gpu", "g[1-4]", default="YES"), partition("cpu", "g[1-4]")])
    text, site = _draft_file(tmp_path, got, slurm_conf="/etc/slurm/slurm.conf")
    hopper = site.clusters["hopper"]
    assert hopper.switch_group_features == ("spine1", "spine2")
    assert hopper.max_switch_wait == "00:10:00" and hopper.default_partition == "gpu"
    assert hopper.partitions["gpu"].gpus_per_node == 8 and hopper.partitions["cpu"].accelerator == "none"
    assert hopper.slurm_conf == "/etc/slurm/slurm.conf"
    assert "# guess: written without accelerator" in text
    assert "# Slurm 22.05.8; accounting on" in text


def test_a_note_cannot_break_out_of_its_comment(tmp_path):
    got = cluster([node("g1")], [partition("gpu", "g1")])
    got = got._replace(notes=("evil\nsite: other",))
    text, site = _draft_file(tmp_path, got)
    assert site.name == "hopper"
    assert "# evil?site: other" in text


def fake_hopper():
    fake = FakeSlurm("hopper", nodes=("g1", "g2"), partitions=("gpu",))
    fake.answer(["scontrol", "--oneliner", "show", "partition"],
                stdout=partition("gpu", "g[1-2]", default="YES", total=2) + "\n")
    return fake


def test_init_writes_a_file_and_never_overwrites_one(tmp_path):
    target = tmp_path / "hopper.yaml"
    result = init.init_site(output=str(target), backend_factory=lambda c: fake_hopper())
    assert result.path == str(target) and [c.name for c in result.clusters] == ["hopper"]
    assert load_site(str(target)).clusters["hopper"].partitions["gpu"].gpu_model == "h100"
    with pytest.raises(UsageError, match="exists; pass --force to replace it"):
        init.init_site(output=str(target), backend_factory=lambda c: fake_hopper())
    target.write_text("site: mine\n")
    init.init_site(output=str(target), force=True, backend_factory=lambda c: fake_hopper())
    assert "hopper" in target.read_text()


def test_a_draft_that_cannot_be_written_is_one_line_naming_the_file_and_leaves_nothing(tmp_path):
    # /proc takes no new files, whoever asks (root passes access(2) there).
    with pytest.raises(SlurmkitError, match=r"^could not write /proc/hopper.yaml: ") as caught:
        init.init_site(output="/proc/hopper.yaml", backend_factory=lambda c: fake_hopper())
    assert not isinstance(caught.value, UsageError) and not os.path.exists("/proc/hopper.yaml")


def test_init_refuses_a_directory_and_a_missing_parent(tmp_path):
    with pytest.raises(UsageError, match="is a directory"):
        init.init_site(output=str(tmp_path), backend_factory=lambda c: fake_hopper())
    with pytest.raises(UsageError, match="does not exist; create it first"):
        init.init_site(output=str(tmp_path / "no" / "x.yaml"), backend_factory=lambda c: fake_hopper())


def test_a_cluster_that_does_not_answer_stops_the_draft_naming_it(tmp_path):
    fake = fake_hopper()
    fake.answer(["scontrol", "show", "config"], stderr="Unable to contact slurm controller (connect failure)\n",
                returncode=1)
    with pytest.raises(SlurmkitError, match="^cluster local did not answer: "):
        init.init_site(backend_factory=lambda c: fake)
    assert not list(tmp_path.iterdir())


def test_cluster_names_need_a_site():
    with pytest.raises(UsageError, match="--cluster needs --site"):
        init.targets(None, ["alpha"])


def test_a_login_node_in_no_site_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    got = init.login_cluster("alice@login.example.org:2200", identity_file="keys/id", known_hosts="kh")
    assert got.name == init.UNNAMED and got.slurm_conf is None
    assert got.login == got.login._replace(host="login.example.org", port=2200, user="alice",
                                           identity_file=str(tmp_path / "keys" / "id"),
                                           known_hosts=str(tmp_path / "kh"), proxy_jump=None)
    assert init.login_cluster("login1", name="hopper").login[:3] == ("login1", 22, None)
    assert init.login_cluster("login1", name="hopper").name == "hopper"
    with pytest.raises(UsageError, match=r"^--login 'alice@:22' has no valid host; write it as user@host:port$"):
        init.login_cluster("alice@:22")
    with pytest.raises(UsageError, match="--login 'a:99999' has an invalid port"):
        init.login_cluster("a:99999")
    with pytest.raises(UsageError, match="--cluster 'bad name'"):
        init.login_cluster("login1", name="bad name")
    with pytest.raises(UsageError, match="--login reads a cluster that is in no site file"):
        init.init_site(load_site(str(LOCAL_SITE)), login=got)
    monkeypatch.setenv("SLURMKIT_VIA", "local")
    with pytest.raises(UsageError, match="SLURMKIT_VIA=local forces local commands; unset SLURMKIT_VIA"):
        init.init_site(login=got)


def test_the_login_options_on_the_command_line(capsys):
    from harness import run_main

    code, _, err = run_main(capsys, "site", "init", "--known-hosts", "kh")
    assert code == 2 and err == "Error: --identity-file, --known-hosts and --proxy-jump go with --login\n"
    code, _, err = run_main(capsys, "site", "init", "--login", "h", "-M", "a", "-M", "b")
    assert code == 2 and err.startswith("Error: --login reads one cluster that is in no site file")
    code, _, err = run_main(capsys, "site", "init", "--login", "root@")
    assert code == 2 and err == "Error: --login 'root@' has no valid host; write it as user@host:port\n"


# ----------------------------------------------------------------------------- the node probe

PROBED = """node g1
addr g1.cluster 10.1.0.1
route 10.1.0.1 dev ens1f0 src 10.1.0.1 uid 0 \\    cache
iface lo|0x9|unknown
iface ens1f0|0x1003|up
iface ens2f0|0x1003|down
iface ens3f0|0x1002|down
iface vlan5|0x1003|up
iface bad$(reboot)|0x1003|up
rdma mlx5_0:1|4: ACTIVE|InfiniBand|400 Gb/sec (4X NDR)
rdma mlx5_1:1|1: DOWN|InfiniBand|10 Gb/sec (4X SDR)
devices nvidia 8
devices davinci 0
runtime ch-run
runtime enroot
end
"""


def test_the_probe_output_is_read_into_facts():
    got = nodeprobe.parse_probe(PROBED)
    assert (got.node, got.addr, got.route_iface) == ("g1", "g1.cluster", "ens1f0")
    # up as the health check reads sysfs: IFF_UP set and a link (ens2f0 has none, ens3f0 is set down);
    # a name with shell text in it is dropped.
    assert got.interfaces == ("lo", "ens1f0", "vlan5")
    assert [(p.name, p.state, p.active) for p in got.rdma] == [("mlx5_0:1", "ACTIVE", True),
                                                               ("mlx5_1:1", "DOWN", False)]
    assert got.devices == {"nvidia": 8, "davinci": 0} and got.runtime_names == ("charliecloud", "pyxis")


def test_a_probe_cut_short_is_an_error_not_empty_facts():
    with pytest.raises(SlurmkitError, match="did not finish"):
        nodeprobe.parse_probe(PROBED.replace("end\n", ""))


def test_active_infiniband_ports_are_the_hcas_and_the_routed_interface_the_socket():
    fabric = nodeprobe.fabric_draft(nodeprobe.parse_probe(PROBED))
    assert (fabric.type, fabric.hcas, fabric.socket_ifname, fabric.gid_index) == \
        ("infiniband", ("=mlx5_0:1",), "ens1f0", None)
    assert "RDMA ports not active, left out: mlx5_1:1 (DOWN)" in fabric.comments


def test_a_routed_interface_that_is_down_is_a_marked_guess():
    fabric = nodeprobe.fabric_draft(nodeprobe.parse_probe(PROBED.replace("ens1f0|0x1003|up", "ens1f0|0x1003|down")))
    assert fabric.socket_ifname == "ens1f0"
    assert "guess: probed on node g1: its address g1.cluster is routed through ens1f0, which is not up (sysfs): " \
           "bring it up, or set socket_ifname to an interface that is (up: lo, vlan5)" in fabric.comments


def test_ethernet_link_layer_ports_are_roce_with_a_marked_gid_guess():
    text = PROBED.replace("|InfiniBand|400", "|Ethernet|400")
    fabric = nodeprobe.fabric_draft(nodeprobe.parse_probe(text))
    assert (fabric.type, fabric.gid_index) == ("roce", 3)
    assert any(c.startswith("guess: RoCE v2 GID index 3") for c in fabric.comments)


def test_no_rdma_port_is_an_ethernet_fabric():
    text = "\n".join(ln for ln in PROBED.splitlines() if not ln.startswith("rdma")) + "\n"
    fabric = nodeprobe.fabric_draft(nodeprobe.parse_probe(text))
    assert (fabric.type, fabric.hcas, fabric.socket_ifname) == ("ethernet", (), "ens1f0")


def test_device_files_that_disagree_with_the_gres_count_are_a_note():
    probe = nodeprobe.parse_probe(PROBED)
    assert nodeprobe.device_notes(probe, "nvidia", "gpu:h100", 8) == []
    assert nodeprobe.device_notes(probe, "nvidia", "gpu:h100", 4) == [
        "node g1 has 8 nvidia device files in /dev where Slurm counts gpu:h100:4: check gres.conf (File=) and the "
        "driver"]


def test_the_probe_runs_as_one_bounded_srun_in_the_partition():
    fake = fake_hopper()
    fake.answer(["srun"], stdout=PROBED)
    got = nodeprobe.probe_type(fake, "gpu", exclude=["g2"], wait_s=20)
    assert got.route_iface == "ens1f0"
    srun = [c for c in fake.commands if c[0] == "srun"]
    assert len(srun) == 1
    assert {"--partition=gpu", "--nodes=1", "--immediate=20", "--exclude=g2"} <= set(srun[0])


def test_a_probe_that_never_starts_names_the_partition_and_leaves_a_marked_guess(tmp_path):
    fake = fake_hopper()
    fake.answer(["srun"], stderr="srun: error: Unable to allocate resources: Requested nodes are busy\n",
                returncode=1)
    result = init.init_site(backend_factory=lambda c: fake, probe_wait=5)
    assert result.warnings == ["cluster hopper: the probe job in partition gpu did not start within 5 s ("
                               "Unable to allocate resources: Requested nodes are busy); its nodes are busy or down: "
                               "run again when one is free"]
    assert "# guess: the probe did not run (the probe job in partition gpu did not start within 5 s" in result.text
