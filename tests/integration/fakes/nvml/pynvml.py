"""A FAKE pynvml (this machine has no NVIDIA GPU), for the NVML energy tests only.

It answers the calls the job script's energy sampler makes
(templates/_energy.sh.j2): ``SLURMKIT_FAKE_NVML_GPUS`` boards (default 2),
minor numbers 0..N-1, each drawing ``SLURMKIT_FAKE_NVML_WATTS`` (default 250)
for ever, so each one's energy counter is that power times the wall clock
(mJ, as NVML counts it).  ``SLURMKIT_FAKE_NVML_ERROR`` makes nvmlInit fail with
that text.  Put its directory first on PYTHONPATH of the job.
"""

import os
import time


class NVMLError(Exception):
    pass


def _count():
    return int(os.environ.get("SLURMKIT_FAKE_NVML_GPUS", "2"))


def nvmlInit():
    if os.environ.get("SLURMKIT_FAKE_NVML_ERROR"):
        raise NVMLError(os.environ["SLURMKIT_FAKE_NVML_ERROR"])


def nvmlShutdown():
    pass


def nvmlDeviceGetCount():
    return _count()


def nvmlDeviceGetHandleByIndex(index):
    if not 0 <= index < _count():
        raise NVMLError("Invalid Argument")
    return index


def nvmlDeviceGetMinorNumber(handle):
    return handle


def nvmlDeviceGetTotalEnergyConsumption(handle):
    return int(time.time() * float(os.environ.get("SLURMKIT_FAKE_NVML_WATTS", "250")) * 1000)
