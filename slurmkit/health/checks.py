"""The checks: pure functions from readings and thresholds to results.

No function here reads the machine or Slurm: each takes the readings the
sources produced (plain dicts, see ``host``, ``nvml``, ``infiniband``,
``kmsg``, ``ascend``), the node's :class:`~slurmkit.health.plan.CheckPlan`
and, for the checks that compare across runs, what the previous check
remembered; each returns a list of :class:`CheckResult` (and the memory to
keep).  Messages say what is wrong and what was expected, because they are
what the admin reads in the report at 3 a.m.
"""

import os
from typing import Dict, List, Optional, Tuple

from slurmkit.health.sources import nvml as nv
from slurmkit.health.sources.infiniband import LINK_COUNTERS, NOISE_COUNTERS
from slurmkit.sysfs import ifname_matches
from slurmkit.health.findings import CheckResult, fail, ok, warn


def _mb(value) -> str:
    return "%.0f MB" % value if value < 10240 else "%.1f GB" % (value / 1024.0)


# ---------------------------------------------------------------- host

def memory(mem: dict, expected_mb: Optional[int], tolerance_percent: float) -> List[CheckResult]:
    have = mem["memory_mb"]
    if not expected_mb:
        return [ok("memory", "%s (no expectation configured)" % _mb(have), have)]
    least = expected_mb * (1 - tolerance_percent / 100.0)
    if have < least:
        return [fail("memory", "%s of memory, expected %s (at least %s): a DIMM may be missing or failed"
                     % (_mb(have), _mb(expected_mb), _mb(least)), have)]
    return [ok("memory", "%s (expected %s)" % (_mb(have), _mb(expected_mb)), have)]


def swap(mem: dict, min_swap_mb: Optional[int], max_used_percent: Optional[float]) -> List[CheckResult]:
    if min_swap_mb is None and max_used_percent is None:
        return []
    have, used = mem["swap_mb"], mem["swap_used_percent"]
    if min_swap_mb is not None and have < min_swap_mb:
        return [fail("swap", "%s of swap, expected at least %s" % (_mb(have), _mb(min_swap_mb)), have)]
    if max_used_percent is not None and used > max_used_percent:
        return [fail("swap", "swap %.0f%% used (at most %.0f%%)" % (used, max_used_percent), used)]
    return [ok("swap", "%s of swap, %.0f%% used" % (_mb(have), used), used)]


def load(mem: dict, warn_per_core: Optional[float], max_per_core: Optional[float]) -> List[CheckResult]:
    per_core = mem["load1"] / max(mem["cores"], 1)
    text = "load %.2f on %d cores (%.2f per core)" % (mem["load1"], mem["cores"], per_core)
    if max_per_core is not None and per_core > max_per_core:
        return [fail("load", "%s, above %.2f" % (text, max_per_core), per_core)]
    if warn_per_core is not None and per_core > warn_per_core:
        return [warn("load", "%s, above %.2f" % (text, warn_per_core), per_core)]
    return [ok("load", text, per_core)]


def mount_path(spec_path: str, node: str) -> str:
    """The configured path for ``node`` ("%n" is its name), normalised as the mount table writes it."""
    return os.path.normpath(spec_path.replace("%n", node))


def mounts(specs, outcomes: Dict[str, object], table: Dict[str, str], node: str) -> List[CheckResult]:
    """One result per configured path; ``outcomes[path]`` is the probe's Outcome (see ``probe``)."""
    results = []
    for spec in specs:
        path = mount_path(spec.path, node)
        name = "mount:" + path
        if spec.mount and path not in table:
            # Checked first and from the kernel's table: a missing mount must not
            # be reported as "full" or "read-only" from the directory beneath it.
            results.append(fail(name, "%s is not mounted" % path))
            continue
        outcome = outcomes.get(path)
        if outcome is None:
            results.append(fail(name, "%s was not probed" % path))
            continue
        if outcome.timed_out:
            results.append(fail(name, "%s did not answer within %gs (a hung NFS or storage server?)"
                                % (path, spec.timeout)))
            continue
        if not outcome.ok:
            results.append(fail(name, "%s could not be probed: %s" % (path, outcome.error)))
            continue
        probe = outcome.value
        if not probe.get("is_dir"):
            results.append(fail(name, "%s %s" % (path, "is not a directory" if probe.get("exists") else "is missing")))
            continue
        if spec.writable and not probe.get("writable"):
            results.append(fail(name, "%s is not writable: %s" % (path, probe.get("write_error") or "refused")))
            continue
        used = probe.get("used_percent")
        if spec.max_used_percent is not None and used is not None and used > spec.max_used_percent:
            results.append(fail(name, "%s is %.0f%% full (at most %.0f%%)" % (path, used, spec.max_used_percent),
                                used))
            continue
        what = [("mounted (%s)" % table[path]) if path in table else "present"]
        if spec.writable:
            what.append("writable")
        if used is not None:
            what.append("%.0f%% used" % used)
        results.append(ok(name, "%s %s" % (path, ", ".join(what)), used))
    return results


def daemons(procs: dict, names) -> List[CheckResult]:
    results = []
    for name in names:
        count = procs["running"].get(name, 0)
        if count:
            results.append(ok("daemon:" + name, "%s running" % name, count))
        else:
            results.append(fail("daemon:" + name, "%s is not running" % name, 0))
    return results


def dstate(procs: dict, previous: dict, now: float, seconds: float) -> Tuple[List[CheckResult], dict]:
    """Processes in D state at this check and the checks before, for ``seconds`` or longer.

    ``previous`` maps "pid:start time" to when the process was first seen in
    D state; a process not in D state now is forgotten, so only one that
    stayed in D at every check counts, and one busy with I/O (briefly in D
    now and then) rarely does.  Returns (results, the memory to keep).
    """
    memory_now = {}
    stuck = []
    for pid, started, name in procs["dstate"]:
        key = "%d:%.2f" % (pid, started)
        first = previous.get(key, now)
        memory_now[key] = first
        if now - first >= seconds:
            stuck.append((now - first, pid, name))
    if stuck:
        stuck.sort(reverse=True)
        listed = ", ".join("%s (pid %d, %.0fs)" % (name, pid, age) for age, pid, name in stuck[:5])
        more = " and %d more" % (len(stuck) - 5) if len(stuck) > 5 else ""
        return [fail("dstate", "%d process%s stuck in D state: %s%s" % (
            len(stuck), "es" if len(stuck) > 1 else "", listed, more), len(stuck))], memory_now
    return [ok("dstate", "no process stuck in D state (%d in D now)" % len(procs["dstate"]), 0)], memory_now


# ---------------------------------------------------------------- accelerators

def _count_results(name, seen, expected, plan, unit) -> List[CheckResult]:
    """A device count against the site's expectation and against Slurm's Gres for the node."""
    problems = []
    if expected is not None and seen != expected:
        problems.append("the site expects %d" % expected)
    if plan.slurm_gres is not None and seen != plan.slurm_gres:
        problems.append("Slurm has Gres=%s:%d" % (plan.gres_name or unit, plan.slurm_gres))
    if problems:
        return [fail(name, "%d %s, but %s" % (seen, unit, " and ".join(problems)), seen)]
    return [ok(name, "%d %s" % (seen, unit), seen)]


def npus(reading: dict, plan) -> List[CheckResult]:
    if reading.get("error"):
        return [fail("npu_count", "cannot list the NPU devices: %s" % reading["error"], 0)]
    return _count_results("npu_count", reading["count"], plan.expected_gpus, plan, "NPUs")


def gpus(reading: Optional[dict], plan, xid_events=None, kernel_error: Optional[str] = None,
         reading_error: Optional[str] = None) -> List[CheckResult]:
    """Every GPU check of an NVIDIA node; ``reading`` is ``nvml.read_gpus``' dict (None: it did not come)."""
    on = plan.enabled
    if reading is None or not reading.get("available"):
        why = reading_error or (reading or {}).get("error") or "no answer"
        # No NVML on a GPU node is a failed node, not a crash: it cannot run GPU jobs.
        return [fail("nvml", "NVML unavailable: %s" % why)] if on("nvml") else []
    results = []
    boards = reading["gpus"]
    if on("nvml"):
        results.append(ok("nvml", "NVML answers, driver %s" % (reading.get("driver") or "unknown")))
    if on("gpu_count"):
        results += _count_results("gpu_count", len(boards), plan.expected_gpus, plan, "GPUs")
    readable = [g for g in boards if not (g["lost"] or g["reset_required"] or g.get("error"))]
    if on("gpu_lost"):
        bad = ["GPU %d %s" % (g["index"], "is lost" if g["lost"] else "needs a reset" if g["reset_required"]
                              else "cannot be read (%s)" % g["error"]) for g in boards if g not in readable]
        results.append(fail("gpu_lost", "; ".join(bad), len(bad)) if bad
                       else ok("gpu_lost", "every GPU answers", 0))
    if on("xid"):
        results.append(_xid(xid_events, kernel_error, plan.checks.fatal_xids))
    if on("ecc"):
        bad = ["GPU %d: %d" % (g["index"], g["ecc_uncorrected"]) for g in readable if g.get("ecc_uncorrected")]
        results.append(fail("ecc", "uncorrected ECC errors (volatile) %s" % ", ".join(bad), len(bad)) if bad
                       else ok("ecc", "no uncorrected ECC errors", 0))
    if on("retired_pages"):
        limit = plan.checks.max_retired_pages
        bad = []
        for g in readable:
            pages = (g.get("retired_sbe") or 0) + (g.get("retired_dbe") or 0)
            if g.get("retired_pending"):
                bad.append("GPU %d has a page retirement pending (needs a GPU reset)" % g["index"])
            elif pages >= limit:
                bad.append("GPU %d retired %d pages (limit %d)" % (g["index"], pages, limit))
        results.append(fail("retired_pages", "; ".join(bad), len(bad)) if bad
                       else ok("retired_pages", "no retirement pending, below %d pages" % limit, 0))
    if on("remapped_rows"):
        bad = []
        for g in readable:
            remap = g.get("remapped") or {}
            if remap.get("failure"):
                bad.append("GPU %d: row remapping failed (the board needs replacing)" % g["index"])
            elif remap.get("pending"):
                bad.append("GPU %d: a row remap is pending (needs a GPU reset)" % g["index"])
        results.append(fail("remapped_rows", "; ".join(bad), len(bad)) if bad
                       else ok("remapped_rows", "no pending or failed row remaps", 0))
    if on("nvlink"):
        results.append(_nvlink(readable, plan.checks.nvlinks))
    if on("throttle"):
        results.append(_throttle(readable))
    if on("pcie"):
        results.append(_pcie(readable))
    if on("stray_processes"):
        results.append(_stray(readable, plan))
    return results


def _xid(events, kernel_error, fatal) -> CheckResult:
    if events is None:
        return warn("xid", "the kernel log could not be read (%s): Xid errors unknown" % (kernel_error or "?"))
    fatal = set(fatal)
    bad = [e for e in events if e.code in fatal]
    if bad:
        listed = "; ".join("Xid %d on %s" % (e.code, e.bus) for e in bad[:5])
        more = " and %d more" % (len(bad) - 5) if len(bad) > 5 else ""
        return fail("xid", "fatal %s%s in the kernel log" % (listed, more), len(bad))
    return ok("xid", "no fatal Xid in the kernel log (%d other Xid line%s)" % (len(events), "" if len(events) == 1
                                                                               else "s"), 0)


def _nvlink(boards, expected) -> CheckResult:
    bad = []
    for g in boards:
        links = g.get("nvlinks") or []
        active = sum(1 for up in links if up)
        if expected is not None and active < expected:
            bad.append("GPU %d has %d of %d NVLinks active" % (g["index"], active, expected))
        elif expected is None and active < len(links):
            down = [str(i) for i, up in enumerate(links) if not up]
            bad.append("GPU %d link%s %s down" % (g["index"], "s" if len(down) > 1 else "", ",".join(down)))
    if bad:
        return fail("nvlink", "; ".join(bad), len(bad))
    return ok("nvlink", "every NVLink active", 0)


def _throttle(boards) -> CheckResult:
    hard, soft = [], []
    for g in boards:
        reasons = g.get("throttle") or 0
        names = [n for bit, n in sorted(nv.THROTTLE_NAMES.items()) if reasons & bit]
        if reasons & nv.HW_THROTTLE:
            hard.append("GPU %d %s" % (g["index"], "+".join(n for n in names if n.startswith("hw"))))
        elif reasons & nv.SW_THERMAL:
            soft.append("GPU %d sw_thermal" % g["index"])
    if hard:
        return fail("throttle", "hardware slowdown: %s (cooling or power delivery)" % ", ".join(hard), len(hard))
    if soft:
        return warn("throttle", "thermal throttling: %s" % ", ".join(soft), len(soft))
    return ok("throttle", "no thermal or hardware throttling", 0)


def _pcie(boards) -> CheckResult:
    narrow, slow = [], []
    for g in boards:
        width, width_max = g.get("pcie_width"), g.get("pcie_width_max")
        gen, gen_max = g.get("pcie_gen"), g.get("pcie_gen_max")
        if width and width_max and width < width_max:
            narrow.append("GPU %d at x%d of x%d" % (g["index"], width, width_max))
        if gen and gen_max and gen < gen_max:
            slow.append("GPU %d at gen %d of %d" % (g["index"], gen, gen_max))
    if narrow:
        return fail("pcie", "PCIe link narrower than it can be: %s (reseat or replace)" % ", ".join(narrow),
                    len(narrow))
    if slow:
        # An idle GPU lowers its link speed to save power, so a low generation
        # alone is only worth a warning; a narrow link never comes back by itself.
        return warn("pcie", "PCIe link below its top generation: %s (normal while idle)" % ", ".join(slow),
                    len(slow))
    return ok("pcie", "PCIe links at full width and speed", 0)


def _stray(boards, plan) -> CheckResult:
    if not plan.checks.stray_gpu_processes:
        return ok("stray_processes", "not checked (stray_gpu_processes: false)")
    if plan.has_job is None:
        return ok("stray_processes", "not checked: whether a job runs here is unknown (Slurm not asked)")
    if plan.has_job:
        return ok("stray_processes", "a job runs on the node", 0)
    stray = ["GPU %d: pid %s" % (g["index"], ",".join(map(str, g["processes"]))) for g in boards
             if g.get("processes")]
    if stray:
        return fail("stray_processes", "GPU processes with no job on the node: %s" % "; ".join(stray), len(stray))
    return ok("stray_processes", "no GPU process outside jobs", 0)


# ---------------------------------------------------------------- InfiniBand

# What the admin does about a port that is missing or down (the message is what the drain's report shows).
_IB_FIX = ("jobs here would fall back to sockets: reseat or replace the HCA or its cable, check the driver and the "
           "subnet manager, or take the port out of the partition's fabric.hcas")


def infiniband(reading: Optional[dict], plan, previous: dict, reading_error: Optional[str] = None
               ) -> Tuple[List[CheckResult], dict]:
    """Port state, rate and error-counter growth per expected port; returns (results, counters to keep)."""
    on = plan.enabled
    results, keep = [], {}
    if reading is None:
        return ([fail("ib_port", "the InfiniBand ports could not be read: %s" % (reading_error or "no answer"))]
                if on("ib_port") else []), previous
    ports = reading["ports"]
    rates = [p["rate_gbps"] for p in ports.values() if p.get("exists") and p.get("rate_gbps")]
    expected_rate = plan.checks.ib_rate_gbps or (max(rates) if rates else None)
    # The ports read: the plan's, with a prefix ("mlx5*") replaced by the ports it matched.
    for spec in ports if ports else plan.ib_ports:
        port = ports.get(spec) or {"exists": False}
        if not port.get("exists"):
            if on("ib_port"):
                where = ("no %s (is the driver loaded?)" % plan.checks.ib_sysfs if not reading["root_exists"]
                         else "no HCA %s" % spec.split(":")[0] if not port.get("hca_exists")
                         else "HCA has no port %s" % spec.split(":")[1])
                results.append(fail("ib_port:" + spec, "%s missing: %s; %s" % (spec, where, _IB_FIX)))
            continue
        if on("ib_port"):
            if port["state"] != "ACTIVE" or port["phys_state"] != "LinkUp":
                results.append(fail("ib_port:" + spec, "%s is %s/%s, expected ACTIVE/LinkUp; %s"
                                    % (spec, port["state"], port["phys_state"], _IB_FIX), port.get("state_code")))
            else:
                results.append(ok("ib_port:" + spec, "%s ACTIVE/LinkUp" % spec, port.get("state_code")))
        if on("ib_rate") and expected_rate:
            rate = port.get("rate_gbps") or 0.0
            if rate < expected_rate:
                results.append(fail("ib_rate:" + spec, "%s runs at %g Gb/s, expected %g (%s)"
                                    % (spec, rate, expected_rate, port.get("rate_text") or "no rate"), rate))
            else:
                results.append(ok("ib_rate:" + spec, "%s at %g Gb/s" % (spec, rate), rate))
        counters = port.get("counters") or {}
        keep[spec] = counters
        if on("ib_errors"):
            results.append(_ib_errors(spec, counters, previous.get(spec)))
    return results, keep


def _ib_errors(spec, counters, before) -> CheckResult:
    name = "ib_errors:" + spec
    if before is None:
        return ok(name, "%s error counters recorded (growth is judged from the next check)" % spec, 0)
    grown = {k: counters[k] - before[k] for k in counters if k in before and counters[k] > before[k]}
    link = {k: v for k, v in grown.items() if k in LINK_COUNTERS}
    noise = {k: v for k, v in grown.items() if k in NOISE_COUNTERS}
    if link:
        return fail(name, "%s link errors since the last check: %s" % (
            spec, ", ".join("%s +%d" % kv for kv in sorted(link.items()))), sum(link.values()))
    if noise:
        return warn(name, "%s errors since the last check: %s" % (
            spec, ", ".join("%s +%d" % kv for kv in sorted(noise.items()))), sum(noise.values()))
    return ok(name, "%s error counters steady" % spec, 0)


# ---------------------------------------------------------------- socket interface

def socket_ifname(reading: Optional[dict], spec: str, reading_error: Optional[str] = None) -> List[CheckResult]:
    """The fabric's ``socket_ifname`` (NCCL_SOCKET_IFNAME) names an interface of the node that is up.

    ``reading`` is ``interfaces.read_interfaces``' dict.  An exclusion ('^docker') names nothing that must
    exist and always passes.  The result's name carries the spec, so a drain reason names the interface.
    """
    # No '=' or ',' in the name: it goes into the drain reason, which Slurm prints among key=value pairs and
    # slurmkit reads back as a list split at ", ".
    name = "socket_ifname:" + "+".join(n for n in spec.lstrip("=^").split(",") if n)
    if spec.startswith("^"):
        return [ok(name, "%s excludes interfaces; nothing to find" % spec)]
    if reading is None or not reading.get("root_exists"):
        why = reading_error or (reading or {}).get("error") or "no answer"
        return [fail(name, "the network interfaces could not be read: %s" % why)]
    found = reading["interfaces"]
    up = sorted(n for n, i in found.items() if i["up"])
    if ifname_matches(spec, up):
        return [ok(name, "%s: %s up" % (spec, ", ".join(n for n in up if ifname_matches(spec, [n]))))]
    down = sorted(n for n in found if n not in up and ifname_matches(spec, [n]))
    if down:
        what = "%s %s down (%s)" % (", ".join(down), "is" if len(down) == 1 else "are",
                                    ", ".join("operstate %s" % found[n]["operstate"] for n in down))
        fix = "bring it up (ip link set %s up) or check its cable and switch port" % down[0]
    else:
        what = "no interface %s on the node" % " or ".join(n for n in spec.lstrip("=").split(",") if n)
        fix = ("check the driver and the interface's name (udev), or set the partition's fabric.socket_ifname to an "
               "interface the nodes have")
    return [fail(name, "%s: NCCL and Gloo find no socket there and jobs fail; %s (up: %s)"
                 % (what, fix, ", ".join(up) or "none"))]


# ---------------------------------------------------------------- containers

def container_runtime(reading: Optional[dict], runtime: str, reading_error: Optional[str] = None) -> List[CheckResult]:
    """The partition's container runtime can start here (see ``sources.containers``)."""
    name = "container_runtime"
    if reading is None:
        return [fail(name, "runtime %s could not be checked: %s" % (runtime, reading_error))]
    if reading["error"]:
        return [fail(name, "runtime %s: %s" % (runtime, reading["error"]))]
    broken = [p for p in reading["programs"] if p["error"]]
    if broken:
        return [fail(name, "runtime %s cannot start images: %s" % (
            runtime, "; ".join("%s %s" % (p["program"], p["error"]) for p in broken)))]
    found = ", ".join("%s (%s)" % (p["path"], p["version"]) if p["version"] else p["path"] for p in reading["programs"])
    where = " with %s" % reading["oci_conf"] if reading["oci_conf"] else ""
    return [ok(name, "runtime %s%s: %s" % (runtime, where, found))]
