"""The checks, as pure functions, on readings from the fakes (NVML, sysfs, kernel log) and on numbers.

Every failure signal of the issue has a case here: memory and swap, mounts,
daemons, D state, GPU count (config and Slurm), lost GPUs, fatal Xids,
uncorrected ECC, retired pages, remapped rows, NVLink, throttling, PCIe,
stray processes, NPU count, InfiniBand state, rate and error growth.
"""

import pytest

from slurmkit.health import checks
from slurmkit.health.sources import infiniband, interfaces, kmsg, nvml
from slurmkit.health.sources.fakes import FakeGpu, FakeNvml, write_ib_port, write_kernel_log, xid_line
from slurmkit.health.plan import CheckPlan
from slurmkit.health.sources.probe import Outcome
from slurmkit.health.findings import FAIL, OK, WARN, CheckResult
from slurmkit.site.model import Fabric, HealthChecks, HealthMount


def by_name(results):
    return {r.name: r for r in results}


def gpu_plan(**kw):
    base = dict(node="g1", cluster="c", partition="gpu", accelerator="nvidia", gres_name="gpu", expected_gpus=2,
                slurm_gres=2, has_job=False)
    base.update(kw)
    return CheckPlan(**base)


def gpu_results(gpus, plan=None, kernel=(), init_error=None):
    reading = nvml.read_gpus(FakeNvml(gpus, init_error=init_error))
    return by_name(checks.gpus(reading, plan or gpu_plan(), kmsg.xids(list(kernel)), None))


# ---------------------------------------------------------------- host

MEM = {"memory_mb": 3900.0, "swap_mb": 1024.0, "swap_used_percent": 10.0, "load1": 3.0, "cores": 4}


def test_memory_against_what_the_node_should_have():
    assert checks.memory(MEM, 4000, 5.0)[0].status == OK               # 3900 >= 3800
    low = checks.memory(MEM, 4200, 5.0)[0]
    assert low.status == FAIL and "3900 MB of memory, expected 4200 MB" in low.message and low.value == 3900.0
    assert checks.memory(MEM, None, 5.0)[0].status == OK


def test_swap_size_and_use():
    assert checks.swap(MEM, None, None) == []
    assert checks.swap(MEM, 2048, None)[0].status == FAIL
    assert checks.swap(MEM, 512, 5.0)[0].message == "swap 10% used (at most 5%)"
    assert checks.swap(MEM, 512, 50.0)[0].status == OK


def test_load_warns_then_fails():
    assert checks.load(MEM, 1.0, None)[0].status == OK                  # 0.75 per core
    assert checks.load(dict(MEM, load1=10.0), 2.0, None)[0].status == WARN
    failed = checks.load(dict(MEM, load1=40.0), 2.0, 8.0)[0]
    assert failed.status == FAIL and failed.value == 10.0


def test_mounts_every_failure_and_a_pass():
    specs = [HealthMount("/m/%n/", mount=True), HealthMount("/gone"), HealthMount("/ro", writable=True),
             HealthMount("/full", max_used_percent=90), HealthMount("/hung", timeout=2.0),
             HealthMount("/good", mount=True, writable=True, max_used_percent=90)]
    outcomes = {"/gone": Outcome(True, {"exists": False, "is_dir": False}),
                "/ro": Outcome(True, {"exists": True, "is_dir": True, "writable": False,
                                      "write_error": "Read-only file system"}),
                "/full": Outcome(True, {"exists": True, "is_dir": True, "used_percent": 97.0}),
                "/hung": Outcome(False, error="no answer within 2s", timed_out=True),
                "/good": Outcome(True, {"exists": True, "is_dir": True, "writable": True, "used_percent": 40.0})}
    results = by_name(checks.mounts(specs, outcomes, {"/good": "nfs4", "/m/x": "ext4"}, "n7"))
    assert results["mount:/m/n7"].message == "/m/n7 is not mounted"                      # %n is the node
    assert results["mount:/gone"].message == "/gone is missing"
    assert results["mount:/ro"].message == "/ro is not writable: Read-only file system"
    assert results["mount:/full"].message == "/full is 97% full (at most 90%)"
    assert "did not answer within 2s" in results["mount:/hung"].message
    assert results["mount:/good"].status == OK and "mounted (nfs4), writable, 40% used" in results["mount:/good"].message
    assert [r.status for r in results.values()].count(FAIL) == 5


def test_daemons():
    results = by_name(checks.daemons({"running": {"munged": 1, "slurmd": 0}}, ["munged", "slurmd"]))
    assert results["daemon:munged"].status == OK
    assert results["daemon:slurmd"].status == FAIL and results["daemon:slurmd"].message == "slurmd is not running"


def test_dstate_only_across_checks_and_only_while_it_lasts():
    procs = {"dstate": [[42, 100.0, "cp"], [43, 101.0, "rsync"]]}
    first, memory = checks.dstate(procs, {}, now=1000.0, seconds=60)
    assert first[0].status == OK and memory == {"42:100.00": 1000.0, "43:101.00": 1000.0}
    # 43 left D state in between: forgotten; 42 is still in D 90 s later: stuck
    second, memory = checks.dstate({"dstate": [[42, 100.0, "cp"]]}, memory, now=1090.0, seconds=60)
    assert second[0].status == FAIL and "cp (pid 42, 90s)" in second[0].message and memory == {"42:100.00": 1000.0}
    # the same pid reused by a new process (another start time) starts afresh
    third, _ = checks.dstate({"dstate": [[42, 500.0, "cp"]]}, memory, now=1200.0, seconds=60)
    assert third[0].status == OK


# ---------------------------------------------------------------- NVIDIA (fake NVML)

def test_a_healthy_gpu_node_passes_every_gpu_check():
    results = gpu_results([FakeGpu(), FakeGpu(uuid="GPU-2")])
    assert set(results) == {"nvml", "gpu_count", "gpu_lost", "xid", "ecc", "retired_pages", "remapped_rows",
                            "nvlink", "throttle", "pcie", "stray_processes"}
    assert all(r.status == OK for r in results.values()), results


def test_no_nvml_on_a_gpu_node_is_a_failed_check_not_a_crash():
    results = gpu_results([], init_error=12)
    assert list(results) == ["nvml"]
    assert results["nvml"].status == FAIL and "NVML Shared Library Not Found" in results["nvml"].message


def test_gpu_count_against_the_config_and_slurms_gres():
    assert gpu_results([FakeGpu()])["gpu_count"].message == \
        "1 GPUs, but the site expects 2 and Slurm has Gres=gpu:2"
    only_slurm = gpu_results([FakeGpu(), FakeGpu()], gpu_plan(slurm_gres=4))["gpu_count"]
    assert only_slurm.status == FAIL and only_slurm.message == "2 GPUs, but Slurm has Gres=gpu:4"


def test_lost_and_reset_required_gpus():
    result = gpu_results([FakeGpu(lost=True), FakeGpu(reset_required=True)])["gpu_lost"]
    assert result.status == FAIL and result.message == "GPU 0 is lost; GPU 1 needs a reset"


@pytest.mark.parametrize("gpu,name,text", [
    (FakeGpu(ecc_uncorrected=3), "ecc", "uncorrected ECC errors (volatile) GPU 0: 3"),
    (FakeGpu(retired_pending=True), "retired_pages", "GPU 0 has a page retirement pending"),
    (FakeGpu(retired_sbe=30, retired_dbe=31), "retired_pages", "GPU 0 retired 61 pages (limit 60)"),
    (FakeGpu(remapped=(0, 1, 1, 0)), "remapped_rows", "a row remap is pending"),
    (FakeGpu(remapped=(0, 9, 0, 1)), "remapped_rows", "row remapping failed"),
    (FakeGpu(nvlinks=(True, False, True, False)), "nvlink", "GPU 0 links 1,3 down"),
    (FakeGpu(throttle=nvml.HW_THERMAL | nvml.SW_POWER_CAP), "throttle", "hardware slowdown: GPU 0 hw_thermal"),
    (FakeGpu(throttle=nvml.HW_POWER_BRAKE), "throttle", "hw_power_brake"),
    (FakeGpu(pcie=(4, 5, 8, 16)), "pcie", "GPU 0 at x8 of x16"),
    (FakeGpu(processes=(4242,)), "stray_processes", "GPU processes with no job on the node: GPU 0: pid 4242"),
])
def test_each_gpu_failure_signal(gpu, name, text):
    results = gpu_results([gpu, FakeGpu()])
    assert results[name].status == FAIL and text in results[name].message, results[name]
    others = [r for n, r in results.items() if n != name and r.status == FAIL]
    assert others == []


def test_soft_signals_only_warn():
    results = gpu_results([FakeGpu(throttle=nvml.SW_THERMAL, pcie=(1, 5, 16, 16)), FakeGpu(throttle=nvml.SW_POWER_CAP)])
    assert results["throttle"].status == WARN and results["pcie"].status == WARN
    assert "normal while idle" in results["pcie"].message


def test_gpu_processes_are_fine_while_a_job_runs_and_unknown_without_slurm():
    assert gpu_results([FakeGpu(processes=(1,)), FakeGpu()], gpu_plan(has_job=True))["stray_processes"].status == OK
    unknown = gpu_results([FakeGpu(processes=(1,)), FakeGpu()], gpu_plan(has_job=None))["stray_processes"]
    assert unknown.status == OK and "unknown" in unknown.message


def test_expected_nvlink_count():
    gpus = [FakeGpu(nvlinks=(True,) * 12), FakeGpu(nvlinks=(True,) * 18)]
    result = gpu_results(gpus, gpu_plan(checks=HealthChecks(nvlinks=18)))["nvlink"]
    assert result.status == FAIL and result.message == "GPU 0 has 12 of 18 NVLinks active"
    assert gpu_results([FakeGpu(nvlinks=None)] * 2)["nvlink"].status == OK    # no NVLink at all: nothing to lose


def test_unsupported_queries_are_not_failures():
    gpu = FakeGpu(unsupported=("nvmlDeviceGetRemappedRows", "nvmlDeviceGetRetiredPages",
                               "nvmlDeviceGetTotalEccErrors"))
    results = gpu_results([gpu, gpu])
    assert all(r.status == OK for r in results.values()), results


def test_fatal_xids_from_a_kernel_log_tree(tmp_path):
    log = write_kernel_log(tmp_path / "kmsg", ["usb 1-1: new device", xid_line(13, detail="Graphics Exception"),
                                               xid_line(79, bus="PCI:0000:86:00")])
    lines, error = kmsg.read_kernel_log(log)
    assert error is None and lines[0] == "usb 1-1: new device"                    # record headers stripped
    events = kmsg.xids(lines)
    assert [(e.code, e.bus) for e in events] == [(13, "PCI:0000:3b:00"), (79, "PCI:0000:86:00")]
    result = by_name(checks.gpus(nvml.read_gpus(FakeNvml([FakeGpu(), FakeGpu()])), gpu_plan(), events, None))["xid"]
    assert result.status == FAIL and result.message == "fatal Xid 79 on PCI:0000:86:00 in the kernel log"
    only_app = checks.gpus(nvml.read_gpus(FakeNvml([FakeGpu(), FakeGpu()])), gpu_plan(), events[:1], None)
    assert by_name(only_app)["xid"].status == OK      # Xid 13 is the application's fault, not the node's


def test_an_unreadable_kernel_log_warns(tmp_path):
    lines, error = kmsg.read_kernel_log(str(tmp_path / "nothing"))
    results = by_name(checks.gpus(nvml.read_gpus(FakeNvml([FakeGpu(), FakeGpu()])), gpu_plan(), None, error))
    assert results["xid"].status == WARN and "could not be read" in results["xid"].message


def test_skipped_checks_do_not_run():
    plan = gpu_plan(checks=HealthChecks(skip=("pcie", "xid")))
    results = by_name(checks.gpus(nvml.read_gpus(FakeNvml([FakeGpu(pcie=(1, 5, 1, 16))] * 2)), plan, [], None))
    assert "pcie" not in results and "xid" not in results and "ecc" in results


# ---------------------------------------------------------------- Ascend

def test_npu_count(tmp_path):
    import os

    for i in range(7):
        os.mknod(str(tmp_path / ("davinci%d" % i)), 0o600 | 0o020000, os.makedev(1, 3))   # char devices
    (tmp_path / "davinci_manager").touch()
    (tmp_path / "davinci7").touch()                   # a plain file is no device
    from slurmkit.health.sources import ascend

    reading = ascend.count_devices(str(tmp_path))
    assert reading["count"] == 7 and reading["devices"][-1] == "davinci6"
    plan = CheckPlan("a1", "c", "npu", accelerator="ascend", gres_name="npu", expected_gpus=8, slurm_gres=8)
    result = checks.npus(reading, plan)[0]
    assert result.status == FAIL and result.message == "7 NPUs, but the site expects 8 and Slurm has Gres=npu:8"
    assert checks.npus(ascend.count_devices(str(tmp_path / "none")), plan)[0].status == FAIL


# ---------------------------------------------------------------- InfiniBand (sysfs tree)

IB_FIX = ("jobs here would fall back to sockets: reseat or replace the HCA or its cable, check the driver and the "
          "subnet manager, or take the port out of the partition's fabric.hcas")


def ib_plan(ports=("mlx5_0:1", "mlx5_1:1"), rate=None, root="/sys/class/infiniband"):
    return CheckPlan("n1", "c", "gpu", ib_ports=tuple(ports), checks=HealthChecks(ib_rate_gbps=rate, ib_sysfs=root))


def test_every_expected_port_active_at_the_expected_rate(tmp_path):
    write_ib_port(tmp_path, "mlx5_0")
    write_ib_port(tmp_path, "mlx5_1", state="1: DOWN", phys_state="3: Disabled")
    write_ib_port(tmp_path, "mlx5_2", rate="200 Gb/sec (4X HDR)")
    reading = infiniband.read_ports(str(tmp_path), ["mlx5_0:1", "mlx5_1:1", "mlx5_2:1", "mlx5_3:1", "mlx5_0:2"])
    plan = ib_plan(["mlx5_0:1", "mlx5_1:1", "mlx5_2:1", "mlx5_3:1", "mlx5_0:2"])
    results, _ = checks.infiniband(reading, plan, {})
    results = by_name(results)
    assert results["ib_port:mlx5_0:1"].status == OK and results["ib_rate:mlx5_0:1"].status == OK
    assert results["ib_port:mlx5_1:1"].message == "mlx5_1:1 is DOWN/Disabled, expected ACTIVE/LinkUp; " + IB_FIX
    # not "any port": one port slower than the others fails on its own
    assert results["ib_rate:mlx5_2:1"].message == "mlx5_2:1 runs at 200 Gb/s, expected 400 (200 Gb/sec (4X HDR))"
    assert results["ib_port:mlx5_3:1"].message == "mlx5_3:1 missing: no HCA mlx5_3; " + IB_FIX
    assert results["ib_port:mlx5_0:2"].message == "mlx5_0:2 missing: HCA has no port 2; " + IB_FIX


def test_a_configured_rate_and_a_missing_driver(tmp_path):
    write_ib_port(tmp_path, "mlx5_0", rate="200 Gb/sec (4X HDR)")
    results, _ = checks.infiniband(infiniband.read_ports(str(tmp_path), ["mlx5_0:1"]), ib_plan(["mlx5_0:1"], 400), {})
    assert by_name(results)["ib_rate:mlx5_0:1"].status == FAIL
    gone = str(tmp_path / "no-driver")
    results, _ = checks.infiniband(infiniband.read_ports(gone, ["mlx5_0:1"]), ib_plan(["mlx5_0:1"], root=gone), {})
    assert by_name(results)["ib_port:mlx5_0:1"].message == \
        "mlx5_0:1 missing: no %s (is the driver loaded?); %s" % (gone, IB_FIX)


def test_error_counters_growing_between_checks(tmp_path):
    plan = ib_plan(["mlx5_0:1"])
    write_ib_port(tmp_path, counters={"symbol_error": 5, "link_downed": 1, "port_rcv_errors": 0})
    first, memory = checks.infiniband(infiniband.read_ports(str(tmp_path), ["mlx5_0:1"]), plan, {})
    assert by_name(first)["ib_errors:mlx5_0:1"].status == OK and memory["mlx5_0:1"]["symbol_error"] == 5
    write_ib_port(tmp_path, counters={"symbol_error": 9, "link_downed": 1, "port_rcv_errors": 0})
    second, memory = checks.infiniband(infiniband.read_ports(str(tmp_path), ["mlx5_0:1"]), plan, memory)
    assert by_name(second)["ib_errors:mlx5_0:1"].status == WARN
    write_ib_port(tmp_path, counters={"symbol_error": 9, "link_downed": 3, "port_rcv_errors": 0})
    third, memory = checks.infiniband(infiniband.read_ports(str(tmp_path), ["mlx5_0:1"]), plan, memory)
    assert by_name(third)["ib_errors:mlx5_0:1"].message == "mlx5_0:1 link errors since the last check: link_downed +2"
    write_ib_port(tmp_path, counters={"symbol_error": 0, "link_downed": 0, "port_rcv_errors": 0})  # cleared
    fourth, _ = checks.infiniband(infiniband.read_ports(str(tmp_path), ["mlx5_0:1"]), plan, memory)
    assert by_name(fourth)["ib_errors:mlx5_0:1"].status == OK


def test_expected_ports_come_from_the_fabric():
    fabric = Fabric(type="infiniband", hcas=("=mlx5_0:1", "mlx5_1", "^mlx5_9"))
    assert infiniband.expected_ports(None, fabric) == ("mlx5_0:1", "mlx5_1:1")


def test_hcas_without_equals_are_prefixes_as_nccl_reads_them(tmp_path):
    """NCCL_IB_HCA=mlx5 uses every mlx5* device: each is checked, and none found is a missing HCA
    (before, "mlx5" was taken for a device of that name and every such node failed)."""
    fabric = Fabric(type="infiniband", hcas=("mlx5", "ib:2"))
    assert infiniband.expected_ports(None, fabric) == ("mlx5*", "ib*:2")
    write_ib_port(tmp_path, "mlx5_0")
    write_ib_port(tmp_path, "mlx5_1", state="1: DOWN", phys_state="3: Disabled")
    write_ib_port(tmp_path, "ibp0", port=1)
    plan = ib_plan(("mlx5*", "ib*:2"), root=str(tmp_path))
    results = by_name(checks.infiniband(infiniband.read_ports(str(tmp_path), plan.ib_ports), plan, {})[0])
    assert results["ib_port:mlx5_0:1"].status == OK
    assert results["ib_port:mlx5_1:1"].message.startswith("mlx5_1:1 is DOWN/Disabled, expected ACTIVE/LinkUp")
    assert results["ib_port:ib*:2"].message == "ib*:2 missing: HCA has no port 2; " + IB_FIX
    none = ib_plan(("mlx4*",), root=str(tmp_path))
    results = by_name(checks.infiniband(infiniband.read_ports(str(tmp_path), none.ib_ports), none, {})[0])
    assert results["ib_port:mlx4*"].message == "mlx4* missing: no HCA mlx4*; " + IB_FIX
    assert infiniband.list_ports(str(tmp_path)) == ("ibp0:1", "mlx5_0:1", "mlx5_1:1")
    assert infiniband.expected_ports(("mlx5_4:2",), fabric) == ("mlx5_4:2",)
    assert infiniband.expected_ports(None, Fabric(type="ethernet")) == ()


# ---------------------------------------------------------------- the socket interface (sysfs net)

def write_interface(root, name, flags="0x1003", operstate="up"):
    """One interface under ``root``, a stand-in for /sys/class/net (the real one is checked below)."""
    base = root / name
    base.mkdir(parents=True, exist_ok=True)
    (base / "flags").write_text(flags + "\n")
    (base / "operstate").write_text(operstate + "\n")


def test_the_socket_interface_up_down_gone_and_excluded(tmp_path):
    write_interface(tmp_path, "lo", "0x9", "unknown")
    write_interface(tmp_path, "eth0")
    write_interface(tmp_path, "eth1", operstate="down")            # no carrier: the cable or switch port
    write_interface(tmp_path, "eth2", flags="0x1002", operstate="down")   # set down
    reading = interfaces.read_interfaces(str(tmp_path))
    assert {n: i["up"] for n, i in reading["interfaces"].items()} == {"lo": True, "eth0": True, "eth1": False,
                                                                      "eth2": False}
    assert checks.socket_ifname(reading, "=eth0") == [CheckResult("socket_ifname:eth0", OK, "=eth0: eth0 up")]
    assert checks.socket_ifname(reading, "eth")[0].status == OK          # NCCL's prefix: eth0 is up
    [down] = checks.socket_ifname(reading, "=eth1")
    assert down.status == FAIL and down.message == (
        "eth1 is down (operstate down): NCCL and Gloo find no socket there and jobs fail; bring it up (ip link set "
        "eth1 up) or check its cable and switch port (up: eth0, lo)")
    [gone] = checks.socket_ifname(reading, "ib0")
    assert gone.name == "socket_ifname:ib0" and gone.status == FAIL and gone.message.startswith(
        "no interface ib0 on the node: NCCL and Gloo find no socket there and jobs fail; check the driver")
    # the name goes into a drain reason: no '=' (Slurm's key=value output) and no ',' (the reason's list)
    assert checks.socket_ifname(reading, "=a,b")[0].name == "socket_ifname:a+b"
    assert checks.socket_ifname(reading, "^docker,lo")[0].status == OK
    missing = interfaces.read_interfaces(str(tmp_path / "none"))
    assert checks.socket_ifname(missing, "eth0")[0].message.startswith("the network interfaces could not be read: ")


def test_the_real_sys_class_net():
    """This machine's own interfaces: the loopback is always there and up; a made-up name is not."""
    reading = interfaces.read_interfaces()
    assert reading["root_exists"] and reading["interfaces"]["lo"]["up"]
    assert checks.socket_ifname(reading, "=lo")[0].status == OK
    assert checks.socket_ifname(reading, "=slurmkit-no-such0")[0].status == FAIL


def test_the_probe_job_and_the_health_check_see_the_same_interfaces_up(tmp_path):
    """site init's probe script, run here by sh on this machine's /sys/class/net, and the health check's
    reader agree on which interfaces are up (ifb0/ifb1 here are down, eth0 and lo up)."""
    import subprocess

    from slurmkit.discovery import nodeprobe

    out = subprocess.run(["sh", "-c", nodeprobe.PROBE_SCRIPT, "probe", str(tmp_path / "ib"), str(tmp_path / "dev")],
                         capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"})
    probe = nodeprobe.parse_probe(out.stdout)
    health = interfaces.read_interfaces()["interfaces"]
    assert "lo" in probe.interfaces
    assert sorted(probe.interfaces) == sorted(n for n, i in health.items() if i["up"])
