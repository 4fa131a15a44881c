"""The kernel log source: NVIDIA Xid events.

``/dev/kmsg`` gives the whole ring buffer, one record per read, without
blocking when opened with O_NONBLOCK (EAGAIN at the end); it needs
CAP_SYSLOG where ``kernel.dmesg_restrict`` is 1, so without it ``dmesg`` is
tried.  A regular file at the configured path is read as a saved log (one
record or dmesg line per line): that is how tests lay out a kernel log.

Xid lines look like (the driver's own wording)::

    NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.
"""

import errno
import os
import re
import stat
from typing import List, NamedTuple, Optional, Tuple

_RECORD_RE = re.compile(r"^\d+,\d+,\d+,[^;]*;")
_XID_RE = re.compile(r"NVRM: Xid \((?P<bus>[^)]*)\): (?P<code>\d+)")


class Xid(NamedTuple):
    bus: str          # "PCI:0000:3b:00"
    code: int
    text: str


def _read_kmsg(path: str) -> List[str]:
    lines = []
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        while True:
            try:
                record = os.read(fd, 8192)   # one record per read; 8 KiB is the kernel's maximum
            except BlockingIOError:
                break                         # the end of the buffer
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # a record was overwritten while we read: go on
                    continue
                raise
            if not record:
                break
            lines.append(record.decode("utf-8", "replace").rstrip("\n"))
    finally:
        os.close(fd)
    return lines


def read_kernel_log(path: str = "/dev/kmsg", dmesg_timeout: float = 5.0) -> Tuple[List[str], Optional[str]]:
    """(lines, error): the kernel log's messages, or why it could not be read."""
    try:
        if stat.S_ISCHR(os.stat(path).st_mode):
            return [message_of(line) for line in _read_kmsg(path)], None
        with open(path, errors="replace") as fh:
            return [message_of(line) for line in fh.read().splitlines()], None
    except OSError as exc:
        first = "%s: %s" % (path, exc.strerror or exc)
    import subprocess   # only for the fallback: a check where /dev/kmsg reads pays nothing for it

    try:
        proc = subprocess.run(["dmesg"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=dmesg_timeout, universal_newlines=True)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], "%s; dmesg: %s" % (first, exc)
    if proc.returncode != 0:
        return [], "%s; dmesg: %s" % (first, proc.stderr.strip() or "exit %d" % proc.returncode)
    return proc.stdout.splitlines(), None


def message_of(line: str) -> str:
    """The message of a /dev/kmsg record ("6,812,50123,-;text"); other lines as they are."""
    match = _RECORD_RE.match(line)
    return line[match.end():] if match else line


def xids(lines: List[str]) -> List[Xid]:
    found = []
    for line in lines:
        match = _XID_RE.search(line)
        if match:
            found.append(Xid(match.group("bus"), int(match.group("code")), line.strip()))
    return found
