"""The Slurm side of health: what a node record tells the sweep (address, state, reason), and acting on
one node by the ownership rules against FakeSlurm (the real slurmctld: tests/integration/test_health.py)."""

import json
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from slurmkit.errors import SlurmCommandError, UsageError
from slurmkit.health import ownership, slurmside
from slurmkit.health.findings import NodeReport, fail, ok
from slurmkit.site.model import Cluster, Defaults, Site
from slurmkit.slurm import parsers
from slurmkit.testing import FakeSlurm

DATA = Path(__file__).parent / "data" / "probe"


def test_node_records_keep_the_address_slurmctld_uses():
    # Recorded `scontrol show node` of the local clusters: NodeAddr is where
    # the sweep's SSH goes (it differs from the node's name there).
    text = json.loads((DATA / "gamma-22.05.json").read_text())["stdout"]
    nodes = {n.name: n for n in parsers.parse_nodes(text)}
    assert nodes["gn1"].addr == "127.0.3.11" and nodes["gn2"].addr == "127.0.3.12"
    assert parsers.parse_nodes("NodeName=x State=IDLE")[0].addr == ""


# ---------------------------------------------------------------- acting on one node (FakeSlurm)

def report(node, *failing):
    results = tuple(fail(n, "broken") for n in failing) or (ok("memory", "fine"),)
    return NodeReport(node=node, cluster="fake", partition="gpu", results=results)


def decide_and_apply(slurm, *args, **kwargs):
    """slurmside.decide_and_apply on the fake's clock (its wait for the drain's second to end is virtual)."""
    return slurmside.decide_and_apply(slurm, *args, clock=kwargs.pop("clock", slurm.clock), **kwargs)


def updates(slurm):
    return [c for c in slurm.commands if c[:2] == ("scontrol", "update")]


@pytest.fixture
def slurm():
    return FakeSlurm("fake", nodes=["n1", "n2", "n3", "n4"])


def test_a_failing_node_is_drained_with_every_failing_check(slurm):
    applied = decide_and_apply(slurm, report("n1", "xid", "ecc"), 3, "50%")
    assert applied.done and applied.text == "drained (slurmkit: xid, ecc)"
    assert updates(slurm) == [("scontrol", "update", "NodeName=n1", "State=DRAIN", "Reason=slurmkit: xid, ecc")]
    n1 = slurmside.node_record(slurm, "n1")
    assert n1.state == "IDLE+DRAIN" and n1.reason == "slurmkit: xid, ecc"


def test_resumed_after_n_clean_checks_and_only_then(slurm):
    decide_and_apply(slurm, report("n1", "xid"), 3, "50%")
    texts = [decide_and_apply(slurm, report("n1"), 3, "50%").text for _ in range(3)]
    assert texts[0] == "drained by slurmkit, clean 1/3 (slurmkit: xid; clean 1/3)"
    assert texts[1].startswith("drained by slurmkit, clean 2/3")
    assert texts[2] == "resumed: 3 clean checks in a row: resume"
    assert slurmside.node_record(slurm, "n1").state == "IDLE"


def test_never_touches_a_node_someone_else_drained_or_whose_reason_changed(slurm):
    slurm.set_node("n2", "DRAIN", "bad dimm", user="alice")
    decide_and_apply(slurm, report("n3", "xid"), 1, "50%")
    slurm.set_node("n3", "DRAIN", "rma 1234", user="bob")      # an admin took slurmkit's drain over
    for node in ("n2", "n3"):
        for failing in ((), ("xid",)):
            applied = decide_and_apply(slurm, report(node, *failing), 1, "50%")
            assert not applied.done and "left alone" in applied.text
    assert slurmside.node_record(slurm, "n2").reason == "bad dimm"
    assert slurmside.node_record(slurm, "n3").reason == "rma 1234"
    assert len(updates(slurm)) == 1                             # only slurmkit's own first drain


def test_the_cap_holds_for_a_node_draining_itself(slurm):
    decide_and_apply(slurm, report("n1", "xid"), 3, 1)
    applied = decide_and_apply(slurm, report("n2", "xid"), 3, 1)
    assert not applied.done and "drain_cap (1) allows 1" in applied.text
    assert slurmside.node_record(slurm, "n2").state == "IDLE"


def test_a_dry_run_changes_nothing(slurm):
    applied = decide_and_apply(slurm, report("n1", "xid"), 3, "50%", dry_run=True)
    assert not applied.done and applied.text == "would drain (slurmkit: xid)" and updates(slurm) == []


def test_many_drains_with_one_reason_are_one_scontrol_call(slurm):
    decisions = [ownership.decide(n, ["xid"], 3) for n in slurm.node_states(["n1", "n2", "n3"])]
    applied = slurmside.apply(slurm, decisions)
    assert all(a.done for a in applied)
    assert updates(slurm) == [("scontrol", "update", "NodeName=n1,n2,n3", "State=DRAIN", "Reason=slurmkit: xid")]


def test_a_refused_change_is_reported_not_raised(slurm):
    slurm.fail_next("drain", SlurmCommandError("scontrol update failed: Invalid node state specified"))
    applied = decide_and_apply(slurm, report("n1", "xid"), 3, "50%")
    assert not applied.done and "Invalid node state" in applied.error


def test_own_node_name(monkeypatch):
    monkeypatch.setenv("SLURMD_NODENAME", "gn7")
    assert slurmside.own_node_name() == "gn7" and slurmside.own_node_name("x1") == "x1"
    monkeypatch.delenv("SLURMD_NODENAME")
    assert slurmside.own_node_name() == socket.gethostname().split(".")[0]


def test_own_node_name_from_the_parent_slurmds_dash_n(tmp_path):
    """Without $SLURMD_NODENAME, a check started by `slurmd -N NAME` (several slurmds on a host) is NAME."""
    ask = [sys.executable, "-c", "from slurmkit.health.slurmside import own_node_name; print(own_node_name())"]
    script = tmp_path / "slurmd"        # a shell script's process is named after the script: "slurmd"
    script.write_text("#!/bin/sh\n%s\n" % " ".join(shlex.quote(a) for a in ask))
    script.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "SLURMD_NODENAME"}
    out = subprocess.run([str(script), "-N", "gn7"], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "gn7"
    other = subprocess.run(ask, capture_output=True, text=True, env=env, check=True)
    assert other.stdout.strip() == socket.gethostname().split(".")[0]


def test_own_cluster(tmp_path, monkeypatch):
    (tmp_path / "b.conf").write_text("")
    site = Site(name="s", path="/dev/null", defaults=Defaults(cluster="a"), clusters={
        "a": Cluster("a", {}, slurm_conf=str(tmp_path / "a.conf")),
        "b": Cluster("b", {}, slurm_conf=str(tmp_path / "b.conf")),
        "c": Cluster("c", {}, slurm_conf=str(tmp_path / "c.conf"))})
    monkeypatch.delenv("SLURM_CONF", raising=False)
    assert slurmside.own_cluster(site).name == "b"            # the only slurm.conf on this host
    assert slurmside.own_cluster(site, "c").name == "c"
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "c.conf"))
    assert slurmside.own_cluster(site).name == "c"
    (tmp_path / "a.conf").write_text("")
    monkeypatch.setenv("SLURM_CONF", "/elsewhere")
    assert slurmside.own_cluster(site).name == "a"            # two here, none named: the default


# ---------------------------------------------------------------- the cap under nodes checking at once

class Gate:
    """A backend whose ``count`` threads wait for each other after their first whole-cluster read and
    after their drain: every node reads "how many are drained" before any drains, and every drain is
    in before any node's clock moves on, as checks starting in the same second do at their worst."""

    def __init__(self, slurm, count):
        import threading

        self.slurm, self.barrier, self.seen = slurm, threading.Barrier(count, timeout=10), threading.local()

    def __getattr__(self, name):
        return getattr(self.slurm, name)

    def drain(self, nodes, reason):
        self.slurm.drain(nodes, reason)
        self.barrier.wait()                   # every drain is in, in the same second

    def node_states(self, names=None):
        answer = self.slurm.node_states(names)
        if names is None:
            self.seen.reads = getattr(self.seen, "reads", 0) + 1
            if self.seen.reads == 1:
                self.barrier.wait()           # everyone has read "none drained yet"
        return answer


def drained_by_us(slurm):
    return sorted(n.name for n in slurm.node_states() if ownership.is_ours(n.reason) and "DRAIN" in n.state)


class _Shared:
    """One clock for every node's check, as slurmctld's and the nodes' (NTP) are: a node's
    wait for its drain's second to end lets the others run meanwhile, for real."""

    def __init__(self, fake_clock, lock):
        self.fake, self.lock = fake_clock, lock

    def time(self):
        with self.lock:
            return self.fake.time()

    def sleep(self, seconds):
        import time

        time.sleep(0.002)                     # the other threads' turn
        with self.lock:
            self.fake.advance(seconds)


def test_two_nodes_failing_in_the_same_second_keep_one_drain_under_a_cap_of_one():
    import threading

    slurm = FakeSlurm("fake", nodes=["n1", "n2", "n3", "n4"])      # the clock stands still: one second
    gate = Gate(slurm, 2)
    finished = {}
    clock = _Shared(slurm.clock, threading.Lock())

    def check(node):
        finished[node] = slurmside.decide_and_apply(gate, report(node, "mount:/shared"), 3, 1, clock=clock)
    threads = [threading.Thread(target=check, args=(n,)) for n in ("n2", "n1")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    # Both read "none drained" and both drained in the same second.  Once it was over, both counted
    # the same two drains in the same order, by name within the second: n1 kept its drain, n2 undid
    # its own.  Exactly one drained: never two, and not none.
    assert drained_by_us(slurm) == ["n1"], finished
    assert finished["n1"].done and finished["n1"].text == "drained (slurmkit: mount:/shared)"
    assert not finished["n2"].done
    assert ("drain undone: partition gpu: 1 of its 4 nodes were drained by slurmkit before this one "
            "(1 of them in the same second, before it by name), its drain_cap (1) allows 1") in finished["n2"].text


def test_a_node_counts_the_drains_only_once_their_second_is_over():
    """n1's drain lands in the same second as n2's, just after n2 drained.  Had n2 counted at once it
    would have seen its drain alone and kept it, and n1, first by name, would have kept its own:
    two under a cap of one.  n2 waits until that second is over, then sees n1 before it and undoes."""
    slurm = FakeSlurm("fake", nodes=["n1", "n2", "n3", "n4"])
    waits = []

    class Late:
        """n1 drains itself while n2 waits for its second to end, stamped in that same second."""
        def time(self):
            return slurm.clock.time()

        def sleep(self, seconds):
            waits.append(seconds)
            slurm.set_node("n1", "DRAIN", "slurmkit: mount:/shared")
            slurm.clock.advance(seconds)
    slurm.clock.advance(0.25)                 # a quarter into a second
    applied = slurmside.decide_and_apply(slurm, report("n2", "mount:/shared"), 3, 1, clock=Late())
    assert waits == [1.25]                    # to half a second past the end of the drain's second
    assert not applied.done and "1 of them in the same second, before it by name" in applied.text
    assert drained_by_us(slurm) == ["n1"]


def test_a_node_counts_only_drains_ordered_before_its_own():
    from slurmkit.slurm.types import NodeInfo
    from datetime import datetime, timedelta

    t = datetime(2026, 12, 1, 12, 0, 0)

    def node(name, stamp, reason="slurmkit: xid", state="IDLE+DRAIN"):
        return NodeInfo(name=name, state=state, partitions=("gpu",), reason=reason, reason_time=stamp)
    healthy = [NodeInfo(name="h%d" % i, state="IDLE", partitions=("gpu",)) for i in range(6)]
    # drained before me, by another or by slurmkit: counted; after me: not (that one counts me)
    nodes = healthy + [node("a", t - timedelta(seconds=5)), node("me", t), node("z", t + timedelta(seconds=1)),
                       node("admin", t - timedelta(seconds=9), reason="rma 12")]
    assert ownership.cap_after_drain("me", nodes, 2).keep
    check = ownership.cap_after_drain("me", nodes, 1)
    assert not check.keep
    assert ("1 of its 10 nodes were drained by slurmkit before this one (0 of them in the same second, before it "
            "by name)") in check.note
    # the same second: ordered by name, so b, me, x; a later second comes after any name
    tie = healthy + [node("b", t), node("me", t), node("x", t), node("a", t + timedelta(seconds=1))]
    assert ownership.cap_after_drain("me", tie, 2).keep
    assert not ownership.cap_after_drain("me", tie, 1).keep
    assert ownership.cap_after_drain("b", tie, 1).keep
    assert not ownership.cap_after_drain("a", tie, 3).keep
    # a drain without a stamp counts as before any
    assert not ownership.cap_after_drain("b", tie + [node("c", None)], 1).keep
    # no longer our drain (an admin took it over, or it was resumed): nothing to judge
    assert ownership.cap_after_drain("me", healthy + [node("me", t, reason="rma 13")], 0).keep


@pytest.mark.parametrize("trial", range(25))
def test_many_nodes_failing_at_once_never_drain_more_than_the_cap(trial):
    import random
    import threading

    names = ["n%02d" % i for i in range(24)]
    slurm = FakeSlurm("fake", nodes=names)                         # 24 nodes, a cap of 3 (12%)
    lock = threading.Lock()
    rng = random.Random(trial)

    class Jittered:
        """Each call a random moment later, and the clock ticks now and then: real interleavings."""
        def __getattr__(self, name):
            real = getattr(slurm, name)

            def call(*args):
                time_module.sleep(rng.random() / 2000)
                with lock:
                    if rng.random() < 0.05:
                        slurm.clock.advance(1)
                    return real(*args)
            return call
    import time as time_module
    done = {}
    clock = _Shared(slurm.clock, lock)

    def check(node):
        done[node] = slurmside.decide_and_apply(Jittered(), report(node, "mount:/shared"), 3, "12%", clock=clock)
    threads = [threading.Thread(target=check, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    kept = drained_by_us(slurm)
    # Never over the cap, and never none: the first drain in the order keeps its own.  Fewer than
    # the cap is possible: a node that read, before draining, drains that were then undone did not
    # drain (its next check will).
    assert 1 <= len(kept) <= 3, kept
    assert sorted(n for n, a in done.items() if a.done) == kept
    assert all(a.done or "not drained" in a.text or "drain undone" in a.text for a in done.values())


def test_a_host_that_is_no_node_is_told_how_to_name_one(slurm):
    # scontrol fails on a name it does not know ("Node vm not found"); a list without it says the same.
    slurm.answer(["scontrol", "--oneliner", "--details", "show", "node", "vm"], stderr="Node vm not found\n",
                 returncode=1)
    for node in ("vm", "n9"):
        with pytest.raises(UsageError, match="^cluster fake has no node named '%s': run 'slurmkit health check' on "
                                             "one of its nodes .* or name the node with --node$" % node):
            slurmside.node_record(slurm, node)
