"""Rendering: golden scripts for the example sites, quoting, fit checks, lint.

Golden files live in tests/golden/; after an intended template change,
regenerate them with ``UPDATE_GOLDEN=1 make unit`` and review the diff.
"""

import os
import subprocess

from pathlib import Path

import pytest

from slurmkit.script import collective, render
from slurmkit.errors import JobDoesNotFitError, UsageError
from slurmkit.site import load_site
from slurmkit.site.model import Fabric, Partition, RoceSettings
from slurmkit.slurm.types import Switch, Topology
from slurmkit.script.topology import ClusterLayout

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
SPEC = render.JobSpec(command=("python", "train.py", "--lr", "3e-4"), nodes=4, comm="heavy", token="0123456789abcdef")


def _site(name):
    return load_site(str(ROOT / "site_configs" / name))


def _layout(partition, nodes_per_leaf, leaves):
    names = ["n%d" % i for i in range(nodes_per_leaf * leaves)]
    switches = tuple(Switch("leaf%d" % j, 0, ",".join(names[j * nodes_per_leaf:(j + 1) * nodes_per_leaf]), "")
                     for j in range(leaves))
    return ClusterLayout(Topology(switches), {partition: ",".join(names)})


def _render_default(site, spec, layout):
    cluster = site.cluster()
    partition = site.partition(cluster)
    return render.render(site, cluster, partition, spec, layout=layout)


@pytest.mark.parametrize("config,golden,spec_changes", [
    ("example-infiniband.yaml", "infiniband-torchrun.sh", {}),
    ("example-roce.yaml", "roce-torchrun.sh", {"env": {"WANDB_PROJECT": "llm run #7"}}),
    ("example-ascend.yaml", "ascend-srun.sh", {"template": "srun", "nodes": 2}),
])
def test_golden_scripts(config, golden, spec_changes):
    site = _site(config)
    partition = site.partition(site.cluster())
    # 3 nodes per leaf: a 4-node heavy job needs 2 leaves, a 2-node one needs 1.
    rendered = _render_default(site, SPEC._replace(**spec_changes), _layout(partition.name, 3, 4))
    path = GOLDEN / golden
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(rendered.script)
    assert rendered.script == path.read_text(), "rendered script differs from %s" % path


def test_ib_script_carries_fabric_and_switches():
    site = _site("example-infiniband.yaml")
    script = _render_default(site, SPEC, _layout("gpu", 3, 4)).script
    assert "#SBATCH --switches=2@00:30:00" in script
    assert "\nexport NCCL_IB_HCA==mlx5_0:1," in script
    assert "#SBATCH --comment=slurmkit:0123456789abcdef" in script
    assert "--rdzv-id=\"$SLURM_JOB_ID\"" in script and "--ntasks-per-node=1" in script


def test_ascend_uses_hccl_and_npu_gres():
    site = _site("example-ascend.yaml")
    partition = site.partition(site.cluster())
    script = _render_default(site, SPEC._replace(nodes=2), _layout(partition.name, 2, 2)).script
    assert "NCCL_" not in script and "HCCL_SOCKET_IFNAME" in script
    assert "#SBATCH --gres=npu:" in script and "--gpus-per-node" not in script


def test_light_jobs_ask_for_no_switch_count():
    site = _site("example-infiniband.yaml")
    rendered = _render_default(site, SPEC._replace(comm="light"), None)
    assert rendered.switches is None and "--switches" not in rendered.script


def test_heavy_without_topology_is_a_usage_error():
    site = _site("example-infiniband.yaml")
    with pytest.raises(UsageError, match="--switches N"):
        _render_default(site, SPEC, None)


HOSTILE = ["$(touch /tmp/slurmkit-pwned)", "'; rm -rf ~'", "a\nb", "`id`", "x\"y", "\\", "", "*", "--", "{a,b}"]


def test_hostile_arguments_are_quoted_and_reach_the_program_byte_for_byte(tmp_path):
    site = _site("example-infiniband.yaml")
    marker = tmp_path / "pwned"
    args = [a.replace("/tmp/slurmkit-pwned", str(marker)) for a in HOSTILE]
    spec = SPEC._replace(command=("printf", "%s\\0", *args), template="single", nodes=1, comm="light",
                   env={"EVIL": "$(touch %s)" % marker})
    script = _render_default(site, spec, None).script
    assert "\nexec printf " in script
    launch = "exec " + script.split("\nexec ", 1)[1]  # a quoted newline argument spans two lines
    # Run the rendered command line and the export in a real shell: nothing executes, bytes survive.
    export = [ln for ln in script.splitlines() if ln.startswith("export EVIL=")][0]
    out = subprocess.run(["bash", "-c", export + "\n" + launch[len("exec "):] + "\nprintf '%s' \"$EVIL\""],
                         capture_output=True).stdout
    *received, evil = out.split(b"\0")
    assert [r.decode() for r in received] == args
    assert evil.decode() == "$(touch %s)" % marker
    assert not marker.exists()


@pytest.mark.parametrize("name", ["bad\nname", "tab\there"])
def test_control_characters_cannot_reach_an_sbatch_line(name):
    site = _site("example-infiniband.yaml")
    with pytest.raises(UsageError, match="control character"):
        _render_default(site, SPEC._replace(name=name, comm="light"), None)


def test_sbatch_quote():
    assert render.sbatch_quote("gpu") == "gpu"
    assert render.sbatch_quote("a b") == '"a b"'
    assert render.sbatch_quote('say "hi" \\o/') == '"say \\"hi\\" \\\\o/"'


@pytest.mark.parametrize("changes,message", [
    ({"nodes": 65}, "asks for 65 nodes but partition gpu on cluster hopper has 64"),
    ({"gpus_per_node": 9}, "asks for 9 gpu per node but partition gpu on cluster hopper has 8 per node"),
    ({"time": "3-00:00:00"}, "time limit of partition gpu on cluster hopper is 2-00:00:00"),
    ({"cpus_per_task": 500}, "500 CPUs per task"),
])
def test_jobs_that_cannot_fit_are_refused_before_sbatch(changes, message):
    site = _site("example-infiniband.yaml")
    with pytest.raises(JobDoesNotFitError, match=message):
        _render_default(site, SPEC._replace(comm="light", **changes), None)


def test_unknown_template_lists_choices():
    site = _site("example-infiniband.yaml")
    with pytest.raises(UsageError, match="choose one of: single, srun, torchrun"):
        _render_default(site, SPEC._replace(template="nope", comm="light"), None)


def test_bad_env_name_refused():
    site = _site("example-infiniband.yaml")
    with pytest.raises(UsageError, match="not a valid environment variable name"):
        _render_default(site, SPEC._replace(env={"A-B": "1"}, comm="light"), None)


def test_torchrun_drops_python_and_uses_no_python_otherwise():
    assert render.launcher_command(["python3", "train.py", "-x"]) == (("train.py", "-x"), True)
    assert render.launcher_command(["./run.sh", "a"]) == (("./run.sh", "a"), False)
    assert render.launcher_command(["python", "-m", "pkg"]) == (("python", "-m", "pkg"), False)


def _partition(**fabric_kw):
    return Partition(name="gpu", accelerator="nvidia", gpu_model="a100", gpus_per_node=8, cpus_per_node=64,
                     fabric=Fabric(**fabric_kw))


def test_lint_prefix_hca():
    warnings = collective.lint(_partition(type="infiniband", hcas=("mlx5_1", "mlx5_10")))
    assert len(warnings) == 1
    assert "'mlx5_1' has no '=' and also matches 'mlx5_10'" in warnings[0] and "'=mlx5_1,mlx5_10'" in warnings[0]


def test_lint_exclude_only_ifname_lets_lo_in():
    warnings = collective.lint(_partition(type="infiniband", hcas=("=mlx5_0",), socket_ifname="^docker0"))
    assert len(warnings) == 1 and "'lo'" in warnings[0] and "^docker0,lo" in warnings[0]
    assert collective.lint(_partition(type="infiniband", hcas=("=mlx5_0",), socket_ifname="^docker0,lo")) == []


def test_roce_env():
    env = collective.collective_env(_partition(type="roce", hcas=("=mlx5_0:1", "=mlx5_1:1"), socket_ifname="=eth0",
                                           roce=RoceSettings(gid_index=3, traffic_class=106)))
    assert env == {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_SOCKET_IFNAME": "=eth0",
                   "NCCL_IB_GID_INDEX": "3", "NCCL_IB_TC": "106"}


def test_ethernet_disables_ib():
    assert collective.collective_env(_partition(type="ethernet", socket_ifname="lo"))["NCCL_IB_DISABLE"] == "1"
