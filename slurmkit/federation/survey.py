"""Probing clusters cheaply: is each one reachable, and how busy is it?

``slurmkit clusters`` asks every cluster of a site the same few questions
(Slurm version, nodes, partitions, pending jobs) and must stay fast when a
cluster is far away or broken.  The usual three parts:

- :func:`probe_argv` (pure): ONE remote command, ``sh -c PROBE_SCRIPT``, so
  a cluster behind SSH costs one round trip, not four.  The script is
  constant text (no user values) that runs each Slurm command between marker
  lines and reports each one's exit status, on stdout and on stderr.
- :func:`parse_probe` (pure): that output -> :class:`ClusterStatus`, with
  the ordinary parsers of :mod:`slurmkit.slurm.parsers`.
- :func:`probe_cluster` runs it through the cluster backend's runner; a
  cluster that cannot be probed (SSH refused, unknown host key, timeout,
  slurmctld down, bad config) raises :class:`ProbeError`, which carries the
  row to show for it (``reachable=False``, the reason, and what was measured
  on the way).
- :func:`survey` probes many clusters in parallel and returns the one
  per-cluster shape of the package, a :class:`~slurmkit.results.GroupResult`
  (name -> ClusterStatus, or the ProbeError); :func:`probe_all` is its
  table: one ClusterStatus per cluster, unreachable ones included.
"""

import shlex
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from slurmkit.errors import ConfigError, SlurmCommandError, SlurmkitError
from slurmkit.results import GroupResult, each
from slurmkit.slurm import commands, parsers
from slurmkit.slurm.types import NodeInfo

# Marker lines around each command's output.  Slurm never prints this, and a
# login shell's own chatter (motd, .bashrc echoes) falls outside the sections.
MARKER = "--slurmkit-probe-7c1f--"

# Gres names counted as accelerators when the site names none of its own
# (``gres_name`` of a partition adds to these); "shard", "mps" and other
# generic resources are not devices and would double-count GPUs.
ACCELERATOR_GRES = ("gpu", "npu")

# A probe is a status check: it must not wait as long as a submission may.
MAX_PROBE_TIMEOUT_S = 15.0


def _sh(argv: Sequence[str]) -> str:
    return shlex.join(argv)


# Constant text: the argv builders of slurmkit.slurm.commands quoted once,
# at import time.  Each section: begin marker, the command, end marker with
# its exit status, written to both streams so stderr is split the same way.
# `scontrol ping` goes first: it answers at once when slurmctld is down, where
# every RPC command would retry for about MessageTimeout seconds; when it or
# `scontrol show node` fails, the other RPCs are skipped.  Partitions are read
# from the nodes' lists (no extra RPC).  The pending count is computed on the
# login node (only a number travels back); squeue's own exit status is carried
# out of the pipeline on fd 3, since POSIX sh has no pipefail.
PROBE_SCRIPT = """m=%(marker)s
b() { echo "$m begin $1"; echo "$m begin $1" >&2; }
e() { echo "$m end $1 $2"; echo "$m end $1 $2" >&2; }
b version; %(version)s; e version $?
b ping; %(ping)s; r=$?; e ping $r
if [ "$r" -eq 0 ]; then
  b nodes; %(nodes)s; r=$?; e nodes $r
fi
if [ "$r" -eq 0 ]; then
  b pending
  { r=$( { { %(pending)s; echo $? >&3; } | wc -l >&4; } 3>&1 ); } 4>&1
  e pending "$r"
fi
exit 0
""" % {"marker": MARKER, "version": _sh(commands.version()), "ping": _sh(commands.ping()),
       "nodes": _sh(commands.show_nodes()), "pending": _sh(commands.squeue_pending_count())}


def probe_argv() -> List[str]:
    """The one command that probes a cluster (run locally or on its login node)."""
    return ["sh", "-c", PROBE_SCRIPT]


@dataclass(frozen=True)
class ClusterStatus:
    """What a probe found out about one cluster.

    ``accelerators`` maps a gres name with its type (``"gpu:h100"``,
    ``"npu:ascend910b"``; just ``"gpu"`` for an untyped gres) to
    ``{"total": n, "idle": n}``: total over all nodes, idle = not allocated
    on a usable node.  ``nodes_idle`` counts usable nodes with nothing
    allocated.  An unreachable cluster has ``reason`` set and zero counts.
    """

    name: str
    reachable: bool
    reason: str = ""
    version: Optional[str] = None
    partitions: List[str] = field(default_factory=list)
    nodes_total: int = 0
    nodes_idle: int = 0
    accelerators: Dict[str, Dict[str, int]] = field(default_factory=dict)
    pending_jobs: int = 0
    rtt_ms: float = 0.0
    via: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def unreachable(name: str, reason: str, version: Optional[str] = None) -> ClusterStatus:
    return ClusterStatus(name=name, reachable=False, reason=_one_line(reason), version=version)


class ProbeError(SlurmkitError):
    """A cluster could not be probed.  The message is the reason (one line).

    ``status`` is the row ``slurmkit clusters`` shows for it: unreachable,
    with the version if ``scontrol --version`` answered, the time the probe
    took and how the cluster was reached.  ``__cause__`` is the original
    error (RemoteError, HostKeyError, ...) when one was raised.
    """

    def __init__(self, status: ClusterStatus):
        super().__init__(status.reason)
        self.status = status


def _one_line(text: str) -> str:
    # Tables and JSON consumers get one line, whatever the error text holds.
    return " ".join(str(text).split())


def partitions_of(nodes: Iterable[NodeInfo]) -> List[str]:
    """The partitions the nodes belong to, in order of first appearance.

    Every node lists its partitions, so the probe needs no separate
    ``scontrol show partition`` RPC (a partition without nodes runs nothing).
    """
    seen: Dict[str, None] = {}
    for node in nodes:
        for name in node.partitions:
            seen.setdefault(name, None)
    return list(seen)


def summarize(name: str, version: Optional[str], nodes: Iterable[NodeInfo], partitions: Iterable[str],
              pending_jobs: int, accelerator_gres: Iterable[str] = ACCELERATOR_GRES) -> ClusterStatus:
    """The status of a reachable cluster from parsed Slurm data (pure)."""
    wanted = set(accelerator_gres)
    nodes = list(nodes)
    accelerators: Dict[str, Dict[str, int]] = {}
    idle = 0
    for node in nodes:
        busy = node.cpus_alloc > 0 or any(v > 0 for v in node.gres_used.values())
        if node.usable and not busy:
            idle += 1
        for key, count in node.gres.items():
            if key.split(":")[0] not in wanted:
                continue
            slot = accelerators.setdefault(key, {"total": 0, "idle": 0})
            slot["total"] += count
            if node.usable:
                # A drained or down node's devices exist but nobody can get them.
                slot["idle"] += max(count - node.gres_used.get(key, 0), 0)
    return ClusterStatus(name=name, reachable=True, version=version, partitions=list(partitions),
                         nodes_total=len(nodes), nodes_idle=idle, accelerators=accelerators,
                         pending_jobs=int(pending_jobs))


@dataclass
class _Section:
    stdout: str = ""
    stderr: str = ""
    returncode: Optional[int] = None     # None: the section never ended (killed, cut off)


def _split(text: str, sections: Dict[str, _Section], stream: str):
    current = None
    chunks: List[str] = []
    for line in text.splitlines(keepends=True):
        at = line.find(MARKER + " ")
        if at > 0 and current is not None:
            # Output without a final newline runs into the end marker: split it off.
            chunks.append(line[:at])
            line = line[at:]
        if line.startswith(MARKER + " "):
            words = line.split()
            if len(words) >= 3 and words[1] == "begin":
                current, chunks = words[2], []
                sections.setdefault(current, _Section())
                continue
            if len(words) >= 3 and words[1] == "end" and words[2] == current:
                setattr(sections[current], stream, "".join(chunks))
                if len(words) >= 4 and words[3].lstrip("-").isdigit():
                    sections[current].returncode = int(words[3])
                current = None
                continue
        if current is not None:
            chunks.append(line)
    if current is not None:   # cut off mid-section: keep what arrived, for the message
        setattr(sections[current], stream, "".join(chunks))


_WHAT = {"version": "scontrol --version", "ping": "scontrol ping", "nodes": "scontrol show node",
         "pending": "squeue"}


def _failure(name: str, key: str, section: Optional[_Section]) -> Optional[str]:
    """Why this section makes the cluster unusable, or None when it is fine."""
    from slurmkit.slurm.backend import UNREACHABLE_RE   # one definition of "controller unreachable"

    where = " on cluster %s" % name if name else ""
    if section is None:
        return "the probe script stopped before %s%s" % (_WHAT[key], where)
    text = section.stderr or section.stdout
    if section.returncode is None:
        return "%s did not finish%s: %s" % (_WHAT[key], where, parsers.first_error_line(text))
    if section.returncode == 0:
        return None
    if section.returncode == 127:
        return ("%s: command not found where cluster%s is reached (%s); install the Slurm client commands "
                "there or put them on the PATH of non-interactive sessions"
                % (_WHAT[key].split()[0], " " + name if name else "", parsers.first_error_line(text)))
    if key == "ping":  # "Slurmctld(primary) at HOST is DOWN", then a banner of asterisks
        down = [ln.strip() for ln in (section.stdout + section.stderr).splitlines() if "DOWN" in ln]
        return "slurmctld%s does not answer: scontrol ping: %s" % (
            " of cluster %s" % name if name else "", down[0] if down else parsers.first_error_line(text))
    if UNREACHABLE_RE.search(text):
        return "slurmctld%s does not answer: %s" % (" of cluster %s" % name if name else "",
                                                   parsers.first_error_line(text))
    return "%s failed%s (exit %d): %s" % (_WHAT[key], where, section.returncode, parsers.first_error_line(text))


def parse_probe(stdout: str, stderr: str, returncode: int, name: str = "",
                accelerator_gres: Iterable[str] = ACCELERATOR_GRES) -> ClusterStatus:
    """The :class:`ClusterStatus` for what :func:`probe_argv` printed (pure).

    ``rtt_ms`` and ``via`` are left for the caller, who measured them.
    """
    sections: Dict[str, _Section] = {}
    _split(stdout or "", sections, "stdout")
    _split(stderr or "", sections, "stderr")
    if not sections:
        # The script never ran its first line: the shell itself failed.
        message = parsers.first_error_line(stderr or stdout or "")
        return unreachable(name, "the probe command failed%s (exit %s): %s"
                           % (" on cluster %s" % name if name else "", returncode, message))
    version = None
    problem = _failure(name, "version", sections.get("version"))
    if problem is None:
        try:
            version = parsers.parse_version(sections["version"].stdout)
        except SlurmCommandError as exc:
            problem = str(exc)
    for key in ("ping", "nodes", "pending"):
        if problem is None:
            problem = _failure(name, key, sections.get(key))
    if problem is not None:
        return unreachable(name, problem, version)
    count = sections["pending"].stdout.strip()
    if not count.isdigit():
        return unreachable(name, "squeue's pending-job count%s is not a number: %r"
                           % (" on cluster %s" % name if name else "", count[:100]), version)
    nodes = parsers.parse_nodes(sections["nodes"].stdout)
    return summarize(name, version, nodes, partitions_of(nodes), int(count), accelerator_gres)


# --------------------------------------------------------------------------
# Running probes
# --------------------------------------------------------------------------

def _accelerator_gres(cluster) -> Tuple[str, ...]:
    names = list(ACCELERATOR_GRES)
    for partition in cluster.partitions.values():
        gres = partition.effective_gres_name
        if gres and gres not in names:
            names.append(gres)
    return tuple(names)


def probe_timeout(cluster) -> float:
    """min(command timeout of the login node, 15 s): a probe never waits like a submission."""
    if cluster.login is not None:
        return min(float(cluster.login.command_timeout), MAX_PROBE_TIMEOUT_S)
    return MAX_PROBE_TIMEOUT_S


def _via(cluster, runner=None) -> str:
    from slurmkit.session import reach

    if runner is not None:
        where = runner.describe()
        if where.startswith("ssh"):
            return where
    try:
        how = reach(cluster)
    except ConfigError:
        return ""
    if how == "ssh" and cluster.login is not None:
        return "ssh %s%s:%s" % (cluster.login.user + "@" if cluster.login.user else "", cluster.login.host,
                                cluster.login.port)
    return how


def _probe_backend(backend, name: str, gres: Tuple[str, ...]) -> ClusterStatus:
    """For a backend without a runner: the same answers through its own calls."""
    version = backend.version()
    nodes = backend.nodes()
    partitions = backend.partitions()
    pending = sum(1 for job in backend.jobs() if job.state == "PENDING")
    return summarize(name, version, nodes, list(partitions), pending, gres)


def probe_cluster(session, name: str, clock=time) -> ClusterStatus:
    """Probe one cluster of ``session``'s site: its status, or :class:`ProbeError`.

    An unknown cluster name is the caller's mistake and raises UsageError.
    Every other slurmkit error (RemoteError, HostKeyError, ConnectTimeoutError,
    SlurmUnavailableError, ConfigError ...), and a probe whose output says the
    cluster is not usable, raises ProbeError, whose ``status`` row has the
    reason.  Bounded in time by the login's connect timeout plus
    :func:`probe_timeout`.
    """
    cluster = session.site.cluster(name)
    gres = _accelerator_gres(cluster)
    via = ""
    started = clock.monotonic()
    cause = None
    try:
        via = _via(cluster)
        backend = session.backend(cluster.name)
        runner = backend.runner
        if runner is None:
            status = _probe_backend(backend, cluster.name, gres)
        else:
            via = _via(cluster, runner)
            result = runner.run(probe_argv(), timeout=probe_timeout(cluster))
            status = parse_probe(result.stdout, result.stderr, result.returncode, cluster.name, gres)
    except SlurmkitError as exc:
        status, cause = unreachable(cluster.name, str(exc)), exc
    status = replace(status, rtt_ms=round((clock.monotonic() - started) * 1000.0, 1), via=via)
    if not status.reachable:
        raise ProbeError(status) from cause
    return status


def survey(session, names: Optional[Sequence[str]] = None, max_workers: int = 8) -> GroupResult:
    """Probe clusters in parallel threads: name -> ClusterStatus, or its ProbeError, in site order.

    ``names`` defaults to every cluster of the site; an unknown name raises
    UsageError before anything is probed.  The total time is about that of
    the slowest cluster, not the sum.
    """
    site = session.site
    if names is None:
        wanted = list(site.clusters)
    else:
        chosen = {site.cluster(n).name for n in names}
        wanted = [n for n in site.clusters if n in chosen]
    return each(wanted, lambda n: probe_cluster(session, n), max_workers=max_workers,
                thread_name_prefix="slurmkit-probe")


def rows(result: GroupResult) -> List[ClusterStatus]:
    """One ClusterStatus per cluster of a :func:`survey`: unreachable ones as their error's row."""
    return [outcome.status if isinstance(outcome, ProbeError) else outcome for outcome in result.values()]


def probe_all(session, names: Optional[Sequence[str]] = None, max_workers: int = 8) -> List[ClusterStatus]:
    """The table of :func:`survey`: one row per cluster, in site order (``slurmkit clusters``)."""
    return rows(survey(session, names, max_workers))
