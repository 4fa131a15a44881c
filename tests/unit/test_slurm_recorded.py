"""Parsers and argv builders for jobs by id, nodes and their reasons, drain/resume and job control,
against outputs recorded on the dev clusters (tests/unit/data/slurm/, written by record.py there).

alpha has accounting (slurmdbd): its sacct answers.  beta has none.  In each
recording ``jobs`` names the roles of the jobs it shows: ``ok`` (COMPLETED),
``failed`` (exit 3), ``cancelled`` (before it started), ``running``, ``held``.
"""

import json
from datetime import datetime
from pathlib import Path

import pytest

from slurmkit.slurm import commands, parsers

DATA = Path(__file__).parent / "data" / "slurm"


def recorded(cluster, what):
    return json.loads((DATA / ("%s-%s-22.05.json" % (cluster, what))).read_text())


# ------------------------------------------------------------------ argv builders

def test_recordings_were_made_with_todays_argv():
    # A recording answers only the argv it was made with: if a builder
    # changes, record.py must be run again.
    r = recorded("alpha", "drain")
    nodes = [r["nodes"]["draining"], r["nodes"]["drained"]]
    assert r["argv"] == commands.update_nodes(nodes, "DRAIN", "slurmkit: recorded drain")
    for cluster in ("alpha", "beta"):
        r = recorded(cluster, "sacct")
        ids = [r["jobs"][k] for k in ("ok", "failed", "cancelled", "running", "held")]
        assert r["argv"] == commands.sacct(ids + ["999999"])
        assert recorded(cluster, "squeue-parsable")["argv"] == commands.squeue_parsable(ids + ["999999"])
        assert recorded(cluster, "squeue-json")["argv"] == commands.squeue_json(ids + ["999999"])
        assert recorded(cluster, "config")["argv"] == commands.show_config()


def test_update_nodes_keeps_the_reason_one_argument():
    assert commands.update_nodes(["n1", "n2"], "DRAIN", "slurmkit: gpu count 7 < 8") == \
        ["scontrol", "update", "NodeName=n1,n2", "State=DRAIN", "Reason=slurmkit: gpu count 7 < 8"]
    assert commands.update_nodes(["n1"], "RESUME") == ["scontrol", "update", "NodeName=n1", "State=RESUME"]


def test_job_control_takes_one_comma_list():
    assert commands.requeue(["1", "22"]) == ["scontrol", "requeue", "1,22"]
    assert commands.hold(["3"]) == ["scontrol", "hold", "3"]
    assert commands.release(["3", "4"]) == ["scontrol", "release", "3,4"]


@pytest.mark.parametrize("build", [commands.requeue, commands.hold, commands.release,
                                   lambda ids: commands.update_nodes(ids, "DRAIN", "x")])
def test_empty_lists_never_become_a_command(build):
    with pytest.raises(ValueError):
        build([])


def test_show_nodes_names_one_hostlist():
    assert commands.show_nodes() == ["scontrol", "--oneliner", "--details", "show", "node"]
    assert commands.show_nodes(["an1", "an3"])[-1] == "an1,an3"


# ------------------------------------------------------------------ nodes and reasons

@pytest.mark.parametrize("cluster", ["alpha", "beta"])
def test_drained_down_and_draining_nodes_with_reason_user_and_time(cluster):
    r = recorded(cluster, "nodes-drained")
    role = r["nodes"]
    nodes = {n.name: n for n in parsers.parse_nodes(r["stdout"])}
    draining, drained, down = nodes[role["draining"]], nodes[role["drained"]], nodes[role["down"]]
    # the draining node still runs its job (MIXED) but takes nothing new (DRAIN)
    assert draining.state == "MIXED+DRAIN"
    assert (draining.reason, draining.reason_user) == ("slurmkit: recorded drain", "root")
    assert drained.state == "IDLE+DRAIN" and drained.reason == "slurmkit: recorded drain"
    assert down.state == "DOWN" and down.reason == "recorded down by an admin" and down.reason_user == "root"
    # scontrol's [user@time] suffix: the drain was set during the recording (all three within seconds)
    assert abs((drained.reason_time - down.reason_time).total_seconds()) < 60
    assert drained.reason_time.year >= 2024
    assert not any(n.usable for n in (draining, drained, down))
    for name in filter(None, role["untouched"].split(",")):
        assert nodes[name].usable and (nodes[name].reason, nodes[name].reason_user) == ("", "")
        assert nodes[name].reason_time is None


def test_one_node_by_name():
    r = recorded("beta", "node-one")
    name = r["argv"][-1]                       # the idle node record.py drained
    nodes = parsers.parse_nodes(r["stdout"])
    assert [(n.name, n.state, n.reason) for n in nodes] == [(name, "IDLE+DRAIN", "slurmkit: recorded drain")]
    assert nodes[0].gres == {"gpu:a100": 4} and nodes[0].partitions == ("gpu", "urgent")


@pytest.mark.parametrize("text,reason,user,when", [
    ("bad gpu [root@2026-01-02T03:04:05]", "bad gpu", "root", datetime(2026, 1, 2, 3, 4, 5)),
    ("Not responding [slurm@2026-01-02T03:04:05]", "Not responding", "slurm", datetime(2026, 1, 2, 3, 4, 5)),
    ("a [bracket] inside [alice@2026-01-02T03:04:05]", "a [bracket] inside", "alice", datetime(2026, 1, 2, 3, 4, 5)),
    ("no suffix at all", "no suffix at all", "", None),
])
def test_reason_suffix(text, reason, user, when):
    node = parsers.parse_nodes("NodeName=n1 State=IDLE+DRAIN Reason=%s" % text)[0]
    assert (node.reason, node.reason_user, node.reason_time) == (reason, user, when)


# ------------------------------------------------------------------ jobs: squeue and sacct agree

def _by_role(recording, jobs):
    by_id = {j.job_id: j for j in jobs}
    return {role: by_id.get(job_id) for role, job_id in recording["jobs"].items()}


@pytest.mark.parametrize("cluster", ["alpha", "beta"])
def test_squeue_keeps_finished_jobs_within_min_job_age(cluster):
    r = recorded(cluster, "squeue-json")
    jobs = _by_role(r, parsers.parse_squeue_json(r["stdout"]))
    assert {role: j.state for role, j in jobs.items()} == {
        "ok": "COMPLETED", "failed": "FAILED", "cancelled": "CANCELLED", "running": "RUNNING", "held": "PENDING"}
    assert jobs["held"].reason == "JobHeldUser" and jobs["failed"].reason == "NonZeroExitCode"
    assert jobs["ok"].comment == "slurmkit:rec-ok" and jobs["ok"].name == "rec-ok"
    assert jobs["cancelled"].nodelist == "" and jobs["ok"].nodelist
    # 22.05's squeue --json ignores --jobs: the whole queue comes back, the backend filters
    assert len(parsers.parse_squeue_json(r["stdout"])) > 5


@pytest.mark.parametrize("cluster", ["alpha", "beta"])
def test_squeue_json_and_parsable_agree(cluster):
    as_json = _by_role(recorded(cluster, "squeue-json"), parsers.parse_squeue_json(
        recorded(cluster, "squeue-json")["stdout"]))
    r = recorded(cluster, "squeue-parsable")
    parsable = _by_role(r, parsers.parse_squeue_parsable(r["stdout"]))
    for role in ("ok", "failed", "cancelled", "running", "held"):
        a, b = as_json[role], parsable[role]
        assert (a.job_id, a.name, a.state, a.partition, a.nodelist, a.user, a.comment) == \
               (b.job_id, b.name, b.state, b.partition, b.nodelist, b.user, b.comment), role


def test_sacct_maps_into_the_fields_squeue_fills():
    r = recorded("alpha", "sacct")
    jobs = _by_role(r, parsers.parse_sacct(r["stdout"]))
    squeue = _by_role(recorded("alpha", "squeue-json"), parsers.parse_squeue_json(
        recorded("alpha", "squeue-json")["stdout"]))
    assert jobs["cancelled"].state == "CANCELLED"            # not "CANCELLED by 0"
    assert jobs["cancelled"].nodelist == ""                   # not "None assigned"
    assert jobs["held"].start_time is None                    # "Unknown"
    for role in ("ok", "failed", "cancelled", "running", "held"):
        a, b = jobs[role], squeue[role]
        assert (a.job_id, a.name, a.state, a.partition, a.node_count, a.nodelist, a.time_limit, a.user,
                a.exit_code, a.signal) == \
               (b.job_id, b.name, b.state, b.partition, b.node_count, b.nodelist, b.time_limit, b.user,
                b.exit_code, b.signal), role
    assert jobs["failed"].exit_code == 3 and jobs["ok"].exit_code == 0
    assert "999999" not in {j.job_id for j in parsers.parse_sacct(r["stdout"])}


def test_sacct_without_accounting_says_so():
    r = recorded("beta", "sacct")
    assert r["returncode"] == 1 and "accounting storage is disabled" in r["stderr"]


def test_config_tells_where_accounting_is():
    alpha = parsers.parse_config(recorded("alpha", "config")["stdout"])
    beta = parsers.parse_config(recorded("beta", "config")["stdout"])
    assert alpha["AccountingStorageType"] == "accounting_storage/slurmdbd"
    assert beta["AccountingStorageType"] == "accounting_storage/none"
    assert alpha["MinJobAge"] == beta["MinJobAge"] == "3600 sec"
