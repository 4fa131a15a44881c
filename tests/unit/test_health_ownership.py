"""Ownership rules: the drain reason, who owns a drain, when to resume, the drain cap (pure)."""

import pytest

from slurmkit.health import ownership
from slurmkit.health.ownership import CAPPED, DRAIN, NONE, RESUME, UPDATE, decide
from slurmkit.slurm.types import NodeInfo


def node(state="IDLE", reason="", user="", name="n1", partitions=("gpu",)):
    return NodeInfo(name=name, state=state, reason=reason, reason_user=user, partitions=partitions)


def test_the_reason_names_every_failing_check():
    assert ownership.drain_reason(["gpu_count", "xid", "mount:/scratch"]) == "slurmkit: gpu_count, xid, mount:/scratch"
    assert ownership.drain_reason(["a", "b"], clean=1, resume_after=3) == "slurmkit: a, b; clean 1/3"
    assert ownership.parse_reason("slurmkit: a, b; clean 1/3") == (("a", "b"), 1)
    assert ownership.parse_reason("slurmkit: mount:/x") == (("mount:/x",), 0)
    assert ownership.parse_reason("bad dimm, ticket 42") is None


def test_a_reason_never_exceeds_the_cap_and_says_how_many_it_left_out():
    names = ["mount:/very/long/path/number/%03d" % i for i in range(40)]
    reason = ownership.drain_reason(names, clean=2, resume_after=3)
    assert len(reason) <= ownership.REASON_MAX and reason.endswith("more; clean 2/3")
    kept = reason[len("slurmkit: "):reason.index(" +")].split(", ")
    assert reason.split(" +")[1].startswith("%d more" % (40 - len(kept)))
    assert ownership.parse_reason(reason)[1] == 2


def test_a_failing_node_in_service_is_drained():
    d = decide(node("MIXED"), ["xid", "ecc"], 3)
    assert (d.action, d.reason) == (DRAIN, "slurmkit: xid, ecc")
    assert decide(node("IDLE"), [], 3).action == NONE


@pytest.mark.parametrize("state,reason,user", [
    ("IDLE+DRAIN", "bad dimm", "alice"),                 # drained by an admin
    ("DOWN", "Not responding", ""),                        # downed by Slurm
    ("DOWN+DRAIN", "rma ticket 7", "root"),
    ("IDLE+DRAIN", "slurmkit was here, ticket 9", "bob"),  # an admin changed slurmkit's reason
])
@pytest.mark.parametrize("failing", [[], ["xid"]])
def test_someone_elses_node_is_never_touched(state, reason, user, failing):
    d = decide(node(state, reason, user), failing, 1)
    assert d.action == NONE and "left alone" in d.note and reason in d.note


def test_a_down_node_with_slurmkits_reason_is_not_resumed():
    d = decide(node("DOWN*+DRAIN", "slurmkit: xid"), [], 1)
    assert d.action == NONE and "not slurmkit's to resume" in d.note


def test_resume_only_after_n_clean_checks_counted_in_the_reason():
    drained = node("IDLE+DRAIN", "slurmkit: xid")
    first = decide(drained, [], 3)
    assert (first.action, first.reason) == (UPDATE, "slurmkit: xid; clean 1/3")
    second = decide(node("IDLE+DRAIN", first.reason), [], 3)
    assert (second.action, second.reason) == (UPDATE, "slurmkit: xid; clean 2/3")
    third = decide(node("MIXED+DRAIN", second.reason), [], 3)     # draining: jobs still finishing
    assert third.action == RESUME
    # a failure in between starts the count again, and names what fails now
    again = decide(node("IDLE+DRAIN", second.reason), ["ecc"], 3)
    assert (again.action, again.reason) == (UPDATE, "slurmkit: ecc")
    # still failing the same way: nothing to write
    assert decide(node("IDLE+DRAIN", "slurmkit: ecc"), ["ecc"], 3).action == NONE
    assert decide(drained, [], 1).action == RESUME


def test_state_words():
    assert ownership.is_drained("IDLE+DRAIN") and ownership.is_drained("drained") and ownership.is_drained("MIXED+DRAIN")
    assert ownership.is_down("DOWN*+DRAIN") and ownership.is_down("IDLE+FAIL") and not ownership.is_down("IDLE*")
    assert not ownership.is_drained("IDLE") and not ownership.is_drained("ALLOCATED")


@pytest.mark.parametrize("cap,size,limit", [(2, 10, 2), ("2", 10, 2), ("10%", 10, 1), ("10%", 2, 1),
                                            ("25%", 9, 2), ("0%", 9, 0), (0, 9, 0), ("100%", 9, 9)])
def test_cap_limit(cap, size, limit):
    assert ownership.cap_limit(cap, size) == limit


def test_the_cap_counts_what_slurmkit_already_drained():
    nodes = [node("IDLE", name="n%d" % i) for i in range(1, 5)]
    nodes[3] = node("IDLE+DRAIN", "slurmkit: old", name="n4")
    decisions = [decide(nodes[i], ["xid"] * (i + 1), 3) for i in range(3)]
    failing = {"n1": ["a"], "n2": ["a", "b"], "n3": ["a", "b", "c"]}
    out = {d.node: d for d in ownership.apply_cap(decisions, nodes, "50%", failing)}
    # 4 nodes, 50%: 2 may be drained; n4 already is, so only one more: the most broken
    assert out["n3"].action == DRAIN and out["n1"].action == CAPPED and out["n2"].action == CAPPED
    assert "partition gpu has 2 of its 4 nodes drained by slurmkit, its drain_cap (50%) allows 2" == \
        out["n1"].note.replace("not drained: ", "")


def test_the_cap_holds_in_every_partition_of_a_node():
    nodes = [node("IDLE", name="a1", partitions=("gpu", "cpu")), node("IDLE", name="a2", partitions=("cpu",)),
             node("IDLE", name="a3", partitions=("gpu",)), node("IDLE", name="a4", partitions=("gpu", "cpu"))]
    decisions = [decide(nodes[1], ["x", "y"], 3), decide(nodes[0], ["x"], 3)]
    out = ownership.apply_cap(decisions, nodes, 1, {"a2": ["x", "y"], "a1": ["x"]})
    assert [d.action for d in out] == [DRAIN, CAPPED]    # cpu is full after a2, so a1 waits
