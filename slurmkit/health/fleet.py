"""``slurmkit health sweep``: check every node of some clusters over SSH, then drain and resume by the rules.

One sweep:

1. takes the sweep lock (``<state dir>/health/sweep.lock``, flock): a second
   sweep, say cron's next one while this one is still running, fails at once
   saying which process holds it, instead of piling up;
2. asks each cluster for its nodes (one ``scontrol show node`` per cluster,
   clusters in parallel);
3. checks the nodes ``health.fanout`` at a time (or, with ``health.relays``
   and more nodes than that, through relay nodes that each check a group:
   :mod:`slurmkit.health.relay`): over SSH to each node's
   ``NodeAddr`` (the federation's SSH layer, with a login-node-like target per
   node and the site's strict known_hosts), running ``slurmkit health check
   --plan - --json`` there with the node's plan on standard input, bounded by
   ``health.node_timeout``; a node that cannot be reached or does not answer
   is reported as unreachable and never drained (Slurm's own
   not-responding logic covers dead nodes);
4. with ``drain`` (or ``dry_run``, which only says what it would do): reads
   each cluster's nodes again, decides per :mod:`slurmkit.health.ownership`,
   holds drains to the cap and applies them, one ``scontrol update`` per
   distinct reason.
"""

import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

from slurmkit.errors import RemoteError, SlurmkitError, SlurmUnavailableError, UsageError
from slurmkit.health import ownership, plan as plans, slurmside
from slurmkit.health.findings import NodeReport
from slurmkit.cache import state_dir

HEALTHY, UNHEALTHY, UNREACHABLE, ERROR, SKIPPED = "healthy", "unhealthy", "unreachable", "error", "skipped"
RELAYED_STATUSES = (HEALTHY, UNHEALTHY, UNREACHABLE, ERROR)   # what a relay may say of a node


class NodeRow(NamedTuple):
    cluster: str
    node: str
    partition: str
    slurm_state: str
    status: str                        # HEALTHY, UNHEALTHY, UNREACHABLE, ERROR, SKIPPED
    report: Optional[NodeReport] = None
    error: str = ""
    action: str = ""                   # what the sweep did or would do in Slurm
    seconds: float = 0.0
    via: str = ""                      # the relay that checked the node; "": the sweep itself

    def to_dict(self):
        return {"cluster": self.cluster, "node": self.node, "partition": self.partition,
                "slurm_state": self.slurm_state, "status": self.status, "error": self.error,
                "action": self.action, "seconds": round(self.seconds, 3), "via": self.via or None,
                "report": self.report.to_dict() if self.report else None}


class SweepResult(NamedTuple):
    rows: List[NodeRow]
    errors: List[str]                  # clusters that could not be asked, changes that failed
    seconds: float
    relays: int = 0                    # relays that answered (health.relays)
    relays_failed: List[str] = []      # "relay: why": their groups were checked by the sweep itself

    @property
    def ok(self) -> bool:
        return not self.errors and all(r.status in (HEALTHY, SKIPPED) for r in self.rows)

    def to_dict(self):
        counts = {}
        for r in self.rows:
            counts[r.status] = counts.get(r.status, 0) + 1
        return {"ok": self.ok, "seconds": round(self.seconds, 3), "counts": counts, "errors": self.errors,
                "relays": self.relays, "relays_failed": list(self.relays_failed),
                "nodes": [r.to_dict() for r in self.rows]}


# ---------------------------------------------------------------- the lock

class SweepLock:
    """An exclusive flock on ``path``, held for the sweep; the file says who holds it."""

    def __init__(self, path: str):
        self.path = path
        self.fd = None

    def __enter__(self):
        from slurmkit import filelock

        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = filelock.lock_path(self.path, mode=0o644)
        if fd is None:
            raise SlurmkitError("another health sweep is running (%s; lock %s): this one stops rather than "
                                "overlap it" % (filelock.holder(self.path), self.path))
        filelock.claim(fd, "pid %d since %s" % (os.getpid(), time.strftime("%Y-%m-%dT%H:%M:%S")))
        self.fd = fd
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            os.close(self.fd)   # closing releases the flock
            self.fd = None


def lock_path(site) -> str:
    return os.path.join(site.health.state_dir or state_dir(), "health", "sweep.lock")


# ---------------------------------------------------------------- reaching a node

def node_target(cluster, node_info, node_timeout: float):
    """A LoginNode for one node: its NodeAddr, with the health ssh settings over the cluster's login."""
    from slurmkit.site.model import LoginNode

    ssh, login = cluster.health.ssh, cluster.login
    return LoginNode(
        host=node_info.addr or node_info.name,
        port=ssh.port or (login.port if login else 22),
        user=ssh.user or (login.user if login else None),
        identity_file=ssh.identity_file or (login.identity_file if login else None),
        known_hosts=ssh.known_hosts or (login.known_hosts if login else None),
        proxy_jump=ssh.proxy_jump or (login.proxy_jump if login else None),
        connect_timeout=ssh.connect_timeout or (login.connect_timeout if login else 10.0),
        command_timeout=node_timeout)


def ssh_runner(cluster, node_info, node_timeout):
    from slurmkit.remote.runner import SSHRunner

    return SSHRunner(node_target(cluster, node_info, node_timeout), cluster.name)


def remote_check(runner, command, check_plan, timeout) -> NodeReport:
    """Run the check on the node; the report, or RemoteError/SlurmkitError saying why not."""
    import json

    argv = list(command) + ["--plan", "-", "--json"]
    try:
        result = runner.run(argv, stdin=check_plan.to_json(), timeout=timeout)
    except SlurmUnavailableError:
        raise SlurmkitError("%s not found on the node: install slurmkit there or set health.command"
                            % command[0]) from None
    try:
        return NodeReport.from_dict(json.loads(result.stdout))
    except ValueError:
        lines = [line for line in (result.stderr or result.stdout).splitlines() if line.strip()]
        raise SlurmkitError("the check on the node answered no report (exit %d): %s"
                            % (result.returncode, lines[-1] if lines else "no output")) from None


def check_with(open_runner: Callable, command, check_plan, timeout) -> Tuple[str, Optional[NodeReport], str]:
    """One node's check through the runner ``open_runner()`` gives: (status, report or None, why not)."""
    runner = None
    try:
        runner = open_runner()
        report = remote_check(runner, command, check_plan, timeout)
        return (HEALTHY if report.healthy else UNHEALTHY), report, ""
    except RemoteError as exc:
        return UNREACHABLE, None, str(exc)
    except SlurmkitError as exc:
        return ERROR, None, str(exc)
    finally:
        if runner is not None:
            runner.close()


# ---------------------------------------------------------------- the sweep

def sweep(session, cluster_names: List[str], partition: Optional[str] = None, drain: bool = False,
          dry_run: bool = False, runner_factory: Optional[Callable] = None,
          nodes: Optional[List[str]] = None) -> SweepResult:
    site = session.site
    settings = site.health
    runner_factory = runner_factory or ssh_runner
    t0 = time.monotonic()
    clusters = [site.cluster(name) for name in cluster_names]
    if partition and not any(partition in c.partitions for c in clusters):
        raise UsageError("no cluster of %s has a partition %r" % (", ".join(c.name for c in clusters), partition))
    with SweepLock(lock_path(site)):
        errors: List[str] = []
        listed: Dict[str, list] = {}

        def list_nodes(cluster):
            return cluster.name, session.backend(cluster.name).node_states()

        with ThreadPoolExecutor(max_workers=max(1, len(clusters))) as pool:
            futures = [(c, pool.submit(list_nodes, c)) for c in clusters]
        for cluster, future in futures:
            try:
                listed[cluster.name] = future.result()[1]
            except SlurmkitError as exc:
                errors.append("cluster %s: cannot list its nodes: %s" % (cluster.name, exc))

        rows: List[NodeRow] = []
        jobs = []
        for cluster in clusters:
            if partition and partition not in cluster.partitions:
                continue
            for info in listed.get(cluster.name, []):
                if nodes and info.name not in nodes:
                    continue
                if partition and partition not in info.partitions:
                    continue
                try:
                    part = plans.choose_partition(cluster, info.partitions, partition)
                except UsageError as exc:
                    rows.append(NodeRow(cluster.name, info.name, ",".join(info.partitions), info.state.lower(),
                                        SKIPPED, error=str(exc)))
                    continue
                jobs.append((cluster, info, plans.build(site, cluster, part, info.name, info)))

        def check_one(job):
            cluster, info, check_plan = job
            start = time.monotonic()
            status, report, error = check_with(lambda: runner_factory(cluster, info, settings.node_timeout),
                                               cluster.health.command, check_plan, settings.node_timeout)
            return NodeRow(cluster.name, info.name, check_plan.partition, info.state.lower(), status, report, error,
                           seconds=time.monotonic() - start)

        def check_directly(some):
            with ThreadPoolExecutor(max_workers=min(settings.fanout, len(some)) or 1) as pool:
                return list(pool.map(check_one, some))

        # health.relays: a cluster with more nodes than one round's goes through relays (slurmkit.health.relay)
        per_cluster: Dict[str, list] = {}
        for job in jobs:
            per_cluster.setdefault(job[0].name, []).append(job)
        flat, relayed = [], []
        for cluster_jobs in per_cluster.values():
            (relayed if settings.relays and len(cluster_jobs) > settings.fanout else flat).append(cluster_jobs)
        relays, relays_failed = 0, []
        from slurmkit.health import relay

        # Every relayed cluster and the flat rest at once: two big clusters take the time of one.
        tasks = [lambda c=c: relay.sweep_through_relays(c, settings, runner_factory, check_directly) for c in relayed]
        flat_jobs = [job for cluster_jobs in flat for job in cluster_jobs]
        if flat_jobs:
            tasks.append(lambda: relay.Relayed(check_directly(flat_jobs), 0, []))
        with ThreadPoolExecutor(max_workers=max(1, len(tasks))) as pool:
            for got in pool.map(lambda task: task(), tasks):
                rows += got.rows
                relays += got.relays
                relays_failed += got.failed

        if drain or dry_run:
            rows = _act(session, clusters, rows, settings, dry_run, errors)
    order = {c.name: i for i, c in enumerate(clusters)}
    rows.sort(key=lambda r: (order.get(r.cluster, 0), _natural(r.node)))
    return SweepResult(rows, errors, time.monotonic() - t0, relays, relays_failed)


def _natural(name):
    import re

    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _act(session, clusters, rows, settings, dry_run, errors) -> List[NodeRow]:
    """Decide on fresh node records, cap the drains, apply (or only say, for a dry run)."""
    out = [r for r in rows if r.report is None]
    for cluster in clusters:
        checked = [r for r in rows if r.cluster == cluster.name and r.report is not None]
        if not checked:
            continue
        backend = session.backend(cluster.name)
        try:
            fresh = {n.name: n for n in backend.node_states()}
        except SlurmkitError as exc:
            errors.append("cluster %s: cannot read its nodes again to act on them: %s" % (cluster.name, exc))
            out += checked
            continue
        failing = {r.node: r.report.failing for r in checked}
        decisions = [ownership.decide(fresh[r.node], r.report.failing, settings.resume_after)
                     for r in checked if r.node in fresh]
        decisions = ownership.apply_cap(decisions, list(fresh.values()), settings.drain_cap, failing)
        applied = {a.decision.node: a for a in slurmside.apply(backend, decisions, dry_run)}
        for r in checked:
            a = applied.get(r.node)
            if a is None:
                out.append(r._replace(action="gone from Slurm"))
                continue
            if a.error:
                errors.append("%s/%s: %s" % (cluster.name, r.node, a.text))
            out.append(r._replace(action=a.text, slurm_state=fresh[r.node].state.lower()))
    return out
