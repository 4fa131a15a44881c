"""The sweep without SSH: FakeSlurm clusters, and each node's check run for real in a local process.

The runner factory stands in for the SSH hop only: each "node" runs the real
``python -m slurmkit health check --plan - --json`` here, with its plan on
standard input.  The SSH path, and the real slurmctld, are in
tests/integration/test_health.py.
"""

import os
import sys
import threading

import pytest

from slurmkit.errors import ConnectTimeoutError, SlurmkitError, SlurmUnavailableError, UsageError
from slurmkit.health import fleet
from slurmkit.site.model import (Cluster, ClusterHealth, Defaults, HealthChecks, HealthMount, HealthSettings,
                                 HealthSsh, LoginNode, Partition, Site)
from slurmkit.slurm.types import NodeInfo
from slurmkit.slurm.runner import LocalRunner
from slurmkit.testing import FakeSlurm, fake_session


@pytest.fixture
def scratch(tmp_path):
    for n in ("n1", "n2", "n3", "n4"):
        (tmp_path / "scratch" / n).mkdir(parents=True)
    return tmp_path / "scratch"


def make_site(tmp_path, cap="50%", resume_after=2, command=(sys.executable, "-m", "slurmkit", "health", "check")):
    # Checks whose outcome only the test decides: a per-node directory that must be writable.
    checks = HealthChecks(daemons=(), dstate_seconds=0, warn_load_per_core=None,
                          mounts=(HealthMount(str(tmp_path / "scratch" / "%n"), writable=True),))
    part = Partition(name="gpu", accelerator="none", cpus_per_node=4, health=checks)
    clusters = {name: Cluster(name=name, partitions={"gpu": part}, default_partition="gpu",
                              health=ClusterHealth(command=tuple(command)))
                for name in ("alpha", "beta")}
    return Site(name="t", path="/dev/null", clusters=clusters, defaults=Defaults(cluster="alpha"),
                health=HealthSettings(resume_after=resume_after, drain_cap=cap, fanout=3,
                                      state_dir=str(tmp_path / "state"), node_timeout=30))


class Local:
    """The runner factory: a local process instead of SSH (unreachable for the nodes named)."""

    def __init__(self, unreachable=()):
        self.unreachable = set(unreachable)
        self.seen = []
        self.lock = threading.Lock()

    def __call__(self, cluster, node_info, timeout):
        with self.lock:
            self.seen.append((cluster.name, node_info.name))
        if node_info.name in self.unreachable:
            class Dead(LocalRunner):
                def run(self, argv, stdin=None, timeout=None):
                    raise ConnectTimeoutError("connecting to %s timed out" % node_info.name)
            return Dead()
        return LocalRunner({"PYTHONPATH": os.pathsep.join(sys.path)})


@pytest.fixture
def clusters():
    return {"alpha": FakeSlurm("alpha", nodes=["n1", "n2", "n3", "n4"]), "beta": FakeSlurm("beta", nodes=["n1"])}


def session(tmp_path, clusters, **kw):
    return fake_session(make_site(tmp_path, **kw), **clusters)


def test_every_node_checked_in_one_table(tmp_path, scratch, clusters):
    (scratch / "n3").rmdir()
    runner = Local(unreachable=["n4"])
    result = fleet.sweep(session(tmp_path, clusters), ["alpha", "beta"], runner_factory=runner)
    rows = {(r.cluster, r.node): r for r in result.rows}
    assert [r.status for r in result.rows] == ["healthy", "healthy", "unhealthy", "unreachable", "healthy"]
    assert rows["alpha", "n3"].report.failing == ["mount:%s" % (scratch / "n3")]
    assert "timed out" in rows["alpha", "n4"].error and rows["alpha", "n4"].report is None
    assert not result.ok and result.to_dict()["counts"] == {"healthy": 3, "unhealthy": 1, "unreachable": 1}
    # a sweep without --drain changes nothing in Slurm
    assert not [c for c in clusters["alpha"].commands if c[:2] == ("scontrol", "update")]
    assert all(r.action == "" for r in result.rows)
    from slurmkit.health.report import sweep_text

    text = sweep_text(result)
    assert "alpha    n3    gpu        idle   unhealthy    mount:" in text and "5 nodes in" in text


def test_drain_with_the_cap_and_never_an_unreachable_node(tmp_path, scratch, clusters):
    for n in ("n1", "n2", "n3"):
        (scratch / n).rmdir()
    s = session(tmp_path, clusters, cap=2)
    result = fleet.sweep(s, ["alpha"], drain=True, runner_factory=Local(unreachable=["n4"]))
    actions = {r.node: r.action for r in result.rows}
    drained = [n for n, a in actions.items() if a.startswith("drained")]
    assert len(drained) == 2 and actions["n4"] == ""                        # unreachable: untouched
    capped = [n for n, a in actions.items() if a.startswith("not drained")]
    assert len(capped) == 1 and "drain_cap (2) allows 2" in actions[capped[0]]
    states = {n.name: n for n in clusters["alpha"].node_states()}
    assert {n for n in states if states[n].reason.startswith("slurmkit: mount:")} == set(drained)


def test_dry_run_says_what_drain_would_do(tmp_path, scratch, clusters):
    (scratch / "n2").rmdir()
    # this time through the lean entry (python -m slurmkit.health) rather than the CLI
    s = session(tmp_path, clusters, command=(sys.executable, "-m", "slurmkit.health"))
    result = fleet.sweep(s, ["alpha"], dry_run=True, runner_factory=Local())
    assert {r.node: r.action for r in result.rows}["n2"].startswith("would drain (slurmkit: mount:")
    assert not [c for c in clusters["alpha"].commands if c[:2] == ("scontrol", "update")]


def test_resume_after_clean_sweeps_and_foreign_drains_kept(tmp_path, scratch, clusters):
    s = session(tmp_path, clusters)
    (scratch / "n1").rmdir()
    clusters["alpha"].set_node("n2", "DRAIN", "fan noise, ticket 7", user="alice")
    fleet.sweep(s, ["alpha"], drain=True, runner_factory=Local())
    (scratch / "n1").mkdir()
    first = fleet.sweep(s, ["alpha"], drain=True, runner_factory=Local())
    second = fleet.sweep(s, ["alpha"], drain=True, runner_factory=Local())
    assert {r.node: r.action for r in first.rows}["n1"].startswith("drained by slurmkit, clean 1/2")
    assert {r.node: r.action for r in second.rows}["n1"].startswith("resumed")
    assert "left alone" in {r.node: r.action for r in second.rows}["n2"]
    states = {n.name: n for n in clusters["alpha"].node_states()}
    assert states["n1"].state == "IDLE" and states["n2"].reason == "fan noise, ticket 7"


def test_partition_and_node_filters(tmp_path, scratch, clusters):
    runner = Local()
    fleet.sweep(session(tmp_path, clusters), ["alpha", "beta"], nodes=["n2"], runner_factory=runner)
    assert sorted(runner.seen) == [("alpha", "n2")]
    with pytest.raises(UsageError, match="no cluster of alpha has a partition 'cpu'"):
        fleet.sweep(session(tmp_path, clusters), ["alpha"], partition="cpu", runner_factory=runner)


def test_a_cluster_that_cannot_be_asked_is_an_error_not_a_crash(tmp_path, scratch, clusters):
    clusters["beta"].fail_next("node_states", SlurmUnavailableError("slurmctld on cluster beta does not answer"))
    result = fleet.sweep(session(tmp_path, clusters), ["alpha", "beta"], runner_factory=Local())
    assert result.errors == ["cluster beta: cannot list its nodes: slurmctld on cluster beta does not answer"]
    assert len(result.rows) == 4 and not result.ok


def test_a_node_without_slurmkit_or_answering_garbage(tmp_path, scratch, clusters):
    s = fake_session(make_site(tmp_path, command=("/nonexistent/slurmkit",)), **clusters)
    result = fleet.sweep(s, ["beta"], runner_factory=Local())
    assert result.rows[0].status == "error" and "/nonexistent/slurmkit not found on the node" in result.rows[0].error
    s = fake_session(make_site(tmp_path, command=(sys.executable, "-c", "print('hello')", "--")), **clusters)
    result = fleet.sweep(s, ["beta"], runner_factory=Local())
    assert result.rows[0].status == "error" and "answered no report (exit 0): hello" in result.rows[0].error


def test_two_sweeps_never_overlap(tmp_path):
    path = str(tmp_path / "health" / "sweep.lock")
    with fleet.SweepLock(path):
        with pytest.raises(SlurmkitError, match=r"another health sweep is running \(pid %d since " % os.getpid()):
            with fleet.SweepLock(path):
                pass
    with fleet.SweepLock(path):           # released: the next one goes ahead
        pass


def test_the_remote_command_and_target(tmp_path):
    cluster = Cluster(name="c", partitions={}, login=LoginNode("login.c", port=2222, user="me",
                                                               identity_file="/k", known_hosts="/kh"))
    info = NodeInfo(name="c1", state="IDLE", addr="10.0.0.7")
    target = fleet.node_target(cluster, info, 42.0)
    assert (target.host, target.port, target.user, target.identity_file, target.known_hosts,
            target.command_timeout) == ("10.0.0.7", 2222, "me", "/k", "/kh", 42.0)
    own = cluster._replace(health=ClusterHealth(ssh=HealthSsh(port=22, user="root", known_hosts="/nodes")))
    target = fleet.node_target(own, NodeInfo(name="c1", state="IDLE"), 42.0)
    assert (target.host, target.port, target.user, target.known_hosts) == ("c1", 22, "root", "/nodes")
