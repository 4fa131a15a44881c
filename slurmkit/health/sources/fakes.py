"""Fakes for what cannot exist on a machine without the hardware: NVML, an HCA's sysfs, Xid lines.

Each is small and mirrors the real interface exactly where slurmkit uses it:

- :class:`FakeNvml` answers the pynvml calls ``slurmkit.health.sources.nvml``
  makes, for a list of :class:`FakeGpu` boards, raising pynvml-style errors
  (an exception with ``.value``) for lost GPUs and unsupported queries;
- :func:`write_ib_port` lays out ``<root>/<hca>/ports/<port>/...`` as the
  kernel's ib_core does, for ``health.ib_sysfs`` to point at;
- :func:`write_kernel_log` writes /dev/kmsg-style records to a file, for
  ``health.kernel_log``.

The real paths run wherever the hardware is (the NVML test skips, saying
so, on a machine without a GPU).
"""

import os
from typing import NamedTuple, Optional, Sequence, Tuple


class FakeNvmlError(Exception):
    """Like ``pynvml.NVMLError``: ``.value`` is the NVML return code."""

    def __init__(self, value, text=""):
        super().__init__(text or "NVML error %d" % value)
        self.value = value


class FakeGpu(NamedTuple):
    uuid: str = "GPU-fake"
    bus_id: str = "00000000:3B:00.0"
    name: str = "NVIDIA H100 80GB HBM3"
    ecc_uncorrected: int = 0
    retired_pending: bool = False
    retired_sbe: int = 0
    retired_dbe: int = 0
    remapped: Tuple[int, int, int, int] = (0, 0, 0, 0)   # correctable, uncorrectable, pending, failure
    throttle: int = 0
    pcie: Tuple[int, int, int, int] = (5, 5, 16, 16)     # gen, max gen, width, max width
    temperature: int = 40
    processes: Tuple[int, ...] = ()
    nvlinks: Optional[Tuple[bool, ...]] = (True,) * 18   # None: no NVLink (NOT_SUPPORTED)
    lost: bool = False                                    # every call: GPU_IS_LOST
    reset_required: bool = False                          # every call: RESET_REQUIRED
    unsupported: Tuple[str, ...] = ()                     # pynvml function names answering NOT_SUPPORTED


class _Proc(NamedTuple):
    pid: int
    usedGpuMemory: int = 0


class _PciInfo(NamedTuple):
    busId: bytes


class FakeNvml:
    NVML_NVLINK_MAX_LINKS = 18

    def __init__(self, gpus: Sequence[FakeGpu] = (), init_error: Optional[int] = None, driver="550.54.15"):
        self.gpus = list(gpus)
        self.init_error = init_error
        self.driver = driver
        self.calls = []

    def nvmlInit(self):
        self.calls.append("nvmlInit")
        if self.init_error is not None:
            raise FakeNvmlError(self.init_error, "NVML Shared Library Not Found" if self.init_error == 12
                                else "NVML error %d" % self.init_error)

    def nvmlShutdown(self):
        self.calls.append("nvmlShutdown")

    def nvmlSystemGetDriverVersion(self):
        return self.driver

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def _gpu(self, handle, function):
        gpu = self.gpus[handle]
        if gpu.lost:
            raise FakeNvmlError(15, "GPU is lost")
        if gpu.reset_required:
            raise FakeNvmlError(16, "GPU requires reset")
        if function in gpu.unsupported:
            raise FakeNvmlError(3, "Not Supported")
        return gpu

    def nvmlDeviceGetUUID(self, h):
        return self._gpu(h, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetName(self, h):
        return self._gpu(h, "nvmlDeviceGetName").name

    def nvmlDeviceGetPciInfo(self, h):
        return _PciInfo(self._gpu(h, "nvmlDeviceGetPciInfo").bus_id.encode())

    def nvmlDeviceGetTotalEccErrors(self, h, error_type, counter_type):
        return self._gpu(h, "nvmlDeviceGetTotalEccErrors").ecc_uncorrected

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h):
        return int(self._gpu(h, "nvmlDeviceGetRetiredPagesPendingStatus").retired_pending)

    def nvmlDeviceGetRetiredPages(self, h, cause):
        gpu = self._gpu(h, "nvmlDeviceGetRetiredPages")
        return [0x1000 * i for i in range(gpu.retired_dbe if cause == 1 else gpu.retired_sbe)]

    def nvmlDeviceGetRemappedRows(self, h):
        return self._gpu(h, "nvmlDeviceGetRemappedRows").remapped

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._gpu(h, "nvmlDeviceGetCurrentClocksEventReasons").throttle

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return self._gpu(h, "nvmlDeviceGetCurrPcieLinkGeneration").pcie[0]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self._gpu(h, "nvmlDeviceGetMaxPcieLinkGeneration").pcie[1]

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self._gpu(h, "nvmlDeviceGetCurrPcieLinkWidth").pcie[2]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self._gpu(h, "nvmlDeviceGetMaxPcieLinkWidth").pcie[3]

    def nvmlDeviceGetTemperature(self, h, sensor):
        return self._gpu(h, "nvmlDeviceGetTemperature").temperature

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [_Proc(pid) for pid in self._gpu(h, "nvmlDeviceGetComputeRunningProcesses").processes]

    def nvmlDeviceGetNvLinkState(self, h, link):
        gpu = self._gpu(h, "nvmlDeviceGetNvLinkState")
        if gpu.nvlinks is None or link >= len(gpu.nvlinks):
            raise FakeNvmlError(3, "Not Supported")
        return int(gpu.nvlinks[link])


def write_ib_port(root, hca="mlx5_0", port=1, state="4: ACTIVE", phys_state="5: LinkUp",
                  rate="400 Gb/sec (4X NDR)", link_layer="InfiniBand", counters=None):
    """One port of an HCA under ``root`` (a stand-in for /sys/class/infiniband); returns its directory."""
    base = os.path.join(str(root), hca, "ports", str(port))
    os.makedirs(os.path.join(base, "counters"), exist_ok=True)
    for name, value in (("state", state), ("phys_state", phys_state), ("rate", rate), ("link_layer", link_layer)):
        with open(os.path.join(base, name), "w") as fh:
            fh.write(value + "\n")
    for name, value in (counters or {}).items():
        with open(os.path.join(base, "counters", name), "w") as fh:
            fh.write("%d\n" % value)
    return base


def kmsg_record(message, seq=1, usec=1000000, priority=4):
    """One /dev/kmsg record: "PRIORITY,SEQ,USEC,-;MESSAGE"."""
    return "%d,%d,%d,-;%s" % (priority, seq, usec, message)


def write_kernel_log(path, messages):
    """A file of /dev/kmsg records, for ``health.kernel_log``."""
    with open(str(path), "w") as fh:
        for seq, message in enumerate(messages, 1):
            fh.write(kmsg_record(message, seq=seq, usec=seq * 1000) + "\n")
    return str(path)


def xid_line(code, bus="PCI:0000:3b:00", detail="GPU has fallen off the bus."):
    """An Xid message as the NVIDIA driver logs it."""
    return "NVRM: Xid (%s): %d, pid=1234, name=python, %s" % (bus, code, detail)
