"""The sources on this machine, for real: psutil, /proc, mounts, /dev/kmsg, sysfs, NVML, forked probes.

What cannot exist here is said by a skip: NVML's real GPU path needs an
NVIDIA GPU (this machine has none, and no device is lent to this session);
InfiniBand sysfs needs an HCA (the real path still runs and must report its
absence).  The fakes' side of the same checks is in test_health_checks.py.
"""

import os
import subprocess
import sys
import textwrap
import time

import pytest

from slurmkit.health import checks
from slurmkit.health.sources import host, infiniband, kmsg, nvml, probe

ROOT = os.geteuid() == 0


def test_memory_swap_load_from_psutil():
    mem = host.read_memory()
    assert mem["memory_mb"] > 100 and mem["cores"] == os.cpu_count()
    assert 0 <= mem["swap_used_percent"] <= 100 and mem["load1"] >= 0
    result = checks.memory(mem, int(mem["memory_mb"]) * 2, 5.0)[0]
    assert result.status == "fail"          # this machine has half of twice its memory


# Node names no other run sees: the process table is the machine's, and another
# run of this file at the same time (test-releases runs the releases' suites at
# once, every root sharing /proc) has fake slurmds of its own.
NODE = "hc%d-n" % os.getpid()


@pytest.fixture
def fake_slurmds(tmp_path):
    """Two processes named slurmd serving nodes n1 and n2 (shell scripts: their comm is the script's name)."""
    script = tmp_path / "slurmd"
    script.write_text("#!/bin/sh\nsleep 60\n")
    script.chmod(0o755)
    procs = [subprocess.Popen([str(script), "-N", NODE + n]) for n in ("1", "2")]
    time.sleep(0.2)
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def test_daemons_and_one_slurmd_per_node(fake_slurmds):
    procs = host.scan_processes(NODE + "1", ["slurmd", "sleep", "no-such-daemon"])
    assert procs["running"]["slurmd"] == 1          # its own; n2's (and any real -N node's) do not count
    assert procs["running"]["sleep"] >= 2 and procs["running"]["no-such-daemon"] == 0
    assert host.scan_processes(NODE + "3", ["slurmd"])["running"]["slurmd"] == 0


DSTATE = textwrap.dedent("""\
    import ctypes, resource, sys
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    libc = ctypes.CDLL(None)
    # The vfork child borrows this process's memory until it exits; meanwhile
    # this process waits in an uninterruptible (killable) sleep: D state.
    if libc.vfork() == 0:
        libc.sleep(int(sys.argv[1]))
    libc._exit(0)
    """)


@pytest.fixture
def process_in_d_state(tmp_path):
    script = tmp_path / "dstate.py"
    script.write_text(DSTATE)
    proc = subprocess.Popen([sys.executable, str(script), "30"], stderr=subprocess.DEVNULL)
    import psutil

    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if psutil.Process(proc.pid).status() == psutil.STATUS_DISK_SLEEP:
            break
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.skip("vfork did not leave a process in D state on this kernel")
    yield proc
    for child in psutil.Process(proc.pid).children():
        child.kill()
    proc.kill()
    proc.wait()


def test_a_process_stuck_in_d_state_fails_across_two_checks(process_in_d_state):
    first = host.scan_processes("n1", [])
    assert [p for p in first["dstate"] if p[0] == process_in_d_state.pid]
    results, memory = checks.dstate(first, {}, time.time(), seconds=0.5)
    assert results[0].status == "ok"               # one sighting is not "stuck"
    time.sleep(0.6)
    results, _ = checks.dstate(host.scan_processes("n1", []), memory, time.time(), seconds=0.5)
    assert results[0].status == "fail" and "(pid %d," % process_in_d_state.pid in results[0].message


def test_the_mount_table_and_its_escapes():
    assert host.mount_table()["/"]
    text = r"36 35 98:0 / /mnt/with\040space rw,noatime master:1 - ext3 /dev/root rw" + "\n" + \
        "37 35 98:0 / /scratch rw - nfs4 srv:/x rw\n"
    assert host.parse_mountinfo(text) == {"/mnt/with space": "ext3", "/scratch": "nfs4"}


def test_probe_a_writable_directory_and_a_missing_one(tmp_path):
    out = host.probe_path(str(tmp_path), True, "n1")
    assert out["writable"] is True and 0 <= out["used_percent"] <= 100
    assert os.listdir(str(tmp_path)) == []          # the probe file is gone again
    assert host.probe_path(str(tmp_path / "nope"), True, "n1") == {"exists": False, "is_dir": False}


@pytest.fixture
def read_only_dir(tmp_path):
    if not ROOT:
        pytest.skip("a read-only bind mount needs root")
    path = tmp_path / "ro"
    path.mkdir()
    for argv in (["mount", "--bind", str(path), str(path)], ["mount", "-o", "remount,ro,bind", str(path)]):
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            subprocess.run(["umount", str(path)], capture_output=True)
            pytest.skip("cannot bind-mount read-only here: %s" % proc.stderr.strip())
    yield str(path)
    subprocess.run(["umount", str(path)], check=True)


def test_a_read_only_file_system_is_not_writable_and_is_a_mount_point(read_only_dir):
    out = host.probe_path(read_only_dir, True, "n1")
    assert out["writable"] is False and out["write_error"] == "Read-only file system"
    assert read_only_dir in host.mount_table()


def test_forked_probes_answer_fail_and_time_out():
    def hang():
        time.sleep(30)

    def boom():
        raise OSError(5, "Input/output error")

    t0 = time.monotonic()
    out = probe.run({"fine": lambda: {"x": 1}, "hang": hang, "boom": boom}, {"fine": 5, "hang": 0.3, "boom": 5})
    assert time.monotonic() - t0 < 2.0                  # a hung reading costs its timeout, not more
    assert out["fine"] == probe.Outcome(True, {"x": 1}, seconds=out["fine"].seconds)
    assert out["hang"].timed_out and out["hang"].error == "no answer within 0.3s"
    assert not out["boom"].ok and "Input/output error" in out["boom"].error


def test_the_real_kernel_log():
    if not os.access("/dev/kmsg", os.R_OK):
        pytest.skip("/dev/kmsg is not readable here")
    lines, error = kmsg.read_kernel_log("/dev/kmsg")
    assert error is None and lines and not lines[0][:1].isdigit()     # messages, record headers stripped
    assert all(e.code > 0 for e in kmsg.xids(lines))


def test_the_real_infiniband_sysfs():
    reading = infiniband.read_ports("/sys/class/infiniband", ["mlx5_0:1"])
    assert reading["root_exists"] == os.path.isdir("/sys/class/infiniband")
    if not reading["root_exists"]:
        assert reading["ports"]["mlx5_0:1"] == {"exists": False, "hca_exists": False}
        pytest.skip("no InfiniBand HCA on this machine: only the absent-driver path ran")
    assert reading["ports"]


def _nvml_here():
    reading = nvml.read_gpus(nvml.load_pynvml())
    return reading


def test_no_nvml_here_is_a_failed_reading_not_a_crash():
    reading = _nvml_here()
    if reading["available"]:
        pytest.skip("this machine has a working NVML (the GPU test below covers it)")
    assert reading["gpus"] == [] and reading["error"]


def test_real_gpus_through_nvml():
    reading = _nvml_here()
    if not reading["available"]:
        pytest.skip("no NVIDIA GPU on this machine (NVML: %s) and no GPU device lent to this session: "
                    "the real NVML path cannot run here" % reading["error"])
    assert reading["gpus"] and all(g["uuid"] and g["bus_id"] for g in reading["gpus"])
    from slurmkit.health.plan import CheckPlan

    plan = CheckPlan("self", "c", "gpu", accelerator="nvidia", expected_gpus=len(reading["gpus"]))
    results = {r.name: r for r in checks.gpus(reading, plan, [], None)}
    assert results["nvml"].status == "ok" and results["gpu_count"].status == "ok"
