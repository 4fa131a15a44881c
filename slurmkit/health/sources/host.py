"""The host source: memory, swap, load, processes (psutil) and mount probes.

psutil is imported here and in no other module of slurmkit but this
package's sources, and only when a reading is taken.  The readings are
plain dicts (they cross a pipe from a forked child, see ``probe``):

- :func:`read_memory` (in process: /proc/meminfo and loadavg cannot hang);
- :func:`scan_processes` (in a child: reading another process's /proc
  entries can block while that process holds its memory lock);
- :func:`mount_table` (in process: /proc/self/mountinfo is the kernel's
  table, reading it never touches the mounted file systems);
- :func:`probe_path` (in a child per path: ``statvfs``, and a create / write
  / fsync / remove of a small file, all of which hang on a dead NFS server).
"""

import os
from typing import Dict, Iterable, List


def preload():
    """Import psutil now (before forking readers that use it)."""
    import psutil

    return psutil


def read_memory() -> dict:
    import psutil

    vm, swap = psutil.virtual_memory(), psutil.swap_memory()
    load1, load5, load15 = os.getloadavg()
    return {"memory_mb": vm.total / 1048576.0, "available_mb": vm.available / 1048576.0,
            "swap_mb": swap.total / 1048576.0, "swap_used_percent": swap.percent if swap.total else 0.0,
            "load1": load1, "load5": load5, "cores": psutil.cpu_count(logical=True) or 1}


def slurmd_node(cmdline: List[str]):
    """The node a slurmd serves when started with ``-N NAME`` (several slurmds on one host), else None."""
    for i, arg in enumerate(cmdline):
        if arg == "-N" and i + 1 < len(cmdline):
            return cmdline[i + 1]
        if arg.startswith("-N") and len(arg) > 2:
            return arg[2:]
    return None


def scan_processes(node: str, daemons: Iterable[str]) -> dict:
    """How many of each wanted daemon run (for ``node``), and the processes in D state.

    A slurmd started with ``-N OTHER`` serves another node of this host and
    is not counted for ``node``: on a host running one slurmd per node, each
    node's check sees only its own.
    """
    import psutil

    wanted = set(daemons)
    running: Dict[str, int] = {name: 0 for name in wanted}
    dstate = []
    for proc in psutil.process_iter(["name", "status", "create_time"]):
        info = proc.info
        name = info.get("name") or ""
        if name in wanted:
            if name == "slurmd":
                try:
                    serves = slurmd_node(proc.cmdline())
                except (psutil.Error, OSError):
                    serves = None
                if serves is not None and serves != node:
                    continue
            running[name] += 1
        if info.get("status") == psutil.STATUS_DISK_SLEEP:
            dstate.append([proc.pid, info.get("create_time") or 0.0, name])
    return {"running": running, "dstate": dstate}


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \040 \011 \012 \134
    out, i = [], 0
    while i < len(field):
        code = field[i + 1:i + 4]
        if field[i] == "\\" and len(code) == 3 and code.isdigit():
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> Dict[str, str]:
    """``/proc/self/mountinfo`` -> {mount point: file system type}; a later mount over a point wins."""
    table = {}
    for line in text.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        after = line.split(" - ", 1)[1].split()
        table[_unescape(fields[4])] = after[0] if after else ""
    return table


def mount_table(path: str = "/proc/self/mountinfo") -> Dict[str, str]:
    with open(path) as fh:
        return parse_mountinfo(fh.read())


def probe_path(path: str, writable: bool, tag: str) -> dict:
    """Exists, disk use, and (if asked) whether a file can be created, written, synced and removed.

    Runs in a forked child (see the module docstring).  ``tag`` names the
    probe file, which is removed again; a leftover one can only come from a
    probe killed mid-way and is harmless.
    """
    if not os.path.isdir(path):
        return {"exists": os.path.exists(path), "is_dir": False}
    out = {"exists": True, "is_dir": True}
    st = os.statvfs(path)
    total = st.f_blocks * st.f_frsize
    if total:
        # df's figure: used over what unprivileged users can have (used + available)
        used = (st.f_blocks - st.f_bfree) * st.f_frsize
        avail = st.f_bavail * st.f_frsize
        out["used_percent"] = 100.0 * used / (used + avail) if used + avail else 100.0
    if writable:
        probe = os.path.join(path, ".slurmkit-health-%s-%d" % (tag, os.getpid()))
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, b"slurmkit health probe\n")
                os.fsync(fd)   # on NFS: a round trip to the server, so a hung server shows here
            finally:
                os.close(fd)
            os.unlink(probe)
            out["writable"] = True
        except OSError as exc:
            out["writable"] = False
            out["write_error"] = exc.strerror or str(exc)
    return out
