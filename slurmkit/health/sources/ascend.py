"""The Ascend source: how many NPU device files the node has.

Ascend's driver makes one character device per NPU, ``/dev/davinci0`` ...
``/dev/davinciN`` (besides ``davinci_manager``); the count is what a node
that lost an NPU shows first.  The directory is configurable
(``health.device_dir``): containers and the local test clusters keep their
device files elsewhere.  The vendor's ``npu-smi`` health states are not read
(yet): only the count.
"""

import os
import re
import stat

_DEVICE_RE = re.compile(r"^davinci[0-9]+\Z")


def count_devices(device_dir: str = "/dev") -> dict:
    try:
        names = os.listdir(device_dir)
    except OSError as exc:
        return {"count": 0, "error": "%s: %s" % (device_dir, exc.strerror or exc)}
    devices = []
    for name in names:
        if not _DEVICE_RE.match(name):
            continue
        try:
            if stat.S_ISCHR(os.stat(os.path.join(device_dir, name)).st_mode):
                devices.append(name)
        except OSError:
            continue
    return {"count": len(devices), "devices": sorted(devices, key=lambda n: int(n[7:]))}
