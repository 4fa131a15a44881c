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

from slurmkit.errors import SlurmCommandError
from slurmkit.health import ownership, slurmside
from slurmkit.health.results import NodeReport, fail, ok
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


def updates(slurm):
    return [c for c in slurm.commands if c[:2] == ("scontrol", "update")]


@pytest.fixture
def slurm():
    return FakeSlurm("fake", nodes=["n1", "n2", "n3", "n4"])


def test_a_failing_node_is_drained_with_every_failing_check(slurm):
    applied = slurmside.decide_and_apply(slurm, report("n1", "xid", "ecc"), 3, "50%")
    assert applied.done and applied.text == "drained (slurmkit: xid, ecc)"
    assert updates(slurm) == [("scontrol", "update", "NodeName=n1", "State=DRAIN", "Reason=slurmkit: xid, ecc")]
    n1 = slurmside.node_record(slurm, "n1")
    assert n1.state == "IDLE+DRAIN" and n1.reason == "slurmkit: xid, ecc"


def test_resumed_after_n_clean_checks_and_only_then(slurm):
    slurmside.decide_and_apply(slurm, report("n1", "xid"), 3, "50%")
    texts = [slurmside.decide_and_apply(slurm, report("n1"), 3, "50%").text for _ in range(3)]
    assert texts[0] == "drained by slurmkit, clean 1/3 (slurmkit: xid; clean 1/3)"
    assert texts[1].startswith("drained by slurmkit, clean 2/3")
    assert texts[2] == "resumed: 3 clean checks in a row: resume"
    assert slurmside.node_record(slurm, "n1").state == "IDLE"


def test_never_touches_a_node_someone_else_drained_or_whose_reason_changed(slurm):
    slurm.set_node("n2", "DRAIN", "bad dimm", user="alice")
    slurmside.decide_and_apply(slurm, report("n3", "xid"), 1, "50%")
    slurm.set_node("n3", "DRAIN", "rma 1234", user="bob")      # an admin took slurmkit's drain over
    for node in ("n2", "n3"):
        for failing in ((), ("xid",)):
            applied = slurmside.decide_and_apply(slurm, report(node, *failing), 1, "50%")
            assert not applied.done and "left alone" in applied.text
    assert slurmside.node_record(slurm, "n2").reason == "bad dimm"
    assert slurmside.node_record(slurm, "n3").reason == "rma 1234"
    assert len(updates(slurm)) == 1                             # only slurmkit's own first drain


def test_the_cap_holds_for_a_node_draining_itself(slurm):
    slurmside.decide_and_apply(slurm, report("n1", "xid"), 3, 1)
    applied = slurmside.decide_and_apply(slurm, report("n2", "xid"), 3, 1)
    assert not applied.done and "drain_cap (1) allows 1" in applied.text
    assert slurmside.node_record(slurm, "n2").state == "IDLE"


def test_a_dry_run_changes_nothing(slurm):
    applied = slurmside.decide_and_apply(slurm, report("n1", "xid"), 3, "50%", dry_run=True)
    assert not applied.done and applied.text == "would drain (slurmkit: xid)" and updates(slurm) == []


def test_many_drains_with_one_reason_are_one_scontrol_call(slurm):
    decisions = [ownership.decide(n, ["xid"], 3) for n in slurm.node_states(["n1", "n2", "n3"])]
    applied = slurmside.apply(slurm, decisions)
    assert all(a.done for a in applied)
    assert updates(slurm) == [("scontrol", "update", "NodeName=n1,n2,n3", "State=DRAIN", "Reason=slurmkit: xid")]


def test_a_refused_change_is_reported_not_raised(slurm):
    slurm.fail_next("drain", SlurmCommandError("scontrol update failed: Invalid node state specified"))
    applied = slurmside.decide_and_apply(slurm, report("n1", "xid"), 3, "50%")
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
    """A backend whose first two whole-cluster reads in each of ``count`` threads wait for all of them:
    every node reads "how many are drained" before any drains, and counts again only once all have
    drained, as checks starting in the same second do at their worst."""

    def __init__(self, slurm, count):
        import threading

        self.slurm, self.barrier, self.seen = slurm, threading.Barrier(count, timeout=10), threading.local()

    def __getattr__(self, name):
        return getattr(self.slurm, name)

    def node_states(self, names=None):
        if names is None and getattr(self.seen, "reads", 0) == 1:
            self.barrier.wait()               # every drain is in before anyone counts again
        answer = self.slurm.node_states(names)
        if names is None:
            self.seen.reads = getattr(self.seen, "reads", 0) + 1
            if self.seen.reads == 1:
                self.barrier.wait()           # everyone has read "none drained yet"
        return answer


def drained_by_us(slurm):
    return sorted(n.name for n in slurm.node_states() if ownership.is_ours(n.reason) and "DRAIN" in n.state)


def test_two_nodes_failing_in_the_same_second_keep_one_drain_under_a_cap_of_one():
    import threading

    slurm = FakeSlurm("fake", nodes=["n1", "n2", "n3", "n4"])      # the clock stands still: one second
    gate = Gate(slurm, 2)
    finished = {}
    waits = []

    def sleep(seconds):                       # the other node's check ends (undoes its drain) meanwhile
        waits.append(seconds)
        others = [t for t in threads if t is not threading.current_thread()]
        for t in others:
            t.join(10)
        slurm.clock.advance(seconds)

    def check(node):
        finished[node] = slurmside.decide_and_apply(gate, report(node, "mount:/shared"), 3, 1, sleep=sleep)
    threads = [threading.Thread(target=check, args=(n,)) for n in ("n1", "n2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    # Both read "none drained" and both drained.  Then whoever counted the other's drain undid its own;
    # where both did (a tie in the same second), n1, the first by name, tried again a second later,
    # alone, and kept it.  Exactly one drained, whatever the order: never two, and not none.
    kept = drained_by_us(slurm)
    assert len(kept) == 1, finished
    other = ({"n1", "n2"} - set(kept)).pop()
    assert finished[kept[0]].done and finished[kept[0]].text == "drained (slurmkit: mount:/shared)"
    assert not finished[other].done
    assert ("drain undone: partition gpu" in finished[other].text
            or "not drained: partition gpu has 1 of its 4 nodes drained" in finished[other].text), finished
    assert waits in ([], [1.0])


def test_a_tie_at_the_caps_edge_is_undone_by_both_and_the_first_by_name_retries_alone():
    slurm = FakeSlurm("fake", nodes=["n1", "n2", "n3", "n4"])
    slurm.set_node("n2", "DRAIN", "slurmkit: mount:/shared")   # n2's drain, stamped in this same second
    waits = []

    def sleep(seconds):                   # meanwhile n2 counted n1's drain too and undid its own
        waits.append(seconds)
        slurm.set_node("n2", None)
        slurm.clock.advance(seconds)
    applied = slurmside.decide_and_apply(_Unseen(slurm, "n2"), report("n1", "mount:/shared"), 3, 1, sleep=sleep)
    assert applied.done and drained_by_us(slurm) == ["n1"] and waits == [1.0]


class _Unseen:
    """The first whole-cluster read does not show ``node``'s drain yet (it landed just after)."""

    def __init__(self, slurm, node):
        self.slurm, self.node, self.reads = slurm, node, 0

    def __getattr__(self, name):
        return getattr(self.slurm, name)

    def node_states(self, names=None):
        answer = self.slurm.node_states(names)
        if names is None:
            self.reads += 1
            if self.reads == 1:
                import dataclasses

                answer = [dataclasses.replace(n, state="IDLE", reason="", reason_time=None)
                          if n.name == self.node else n for n in answer]
        return answer


def test_a_node_counts_only_drains_stamped_no_later_than_its_own():
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
    assert not check.keep and check.retry_in is None              # the cap is full: no retry
    assert "1 of its 10 nodes were drained by slurmkit before this one and 0 at the same time" in check.note
    # the same second: a tie; the first of the tie by name may retry, the others may not
    tie = healthy + [node("b", t), node("me", t), node("x", t)]
    assert ownership.cap_after_drain("me", tie, 3).keep
    assert ownership.cap_after_drain("me", tie, 2).retry_in == 1.25          # "me" is 2nd of b, me, x
    assert ownership.cap_after_drain("me", tie, 1).retry_in is None
    assert ownership.cap_after_drain("b", tie, 1).retry_in == 1.0
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

    def check(node):
        done[node] = slurmside.decide_and_apply(Jittered(), report(node, "mount:/shared"), 3, "12%",
                                                sleep=lambda s: time_module.sleep(s / 1000))
    threads = [threading.Thread(target=check, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    kept = drained_by_us(slurm)
    assert len(kept) <= 3, kept
    assert sorted(n for n, a in done.items() if a.done) == kept
    assert all(a.done or "not drained" in a.text or "drain undone" in a.text for a in done.values())
