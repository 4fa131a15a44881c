"""Site config loading and validation: examples, every kind of problem, finding sites.

Bad configs are written into ``tmp_path`` so each assertion can name the
exact line and key path a site admin would be pointed to.
"""

import os
import re
import textwrap
from pathlib import Path

import pytest

from slurmkit.errors import ConfigError, UsageError
from slurmkit.site import find_site, list_sites, load_site, site_search_path, validate_files
from slurmkit.site import loader, schema
from slurmkit.site.model import PriceWindow
from slurmkit.times import slurm_time_seconds

REPO = Path(__file__).resolve().parents[2]
SITE_CONFIGS = REPO / "site_configs"
EXAMPLES = sorted(SITE_CONFIGS.glob("*.yaml"))

# A small valid site; tests replace pieces of it.  Line numbers below refer
# to this text (line 1 is "site: test").
GOOD = """\
site: test
defaults:
  cluster: alpha
  partition: gpu
clusters:
  alpha:
    partitions:
      gpu:
        accelerator: nvidia
        gpu_model: h100
        gpus_per_node: 8
        cpus_per_node: 4
"""


def write(tmp_path, text, name="site.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def problems_of(tmp_path, text):
    path = write(tmp_path, text)
    return [(p.line, p.key, p.message) for p in validate_files([path])]


def only_problem(tmp_path, text):
    found = problems_of(tmp_path, text)
    assert len(found) == 1, found
    return found[0]


# ---------------------------------------------------------------------------
# The shipped configs


def test_examples_exist():
    names = {p.stem for p in EXAMPLES}
    assert {"local", "example-infiniband", "example-roce", "example-ascend"} <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_validates_and_loads(path):
    assert [str(p) for p in validate_files([path])] == []
    site = load_site(path)
    assert site.name == path.stem
    assert site.path == str(path)
    assert site.clusters
    cluster = site.cluster()
    assert site.partition(cluster) in cluster.partitions.values()
    for cluster in site.clusters.values():
        for part in cluster.partitions.values():
            if part.accelerator != "none":
                assert part.gpus_per_node >= 1 and part.gpu_model and part.gres_name


def test_local_site_matches_devcluster():
    site = load_site(SITE_CONFIGS / "local.yaml")
    assert site.defaults.cluster == "alpha"
    assert site.defaults.partition == "gpu"
    assert site.defaults.time == "00:10:00"
    assert set(site.clusters) == {"alpha", "beta", "gamma"}
    devstate = REPO / ".devcluster"

    alpha = site.clusters["alpha"]
    assert set(alpha.partitions) == {"gpu", "cpu"}
    gpu = alpha.partitions["gpu"]
    assert (gpu.accelerator, gpu.gpu_model, gpu.gpus_per_node, gpu.cpus_per_node, gpu.memory_mb,
            gpu.max_nodes, gpu.max_time, gpu.gres_name) == ("nvidia", "h100", 8, 4, 4000, 4, "24:00:00", "gpu")
    assert gpu.fabric.type == "ethernet" and gpu.fabric.socket_ifname == "lo"
    cpu = alpha.partitions["cpu"]
    assert (cpu.accelerator, cpu.gpus_per_node, cpu.max_time, cpu.gres_name) == ("none", 0, None, None)
    assert alpha.slurm_conf == str(devstate / "alpha" / "etc" / "slurm.conf")
    assert (alpha.login.host, alpha.login.port, alpha.login.user) == ("127.0.1.2", 2222, "root")
    assert alpha.login.identity_file == str(devstate / "ssh" / "id_ed25519")
    assert alpha.login.known_hosts == str(devstate / "ssh" / "known_hosts")
    assert alpha.login.connect_timeout == 10.0
    assert alpha.price_per_gpu_hour == (PriceWindow(0, 24, 4.0),)

    beta = site.clusters["beta"]
    assert beta.login.host == "127.0.2.2"
    bgpu = beta.partitions["gpu"]
    assert (bgpu.gpu_model, bgpu.gpus_per_node, bgpu.max_nodes, bgpu.max_time) == ("a100", 4, 3, "12:00:00")
    assert len(beta.price_per_gpu_hour) == 2

    gamma = site.clusters["gamma"]
    assert gamma.login.host == "127.0.3.2"
    assert gamma.default_partition == "npu"
    npu = gamma.partitions["npu"]
    assert (npu.accelerator, npu.gpu_model, npu.gpus_per_node, npu.gres_name, npu.max_nodes,
            npu.max_time) == ("ascend", "ascend910b", 8, "npu", 2, "12:00:00")
    assert gamma.price_per_gpu_hour == (PriceWindow(0, 24, 1.5),)
    assert site.partition(gamma).name == "npu"


def test_infiniband_example():
    site = load_site(SITE_CONFIGS / "example-infiniband.yaml")
    cluster = site.cluster()
    assert len(cluster.partitions) == 2
    fabric = cluster.partitions["gpu"].fabric
    assert fabric.type == "infiniband"
    assert fabric.hcas == tuple("=mlx5_%d:1" % i for i in range(8))
    assert fabric.socket_ifname == "=ib0"
    assert fabric.env["NCCL_IB_TIMEOUT"] == "22"          # numbers become their text
    assert site.modules and all(isinstance(m, str) for m in site.modules)
    assert site.defaults.account == "ml-research"
    assert site.template_dirs == (str(SITE_CONFIGS / "templates"),)
    assert cluster.login.identity_file == os.path.expanduser("~/.ssh/id_ed25519")
    assert cluster.login.proxy_jump == "jump@bastion.example.org:22"
    assert site.max_switch_wait == "00:30:00"


def test_roce_example():
    site = load_site(SITE_CONFIGS / "example-roce.yaml")
    cluster = site.cluster()
    part = site.partition(cluster)
    assert part.gpu_model == "a100"
    assert part.fabric.type == "roce"
    assert (part.fabric.roce.gid_index, part.fabric.roce.traffic_class) == (3, 106)
    assert site.switch_wait(cluster) == "00:15:00"
    assert cluster.login.port == 22 and cluster.login.user is None


def test_ascend_example():
    site = load_site(SITE_CONFIGS / "example-ascend.yaml")
    part = site.partition(site.cluster())
    assert (part.accelerator, part.gres_name, part.gpu_model) == ("ascend", "npu", "ascend910b")
    assert part.fabric.type == "roce"
    assert part.fabric.hcas == ()
    assert any(key.startswith("HCCL_") for key in part.fabric.env)


def test_minimal_site_gets_defaults(tmp_path):
    site = load_site(write(tmp_path, """\
        site: tiny
        clusters:
          c:
            partitions:
              p: {accelerator: none, cpus_per_node: 2}
        """))
    assert site.defaults.time == "01:00:00" and site.defaults.template == "torchrun"
    assert site.max_switch_wait == "00:10:00"
    assert site.modules == () and site.setup == () and site.template_dirs == ()
    part = site.clusters["c"].partitions["p"]
    assert part.fabric.type == "ethernet" and part.fabric.hcas == ()
    assert part.max_time is None and part.gres_name is None
    assert site.clusters["c"].login is None and site.clusters["c"].price_per_gpu_hour == ()


def test_explicit_gres_name_and_defaults_for_ascend(tmp_path):
    site = load_site(write(tmp_path, """\
        site: t
        clusters:
          c:
            partitions:
              a: {accelerator: ascend, gpu_model: ascend910b, gpus_per_node: 8, cpus_per_node: 4}
              b: {accelerator: nvidia, gpu_model: h100, gpus_per_node: 8, cpus_per_node: 4, gres_name: gpgpu}
        """))
    parts = site.clusters["c"].partitions
    assert parts["a"].gres_name == "npu"
    assert parts["b"].gres_name == "gpgpu"


def test_relative_paths_resolve_against_the_config_file(tmp_path, monkeypatch):
    sub = tmp_path / "conf"
    sub.mkdir()
    monkeypatch.chdir(tmp_path)  # the working directory must not matter
    path = write(sub, GOOD.replace("    partitions:\n", "    slurm_conf: ../etc/slurm.conf\n    partitions:\n", 1)
                 + "template_dirs: [tpl, /abs/tpl]\n")
    site = load_site("conf/site.yaml")
    assert site.clusters["alpha"].slurm_conf == str(tmp_path / "etc" / "slurm.conf")
    assert site.template_dirs == (str(sub / "tpl"), "/abs/tpl")
    assert site.path == str(path)


# ---------------------------------------------------------------------------
# Problems, one kind at a time


def test_problem_str_format():
    p = loader.Problem("site.yaml", 12, "clusters.alpha.partitions.gpu.gpus_per_node",
                       "expected an integer, got 'eight'")
    assert str(p) == "site.yaml:12: clusters.alpha.partitions.gpu.gpus_per_node: expected an integer, got 'eight'"
    assert str(loader.Problem("x.yaml", None, "", "no such file")) == "x.yaml: no such file"


def test_good_base_is_valid(tmp_path):
    assert problems_of(tmp_path, GOOD) == []


def test_wrong_type_string_for_int(tmp_path):
    line, key, message = only_problem(tmp_path, GOOD.replace("gpus_per_node: 8", "gpus_per_node: eight"))
    assert (line, key) == (11, "clusters.alpha.partitions.gpu.gpus_per_node")
    assert message == "expected an integer, got 'eight'"


@pytest.mark.parametrize("text,shown", [("true", "true"), ("yes", "yes (YAML reads it as true)"), ("8.0", "8.0")])
def test_bool_and_float_are_not_int(tmp_path, text, shown):
    line, key, message = only_problem(tmp_path, GOOD.replace("cpus_per_node: 4", "cpus_per_node: " + text))
    assert (line, key, message) == (12, "clusters.alpha.partitions.gpu.cpus_per_node",
                                    "expected an integer, got %s" % shown)


def test_number_for_string_suggests_quotes(tmp_path):
    line, key, message = only_problem(tmp_path, GOOD.replace("gpu_model: h100", "gpu_model: 100"))
    assert (line, key) == (10, "clusters.alpha.partitions.gpu.gpu_model")
    assert message.startswith("expected a string, got 100") and "quotes" in message


def test_unknown_key_did_you_mean(tmp_path):
    line, key, message = only_problem(tmp_path, GOOD.replace("cpus_per_node: 4", "cpus_per_node: 4\n"
                                                             "        gpus_per_nod: 8"))
    assert (line, key) == (13, "clusters.alpha.partitions.gpu.gpus_per_nod")
    assert message == "unknown key 'gpus_per_nod'; did you mean 'gpus_per_node'?"


def test_unknown_key_without_close_match_lists_valid_keys(tmp_path):
    line, key, message = only_problem(tmp_path, GOOD + "colour: blue\n")
    assert (line, key) == (13, "colour")
    assert message.startswith("unknown key 'colour'; valid keys here: site, description, defaults")


def test_top_level_x_keys_are_ignored(tmp_path):
    assert problems_of(tmp_path, GOOD + "x-anchors:\n  anything: [1, 2]\n") == []


def test_missing_required_key_reported_at_parent_line(tmp_path):
    line, key, message = only_problem(tmp_path, GOOD.replace("        accelerator: nvidia\n", ""))
    assert (line, key) == (8, "clusters.alpha.partitions.gpu.accelerator")
    assert message == "required key is missing (expected one of nvidia, ascend, none)"


def test_missing_top_level_keys(tmp_path):
    found = problems_of(tmp_path, "description: nothing else\n")
    assert [(line, key) for line, key, _ in found] == [(1, "site"), (1, "clusters")]
    assert all(m.startswith("required key is missing") for _, _, m in found)


def test_bad_enum_lists_choices(tmp_path):
    line, key, message = only_problem(tmp_path, GOOD.replace("accelerator: nvidia", "accelerator: amd"))
    assert (line, key) == (9, "clusters.alpha.partitions.gpu.accelerator")
    assert message == "expected one of nvidia, ascend, none; got 'amd'"


def test_bad_fabric_type_suggests(tmp_path):
    line, key, message = only_problem(tmp_path, GOOD + "        fabric: {type: infiniband2}\n")
    assert (line, key) == (13, "clusters.alpha.partitions.gpu.fabric.type")
    assert "expected one of infiniband, roce, ethernet" in message and "did you mean 'infiniband'" in message


@pytest.mark.parametrize("good", ["24:00:00", "48:00:00", "30", "90:00", "2-00:00:00", "1-12", "1-12:30",
                                  "UNLIMITED", "infinite", "00:10:00"])
def test_good_times(tmp_path, good):
    assert problems_of(tmp_path, GOOD + "        max_time: %s\n" % good) == []
    assert problems_of(tmp_path, GOOD + "        max_time: \"%s\"\n" % good) == []


@pytest.mark.parametrize("bad", ["1h", "10:60", "1:00:60", "1-24", "1-2:3:4:5", "-5", "", "forever", "1.5"])
def test_bad_times(tmp_path, bad):
    line, key, message = only_problem(tmp_path, GOOD + "        max_time: \"%s\"\n" % bad)
    assert (line, key) == (13, "clusters.alpha.partitions.gpu.max_time")
    assert "Slurm time" in message


def test_unquoted_sexagesimal_time_keeps_its_text(tmp_path):
    # YAML 1.1 reads 24:00:00 as 86400; the model must still say "24:00:00".
    site = load_site(write(tmp_path, GOOD + "        max_time: 24:00:00\n"))
    assert site.clusters["alpha"].partitions["gpu"].max_time == "24:00:00"


def test_slurm_time_seconds():
    assert slurm_time_seconds("1-02:03:04") == 86400 + 7200 + 180 + 4
    assert slurm_time_seconds("90") == 5400
    assert slurm_time_seconds("UNLIMITED") is None
    with pytest.raises(ValueError):
        slurm_time_seconds("00:61")


def test_defaults_must_name_existing_cluster_and_partition(tmp_path):
    found = problems_of(tmp_path, GOOD.replace("cluster: alpha", "cluster: alpah"))
    assert found == [(3, "defaults.cluster", "unknown cluster 'alpah'; clusters are: alpha")]
    found = problems_of(tmp_path, GOOD.replace("partition: gpu", "partition: gpux"))
    assert [(line, key) for line, key, _ in found] == [(4, "defaults.partition")]
    assert "unknown partition 'gpux'" in found[0][2]


def test_default_partition_must_exist(tmp_path):
    found = problems_of(tmp_path, GOOD.replace("    partitions:", "    default_partition: cpu\n    partitions:"))
    assert found == [(7, "clusters.alpha.default_partition", "unknown partition 'cpu'; this cluster has: gpu")]


def test_duplicate_keys_are_detected(tmp_path):
    text = GOOD.replace("cpus_per_node: 4", "cpus_per_node: 4\n        cpus_per_node: 8")
    line, key, message = only_problem(tmp_path, text)
    assert (line, key) == (13, "clusters.alpha.partitions.gpu.cpus_per_node")
    assert message.startswith("duplicate key 'cpus_per_node' (first at line 12)")


def test_duplicate_cluster_names_are_detected(tmp_path):
    text = GOOD + "  alpha:\n    partitions:\n      cpu: {accelerator: none, cpus_per_node: 1}\n"
    found = problems_of(tmp_path, text)
    assert (13, "clusters.alpha") in [(line, key) for line, key, _ in found]


def test_malformed_yaml_is_one_problem_with_the_line(tmp_path):
    text = GOOD.replace("cpus_per_node: 4", "cpus_per_node: [4")
    found = validate_files([write(tmp_path, text)])
    assert len(found) == 1
    assert found[0].line == 12 and found[0].key == ""
    assert found[0].message.startswith("invalid YAML:")


def test_bad_indentation_line(tmp_path):
    text = GOOD.replace("        gpu_model: h100", "       gpu_model: h100")
    (problem,) = validate_files([write(tmp_path, text)])
    assert problem.line == 10 and "invalid YAML" in problem.message


def test_empty_file(tmp_path):
    for text in ("", "# just a comment\n"):
        assert problems_of(tmp_path, text) == [(None, "", "file is empty")]


def test_top_level_not_a_mapping(tmp_path):
    ((line, key, message),) = problems_of(tmp_path, "- site: a\n- site: b\n")
    assert line == 1 and "top level must be a mapping" in message


def test_missing_file(tmp_path):
    (problem,) = validate_files([tmp_path / "nope.yaml"])
    assert problem.message == "no such file" and problem.line is None


def test_unsafe_tags_are_refused_not_run(tmp_path):
    marker = tmp_path / "pwned"
    text = GOOD.replace("site: test", "site: !!python/object/apply:os.system [\"touch %s\"]" % marker)
    found = problems_of(tmp_path, text)
    assert found and found[0][0] == 1
    text = GOOD.replace("gpu_model: h100", "gpu_model: !!python/name:os.system h100")
    ((line, key, message),) = problems_of(tmp_path, text)
    assert (line, key) == (10, "clusters.alpha.partitions.gpu.gpu_model") and "cannot read" in message
    assert not marker.exists()


def test_non_string_key(tmp_path):
    found = problems_of(tmp_path, GOOD + "  1:\n    partitions: {p: {accelerator: none, cpus_per_node: 1}}\n")
    assert found == [(13, "clusters.1", "a key must be a string, got 1; put it in quotes")]


def test_bad_names(tmp_path):
    found = problems_of(tmp_path, GOOD.replace("      gpu:", "      gpu.big:").replace("partition: gpu",
                                                                                        "partition: gpu.big"))
    assert [(line, key) for line, key, _ in found] == [(8, "clusters.alpha.partitions.gpu.big")]


def test_empty_sections(tmp_path):
    found = problems_of(tmp_path, "site: t\nclusters: {}\n")
    assert found == [(2, "clusters", "needs at least 1 entry")]
    found = problems_of(tmp_path, "site: t\nclusters:\n")
    assert found == [(2, "clusters", "expected a mapping, got nothing")]


def test_null_means_default(tmp_path):
    site = load_site(write(tmp_path, GOOD.replace("partition: gpu", "partition: gpu\n  account: null\n  time:")))
    assert site.defaults.account is None and site.defaults.time == "01:00:00"


def test_wrong_container_types(tmp_path):
    found = problems_of(tmp_path, GOOD + "modules: cuda/12.4\nsetup: {a: b}\n")
    assert found == [(13, "modules", "expected a list of strings, got 'cuda/12.4'"),
                     (14, "setup", "expected a list of strings, got a mapping")]


# -- partition rules


def test_accelerator_requires_model_and_count(tmp_path):
    text = GOOD.replace("        gpu_model: h100\n", "").replace("        gpus_per_node: 8\n", "")
    found = problems_of(tmp_path, text)
    assert [(line, key) for line, key, _ in found] == [
        (8, "clusters.alpha.partitions.gpu.gpu_model"), (8, "clusters.alpha.partitions.gpu.gpus_per_node")]
    assert "required when accelerator is nvidia" in found[0][2]
    found = problems_of(tmp_path, GOOD.replace("gpus_per_node: 8", "gpus_per_node: 0"))
    assert found == [(11, "clusters.alpha.partitions.gpu.gpus_per_node",
                      "must be at least 1 when accelerator is nvidia")]


def test_no_accelerator_forbids_gpus(tmp_path):
    text = GOOD.replace("accelerator: nvidia", "accelerator: none")
    found = problems_of(tmp_path, text)
    assert [(line, key) for line, key, _ in found] == [
        (10, "clusters.alpha.partitions.gpu.gpu_model"), (11, "clusters.alpha.partitions.gpu.gpus_per_node")]
    assert found[1][2] == "must be 0 or absent when accelerator is none"


def test_invalid_value_is_not_reported_twice(tmp_path):
    # 'eight' is wrong once; the "gpus_per_node required" rule must not pile on.
    assert len(problems_of(tmp_path, GOOD.replace("gpus_per_node: 8", "gpus_per_node: eight"))) == 1
    assert len(problems_of(tmp_path, GOOD.replace("accelerator: nvidia", "accelerator: nvdia"))) == 1


def test_bounds(tmp_path):
    found = problems_of(tmp_path, GOOD.replace("cpus_per_node: 4", "cpus_per_node: 0"))
    assert found == [(12, "clusters.alpha.partitions.gpu.cpus_per_node", "must be at least 1, got 0")]


# -- fabric rules

IB = GOOD + """\
        fabric:
          type: infiniband
          hcas: ["=mlx5_0:1", "=mlx5_1:1"]
          socket_ifname: "=ib0"
"""


def test_infiniband_fabric_loads(tmp_path):
    fabric = load_site(write(tmp_path, IB)).clusters["alpha"].partitions["gpu"].fabric
    assert fabric.hcas == ("=mlx5_0:1", "=mlx5_1:1") and fabric.socket_ifname == "=ib0"


def test_infiniband_needs_hcas(tmp_path):
    found = problems_of(tmp_path, IB.replace("          hcas: [\"=mlx5_0:1\", \"=mlx5_1:1\"]\n", ""))
    assert [(line, key) for line, key, _ in found] == [(13, "clusters.alpha.partitions.gpu.fabric.hcas")]
    found = problems_of(tmp_path, IB.replace("[\"=mlx5_0:1\", \"=mlx5_1:1\"]", "[]"))
    assert [(line, key) for line, key, _ in found] == [(15, "clusters.alpha.partitions.gpu.fabric.hcas")]


def test_roce_needs_gid_index_and_roce_only_for_roce(tmp_path):
    found = problems_of(tmp_path, IB.replace("type: infiniband", "type: roce"))
    assert [(line, key) for line, key, _ in found] == [(13, "clusters.alpha.partitions.gpu.fabric.roce.gid_index")]
    text = IB.replace("type: infiniband", "type: roce") + "          roce: {traffic_class: 106}\n"
    found = problems_of(tmp_path, text)
    assert [(line, key) for line, key, _ in found] == [(17, "clusters.alpha.partitions.gpu.fabric.roce.gid_index")]
    text = IB + "          roce: {gid_index: 3}\n"
    found = problems_of(tmp_path, text)
    assert found == [(17, "clusters.alpha.partitions.gpu.fabric.roce",
                      "only allowed when the fabric type is roce (it is infiniband)")]
    text = IB.replace("type: infiniband", "type: roce") + "          roce: {gid_index: 3, traffic_class: 106}\n"
    roce = load_site(write(tmp_path, text)).clusters["alpha"].partitions["gpu"].fabric.roce
    assert (roce.gid_index, roce.traffic_class, roce.service_level) == (3, 106, None)


def test_ethernet_with_hcas_is_a_problem(tmp_path):
    found = problems_of(tmp_path, IB.replace("type: infiniband", "type: ethernet"))
    assert [(line, key) for line, key, _ in found] == [(15, "clusters.alpha.partitions.gpu.fabric.hcas")]


def test_fabric_env(tmp_path):
    text = GOOD + "        fabric:\n          env: {NCCL_IB_TIMEOUT: 22, NCCL_X: \"y\", OCT: 022, nccl_bad: 1, B: on}\n"
    found = problems_of(tmp_path, text)
    assert [(line, key) for line, key, _ in found] == [(14, "clusters.alpha.partitions.gpu.fabric.env.nccl_bad"),
                                                       (14, "clusters.alpha.partitions.gpu.fabric.env.B")]
    assert "^[A-Z_][A-Z0-9_]*$" in found[0][2]
    assert found[1][2] == "expected a string or a number, got on (YAML reads it as true)"
    text = GOOD + "        fabric:\n          env: {NCCL_IB_TIMEOUT: 22, NCCL_X: \"y\", OCT: 022}\n"
    env = load_site(write(tmp_path, text)).clusters["alpha"].partitions["gpu"].fabric.env
    assert env == {"NCCL_IB_TIMEOUT": "22", "NCCL_X": "y", "OCT": "022"}


def test_anchors_and_merge_keys(tmp_path):
    text = """\
        site: t
        x-part: &part
          accelerator: nvidia
          gpu_model: h100
          gpus_per_node: 8
          cpus_per_node: 4
        clusters:
          c:
            partitions:
              a: *part
              b:
                <<: *part
                gpus_per_node: 4
        """
    site = load_site(write(tmp_path, text))
    parts = site.clusters["c"].partitions
    assert (parts["a"].gpus_per_node, parts["b"].gpus_per_node, parts["b"].gpu_model) == (8, 4, "h100")
    # a mistake inside an anchor is reported once, where it is written
    found = problems_of(tmp_path, text.replace("cpus_per_node: 4", "cpus_per_node: four"))
    assert found == [(6, "clusters.c.partitions.a.cpus_per_node", "expected an integer, got 'four'")]


# -- login


def test_login(tmp_path):
    text = GOOD.replace("    partitions:", "    login:\n      host: h\n      port: 2222\n"
                                          "      proxy_jump: \"u@bastion:2200\"\n    partitions:")
    login = load_site(write(tmp_path, text)).clusters["alpha"].login
    assert (login.host, login.port, login.proxy_jump, login.command_timeout) == ("h", 2222, "u@bastion:2200", 60.0)
    text = GOOD.replace("    partitions:", "    login:\n      port: 70000\n      proxy_jump: \"a b\"\n"
                                          "    partitions:")
    found = problems_of(tmp_path, text)
    assert [(line, key) for line, key, _ in found] == [
        (7, "clusters.alpha.login.host"), (8, "clusters.alpha.login.port"), (9, "clusters.alpha.login.proxy_jump")]


# -- prices


def price(text):
    return GOOD.replace("    partitions:", "    price_per_gpu_hour: %s\n    partitions:" % text)


def test_single_price_is_one_all_day_window(tmp_path):
    site = load_site(write(tmp_path, price("2.5")))
    assert site.clusters["alpha"].price_per_gpu_hour == (PriceWindow(0, 24, 2.5),)


def test_price_windows_wrap_midnight(tmp_path):
    site = load_site(write(tmp_path, price('[{hours: "08-20", price: 3.1}, {hours: "20-08", price: 1.4}]')))
    assert site.clusters["alpha"].price_per_gpu_hour == (PriceWindow(8, 20, 3.1), PriceWindow(20, 8, 1.4))
    site = load_site(write(tmp_path, price('[{hours: "00-12", price: 1}, {hours: "12-00", price: 2}]')))
    assert site.clusters["alpha"].price_per_gpu_hour == (PriceWindow(0, 12, 1.0), PriceWindow(12, 24, 2.0))


def test_price_windows_overlap_and_gaps(tmp_path):
    found = problems_of(tmp_path, price('[{hours: "08-20", price: 3}, {hours: "19-06", price: 1}]'))
    assert [(line, key) for line, key, _ in found] == [(7, "clusters.alpha.price_per_gpu_hour")] * 2
    assert "overlap at hours 19-20" in found[0][2]
    assert "leave hours 06-08 uncovered" in found[1][2]


def test_bad_price_values(tmp_path):
    found = problems_of(tmp_path, price('[{hours: "8-25", price: 1}, {hours: "0-24", price: -1}, {price: 1}]'))
    assert [(line, key) for line, key, _ in found] == [
        (7, "clusters.alpha.price_per_gpu_hour[0].hours"), (7, "clusters.alpha.price_per_gpu_hour[1].price"),
        (7, "clusters.alpha.price_per_gpu_hour[2].hours")]
    assert problems_of(tmp_path, price('"cheap"')) == [
        (7, "clusters.alpha.price_per_gpu_hour", "expected a number or a list of mappings, got 'cheap'")]
    assert problems_of(tmp_path, price("-1")) == [
        (7, "clusters.alpha.price_per_gpu_hour", "must be at least 0, got -1")]
    ((_, _, message),) = problems_of(tmp_path, price('[{hours: "05-05", price: 1}]'))
    assert "empty window" in message


# -- several at once, and load_site's error


BAD_MANY = """\
site: many
defaults:
  cluster: nope
clusters:
  alpha:
    partitions:
      gpu:
        accelerator: nvidia
        gpu_model: h100
        gpus_per_node: eight
        cpus_per_node: 4
        cpus_per_node: 4
        max_time: "25:61:00"
        colour: red
"""


def test_every_problem_is_reported_in_line_order(tmp_path):
    found = problems_of(tmp_path, BAD_MANY)
    assert [(line, key) for line, key, _ in found] == [
        (3, "defaults.cluster"),
        (10, "clusters.alpha.partitions.gpu.gpus_per_node"),
        (12, "clusters.alpha.partitions.gpu.cpus_per_node"),
        (13, "clusters.alpha.partitions.gpu.max_time"),
        (14, "clusters.alpha.partitions.gpu.colour"),
    ]


def test_load_site_raises_first_problem_and_count(tmp_path):
    path = write(tmp_path, BAD_MANY)
    with pytest.raises(ConfigError) as info:
        load_site(path)
    message = str(info.value)
    assert message.startswith("%s:3: defaults.cluster: unknown cluster 'nope'" % path)
    assert message.endswith("(and 4 more problems; run `slurmkit site validate %s`)" % path)
    assert len(info.value.problems) == 5
    assert isinstance(info.value, UsageError)  # exit code 2 at the CLI


def test_load_site_single_problem_has_no_suffix(tmp_path):
    path = write(tmp_path, GOOD.replace("gpus_per_node: 8", "gpus_per_node: eight"))
    with pytest.raises(ConfigError) as info:
        load_site(path)
    assert str(info.value) == ("%s:11: clusters.alpha.partitions.gpu.gpus_per_node: expected an integer, "
                               "got 'eight'" % path)


def test_validate_files_covers_several_files(tmp_path):
    good = write(tmp_path, GOOD, "good.yaml")
    bad = write(tmp_path, "", "bad.yaml")
    found = validate_files([good, bad, tmp_path / "missing.yaml"])
    assert [(p.file, p.message) for p in found] == [(str(bad), "file is empty"),
                                                    (str(tmp_path / "missing.yaml"), "no such file")]


# ---------------------------------------------------------------------------
# Finding sites


@pytest.fixture
def site_path(tmp_path, monkeypatch):
    """An isolated search path: two directories on SLURMKIT_SITE_PATH, a fake home."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    monkeypatch.setenv("SLURMKIT_SITE_PATH", os.pathsep.join([str(first), str(second)]))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return first, second


def test_find_site_by_name_on_search_path(site_path):
    first, second = site_path
    write(second, GOOD.replace("site: test", "site: hpc"), "hpc.yml")
    write(second, GOOD.replace("site: test", "site: other"), "other.yaml")
    assert find_site("hpc").name == "hpc"
    # the first directory wins over later ones
    write(first, GOOD.replace("site: test", "site: other"), "other.yaml")
    assert find_site("other").path == str(first / "other.yaml")
    sites = list_sites()
    assert sites["hpc"] == str(second / "hpc.yml")
    assert sites["other"] == str(first / "other.yaml")


def test_find_site_by_path(tmp_path, site_path, monkeypatch):
    path = write(tmp_path, GOOD, "mysite.yaml")
    assert find_site(str(path)).name == "test"
    monkeypatch.chdir(tmp_path)
    assert find_site("mysite.yaml").name == "test"
    assert find_site("./mysite.yaml").path == str(path)
    with pytest.raises(ConfigError, match="does not exist"):
        find_site("nothere.yaml")


def test_unknown_site_lists_choices(site_path):
    first, second = site_path
    write(first, GOOD, "alpha-site.yaml")
    write(second, GOOD, "beta-site.yaml")
    with pytest.raises(UsageError) as info:
        find_site("alpha-sit")
    message = str(info.value)
    assert "unknown site 'alpha-sit'" in message
    assert "did you mean 'alpha-site'" in message
    assert "alpha-site" in message and "beta-site" in message
    assert str(first) in message


def test_repo_site_configs_are_on_the_path(site_path):
    assert site_search_path()[-1] == str(SITE_CONFIGS)
    assert list_sites()["local"] == str(SITE_CONFIGS / "local.yaml")
    assert find_site("local").name == "local"


def test_invalid_site_found_by_name_raises_config_error(site_path):
    first, _ = site_path
    write(first, "site: broken\n", "broken.yaml")
    with pytest.raises(ConfigError, match="broken.yaml:1: clusters: required key is missing"):
        find_site("broken")


# ---------------------------------------------------------------------------
# Documentation stays complete


def test_readme_documents_every_key():
    readme = (SITE_CONFIGS / "README.md").read_text()
    missing = [path for path, _ in schema.iter_keys() if "`%s`" % path not in readme]
    assert missing == []


def test_no_unsafe_yaml_loading_in_the_loader():
    source = Path(loader.__file__).read_text()
    assert not re.search(r"yaml\.(load|unsafe_load|full_load)\(", source)
    assert "yaml.Loader" not in source and "UnsafeLoader" not in source


def test_pure_python_parser_reports_the_same(tmp_path, monkeypatch):
    # PyYAML without libyaml falls back to the pure-Python SafeLoader; line
    # numbers and messages must not depend on which one parsed the file.
    import yaml

    texts = [BAD_MANY, GOOD.replace("cpus_per_node: 4", "cpus_per_node: [4"), GOOD.replace("gpu_model: h100",
                                                                                          "gpu_model: 100")]

    def run():
        # the parsers word syntax errors differently; only the place must agree
        return [[(line, key, "invalid YAML" if message.startswith("invalid YAML") else message)
                 for line, key, message in problems_of(tmp_path, text)] for text in texts]

    with_c = run()
    monkeypatch.setattr(loader, "YamlLoader", yaml.SafeLoader)
    assert run() == with_c


@pytest.mark.parametrize("name,needle", [("SLURM_NTASKS", "is set by Slurm for the job"),
                                         ("BASH_ENV", "is read by the job script's own shell"),
                                         ("9LIVES", "is not a valid environment variable name")])
def test_a_fabric_env_name_follows_the_rule_of_env(tmp_path, name, needle):
    # A site's fabric env and a user's --env are both exported by the job script: one rule for both.
    from slurmkit import envnames
    from slurmkit.script.quoting import check_env_name

    path = tmp_path / "site.yaml"
    path.write_text("site: t\nclusters:\n  c:\n    partitions:\n      cpu:\n        accelerator: none\n"
                    "        cpus_per_node: 2\n        fabric:\n          env:\n            %s: '1'\n" % name)
    with pytest.raises(ConfigError, match=needle):
        load_site(str(path))
    with pytest.raises(UsageError, match="--env: .*" + needle):
        check_env_name(name)
    assert envnames.problem("my_setting") is None and envnames.problem("NCCL_DEBUG") is None   # --env takes both
