"""slurmkit.federation.survey without a cluster: the probe script, its parser, probing with fake backends, the CLI.

Recorded outputs (tests/unit/data/probe/*.json) are what ``probe_argv()``
printed on the local dev clusters (Slurm 22.05.8): each cluster idle over
SSH, alpha with one running 2-GPU job and one pending job, and a slurmctld
that does not answer.
"""

import json
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from slurmkit.federation import survey
from slurmkit.cli.cluster_commands import clusters_command, trust_command
from slurmkit.errors import (ConfigError, ConnectTimeoutError, HostKeyError, RemoteError, SlurmUnavailableError,
                             UsageError)
from slurmkit.remote import connect, known_hosts
from slurmkit.session import Session
from slurmkit.site.model import Cluster, Defaults, LoginNode, Partition, Site
from slurmkit.slurm.parsers import parse_nodes
from slurmkit.results import GroupResult
from slurmkit.slurm.backend import SlurmBackend
from slurmkit.slurm.types import JobInfo
from slurmkit.testing import FakeSlurm

from harness import one_error_line, run_main

DATA = Path(__file__).resolve().parent / "data" / "probe"
ROOT = Path(__file__).resolve().parents[2]


def recorded(name):
    return json.loads((DATA / name).read_text())


def parse_recorded(name, cluster=""):
    r = recorded(name)
    return survey.parse_probe(r["stdout"], r["stderr"], r["returncode"], cluster)


@pytest.fixture(autouse=True)
def _not_forced(monkeypatch):
    # reach() must decide by the site, not by the developer's environment.
    monkeypatch.delenv("SLURMKIT_VIA", raising=False)
    monkeypatch.delenv("SLURMKIT_BACKEND", raising=False)


# ------------------------------------------------------------------ the probe command

def test_probe_argv_is_one_constant_shell_command():
    argv = survey.probe_argv()
    assert argv == ["sh", "-c", survey.PROBE_SCRIPT]
    assert survey.probe_argv() == argv   # constant: no user values anywhere
    for command in ("scontrol --version", "scontrol ping", "scontrol --oneliner --details show node",
                    "squeue --noheader --states=PENDING --format=%i"):
        assert command in survey.PROBE_SCRIPT
    assert "show partition" not in survey.PROBE_SCRIPT   # partitions come from the nodes' lists
    assert "| wc -l" in survey.PROBE_SCRIPT


@pytest.mark.parametrize("failing,ran", [
    ("ping", ["scontrol --version", "scontrol ping"]),
    ("show", ["scontrol --version", "scontrol ping", "scontrol --oneliner --details show node"]),
    ("", ["scontrol --version", "scontrol ping", "scontrol --oneliner --details show node",
          "squeue --noheader --states=PENDING --format=%i"]),
], ids=["slurmctld down", "nodes refused", "all answer"])
def test_the_probe_skips_every_rpc_command_once_one_fails(tmp_path, failing, ran):
    # Each RPC command retries for about MessageTimeout (10 s) against a slurmctld that is down:
    # the real script, in a real shell, with stand-ins that record what ran.
    import subprocess

    log = tmp_path / "ran.log"
    for tool in ("scontrol", "squeue"):
        (tmp_path / tool).write_text('#!/bin/sh\necho "%s $*" >>%s\ncase " $* " in *" %s "*) exit 1;; esac\n'
                                     'case "$1" in --version) echo "slurm 22.05.8";; esac\nexit 0\n'
                                     % (tool, log, failing or "nothing-fails"))
        (tmp_path / tool).chmod(0o755)
    proc = subprocess.run(survey.probe_argv(), capture_output=True, text=True, timeout=30,
                          env={"PATH": "%s:/usr/bin:/bin" % tmp_path})
    assert proc.returncode == 0, proc.stderr
    assert log.read_text().splitlines() == ran


# ------------------------------------------------------------------ parse_probe on recorded output

@pytest.mark.parametrize("name,partitions,nodes,accel", [
    ("alpha", ["gpu", "cpu"], 4, {"gpu:h100": 32}),
    ("beta", ["gpu"], 3, {"gpu:a100": 12}),
    ("gamma", ["npu"], 2, {"npu:ascend910b": 16}),
])
def test_recorded_idle_clusters(name, partitions, nodes, accel):
    status = parse_recorded("%s-22.05.json" % name, name)
    assert status.reachable and status.reason == ""
    assert status.name == name and status.version == "22.05.8"
    assert status.partitions == partitions
    assert (status.nodes_total, status.nodes_idle) == (nodes, nodes)
    assert {k: v["total"] for k, v in status.accelerators.items()} == accel
    assert all(v["idle"] == v["total"] for v in status.accelerators.values())
    assert status.pending_jobs == 0


def test_recorded_busy_cluster():
    # one job with 2 GPUs and 1 CPU on an1, one job pending on --begin
    status = parse_recorded("alpha-busy-22.05.json", "alpha")
    assert status.reachable
    assert (status.nodes_idle, status.nodes_total) == (3, 4)
    assert status.accelerators == {"gpu:h100": {"total": 32, "idle": 30}}
    assert status.pending_jobs == 1


def test_recorded_controller_down():
    status = parse_recorded("ctld-down-22.05.json", "alpha")
    assert not status.reachable
    assert status.reason == ("slurmctld of cluster alpha does not answer: scontrol ping: "
                             "Slurmctld(primary) at 127.0.1.1 is DOWN")
    assert status.version == "22.05.8"          # scontrol --version needs no controller
    assert (status.nodes_total, status.partitions, status.accelerators) == (0, [], {})


def test_output_cut_off_mid_section_is_unreachable():
    r = recorded("alpha-22.05.json")
    cut = r["stdout"][:r["stdout"].index("end nodes")]
    status = survey.parse_probe(cut, "", -1, "alpha")
    assert not status.reachable and status.reason.startswith("scontrol show node did not finish on cluster alpha")


def test_shell_that_never_ran_the_script():
    status = survey.parse_probe("", "bash: sh: command not found\n", 127, "x")
    assert not status.reachable
    assert status.reason == "the probe command failed on cluster x (exit 127): sh: command not found"


def test_login_shell_chatter_and_missing_final_newline_are_tolerated():
    r = recorded("beta-22.05.json")
    stdout = "Welcome to beta!\n" + r["stdout"].replace("gpu:a100:4(S:0)", "gpu:a100:4")
    # a command whose last line has no newline runs into the end marker
    stdout = stdout.replace("\n" + survey.MARKER + " end partitions 0", survey.MARKER + " end partitions 0")
    status = survey.parse_probe(stdout, r["stderr"], 0, "beta")
    assert status.reachable and status.partitions == ["gpu"] and status.nodes_total == 3


def test_command_not_found_on_the_far_side():
    stdout = "%s begin version\n%s end version 127\n" % (survey.MARKER, survey.MARKER)
    stderr = "%s begin version\nsh: 1: scontrol: not found\n%s end version 127\n" % (survey.MARKER, survey.MARKER)
    status = survey.parse_probe(stdout, stderr, 0, "gamma")
    assert not status.reachable
    assert status.reason.startswith("scontrol: command not found where cluster gamma is reached")


# ------------------------------------------------------------------ idle/total arithmetic

def node(name, state="IDLE", gres="gpu:h100:8", used="gpu:h100:0(IDX:N/A)", cpus=4, alloc=0):
    return ("NodeName=%s CPUAlloc=%d CPUTot=%d Gres=%s GresUsed=%s State=%s Partitions=gpu"
            % (name, alloc, cpus, gres, used, state))


def summarize_lines(*lines, **kw):
    return survey.summarize("c", "22.05.8", parse_nodes("\n".join(lines)), ["gpu"], 0, **kw)


def test_idle_nodes_and_accelerators():
    status = summarize_lines(
        node("n1"),                                                          # idle
        node("n2", "MIXED", used="gpu:h100:3(IDX:0-2)", alloc=3),            # 5 GPUs free
        node("n3", "ALLOCATED", used="gpu:h100:8(IDX:0-7)", alloc=4),        # nothing free
        node("n4", "IDLE+DRAIN"),                                            # free but unusable
        node("n5", "DOWN*+NOT_RESPONDING"),                                  # unusable
        node("n6", "MIXED", used="gpu:h100:0(IDX:N/A)", alloc=1),            # CPU job: GPUs free, node busy
    )
    assert status.nodes_total == 6
    assert status.nodes_idle == 1
    assert status.accelerators == {"gpu:h100": {"total": 48, "idle": 8 + 5 + 0 + 0 + 0 + 8}}


def test_accelerator_kinds_are_kept_apart_and_non_devices_ignored():
    status = summarize_lines(
        node("n1", gres="gpu:h100:4(S:0),gpu:a100:2(S:1),shard:h100:16", used="gpu:h100:1(IDX:0),gpu:a100:0"),
        node("n2", gres="gpu:2", used="gpu:0"),
        node("n3", gres="npu:ascend910b:8", used="npu:ascend910b:8(IDX:0-7)", alloc=4),
        node("n4", gres="(null)", used=""),
    )
    assert status.accelerators == {"gpu:h100": {"total": 4, "idle": 3}, "gpu:a100": {"total": 2, "idle": 2},
                                   "gpu": {"total": 2, "idle": 2}, "npu:ascend910b": {"total": 8, "idle": 0}}
    assert status.nodes_idle == 2       # n1 has a GPU in use, n3 is full


def test_site_gres_names_count_as_accelerators():
    line = node("n1", gres="mlu:370:4", used="mlu:370:1")
    assert summarize_lines(line).accelerators == {}
    status = summarize_lines(line, accelerator_gres=("gpu", "mlu"))
    assert status.accelerators == {"mlu:370": {"total": 4, "idle": 3}}


def test_to_dict_is_plain_json():
    status = parse_recorded("gamma-22.05.json", "gamma")
    data = json.loads(json.dumps(status.to_dict()))
    assert set(data) == {"name", "reachable", "reason", "version", "partitions", "nodes_total", "nodes_idle",
                         "accelerators", "pending_jobs", "rtt_ms", "via"}
    assert data["accelerators"] == {"npu:ascend910b": {"total": 16, "idle": 16}}


# ------------------------------------------------------------------ probe_cluster / probe_all

def make_site(names=("alpha", "beta", "gamma"), login=True, command_timeout=60.0):
    clusters = {}
    for i, name in enumerate(names, 1):
        parts = {"gpu": Partition(name="gpu", accelerator="nvidia", gpu_model="h100", gpus_per_node=8)}
        if name == "gamma":
            parts = {"npu": Partition(name="npu", accelerator="ascend", gpu_model="ascend910b", gres_name="npu",
                                      gpus_per_node=8)}
        lg = LoginNode(host="127.0.%d.2" % i, port=2222, user="root", command_timeout=command_timeout)
        clusters[name] = Cluster(name=name, partitions=parts, login=lg if login else None)
    return Site(name="test", path="/dev/null", clusters=clusters, defaults=Defaults(cluster=names[0]))


def answering(name, recording, delay=0.0, error=None):
    """A FakeSlurm whose runner answers the probe command with a recording (or raises ``error``)."""
    slurm = FakeSlurm(name)
    r = recorded(recording)
    slurm.answer(survey.probe_argv(), r["stdout"], r["stderr"], r["returncode"], delay=delay, error=error)
    return slurm


def session_with(backends, site=None):
    site = site or make_site(tuple(backends))
    return Session(site, backend_factory=lambda cluster: backends[cluster.name])


def test_probe_cluster_measures_and_says_how_it_got_there(monkeypatch):
    monkeypatch.setenv("SLURMKIT_VIA", "ssh")
    beta = answering("beta", "beta-22.05.json")
    class Ticks:
        """A clock the probe reads twice: before the round trip and after it."""
        times = iter([10.0, 10.25])

        def monotonic(self):
            return next(self.times)
    status = survey.probe_cluster(session_with({"beta": beta}), "beta", clock=Ticks())
    assert status.reachable and status.nodes_total == 3
    assert status.rtt_ms == 250.0
    assert status.via == "ssh root@127.0.1.2:2222"                # beta is the first cluster of this site
    assert beta.commands == [tuple(survey.probe_argv())]          # one command, one round trip
    assert beta.timeouts == [15.0]                                # min(command_timeout 60, 15)


def test_probe_timeout_follows_a_shorter_command_timeout():
    site = make_site(("beta",), command_timeout=5.0)
    beta = answering("beta", "beta-22.05.json")
    survey.probe_cluster(session_with({"beta": beta}, site), "beta")
    assert beta.timeouts == [5.0]
    assert survey.probe_timeout(make_site(("beta",), login=False).clusters["beta"]) == 15.0


@pytest.mark.parametrize("error", [
    RemoteError("cannot reach login node 127.0.2.2:2222 of cluster beta: Connection refused (is sshd running?)"),
    HostKeyError("host key of 127.0.2.2:2222 (cluster beta) is unknown: ssh-ed25519 SHA256:x; if this "
                 "fingerprint is right, run `slurmkit site trust beta`"),
    ConnectTimeoutError("cannot reach login node 127.0.2.2:2222 of cluster beta within 10s (connect_timeout)"),
    SlurmUnavailableError("scontrol not found on the login node of beta"),
    ConfigError("identity_file /nope of cluster beta does not exist;\n fix the path"),
])
def test_every_slurmkit_error_becomes_a_probe_error_with_its_row(error):
    with pytest.raises(survey.ProbeError) as caught:
        survey.probe_cluster(session_with({"beta": answering("beta", "beta-22.05.json", error=error)}), "beta")
    status = caught.value.status
    assert not status.reachable
    assert status.reason == str(caught.value) == " ".join(str(error).split())        # one line
    assert status.name == "beta" and status.rtt_ms >= 0
    assert caught.value.__cause__ is error                       # the original error, for callers that care


def test_a_controller_that_is_down_is_a_probe_error_too():
    with pytest.raises(survey.ProbeError) as caught:
        survey.probe_cluster(session_with({"alpha": answering("alpha", "ctld-down-22.05.json")}), "alpha")
    assert caught.value.status.version == "22.05.8"              # scontrol --version answered
    assert "scontrol ping" in str(caught.value) and caught.value.__cause__ is None


def test_backend_that_cannot_even_be_created_is_unreachable(monkeypatch):
    monkeypatch.setenv("SLURMKIT_VIA", "ssh")
    site = make_site(("alpha",), login=False)
    with pytest.raises(survey.ProbeError, match="has no login node"):  # SLURMKIT_VIA=ssh without a login node
        survey.probe_cluster(Session(site), "alpha")


def test_unknown_cluster_is_a_usage_error_not_an_unreachable_one():
    session = session_with({"beta": answering("beta", "beta-22.05.json")})
    with pytest.raises(UsageError, match="choose one of: beta"):
        survey.probe_cluster(session, "nope")
    with pytest.raises(UsageError):
        survey.survey(session, ["beta", "nope"])


class PyslurmLike(SlurmBackend):
    """A backend without a runner (the interface's default): answers through its own calls."""

    def __init__(self):
        r = recorded("alpha-busy-22.05.json")["stdout"]
        self._nodes = parse_nodes(r)

    def version(self):
        return "22.05.8"

    def nodes(self):
        return self._nodes

    def partitions(self):
        return {"gpu": {}, "cpu": {}}

    def jobs(self, job_ids=None, user=None):
        return [JobInfo("1", "a", "PENDING"), JobInfo("2", "b", "RUNNING"), JobInfo("3", "c", "PENDING")]


def test_backend_without_runner_falls_back_to_its_calls():
    site = make_site(("alpha",), login=False)
    status = survey.probe_cluster(Session(site, backend_factory=lambda c: PyslurmLike()), "alpha")
    assert status.reachable and status.via == "local"
    assert status.partitions == ["gpu", "cpu"] and status.pending_jobs == 2
    assert status.accelerators == {"gpu:h100": {"total": 32, "idle": 30}}


def test_survey_is_parallel_in_site_order_and_one_result_per_cluster():
    down = RemoteError("cannot reach login node of gamma")
    backends = {"alpha": answering("alpha", "alpha-22.05.json", delay=0.6),
                "beta": answering("beta", "beta-22.05.json", delay=0.6),
                "gamma": answering("gamma", "gamma-22.05.json", delay=0.6, error=down)}
    started = time.monotonic()
    result = survey.survey(session_with(backends))
    elapsed = time.monotonic() - started
    assert isinstance(result, GroupResult)
    assert list(result) == ["alpha", "beta", "gamma"]
    assert list(result.succeeded) == ["alpha", "beta"] and list(result.failed) == ["gamma"]
    assert result["alpha"].nodes_total == 4 and result["gamma"].__cause__ is down
    assert elapsed < 1.5, "3 probes of 0.6 s took %.2f s: not parallel" % elapsed
    # the table: one row per cluster, the unreachable one with its reason
    rows = survey.rows(result)
    assert [(s.name, s.reachable) for s in rows] == [("alpha", True), ("beta", True), ("gamma", False)]
    assert rows[2].reason == "cannot reach login node of gamma"
    # names: a subset, any order, duplicates collapse; results still in site order
    backends = {n: answering(n, "%s-22.05.json" % n) for n in ("alpha", "beta", "gamma")}
    assert [s.name for s in survey.probe_all(session_with(backends), ["gamma", "alpha", "gamma"])] == \
        ["alpha", "gamma"]
    assert survey.probe_all(session_with(backends), []) == []


def test_survey_uses_at_most_max_workers_threads():
    active, peak, lock = [0], [0], threading.Lock()

    class Counting(FakeSlurm):
        def _command(self, argv, stdin, timeout):
            with lock:
                active[0] += 1
                peak[0] = max(peak[0], active[0])
            try:
                return super()._command(argv, stdin, timeout)
            finally:
                with lock:
                    active[0] -= 1

    names = tuple("c%d" % i for i in range(6))
    backends = {}
    for n in names:
        backends[n] = Counting(n)
        r = recorded("beta-22.05.json")
        backends[n].answer(survey.probe_argv(), r["stdout"], r["stderr"], r["returncode"], delay=0.1)
    result = survey.survey(session_with(backends, make_site(names)), max_workers=2)
    assert len(result) == 6 and result.ok
    assert peak[0] == 2


# ------------------------------------------------------------------ the CLI commands

def _statuses():
    up = parse_recorded("alpha-busy-22.05.json", "alpha")
    return [replace(up, rtt_ms=123.4, via="ssh root@127.0.1.2:2222"),
            survey.unreachable("gamma", "cannot reach login node 127.0.3.2:2222 of cluster gamma: Connection refused")]


def test_clusters_table(monkeypatch, capsys):
    monkeypatch.setattr(survey, "probe_all", lambda session, names=None: _statuses())
    code, out, err = run_main(capsys, "clusters", "--site", ROOT / "site_configs" / "local.yaml")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["CLUSTER", "REACH", "VERSION", "PARTITIONS", "NODES", "ACCELERATORS", "PENDING",
                                "RTT_MS", "REASON"]
    assert lines[1].split() == ["alpha", "ok", "22.05.8", "gpu,cpu", "3/4", "h100", "30/32", "1", "123"]
    assert lines[2].startswith("gamma") and lines[2].split()[1] == "unreachable"
    assert lines[2].endswith("cannot reach login node 127.0.3.2:2222 of cluster gamma: Connection refused")


def test_clusters_json_and_exit_codes(monkeypatch, capsys):
    got = {}

    def fake(session, names=None):
        got["names"] = names
        return [s for s in _statuses() if not s.reachable]

    monkeypatch.setattr(survey, "probe_all", fake)
    code, out, _ = run_main(capsys, "clusters", "--site", ROOT / "site_configs" / "local.yaml", "--json", "gamma")
    assert got["names"] == ["gamma"]
    assert code == 1                         # every cluster asked for is unreachable
    data = json.loads(out)
    assert data[0]["name"] == "gamma" and data[0]["reachable"] is False


# site trust, with the key exchange replaced by a fixed key

KEY_B64 = "AAAAC3NzaC1lZDI1NTE5AAAAIAq41eNdhjrCRAzqqP9Z0kzdQdrg7xJdXKVPCXQieA12"


@pytest.fixture
def trust_site(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(known_hosts, "SYSTEM_KNOWN_HOSTS", str(tmp_path / "no-system-known-hosts"))
    monkeypatch.setattr(connect, "fetch_host_key", lambda login, cluster="?", jump=False:
                        ("ssh-ed25519", KEY_B64, known_hosts.fingerprint_b64(KEY_B64)))
    known = tmp_path / "known_hosts"
    known.write_text("")
    text = (ROOT / "site_configs" / "local.yaml").read_text()
    text = text.replace("known_hosts: ../.devcluster/ssh/known_hosts", "known_hosts: %s" % known)
    text = text.replace("    login:\n      <<: *login\n      host: 127.0.3.2\n", "")   # gamma: no login node
    site = tmp_path / "site.yaml"
    site.write_text(text)
    return str(site), known


def test_trust_shows_the_fingerprint_and_writes_nothing_when_declined(trust_site, capsys):
    site, known = trust_site
    code, out, err = run_main(capsys, "site", "trust", "--site", site, "beta", input="n\n")
    fp = known_hosts.fingerprint_b64(KEY_B64)
    out += err
    assert out.index("host key: ssh-ed25519 %s" % fp) < out.index("Trust this key? [y/N]")
    assert "cluster beta: login node 127.0.2.2:2222" in out and "known_hosts file: %s" % known in out
    assert code == 1 and known.read_text() == ""


def test_trust_yes_writes_once(trust_site, capsys):
    site, known = trust_site
    code, out, err = run_main(capsys, "site", "trust", "--site", site, "--yes", "beta")
    assert code == 0 and "Trust this key?" not in out + err
    assert known.read_text() == "[127.0.2.2]:2222 ssh-ed25519 %s\n" % KEY_B64
    code, out, err = run_main(capsys, "site", "trust", "--site", site, "beta")     # no prompt: nothing to decide
    assert code == 0 and "already trusted (%s (line 1))" % known in out + err
    assert known.read_text().count("\n") == 1


def test_trust_refuses_a_revoked_key(trust_site, capsys):
    site, known = trust_site
    known.write_text("@revoked * ssh-ed25519 %s\n" % KEY_B64)
    code, _, err = run_main(capsys, "site", "trust", "--site", site, "--yes", "beta")
    line = one_error_line(err)
    assert code == 1 and "@revoked" in line and known_hosts.fingerprint_b64(KEY_B64) in line
    assert known.read_text() == "@revoked * ssh-ed25519 %s\n" % KEY_B64


def test_trust_unknown_cluster_and_cluster_without_login(trust_site, capsys):
    site, _ = trust_site
    code, _, err = run_main(capsys, "site", "trust", "--site", site, "nope")
    assert code == 2 and "choose one of: alpha, beta, gamma" in one_error_line(err)
    code, _, err = run_main(capsys, "site", "trust", "--site", site, "gamma")
    assert code == 2 and "has no login node" in one_error_line(err)


def test_commands_have_help():
    for command in (clusters_command, trust_command):
        assert command.help.strip()
        for param in command.params:
            if param.param_type_name == "option":
                assert param.help, param.opts


def test_partitions_come_from_the_nodes_in_order():
    nodes = parse_nodes("NodeName=a1 Partitions=gpu,cpu\nNodeName=a2 Partitions=cpu,debug\nNodeName=a3\n")
    assert survey.partitions_of(nodes) == ["gpu", "cpu", "debug"]
