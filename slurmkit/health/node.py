"""One node's check: take the readings its plan needs, judge them, remember what the next check compares.

Readings that can block in the kernel run in forked children with their own
deadlines (see ``probe``), all at once; the rest (memory, load, the kernel
log, the device list) are read in this process.  Sources are injectable
(:class:`Sources`) so tests can hand in a fake NVML; the sysfs and kernel
log roots come from the plan's thresholds.
"""

import time
from typing import Callable, NamedTuple

# The source modules import psutil and pynvml only inside their functions:
# importing them here costs nothing a check does not use.
from slurmkit.health import checks, state
from slurmkit.health.sources import ascend, containers, host, infiniband, interfaces, kmsg, nvml, probe
from slurmkit.health.plan import CheckPlan
from slurmkit.health.findings import NodeReport, fail

PROCESS_TIMEOUT = 10.0
NVML_TIMEOUT = 20.0
IB_TIMEOUT = 10.0
RUNTIME_TIMEOUT = 15.0     # each of the runtime's programs answers its version within 5 s


class Sources(NamedTuple):
    nvml: Callable[[], object] = nvml.load_pynvml       # called in the child: returns the NVML provider
    memory: Callable[[], dict] = None                # None: host.read_memory
    now: Callable[[], float] = time.time


def _timeout(plan: CheckPlan, seconds: float) -> float:
    # Every child gets at most 80% of the whole check's watchdog, so the
    # check still answers (with the timeouts reported) before it fires.
    return max(0.1, min(seconds, plan.check_timeout * 0.8))


def check_node(plan: CheckPlan, sources: Sources = Sources()) -> NodeReport:
    started, t0 = sources.now(), time.monotonic()
    on, limits = plan.enabled, plan.checks
    tasks, timeouts = {}, {}
    if on("daemon") or on("dstate"):
        daemons = limits.daemons if on("daemon") else ()
        tasks["processes"] = lambda: host.scan_processes(plan.node, daemons)
        timeouts["processes"] = _timeout(plan, PROCESS_TIMEOUT)
    mount_specs = limits.mounts if on("mount") else ()
    for spec in mount_specs:
        path = checks.mount_path(spec.path, plan.node)
        tasks["mount:" + path] = (lambda p=path, w=spec.writable: host.probe_path(p, w, plan.node))
        timeouts["mount:" + path] = _timeout(plan, spec.timeout)
    gpu_checks = plan.accelerator == "nvidia" and any(
        on(n) for n in ("nvml", "gpu_count", "gpu_lost", "ecc", "retired_pages", "remapped_rows", "nvlink",
                        "throttle", "pcie", "stray_processes"))
    if gpu_checks:
        tasks["nvml"] = lambda: nvml.read_gpus(sources.nvml())
        timeouts["nvml"] = _timeout(plan, NVML_TIMEOUT)
    if plan.ib_ports and any(on(n) for n in ("ib_port", "ib_rate", "ib_errors")):
        tasks["ib"] = lambda: infiniband.read_ports(limits.ib_sysfs, plan.ib_ports)
        timeouts["ib"] = _timeout(plan, IB_TIMEOUT)
    if on("container_runtime"):
        tasks["containers"] = lambda: containers.read_runtime(plan.container_runtime, plan.oci_conf)
        timeouts["containers"] = _timeout(plan, RUNTIME_TIMEOUT)
    if on("memory") or on("swap") or on("load") or "processes" in tasks:
        # Imported once, here, before the children fork: each of them would otherwise import it again.
        host.preload()
    outcomes = probe.run(tasks, timeouts) if tasks else {}

    # In this process, while nothing else is left to wait for.
    results = []
    if on("memory") or on("swap") or on("load"):
        if sources.memory is None:
                mem = host.read_memory()
        else:
            mem = sources.memory()
        if on("memory"):
            results += checks.memory(mem, plan.memory_mb, limits.memory_tolerance_percent)
        if on("swap"):
            results += checks.swap(mem, limits.min_swap_mb, limits.max_swap_used_percent)
        if on("load"):
            results += checks.load(mem, limits.warn_load_per_core, limits.max_load_per_core)
    if mount_specs:
        table = host.mount_table()
        results += checks.mounts(mount_specs, {k[len("mount:"):]: v for k, v in outcomes.items()
                                               if k.startswith("mount:")}, table, plan.node)
    memory = state.load(plan.state_dir, plan.node)
    remember = {}
    if "processes" in outcomes:
        procs = outcomes["processes"]
        if not procs.ok:
            names = [n for n in ("daemon", "dstate") if on(n)]
            results += [fail(n, "the process table could not be read: %s" % procs.error) for n in names]
        else:
            if on("daemon"):
                results += checks.daemons(procs.value, limits.daemons)
            if on("dstate") and limits.dstate_seconds > 0:
                found, remember["dstate"] = checks.dstate(procs.value, memory.get("dstate") or {}, started,
                                                          limits.dstate_seconds)
                results += found
    if gpu_checks:
        events, kernel_error = None, None
        if on("xid"):
            lines, kernel_error = kmsg.read_kernel_log(limits.kernel_log)
            events = None if kernel_error else kmsg.xids(lines)
        outcome = outcomes["nvml"]
        results += checks.gpus(outcome.value if outcome.ok else None, plan, events, kernel_error,
                               reading_error=None if outcome.ok else outcome.error)
    if plan.accelerator == "ascend" and on("npu_count"):
        results += checks.npus(ascend.count_devices(limits.device_dir), plan)
    if "ib" in outcomes:
        outcome = outcomes["ib"]
        found, remember["ib"] = checks.infiniband(outcome.value if outcome.ok else None, plan,
                                                  memory.get("ib") or {}, None if outcome.ok else outcome.error)
        results += found
    if on("socket_ifname"):
        results += checks.socket_ifname(interfaces.read_interfaces(), plan.socket_ifname)
    if "containers" in outcomes:
        outcome = outcomes["containers"]
        results += checks.container_runtime(outcome.value if outcome.ok else None, plan.container_runtime,
                                            None if outcome.ok else outcome.error)
    if remember or memory:
        remember["time"] = started
        state.save(plan.state_dir, plan.node, remember)
    return NodeReport(node=plan.node, cluster=plan.cluster, partition=plan.partition, results=tuple(results),
                      started=started, duration=time.monotonic() - t0)
