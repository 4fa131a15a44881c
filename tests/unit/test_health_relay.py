"""Relays (health.relays): the sweep reaches one node per group, which checks the rest of its group.

As in test_health_sweep.py the SSH hop is replaced (a local process per
node, the real ``python -m slurmkit health check`` with the plan on standard
input); here the relay between them runs for real too, in this process
(:func:`slurmkit.health.relay.serve` on the very JSON the sweep sends) or
as its own process (``python -m slurmkit.health --relay -``).  Over real SSH
between real node addresses: tests/integration/test_health.py and
test_scale.py.
"""

import json
import os
import subprocess
import sys
import threading

import pytest

from slurmkit.errors import ConnectTimeoutError, UsageError
from slurmkit.health import relay
from slurmkit.health import fleet
from slurmkit.health.plan import CheckPlan
from slurmkit.health.report import sweep_text
from slurmkit.site.model import (Cluster, ClusterHealth, Defaults, HealthChecks, HealthMount, HealthSettings,
                                 LoginNode, Partition, Site)
from slurmkit.slurm.runner import CommandResult, LocalRunner
from slurmkit.testing import FakeSlurm, fake_session

NODES = ["n1", "n2", "n3", "n4", "n5"]
CHILD_ENV = {"PYTHONPATH": os.pathsep.join(sys.path)}


def make_site(tmp_path, relays=True, fanout=2, relay_fanout=None):
    checks = HealthChecks(daemons=(), dstate_seconds=0, warn_load_per_core=None,
                          mounts=(HealthMount(str(tmp_path / "scratch" / "%n"), writable=True),))
    part = Partition(name="gpu", accelerator="none", cpus_per_node=4, health=checks)
    command = (sys.executable, "-m", "slurmkit.health")
    clusters = {"alpha": Cluster(name="alpha", partitions={"gpu": part}, default_partition="gpu",
                                 health=ClusterHealth(command=command))}
    return Site(name="t", path="/dev/null", clusters=clusters, defaults=Defaults(cluster="alpha"),
                health=HealthSettings(fanout=fanout, relays=relays, relay_fanout=relay_fanout,
                                      state_dir=str(tmp_path / "state"),
                                      node_timeout=30))


@pytest.fixture
def scratch(tmp_path):
    for n in NODES:
        (tmp_path / "scratch" / n).mkdir(parents=True)
    return tmp_path / "scratch"


class Nodes:
    """Both hops, for the sweep (runner_factory) and inside the relay (runner_for).

    Reaching a node runs its real check in a local process; reaching a relay
    runs :func:`relay.serve` on the job the sweep sent, with this object as
    the relay's own way to its peers.  ``dead`` nodes cannot be reached from
    anywhere; ``garbled`` relays print something that is no answer.
    """

    def __init__(self, dead=(), garbled=()):
        self.dead, self.garbled = set(dead), set(garbled)
        self.sweep_reached, self.relay_reached, self.jobs = [], [], []
        self.lock = threading.Lock()

    def __call__(self, cluster, node_info, timeout):           # the sweep's runner_factory
        with self.lock:
            self.sweep_reached.append(node_info.name)
        return self._runner(node_info.name, from_sweep=True)

    def runner_for(self, target, cluster, timeout):            # the relay's
        if target is None:
            return LocalRunner(CHILD_ENV)
        with self.lock:
            self.relay_reached.append(target.host)
        return self._runner(target.host, from_sweep=False)

    def _runner(self, name, from_sweep):
        nodes = self

        class Runner(LocalRunner):
            def run(self, argv, stdin=None, timeout=None):
                if name in nodes.dead:
                    raise ConnectTimeoutError("connecting to %s timed out" % name)
                if from_sweep and list(argv[-2:]) == [relay.RELAY_FLAG, "-"]:
                    if name in nodes.garbled:
                        return CommandResult(tuple(argv), 1, "", "Traceback: something broke\n")
                    job = relay.RelayJob.from_json(stdin)
                    assert job.relay == name and timeout == job.timeout()
                    with nodes.lock:
                        nodes.jobs.append(job)
                    rows = relay.serve(job, runner_for=nodes.runner_for)
                    return CommandResult(tuple(argv), 0, json.dumps({"version": 1, "relay": name, "nodes": rows}), "")
                return super().run(argv, stdin, timeout)

        return Runner(CHILD_ENV)


def run_sweep(tmp_path, nodes, fake=None, **site):
    fake = fake or FakeSlurm("alpha", nodes=NODES)
    return fleet.sweep(fake_session(make_site(tmp_path, **site), alpha=fake), ["alpha"], runner_factory=nodes)


# ---------------------------------------------------------------- groups and relays, pure

@pytest.mark.parametrize("count,fanout,sizes", [
    (1024, 32, [32] * 32),      # two rounds: 32 relays of 32
    (64, 32, [8] * 8),          # not 32 relays of 2: a relay process for one peer costs more than it saves
    (2048, 32, [64] * 32),      # beyond fanout squared: at most fanout relays, which take two rounds each
    (33, 32, [6, 6, 6, 5, 5, 5]),
    (5, 2, [3, 2]),
])
def test_about_sqrt_n_groups_of_consecutive_nodes_never_more_than_fanout(count, fanout, sizes):
    got = relay.groups(count, fanout)
    assert [len(g) for g in got] == sizes
    assert [i for g in got for i in g] == list(range(count))


def test_no_relays_when_one_round_covers_the_nodes():
    assert relay.groups(32, 32) == [] and relay.groups(1, 1) == []


def test_the_relay_is_a_node_whose_host_slurm_sees_up():
    assert relay.pick_relay(["down*", "idle*", "drained", "idle"]) == 2    # drained: the host is up
    assert relay.pick_relay(["down", "idle*", "powered_down"]) == 0        # none: the first, and fall back


def test_a_relay_job_crosses_as_json_and_a_newer_one_is_refused(tmp_path):
    plan = CheckPlan(node="n2", cluster="alpha", partition="gpu")
    job = relay.RelayJob("n1", "alpha", ("python3", "-m", "slurmkit.health"), 4, 30.0,
                         (relay.RelayNode(plan._replace(node="n1"), None),
                          relay.RelayNode(plan, LoginNode(host="10.0.0.2", port=2222, user="root"))))
    back = relay.RelayJob.from_json(job.to_json())
    assert back == job
    assert back.timeout() == 60.0        # one round of checks, and one for the relay itself
    assert back.watchdog() == 45.0       # the relay ends itself first
    with pytest.raises(UsageError, match="relay job is version 2; this slurmkit reads version 1"):
        relay.RelayJob.from_json(job.to_json().replace('"version": 1', '"version": 2'))
    with pytest.raises(UsageError, match="not a relay job"):
        relay.RelayJob.from_json('{"version": 1}')


# ---------------------------------------------------------------- sweeps through relays

def test_the_sweep_reaches_only_the_relays_and_every_node_is_checked_as_itself(tmp_path, scratch):
    (scratch / "n4").rmdir()
    nodes = Nodes()
    result = run_sweep(tmp_path, nodes)
    assert sorted(nodes.sweep_reached) == ["n1", "n4"]               # groups n1-n3 and n4-n5
    assert sorted(nodes.relay_reached) == ["n2", "n3", "n5"]          # each relay checks itself locally
    rows = {r.node: r for r in result.rows}
    assert [r.node for r in result.rows] == NODES
    assert {n: r.via for n, r in rows.items()} == {"n1": "n1", "n2": "n1", "n3": "n1", "n4": "n4", "n5": "n4"}
    for name, row in rows.items():
        assert row.report.node == name and "mount:%s" % (scratch / name) in [c.name for c in row.report.results]
    assert rows["n4"].status == "unhealthy" and rows["n4"].report.failing == ["mount:%s" % (scratch / "n4")]
    assert [rows[n].status for n in ("n1", "n2", "n3", "n5")] == ["healthy"] * 4
    assert result.relays == 2 and result.relays_failed == []
    data = result.to_dict()
    assert data["relays"] == 2 and data["nodes"][1]["via"] == "n1"
    assert "5 nodes in" in sweep_text(result) and "through 2 relays" in sweep_text(result)


def test_relay_fanout_bounds_what_one_relay_runs_at_once_and_its_time_limit(tmp_path, scratch):
    nodes = Nodes()
    result = run_sweep(tmp_path, nodes, relay_fanout=1)
    assert [r.status for r in result.rows] == ["healthy"] * 5
    jobs = {job.relay: job for job in nodes.jobs}
    assert {r: j.fanout for r, j in jobs.items()} == {"n1": 1, "n4": 1}
    # n1's group of 3, one at a time: three rounds of node_timeout (30 s), and one for the relay itself
    assert jobs["n1"].timeout() == 120.0 and jobs["n4"].timeout() == 90.0
    assert run_sweep(tmp_path, Nodes()).relays == 2
    nodes = Nodes()
    run_sweep(tmp_path, nodes)
    assert {j.fanout for j in nodes.jobs} == {2}            # default: health.fanout


def test_a_peer_the_relay_cannot_reach_is_unreachable_never_drained(tmp_path, scratch):
    nodes = Nodes(dead=["n3"])
    fake = FakeSlurm("alpha", nodes=NODES)
    result = fleet.sweep(fake_session(make_site(tmp_path), alpha=fake), ["alpha"], drain=True,
                           runner_factory=nodes)
    rows = {r.node: r for r in result.rows}
    # n3 was tried by its relay, then by the sweep: it is nobody's to answer for
    assert rows["n3"].status == "unreachable" and "timed out" in rows["n3"].error
    assert rows["n3"].action == "" and not [c for c in fake.commands if c[:2] == ("scontrol", "update")]
    assert [rows[n].status for n in ("n1", "n2", "n4", "n5")] == ["healthy"] * 4


def test_a_dead_relay_costs_its_group_nothing_but_a_second_relay_is_not_tried(tmp_path, scratch):
    nodes = Nodes(dead=["n1"])
    result = run_sweep(tmp_path, nodes)
    rows = {r.node: r for r in result.rows}
    assert rows["n1"].status == "unreachable"
    # n2 and n3 checked by the sweep itself, n4 and n5 through relay n4
    assert [rows[n].status for n in ("n2", "n3", "n4", "n5")] == ["healthy"] * 4
    assert (rows["n2"].via, rows["n3"].via, rows["n5"].via) == ("", "", "n4")
    assert result.relays == 1 and len(result.relays_failed) == 1
    assert result.relays_failed[0].startswith("n1: connecting to n1 timed out")
    assert "relay n1: connecting to n1 timed out; the sweep checked its group itself" in sweep_text(result)


def test_a_relay_answering_no_rows_falls_back_with_its_last_line(tmp_path, scratch):
    result = run_sweep(tmp_path, Nodes(garbled=["n4"]))
    assert [r.status for r in result.rows] == ["healthy"] * 5
    assert {r.node: r.via for r in result.rows}["n5"] == ""
    assert result.relays_failed == ["n4: the relay answered no rows (exit 1): Traceback: something broke"]


def test_the_relay_skips_a_node_slurm_sees_down_when_choosing(tmp_path, scratch):
    fake = FakeSlurm("alpha", nodes=NODES)
    fake.set_node("n1", "DOWN", "Not responding")
    nodes = Nodes()
    run_sweep(tmp_path, nodes, fake=fake)
    assert sorted(nodes.sweep_reached) == ["n2", "n4"]


def test_rows_for_nodes_the_relay_was_not_sent_or_about_another_node_are_dropped():
    report = {"node": "n2", "cluster": "a", "partition": "p", "results": []}
    text = json.dumps({"version": 1, "nodes": [
        {"node": "n2", "status": "healthy", "report": report, "error": "", "seconds": 0.1},
        {"node": "n3", "status": "healthy", "report": report, "error": "", "seconds": 0.1},    # report of n2
        {"node": "n9", "status": "healthy", "report": None, "error": "", "seconds": 0.1},      # not sent
        {"node": "n4", "status": "skipped", "report": None, "error": "", "seconds": 0.1}]})   # not a relay's
    assert list(relay.parse_rows(text, ["n2", "n3", "n4"])) == ["n2"]
    assert relay.parse_rows("Traceback ...", ["n2"]) == {}
    assert relay.parse_rows(text.replace('"version": 1', '"version": 7'), ["n2"]) == {}


def test_relays_off_or_few_nodes_sweep_flat(tmp_path, scratch):
    nodes = Nodes()
    result = run_sweep(tmp_path, nodes, relays=False)
    assert sorted(nodes.sweep_reached) == NODES and not nodes.relay_reached and result.relays == 0
    nodes = Nodes()
    result = run_sweep(tmp_path, nodes, fanout=5)
    assert sorted(nodes.sweep_reached) == NODES and not nodes.relay_reached
    assert all(r.via == "" for r in result.rows)


# ---------------------------------------------------------------- the relay as its own process

def test_the_relay_entry_points_check_and_answer_rows(tmp_path, scratch):
    plan = CheckPlan(node="n1", cluster="alpha", partition="gpu",
                     checks=HealthChecks(daemons=(), dstate_seconds=0, warn_load_per_core=None,
                                         mounts=(HealthMount(str(scratch / "%n"), writable=True),)),
                     state_dir=str(tmp_path / "state"))
    job = relay.RelayJob("n1", "alpha", (sys.executable, "-m", "slurmkit.health"), 4, 30.0,
                         (relay.RelayNode(plan, None),))
    env = dict(os.environ, **CHILD_ENV)
    for entry in ([sys.executable, "-m", "slurmkit.health"], [sys.executable, "-m", "slurmkit", "health", "check"]):
        p = subprocess.run(entry + ["--relay", "-"], input=job.to_json(), capture_output=True, text=True, env=env,
                           timeout=60)
        assert p.returncode == 0, p.stderr
        rows = relay.parse_rows(p.stdout, ["n1"])
        assert rows["n1"]["status"] == "healthy" and rows["n1"]["report"].node == "n1"
    p = subprocess.run([sys.executable, "-m", "slurmkit", "health", "check", "--relay", "-", "--node", "n1"],
                       input=job.to_json(), capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 2 and p.stderr.startswith("Error: --relay checks the nodes its job names")
