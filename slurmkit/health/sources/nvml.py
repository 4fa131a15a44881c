"""The NVIDIA GPU source, through NVML (the ``nvidia-ml-py`` package's ``pynvml``).

The provider is anything with the subset of pynvml's API used below: the
real module (:func:`load_pynvml`), or ``slurmkit.health.sources.fakes.FakeNvml`` in
tests.  :func:`read_gpus` turns it into one plain dict; a GPU check never
raises: no NVML (library or driver missing) is ``available: false`` with the
reason, a lost GPU is ``lost: true``, and a query the GPU does not support
is ``None``.  NVML calls can hang inside a wedged driver, so the check runs
this in a forked child (see ``probe``).
"""

from typing import Optional

# pynvml's return codes (nvml.h)
NOT_SUPPORTED = 3
GPU_IS_LOST = 15
RESET_REQUIRED = 16

# Clock event ("throttle") reasons, nvml.h nvmlClocksEventReason*: the
# hardware ones mean a sick or overheating board; the software ones a power
# cap or a thermal limit the driver applies.
HW_SLOWDOWN, SW_THERMAL, HW_THERMAL, HW_POWER_BRAKE, SW_POWER_CAP = 0x8, 0x20, 0x40, 0x80, 0x4
HW_THROTTLE = HW_SLOWDOWN | HW_THERMAL | HW_POWER_BRAKE
SW_THROTTLE = SW_THERMAL | SW_POWER_CAP
THROTTLE_NAMES = {HW_SLOWDOWN: "hw_slowdown", HW_THERMAL: "hw_thermal", HW_POWER_BRAKE: "hw_power_brake",
                  SW_THERMAL: "sw_thermal", SW_POWER_CAP: "sw_power_cap"}


def load_pynvml():
    import pynvml

    return pynvml


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _code(exc) -> Optional[int]:
    return getattr(exc, "value", None)


def read_gpus(nvml) -> dict:
    """Every GPU NVML sees, as a dict (see the module docstring)."""
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, NoPermission ...
        return {"available": False, "error": "%s" % (str(exc) or type(exc).__name__), "gpus": []}
    try:
        out = {"available": True, "error": None, "gpus": []}
        try:
            out["driver"] = _text(nvml.nvmlSystemGetDriverVersion())
        except Exception:
            out["driver"] = None
        count = nvml.nvmlDeviceGetCount()
        for index in range(count):
            out["gpus"].append(_read_gpu(nvml, index))
        return out
    except Exception as exc:
        return {"available": False, "error": "NVML failed: %s" % exc, "gpus": []}
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def _read_gpu(nvml, index) -> dict:
    gpu = {"index": index, "lost": False, "reset_required": False, "error": None}
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
    except Exception as exc:
        return _lost(gpu, exc)

    def query(key, func, *args, convert=None):
        """Fill gpu[key]; None when unsupported; a lost GPU ends the reading."""
        try:
            value = func(handle, *args)
            gpu[key] = convert(value) if convert else value
        except Exception as exc:
            if _code(exc) in (GPU_IS_LOST, RESET_REQUIRED):
                raise _Lost(exc)
            gpu[key] = None

    try:
        query("uuid", nvml.nvmlDeviceGetUUID, convert=_text)
        query("name", nvml.nvmlDeviceGetName, convert=_text)
        query("bus_id", nvml.nvmlDeviceGetPciInfo, convert=lambda info: _text(info.busId))
        query("ecc_uncorrected", nvml.nvmlDeviceGetTotalEccErrors, 1, 0)   # UNCORRECTED, VOLATILE
        query("retired_pending", nvml.nvmlDeviceGetRetiredPagesPendingStatus, convert=bool)
        query("retired_sbe", nvml.nvmlDeviceGetRetiredPages, 0, convert=len)  # MULTIPLE_SINGLE_BIT
        query("retired_dbe", nvml.nvmlDeviceGetRetiredPages, 1, convert=len)  # DOUBLE_BIT
        query("remapped", nvml.nvmlDeviceGetRemappedRows,
              convert=lambda r: {"correctable": r[0], "uncorrectable": r[1], "pending": bool(r[2]),
                                 "failure": bool(r[3])})
        query("throttle", _throttle_reasons(nvml))
        query("pcie_gen", nvml.nvmlDeviceGetCurrPcieLinkGeneration)
        query("pcie_gen_max", nvml.nvmlDeviceGetMaxPcieLinkGeneration)
        query("pcie_width", nvml.nvmlDeviceGetCurrPcieLinkWidth)
        query("pcie_width_max", nvml.nvmlDeviceGetMaxPcieLinkWidth)
        query("temperature", nvml.nvmlDeviceGetTemperature, 0)
        query("processes", nvml.nvmlDeviceGetComputeRunningProcesses,
              convert=lambda procs: [int(p.pid) for p in procs])
        links = []
        for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                links.append(bool(nvml.nvmlDeviceGetNvLinkState(handle, link)))
            except Exception as exc:
                if _code(exc) in (GPU_IS_LOST, RESET_REQUIRED):
                    raise _Lost(exc)
                # NOT_SUPPORTED / INVALID_ARGUMENT: no such link on this GPU;
                # links are numbered densely, so the first missing one ends them
                break
        gpu["nvlinks"] = links
    except _Lost as lost:
        return _lost(gpu, lost.exc)
    return gpu


def _throttle_reasons(nvml):
    # nvidia-ml-py renamed "throttle reasons" to "clocks event reasons" (same values)
    return getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or nvml.nvmlDeviceGetCurrentClocksThrottleReasons


class _Lost(Exception):
    def __init__(self, exc):
        super().__init__(str(exc))
        self.exc = exc


def _lost(gpu, exc):
    code = _code(exc)
    gpu["lost"] = code == GPU_IS_LOST
    gpu["reset_required"] = code == RESET_REQUIRED
    gpu["error"] = str(exc) or type(exc).__name__
    return gpu
