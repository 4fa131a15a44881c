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
