"""The parsers on what every tested Slurm release printed: 22.05 (Debian 12), 24.11 (Debian 13), 26.05 (unstable).

Every recording comes from the real daemons of that release on the local
clusters, inside the release's Debian root (scripts/releases/record.sh runs
the recorders named in each file's "recorded"):

- tests/unit/data/releases/RELEASE/*.json    (tests/unit/data/releases/record.py)
- tests/unit/data/slurm/CLUSTER-WHAT-RELEASE.json   (tests/unit/data/slurm/record.py)
- tests/unit/data/exit_codes/RELEASE/         (tests/unit/data/exit_codes/record.py)

The same facts are asserted on each release: where a release prints
something else, the parser must still read the same meaning out of it.
"""

import json
from pathlib import Path

import pytest

from slurmkit.errors import SlurmCommandError
from slurmkit.federation import survey
from slurmkit.slurm import commands, hostlist, parsers

DATA = Path(__file__).parent / "data"
RELEASES = ["22.05", "24.11", "26.05"]
# Recorded on the releases in Debian roots; 22.05's slurm/ and exit_codes/ data
# predate them and are tested in test_slurm_recorded.py and test_exit_codes.py.
NEWER = ["24.11", "26.05"]


def extra(release, name):
    return json.loads((DATA / "releases" / release / (name + ".json")).read_text())


def recorded(release, cluster, what):
    return json.loads((DATA / "slurm" / ("%s-%s-%s.json" % (cluster, what, release))).read_text())


def test_every_release_is_recorded_from_its_own_daemons():
    for release in RELEASES:
        version = extra(release, "version")
        assert version["stdout"].split()[1].startswith(release + "."), version["stdout"]
        assert "Slurm %s." % release in version["recorded"]
    for release in NEWER:
        assert recorded(release, "alpha", "config")["recorded"].endswith("by tests/unit/data/slurm/record.py")
        assert json.loads((DATA / "exit_codes" / release / "jobs.json").read_text())["slurm"].startswith(release)


# ------------------------------------------------------------------ topology

@pytest.mark.parametrize("release", RELEASES)
def test_topology_is_the_same_tree_on_every_release(release):
    alpha = parsers.parse_topology(extra(release, "topology-alpha")["stdout"])
    assert [(s.name, s.level, s.nodes) for s in alpha.switches] == [
        ("leaf1", 0, "an[1-2]"), ("leaf2", 0, "an[3-4]"), ("spine", 1, "an[1-4]")]
    assert [s.name for s in alpha.leaves] == ["leaf1", "leaf2"]
    beta = parsers.parse_topology(extra(release, "topology-beta")["stdout"])
    assert {s.name: hostlist.expand(s.nodes) for s in beta.leaves} == {"leaf1": ["bn1", "bn2"], "leaf2": ["bn3"]}
    gamma = parsers.parse_topology(extra(release, "topology-gamma")["stdout"])
    assert [(s.name, s.level, s.nodes, s.switches) for s in gamma.switches] == [("leaf1", 0, "gn[1-2]", "")]


@pytest.mark.parametrize("text", [
    (DATA / "topology_22.05.txt").read_text(),                    # Switches=leaf[1-2]: a hostlist
    extra("24.11", "topology-alpha")["stdout"],                   # Switches=leaf1,leaf2: as slurm.conf's topology.conf names them
])
def test_a_spine_lists_its_leaves_in_either_spelling(text):
    spine = [s for s in parsers.parse_topology(text).switches if s.level == 1][0]
    assert hostlist.expand(spine.switches) == ["leaf1", "leaf2"]


# ------------------------------------------------------------------ start estimates

@pytest.mark.parametrize("release", RELEASES)
def test_test_only_estimate(release):
    r = extra(release, "test-only-alpha")
    assert r["argv"] == commands.sbatch(test_only=True) and r["returncode"] == 0
    est = parsers.parse_test_only(r["stderr"])
    assert est.partition == "gpu" and est.cpus == 2 and len(hostlist.expand(est.nodes)) == 2
    assert est.start.year >= 2024


def test_26_05_puts_a_word_between_the_time_and_using():
    # What made the old pattern miss 26.05's estimate (the whole federation
    # then ranked a 26.05 cluster as refused).
    stderr = extra("26.05", "test-only-alpha")["stderr"]
    assert " a using " in stderr
    assert parsers.parse_test_only(stderr).start.isoformat() in stderr


@pytest.mark.parametrize("release", RELEASES)
def test_test_only_refusal_is_one_error_line(release):
    r = extra(release, "test-only-refused")
    assert r["returncode"] != 0
    with pytest.raises(SlurmCommandError) as err:
        parsers.parse_test_only(r["stderr"])
    assert "Requested node configuration is not available" in str(err.value)


# ------------------------------------------------------------------ nodes, partitions, config

@pytest.mark.parametrize("release", RELEASES)
def test_nodes_with_a_job_running(release):
    busy = set(hostlist.expand(parsers.parse_key_values(extra(release, "job-alpha-running")["stdout"])["NodeList"]))
    nodes = {n.name: n for n in parsers.parse_nodes(extra(release, "nodes-alpha-busy")["stdout"])}
    assert sorted(nodes) == ["an1", "an2", "an3", "an4"] and len(busy) == 2
    for name, node in nodes.items():
        assert node.gres == {"gpu:h100": 8} and node.partitions == ("gpu", "cpu")
        assert node.addr.startswith("127.0.1.")
        if name in busy:
            assert node.state == "MIXED" and node.gres_used == {"gpu:h100": 2} and node.cpus_alloc >= 1
        else:
            assert node.state == "IDLE" and node.gres_used == {"gpu:h100": 0} and node.usable
    idle = parsers.parse_nodes(extra(release, "nodes-alpha-idle")["stdout"])
    assert {n.state for n in idle} == {"IDLE"}


@pytest.mark.parametrize("release", RELEASES)
def test_partitions_and_config(release):
    parts = parsers.parse_partitions(extra(release, "partitions-beta")["stdout"])
    assert sorted(parts) == ["gpu", "urgent"]
    assert (parts["gpu"]["PriorityTier"], parts["urgent"]["PriorityTier"]) == ("1", "2")
    assert parts["gpu"]["MaxTime"] == "12:00:00" and parts["gpu"]["Nodes"] == "bn[1-3]"
    alpha = parsers.parse_config(extra(release, "config-alpha")["stdout"])
    gamma = parsers.parse_config(extra(release, "config-gamma")["stdout"])
    assert parsers.scheduler_parameter(alpha, "max_switch_wait") == "120"
    assert parsers.scheduler_parameter(gamma, "max_switch_wait") is None     # Slurm's default of 300 s
    assert alpha["AccountingStorageType"] == "accounting_storage/slurmdbd"
    # No accounting: 22.05 says accounting_storage/none, 24.11 and later (null).
    assert gamma["AccountingStorageType"] == ("accounting_storage/none" if release == "22.05" else "(null)")
    assert parsers.accounting_enabled(alpha) and not parsers.accounting_enabled(gamma)
    assert alpha["TopologyPlugin"] == "topology/tree" and alpha["MinJobAge"] == "3600 sec"


# ------------------------------------------------------------------ jobs

@pytest.mark.parametrize("release", RELEASES)
def test_a_running_job_as_scontrol_and_squeue_show_it(release):
    kv = parsers.parse_key_values(extra(release, "job-gamma-npu")["stdout"])
    assert kv["JobState"] == "RUNNING" and kv["ExitCode"] == "0:0"
    # The gres a job asked for: 22.05 spells it gres:npu:8, 24.11 and later gres/npu:8.
    assert kv["TresPerNode"] == ("gres:npu:8" if release == "22.05" else "gres/npu:8")
    switches = parsers.parse_key_values(extra(release, "job-alpha-running")["stdout"])["Switches"]
    assert switches == "1@00:01:00"
    r = extra(release, "squeue-json-gamma")
    (job,) = [j for j in parsers.parse_squeue_json(r["stdout"]) if j.job_id == r["jobs"]["npu"]]
    assert (job.state, job.partition, job.nodelist, job.name) == ("RUNNING", "npu", "gn1", "rec-npu")
    assert (job.exit_code, job.signal, job.cluster, job.comment) == (None, None, "gamma", "slurmkit:rec-npu")
    assert job.time_limit == "00:10:00" and job.start_time is not None


RECORDED_ONE = [r for r in RELEASES if (DATA / "releases" / r / "squeue-one-beta.json").exists()]


def test_one_job_by_id_is_recorded_on_every_release():
    assert RECORDED_ONE == RELEASES


@pytest.mark.parametrize("release", RECORDED_ONE)
def test_one_job_by_id_reads_as_the_json_list_reads_it(release):
    """commands.squeue_format (one cheap RPC) against squeue --json for the same jobs, recorded right after."""
    one = extra(release, "squeue-one-beta")
    rows = parsers.parse_squeue_format(one["stdout"])
    assert [j.job_id for j in rows] == [one["jobs"][k] for k in ("failed", "signalled", "cancelled", "pending",
                                                                  "relative")]
    listed = {j.job_id: j for j in parsers.parse_squeue_json(extra(release, "squeue-json-one-beta")["stdout"])}
    for job in rows:
        assert job == listed[job.job_id], (release, job, listed[job.job_id])
    by_role = _by_role(one, rows)
    assert (by_role["failed"].state, by_role["failed"].exit_code, by_role["failed"].signal) == ("FAILED", 3, None)
    assert (by_role["signalled"].exit_code, by_role["signalled"].signal) == (None, 9)
    assert by_role["cancelled"].state == "CANCELLED" and by_role["cancelled"].exit_code is None
    assert by_role["pending"].state == "PENDING" and by_role["pending"].end_time is None
    assert by_role["failed"].name == "rec failed" and by_role["failed"].comment == "slurmkit:rec one|two"
    assert by_role["failed"].stdout == "/tmp/rec-rec failed-%s.out" % one["jobs"]["failed"]
    assert by_role["failed"].time_limit == "00:05:00" and by_role["failed"].end_time is not None
    assert by_role["relative"].stdout == "/tmp/rec-rec-relative-%s.out" % one["jobs"]["relative"]


def _by_role(recording, jobs):
    by_id = {j.job_id: j for j in jobs}
    return {role: by_id.get(job_id) for role, job_id in recording["jobs"].items()}


@pytest.mark.parametrize("release", NEWER)
@pytest.mark.parametrize("cluster", ["alpha", "beta"])
def test_squeue_json_and_parsable_agree(release, cluster):
    r = recorded(release, cluster, "squeue-json")
    as_json = _by_role(r, parsers.parse_squeue_json(r["stdout"]))
    assert {role: j.state for role, j in as_json.items()} == {
        "ok": "COMPLETED", "failed": "FAILED", "cancelled": "CANCELLED", "running": "RUNNING", "held": "PENDING"}
    assert as_json["held"].reason == "JobHeldUser" and as_json["failed"].reason == "NonZeroExitCode"
    assert (as_json["failed"].exit_code, as_json["ok"].exit_code, as_json["cancelled"].exit_code) == (3, 0, None)
    assert as_json["cancelled"].nodelist == "" and as_json["ok"].nodelist
    p = recorded(release, cluster, "squeue-parsable")
    parsable = _by_role(p, parsers.parse_squeue_parsable(p["stdout"]))
    for role in ("ok", "failed", "cancelled", "running", "held"):
        a, b = as_json[role], parsable[role]
        assert (a.job_id, a.name, a.state, a.partition, a.nodelist, a.user, a.comment) == \
               (b.job_id, b.name, b.state, b.partition, b.nodelist, b.user, b.comment), role


@pytest.mark.parametrize("release", NEWER)
def test_squeue_json_answers_only_the_jobs_asked_for(release):
    # 22.05's squeue --json ignored --jobs (the whole queue came back);
    # the newer releases filter.  The backend filters either way.
    r = recorded(release, "alpha", "squeue-json")
    assert {j.job_id for j in parsers.parse_squeue_json(r["stdout"])} == set(r["jobs"].values())


@pytest.mark.parametrize("release", NEWER)
def test_a_job_still_completing_is_completing_as_on_22_05(release):
    # after scontrol requeue: ["PENDING", "COMPLETING"]; 22.05, %T and pyslurm say COMPLETING
    r = recorded(release, "alpha", "squeue-json-after")
    states = {j["job_id"]: j["job_state"] for j in json.loads(r["stdout"])["jobs"]}
    parsed = {int(j.job_id): j.state for j in parsers.parse_squeue_json(r["stdout"])}
    assert ["PENDING", "COMPLETING"] in states.values() and ["PENDING"] in states.values()
    assert all(parsed[i] == ("COMPLETING" if "COMPLETING" in s else s[0]) for i, s in states.items())


@pytest.mark.parametrize("release", NEWER)
def test_sacct_maps_into_the_fields_squeue_fills(release):
    r = recorded(release, "alpha", "sacct")
    assert r["argv"][0] == "sacct" and r["returncode"] == 0
    jobs = _by_role(r, parsers.parse_sacct(r["stdout"]))
    squeue = _by_role(recorded(release, "alpha", "squeue-json"),
                      parsers.parse_squeue_json(recorded(release, "alpha", "squeue-json")["stdout"]))
    assert jobs["cancelled"].state == "CANCELLED" and jobs["cancelled"].nodelist == ""
    assert jobs["held"].start_time is None
    for role in ("ok", "failed", "cancelled", "running", "held"):
        a, b = jobs[role], squeue[role]
        assert (a.job_id, a.name, a.state, a.partition, a.node_count, a.nodelist, a.time_limit, a.user,
                a.exit_code, a.signal) == \
               (b.job_id, b.name, b.state, b.partition, b.node_count, b.nodelist, b.time_limit, b.user,
                b.exit_code, b.signal), role
    beta = recorded(release, "beta", "sacct")
    assert beta["returncode"] == 1 and "accounting storage is disabled" in beta["stderr"]


@pytest.mark.parametrize("release", NEWER)
def test_nodes_drained_and_down_with_reasons(release):
    r = recorded(release, "beta", "nodes-drained")
    role = r["nodes"]
    nodes = {n.name: n for n in parsers.parse_nodes(r["stdout"])}
    assert nodes[role["draining"]].state == "MIXED+DRAIN"
    assert nodes[role["drained"]].state == "IDLE+DRAIN"
    assert (nodes[role["drained"]].reason, nodes[role["drained"]].reason_user) == ("slurmkit: recorded drain", "root")
    assert nodes[role["down"]].state == "DOWN" and nodes[role["down"]].reason == "recorded down by an admin"
    assert not any(nodes[role[k]].usable for k in ("draining", "drained", "down"))


@pytest.mark.parametrize("release", RELEASES)
def test_a_resumed_node_has_no_reason_on_any_release(release):
    # 24.11 keeps "rec: downed [root@...]" on the IDLE node of beta (no accounting): stale, not a drain
    r = extra(release, "nodes-beta-resumed")
    (node,) = parsers.parse_nodes(r["stdout"])
    assert (node.name, node.state, node.usable) == ("bn3", "IDLE", True)
    assert (node.reason, node.reason_user, node.reason_time) == ("", "", None)
    assert ("Reason=rec: downed" in r["stdout"]) == (release == "24.11")


@pytest.mark.parametrize("release", RELEASES)
def test_resuming_a_node_in_service_is_refused_on_every_release_and_slurmkit_accepts_it(release):
    from slurmkit.testing import FakeSlurm

    again = extra(release, "resume-beta-again")
    assert again["returncode"] == 1 and "Invalid node state" in again["stderr"]
    slurm = FakeSlurm("beta", nodes=["bn1", "bn2", "bn3"])
    slurm.replay(again)
    slurm.replay(extra(release, "nodes-beta-resumed"))
    slurm.resume(["bn3"])                                   # no error: bn3 is in service
    assert slurm.commands[-2:] == [tuple(again["argv"]), tuple(commands.show_nodes(["bn3"]))]


@pytest.mark.parametrize("release", NEWER)
def test_job_control_errors_say_what_is_wrong(release):
    assert "Invalid job id" in recorded(release, "alpha", "hold-unknown")["stderr"]
    assert "Invalid node name" in recorded(release, "alpha", "drain-unknown")["stderr"]
    assert recorded(release, "alpha", "squeue-unknown")["returncode"] == 1
    for what in ("release", "hold", "requeue", "resume"):
        assert recorded(release, "alpha", what)["returncode"] == 0, what


# ------------------------------------------------------------------ how jobs end

def _exit_data(release):
    base = DATA / "exit_codes" / release
    return base, json.loads((base / "jobs.json").read_text())["jobs"]


@pytest.mark.parametrize("release", NEWER)
def test_exit_codes_from_every_source(release):
    base, jobs = _exit_data(release)
    want = {name: (j["exit_code"], j["signal"]) for name, j in jobs.items()}
    ids = {j["id"]: name for name, j in jobs.items()}
    squeue = {ids[i.job_id]: (i.exit_code, i.signal)
              for i in parsers.parse_squeue_json((base / "squeue.json").read_text()) if i.job_id in ids}
    assert squeue == want
    for line in (base / "scontrol.txt").read_text().splitlines():
        kv = parsers.parse_key_values(line)
        name = ids[kv["JobId"]]
        ran = kv["NodeList"] not in ("", "(null)")
        assert parsers.ended_exit(kv["JobState"], ran, kv["ExitCode"]) == want[name], name
    argv_line, text = (base / "sacct.txt").read_text().split("\n", 1)
    assert json.loads(argv_line) == commands.sacct([jobs[n]["id"] for n in jobs])
    sacct = {ids[i.job_id]: (i.exit_code, i.signal) for i in parsers.parse_sacct(text)}
    for name, (code, signal) in want.items():
        if code is not None and code >= 128 and release < "26.05":
            # 22.05 and 24.11's sacct print an exit status of 128 or more 128
            # short (src/sacct/print.c); 26.05's prints it whole.
            code -= 128
        assert sacct[name] == (code, signal), name


@pytest.mark.parametrize("release", NEWER)
def test_newer_squeue_json_reports_the_end_as_an_object(release):
    # 22.05 gave the raw wait status (768 for exit 3); 23.02 and later an object
    # with status, return_code and signal: decode_exit reads both.  A non-zero
    # exit is status ERROR there (EXITED is kept for 0).
    base, jobs = _exit_data(release)
    raw = {str(j["job_id"]): j["exit_code"] for j in json.loads((base / "squeue.json").read_text())["jobs"]}
    exit3, term, ok = raw[jobs["exit3"]["id"]], raw[jobs["self_term"]["id"]], raw[jobs["ok"]["id"]]
    assert isinstance(exit3, dict) and exit3["status"] == ["ERROR"]
    assert parsers.decode_exit(exit3) == (3, None)
    assert ok["status"] == ["SUCCESS"] and parsers.decode_exit(ok) == (0, None)
    assert isinstance(term, dict) and "SIGNALED" in term["status"]
    assert parsers.decode_exit(term) == (None, 15)


# ------------------------------------------------------------------ the federation probe

@pytest.mark.parametrize("release", RELEASES)
def test_probe_of_a_busy_cluster(release):
    r = extra(release, "probe-alpha")
    assert r["argv"] == survey.probe_argv()
    status = survey.parse_probe(r["stdout"], r["stderr"], r["returncode"], "alpha")
    assert status.reachable and status.version.startswith(release + ".")
    assert status.partitions == ["gpu", "cpu"] and status.nodes_total == 4 and status.nodes_idle == 2
    assert status.accelerators == {"gpu:h100": {"total": 32, "idle": 28}}


class _Replay:
    """A runner answering each argv with what the release printed for it."""

    def __init__(self, *recordings):
        self.answers = {tuple(r["argv"]): r for r in recordings}
        self.calls = []

    def run(self, argv, stdin=None, timeout=None):
        from slurmkit.slurm.runner import CommandResult

        self.calls.append(tuple(argv))
        r = self.answers[tuple(argv)]
        return CommandResult(tuple(argv), r["returncode"], r["stdout"], r["stderr"])


@pytest.mark.parametrize("release", RELEASES)
def test_the_backend_asks_sacct_only_where_accounting_exists(release):
    # 24.11's "(null)" once read as an accounting storage: every poll of a job
    # squeue had forgotten then ran sacct, which answered "accounting storage
    # is disabled".
    from slurmkit.slurm.backend import CommandBackend

    for cluster, has in (("alpha", True), ("gamma", False)):
        runner = _Replay(extra(release, "config-" + cluster))
        assert CommandBackend(runner, cluster).has_accounting() is has, cluster
        assert runner.calls == [tuple(commands.show_config())]


def test_pyslurm_24_11_exit_status_comes_whole_from_scontrol():
    # pyslurm 24.11's Job API takes 128 off (a script that exited 143 reads 15),
    # and its deprecated job().find_id raises TypeError for every job: the backend
    # then asks scontrol, whose ExitCode is whole (recorded on 24.11).
    from types import SimpleNamespace

    from slurmkit.slurm import pyslurm_backend as pb
    from slurmkit.slurm import pyslurm_rules as rules
    from slurmkit.slurm.backend import CommandBackend
    from slurmkit.slurm.runner import CommandResult
    from slurmkit.slurm.types import JobInfo

    base, jobs = _exit_data("24.11")
    lines = {parsers.parse_key_values(ln)["JobId"]: ln for ln in (base / "scontrol.txt").read_text().splitlines()}
    job_id = jobs["child_term"]["id"]

    class Runner:
        calls = []

        def run(self, argv, stdin=None, timeout=None):
            self.calls.append(list(argv))
            return CommandResult(tuple(argv), 0, lines[argv[-1]] + "\n", "")

    def broken_find_id(_id):
        raise TypeError("an integer is required")

    backend = object.__new__(pb.PyslurmBackend)
    CommandBackend.__init__(backend, Runner(), "alpha")
    backend._pyslurm = SimpleNamespace(job=lambda: SimpleNamespace(find_id=broken_find_id))
    cut = JobInfo(job_id=job_id, name="x", state="FAILED", partition="cpu", node_count=1, nodelist="an1",
                  start_time=None, time_limit="00:02:00", user="root", reason="", comment="",
                  exit_code=15, signal=None)
    assert rules.exit_is_ambiguous(cut)
    exact = backend._exact_exit(cut)
    assert (exact.exit_code, exact.signal) == (143, None)
    assert Runner.calls == [commands.show_job(job_id)]


@pytest.mark.parametrize("release", NEWER)
def test_a_signalled_job_reason_is_whole_as_scontrol_prints_it(release):
    # squeue --json of 24.11+ gives "RaisedSignal" with the signal in
    # state_description; scontrol (and pyslurm) print "RaisedSignal:9(Killed)".
    base, jobs = _exit_data(release)
    ids = {j["id"]: name for name, j in jobs.items()}
    by_json = {ids[i.job_id]: i.reason for i in parsers.parse_squeue_json((base / "squeue.json").read_text())
               if i.job_id in ids}
    by_scontrol = {ids[kv["JobId"]]: kv["Reason"] for kv in map(parsers.parse_key_values,
                                                                (base / "scontrol.txt").read_text().splitlines())}
    assert by_json["self_kill"] == "RaisedSignal:9(Killed)" and by_json["self_term"] == "RaisedSignal:15(Terminated)"
    assert by_json["exit3"] == "NonZeroExitCode"
    for name in ("self_kill", "self_term", "exit3", "exit137"):
        assert by_json[name] == by_scontrol[name], name
