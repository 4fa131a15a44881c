"""One node's whole check (``node.check_node``): readings in forked children, checks, and the state file.

The NVML provider is the fake (handed to the forked child), the InfiniBand
tree and the kernel log are laid out under tmp_path; psutil, /proc and the
mount probes are this machine's.
"""

import json
import shutil
import time

import pytest

from slurmkit.health import node, state
from slurmkit.health.sources.fakes import FakeGpu, FakeNvml, write_ib_port, write_kernel_log, xid_line
from slurmkit.health.plan import CheckPlan
from slurmkit.health.findings import NodeReport
from slurmkit.site.model import HealthChecks, HealthMount


@pytest.fixture
def state_dir(tmp_path):
    return str(tmp_path / "state")


def plan_for(tmp_path, state_dir, **checks):
    limits = dict(daemons=("no-such-daemon-hc",), kernel_log=str(tmp_path / "kmsg"),
                  ib_sysfs=str(tmp_path / "ib"), mounts=(HealthMount(str(tmp_path / "scratch" / "%n"),
                                                                     writable=True),), warn_load_per_core=None)
    limits.update(checks)
    return CheckPlan(node="g7", cluster="c", partition="gpu", accelerator="nvidia", gres_name="gpu",
                     expected_gpus=2, slurm_gres=2, has_job=False, memory_mb=64, checks=HealthChecks(**limits),
                     ib_ports=("mlx5_0:1",), state_dir=state_dir)


def test_a_whole_node_every_source_and_what_fails(tmp_path, state_dir):
    (tmp_path / "scratch" / "g7").mkdir(parents=True)
    write_ib_port(tmp_path / "ib", "mlx5_0", state="1: DOWN", phys_state="2: Polling")
    write_kernel_log(tmp_path / "kmsg", [xid_line(48, detail="DBE (double bit error) ECC error")])
    fake = FakeNvml([FakeGpu(), FakeGpu(ecc_uncorrected=2)])
    report = node.check_node(plan_for(tmp_path, state_dir), node.Sources(nvml=lambda: fake))
    by = {r.name: r for r in report.results}
    assert report.failing == ["daemon:no-such-daemon-hc", "xid", "ecc", "ib_port:mlx5_0:1"]
    assert by["mount:%s" % (tmp_path / "scratch" / "g7")].status == "ok"      # %n: this node's own directory
    assert by["memory"].status == "ok" and by["gpu_count"].status == "ok" and by["dstate"].status == "ok"
    assert 0 < report.duration < 5 and abs(report.started - time.time()) < 60
    # the JSON the sweep reads back is the same report
    assert NodeReport.from_dict(json.loads(json.dumps(report.to_dict()))) == report


def test_a_hung_reading_is_a_failed_check_not_a_hung_check(tmp_path, state_dir):
    def wedged():
        time.sleep(60)           # as NVML inside a wedged driver

    t0 = time.monotonic()
    report = node.check_node(plan_for(tmp_path, state_dir, skip=("ib", "mount"))._replace(check_timeout=1.0),
                             node.Sources(nvml=wedged))
    assert time.monotonic() - t0 < 3
    nvml = {r.name: r for r in report.results}["nvml"]
    assert nvml.status == "fail" and "no answer within 0.8s" in nvml.message


def test_counters_are_remembered_per_node_between_checks(tmp_path, state_dir):
    (tmp_path / "scratch" / "g7").mkdir(parents=True)
    write_ib_port(tmp_path / "ib", counters={"link_error_recovery": 0})
    plan = plan_for(tmp_path, state_dir, skip=("gpu",))
    first = node.check_node(plan)
    assert "ib_errors:mlx5_0:1" not in first.failing
    assert state.load(state_dir, "g7")["ib"] == {"mlx5_0:1": {"link_error_recovery": 0}}
    write_ib_port(tmp_path / "ib", counters={"link_error_recovery": 4})
    assert "ib_errors:mlx5_0:1" not in node.check_node(plan._replace(node="g8")).failing   # g8 starts afresh
    second = node.check_node(plan)
    assert "ib_errors:mlx5_0:1" in second.failing


def test_what_a_partition_runs():
    cpu = CheckPlan("c1", "c", "cpu")
    assert cpu.enabled("memory") and not cpu.enabled("nvml") and not cpu.enabled("npu_count")
    assert not cpu.enabled("ib_port")
    npu = CheckPlan("a1", "c", "npu", accelerator="ascend", ib_ports=("x:1",))
    assert npu.enabled("npu_count") and not npu.enabled("gpu_count") and npu.enabled("ib_rate")
    gpu = CheckPlan("g1", "c", "gpu", accelerator="nvidia", checks=HealthChecks(skip=("host", "pcie")))
    assert gpu.enabled("xid") and not gpu.enabled("pcie") and not gpu.enabled("memory") and not gpu.enabled("mount")


def test_a_plan_travels_as_json_and_refuses_another_version():
    plan = CheckPlan("g1", "c", "gpu", accelerator="nvidia", checks=HealthChecks(mounts=(HealthMount("/x"),)),
                     ib_ports=("mlx5_0:1",))
    assert CheckPlan.from_json(plan.to_json()) == plan
    from slurmkit.errors import UsageError

    newer = json.loads(plan.to_json())
    newer["version"] = 99
    with pytest.raises(UsageError, match="version 99; this slurmkit reads versions 1, 2, 3"):
        CheckPlan.from_json(json.dumps(newer))
    with pytest.raises(UsageError, match="not a check plan"):
        CheckPlan.from_json("{}")


def test_the_socket_interface_is_checked_where_the_fabric_names_one(tmp_path, state_dir):
    """The plan carries the partition's socket_ifname (a version-2 plan, without it, is still read);
    the whole check fails a node whose interface is gone, on this machine's real /sys/class/net."""
    from slurmkit.health import plan as plans
    from slurmkit.site.model import Cluster, Fabric, Partition, Site

    part = Partition(name="gpu", fabric=Fabric(type="ethernet", socket_ifname="=slurmkit-gone0"))
    cluster = Cluster(name="c", partitions={"gpu": part})
    built = plans.build(Site(name="s", path="s.yaml", clusters={"c": cluster}), cluster, part, "g7")
    assert built.socket_ifname == "=slurmkit-gone0" and built.enabled("socket_ifname")
    assert not built._replace(socket_ifname=None).enabled("socket_ifname")
    assert not built._replace(checks=HealthChecks(skip=("fabric",))).enabled("socket_ifname")
    old = json.loads(built.to_json())
    old["version"] = 2
    del old["socket_ifname"]
    assert CheckPlan.from_json(json.dumps(old)).socket_ifname is None
    plan = plan_for(tmp_path, state_dir, skip=("gpu", "ib", "host"))._replace(socket_ifname="=slurmkit-gone0")
    report = node.check_node(plan)
    assert report.failing == ["socket_ifname:slurmkit-gone0"]
    assert "no interface slurmkit-gone0 on the node" in report.results[0].message
    assert node.check_node(plan._replace(socket_ifname="=lo")).failing == []


# ---------------------------------------------------------------------------
# The container runtime check (a partition with containers.runtime)

def _runtime_plan(tmp_path, runtime, oci_conf=None):
    return CheckPlan("n1", "c", "cpu", container_runtime=runtime, oci_conf=oci_conf, state_dir=str(tmp_path),
                     checks=HealthChecks(skip=("host",)))


def _fake_program(directory, name, body):
    path = directory / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


def _runtime_result(plan):
    from slurmkit.health.node import check_node

    (result,) = [r for r in check_node(plan).results if r.name == "container_runtime"]
    return result


def test_a_plan_from_before_containers_still_reads_and_runs_no_runtime_check(tmp_path):
    old = json.loads(CheckPlan("n1", "c", "cpu").to_json())
    old["version"] = 1
    for key in ("container_runtime", "oci_conf"):
        del old[key]
    plan = CheckPlan.from_json(json.dumps(old))
    assert plan.container_runtime is None and not plan.enabled("container_runtime")


def test_the_runtimes_program_must_start(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    result = _runtime_result(_runtime_plan(tmp_path, "apptainer"))
    assert result.status == "fail" and result.message.startswith(
        "runtime apptainer cannot start images: apptainer not on PATH (%s)" % bin_dir)
    _fake_program(bin_dir, "apptainer", 'echo "FATAL: kernel too old" >&2; exit 255')
    result = _runtime_result(_runtime_plan(tmp_path, "apptainer"))
    assert result.status == "fail" and "apptainer --version exited 255: FATAL: kernel too old" in result.message
    _fake_program(bin_dir, "apptainer", 'echo "apptainer version 1.3.4"')
    result = _runtime_result(_runtime_plan(tmp_path, "apptainer"))
    assert result.status == "ok" and result.message == ("runtime apptainer: %s (apptainer version 1.3.4)"
                                                         % (bin_dir / "apptainer"))


def test_oci_needs_an_oci_conf_whose_programs_start(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    conf = tmp_path / "oci.conf"
    result = _runtime_result(_runtime_plan(tmp_path, "oci", str(conf)))
    assert result.status == "fail" and "%s cannot be read" % conf in result.message and "on the host" in result.message
    conf.write_text('ContainerPath=/run/slurm-oci\nRunTimeQuery="runc --root=/run/slurm-oci state %n.%u.%j"\n'
                    'RunTimeRun="runc --root=/run/slurm-oci run %n.%u.%j -b %b"\n')
    result = _runtime_result(_runtime_plan(tmp_path, "oci", str(conf)))
    assert result.status == "fail" and "runc not on PATH" in result.message
    _fake_program(bin_dir, "runc", 'echo "runc version 1.1.5"')
    result = _runtime_result(_runtime_plan(tmp_path, "oci", str(conf)))
    assert result.status == "ok" and result.message == "runtime oci with %s: %s (runc version 1.1.5)" % (
        conf, bin_dir / "runc")


@pytest.mark.skipif(shutil.which("ch-run") is None, reason="Charliecloud is not installed here (make install-system)")
def test_the_real_charliecloud_starts():
    from slurmkit.health.sources.containers import read_runtime

    reading = read_runtime("charliecloud")
    assert reading["error"] is None and reading["programs"][0]["error"] is None, reading
    assert reading["programs"][0]["version"][0].isdigit(), reading        # ch-run --version prints 0.31
