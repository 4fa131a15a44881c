"""What only the nodes know: a short job on one node of each node type.

Slurm knows a node's gres but not which interface carries its address,
which RDMA devices it has and in what state, or which container runtimes
are installed.  :data:`PROBE_SCRIPT` (constant POSIX sh: nothing of slurmkit
need be on the nodes) prints one fact per line; :func:`parse_probe` (pure)
reads them into a :class:`NodeProbe`; :func:`probe_type` runs the script as
one ``srun --immediate`` task on a node of the type (through the cluster
backend's runner: here, or on the login node over SSH), so a partition with
no free node makes it end after a bounded wait, with a message naming the
partition, instead of queueing.

Where the RDMA devices are read is a parameter (``/sys/class/infiniband``;
the partition's ``health.ib_sysfs`` when a site sets one): tests point it at
a fake sysfs tree made by :func:`slurmkit.health.sources.fakes.write_ib_port`,
the one the health checks use.  What the script prints is read with
:mod:`slurmkit.sysfs`, as the health checks read the same files: a port or an
interface is active or up for ``site init`` exactly when it is for
``slurmkit health``.  The devices are counted in ``device_dir``
(``/dev``, or the partition's ``health.device_dir``) as the health checks
count them.
"""

import re
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from slurmkit.errors import SlurmkitError
from slurmkit.slurm import commands
from slurmkit.sysfs import RdmaPort, interface_up, state_name

# The container runtimes slurmkit has adapters for, by the command each installs (Slurm's own OCI
# support runs runc or crun; pyxis needs enroot).
RUNTIME_COMMANDS = {"ch-run": "charliecloud", "runc": "oci", "crun": "oci", "enroot": "pyxis",
                    "apptainer": "apptainer", "singularity": "apptainer", "podman-hpc": "podman-hpc"}

# Arguments: $1 the RDMA sysfs root, $2 the device directory.  Each fact on its own line, its kind first.
# The node's address is the one Slurm reaches it by (NodeAddr), resolved on the node, and the interface
# is where the kernel routes it: the interface NCCL's and Gloo's sockets should use.
PROBE_SCRIPT = r"""ib=$1; dev=$2
name=${SLURMD_NODENAME:-$(hostname)}
echo "node $name"
addr=$(scontrol show node -o "$name" 2>/dev/null | sed -n 's/.* NodeAddr=\([^ ]*\).*/\1/p')
[ -n "$addr" ] || addr=$name
case $addr in
  *[!0-9.:]*) ip=$(getent hosts "$addr" 2>/dev/null | awk 'NR == 1 { print $1 }') ;;
  *) ip=$addr ;;
esac
echo "addr $addr ${ip:--}"
if command -v ip >/dev/null 2>&1; then
  [ -n "$ip" ] && ip -o route get "$ip" 2>/dev/null | head -n 1 | sed 's/^/route /'
fi
for i in /sys/class/net/*; do
  [ -e "$i" ] || continue
  echo "iface ${i##*/}|$(cat "$i/flags" 2>/dev/null)|$(cat "$i/operstate" 2>/dev/null)"
done
for p in "$ib"/*/ports/*; do
  [ -d "$p" ] || continue
  h=${p%/ports/*}; h=${h##*/}; n=${p##*/}
  echo "rdma $h:$n|$(cat "$p/state" 2>/dev/null)|$(cat "$p/link_layer" 2>/dev/null)|$(cat "$p/rate" 2>/dev/null)"
done
for kind in nvidia davinci; do
  n=0
  for f in "$dev"/$kind[0-9]*; do [ -e "$f" ] && n=$((n + 1)); done
  echo "devices $kind $n"
done
for r in ch-run runc crun enroot apptainer singularity podman-hpc; do
  command -v "$r" >/dev/null 2>&1 && echo "runtime $r"
done
echo "end"
"""


class NodeProbe(NamedTuple):
    node: str
    addr: str = ""
    route_iface: Optional[str] = None    # where the kernel routes the node's own address
    interfaces: Tuple[str, ...] = ()    # those up (sysfs flags and operstate, as the health check reads them)
    rdma: Tuple[RdmaPort, ...] = ()
    devices: Dict[str, int] = {}         # "nvidia" / "davinci" -> how many device files
    runtimes: Tuple[str, ...] = ()       # commands found (ch-run, runc ...)
    ib_root: str = "/sys/class/infiniband"
    device_dir: str = "/dev"

    @property
    def runtime_names(self) -> Tuple[str, ...]:
        """The slurmkit runtimes those commands make possible, each once, in RUNTIME_COMMANDS order."""
        seen: List[str] = []
        for command in self.runtimes:
            name = RUNTIME_COMMANDS.get(command)
            if name and name not in seen:
                seen.append(name)
        return tuple(seen)


_NAME_RE = re.compile(r"[A-Za-z0-9_.:@+-]{1,64}", re.ASCII)


def _word(text: str) -> Optional[str]:
    """A name from the node's output kept only when it is a plain word (interfaces, HCAs, commands)."""
    return text if _NAME_RE.fullmatch(text) else None


def parse_probe(stdout: str, ib_root: str = "/sys/class/infiniband", device_dir: str = "/dev") -> NodeProbe:
    """What :data:`PROBE_SCRIPT` printed -> :class:`NodeProbe` (pure); SlurmkitError when it did not finish."""
    node, addr, route = "", "", None
    interfaces, rdma, runtimes, devices, ended = [], [], [], {}, False
    for line in stdout.splitlines():
        kind, _, rest = line.strip().partition(" ")
        if kind == "node":
            node = rest.strip()
        elif kind == "addr":
            addr = rest.split()[0] if rest.split() else ""
        elif kind == "route":
            words = rest.split()
            if "dev" in words[:-1]:
                route = _word(words[words.index("dev") + 1])
        elif kind == "iface":
            parts = rest.split("|")
            name = _word(parts[0].strip())
            if name and len(parts) == 3 and interface_up(parts[1], parts[2]) and name not in interfaces:
                interfaces.append(name)
        elif kind == "rdma":
            parts = rest.split("|")
            name = _word(parts[0]) if parts else None
            if name and len(parts) == 4:
                state = state_name(parts[1].strip())[1] or ""
                rdma.append(RdmaPort(name, state, parts[2].strip(), parts[3].strip()))
        elif kind == "devices":
            words = rest.split()
            if len(words) == 2 and words[1].isascii() and words[1].isdigit():
                devices[words[0]] = int(words[1])
        elif kind == "runtime":
            name = _word(rest.strip())
            if name:
                runtimes.append(name)
        elif kind == "end":
            ended = True
    if not ended:
        raise SlurmkitError("the node probe did not finish (its output: %s)" % " ".join(stdout.split())[:200])
    return NodeProbe(node=node, addr=addr, route_iface=route, interfaces=tuple(interfaces), rdma=tuple(rdma),
                     devices=devices, runtimes=tuple(runtimes), ib_root=ib_root, device_dir=device_dir)


# srun's words when --immediate gave up, or the nodes cannot run it now (every release says one of them).
_NOT_STARTED_RE = re.compile(r"immediate|Unable to allocate resources|Requested nodes are busy|"
                             r"Nodes required for job are DOWN|not available", re.I)


def probe_type(backend, partition: str, exclude: Sequence[str] = (), wait_s: int = 30,
               ib_root: str = "/sys/class/infiniband", device_dir: str = "/dev") -> NodeProbe:
    """Run the probe on one node of ``partition`` that is not in ``exclude``: its :class:`NodeProbe`.

    Bounded: srun waits at most ``wait_s`` for a node, the whole command ``wait_s`` + 60 s.  A probe that
    never starts raises SlurmkitError naming the partition and the wait.
    """
    if backend.runner is None:
        raise SlurmkitError("the %s backend runs no commands; probe the nodes through the Slurm commands "
                            "(SLURMKIT_BACKEND=commands)" % backend.describe())
    argv = commands.srun_probe(partition, ["sh", "-c", PROBE_SCRIPT, "slurmkit-probe", ib_root, device_dir],
                               exclude=exclude, wait_s=wait_s)
    result = backend.runner.run(argv, timeout=wait_s + 60)
    if result.returncode != 0:
        from slurmkit.slurm.parsers import first_error_line

        why = first_error_line(result.stderr or result.stdout)
        if _NOT_STARTED_RE.search(result.stderr or ""):
            raise SlurmkitError("the probe job in partition %s did not start within %d s (%s); its nodes are busy "
                                "or down: run again when one is free" % (partition, wait_s, why))
        raise SlurmkitError("the probe job in partition %s failed (exit %d): %s" % (partition, result.returncode, why))
    return parse_probe(result.stdout, ib_root, device_dir)


def fabric_draft(probe: NodeProbe, accelerator: str = "nvidia"):
    """The fabric a partition's draft gets from its nodes' probe (pure): :class:`sitefile.FabricDraft`.

    Active RDMA ports decide the type (InfiniBand link layer: infiniband; Ethernet: RoCE), and are the
    HCAs NCCL is told to use; the interface that carries the node's address is the socket interface
    (NCCL's bootstrap and Gloo use it on every fabric).  Ports that are not active are named in a comment
    and left out: NCCL would fail over them.
    """
    from slurmkit.discovery.sitefile import FabricDraft

    where = "probed on node %s" % _word(probe.node) if _word(probe.node) else "probed on one node"
    comments = []
    if probe.route_iface and probe.route_iface not in probe.interfaces:
        comments.append("guess: %s: its address %s is routed through %s, which is not up (sysfs): bring it up, or "
                        "set socket_ifname to an interface that is (up: %s)"
                        % (where, probe.addr or "?", probe.route_iface, ", ".join(probe.interfaces) or "none"))
    elif probe.route_iface:
        comments.append("%s: its address %s is routed through %s" % (where, probe.addr or "?", probe.route_iface))
    else:
        comments.append("guess: %s, no interface found for its address %s: socket_ifname left out"
                        % (where, probe.addr or "?"))
    active = [p for p in probe.rdma if p.active]
    idle = [p for p in probe.rdma if not p.active]
    if idle:
        comments.append("RDMA ports not active, left out: %s" % ", ".join("%s (%s)" % (p.name, p.state or "?")
                                                                          for p in idle))
    if active and probe.ib_root != "/sys/class/infiniband":
        comments.append("RDMA devices read from %s (not the kernel's /sys/class/infiniband)" % probe.ib_root)
    if not active:
        comments.append("no active RDMA port in %s: an ethernet fabric" % probe.ib_root)
        return FabricDraft(type="ethernet", socket_ifname=probe.route_iface, comments=tuple(comments))
    infiniband = [p for p in active if p.link_layer.lower() == "infiniband"]
    ports = infiniband or active
    kind = "infiniband" if infiniband else "roce"
    comments.append("RDMA: %s" % ", ".join("%s %s %s" % (p.name, p.link_layer or "?", p.rate or "") for p in ports))
    gid = None
    if kind == "roce" and accelerator != "ascend":
        gid = 3
        comments.append("guess: RoCE v2 GID index 3 (the usual one); `show_gids` on a node says which index "
                        "holds the RoCE v2 address")
    return FabricDraft(type=kind, hcas=tuple("=" + p.name for p in ports), socket_ifname=probe.route_iface,
                       gid_index=gid, comments=tuple(comments))


def device_notes(probe: NodeProbe, accelerator: str, gres: str, per_node: int) -> List[str]:
    """What the probe saw that disagrees with Slurm's gres count (pure): one note, or none."""
    kind = {"nvidia": "nvidia", "ascend": "davinci"}.get(accelerator)
    if kind is None or kind not in probe.devices:
        return []
    found = probe.devices[kind]
    if found == per_node:
        return []
    return ["node %s has %d %s device files in %s where Slurm counts %s:%d: check gres.conf (File=) and the "
            "driver" % (_word(probe.node) or "?", found, kind, probe.device_dir, gres, per_node)]
