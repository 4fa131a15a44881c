"""``slurmkit clusters`` and ``slurmkit site trust`` end to end, over real SSH.

Every run is ``python -m slurmkit ...`` with ``SLURMKIT_VIA=ssh``, so each
probe really goes through the cluster's login sshd (127.0.k.2:2222) although
the clusters' slurm.conf files exist on this machine.  HOME is a temporary
directory: only the known_hosts file the site names vouches for host keys.

Expected shapes come from devcluster/README.md (and are cross-checked with
.devcluster/clusters.json): alpha an[1-4] gpu:h100:8 (partitions gpu, cpu),
beta bn[1-3] gpu:a100:4 (gpu, and urgent, which preempts gpu), gamma gn[1-2] npu:ascend910b:8 (npu).

Other suites use these clusters at the same time: idle counts are only
checked to be within their totals.  Disruptive steps (sshd or slurmctld
stopped) use gamma, like tests/integration/test_ssh.py, always through the
``devcluster_control`` fixture, which restores the cluster even when a test
fails.
"""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from harness import run_slurmkit
from conftest import port_open, slurm_version
from conftest import slurm as _slurm

pytest.importorskip("paramiko")

REPO = Path(__file__).resolve().parents[2]
LOCAL_SITE = REPO / "site_configs" / "local.yaml"

EXPECTED = {
    "alpha": {"partitions": {"gpu", "cpu"}, "nodes": 4, "accelerators": {"gpu:h100": 32}},
    "beta": {"partitions": {"gpu", "urgent"}, "nodes": 3, "accelerators": {"gpu:a100": 12}},
    "gamma": {"partitions": {"npu"}, "nodes": 2, "accelerators": {"npu:ascend910b": 16}},
}


@pytest.fixture
def dev(devcluster):
    # Another suite may be restarting a login sshd right now (down-sshd/up-sshd):
    # give it a moment instead of failing on its transient state.
    for info in devcluster.clusters.values():
        deadline = time.monotonic() + 20
        while not port_open(info.login_host, info.login_port) and time.monotonic() < deadline:
            time.sleep(0.2)
    return devcluster


@pytest.fixture
def home(tmp_path):
    path = tmp_path / "home"
    path.mkdir()
    if Path("/etc/ssh/ssh_known_hosts").exists() and "127.0." in Path("/etc/ssh/ssh_known_hosts").read_text():
        pytest.skip("/etc/ssh/ssh_known_hosts vouches for dev cluster keys: the trust tests cannot be hermetic")
    return path


def slurmkit(home, *args, input=None, timeout=60):
    """Run ``python -m slurmkit ARGS`` over SSH; returns (CompletedProcess, seconds)."""
    env = dict(os.environ, SLURMKIT_VIA="ssh", HOME=str(home))
    env.pop("SSH_AUTH_SOCK", None)
    env.pop("SLURMKIT_SITE", None)
    started = time.monotonic()
    proc = run_slurmkit(args, env=env, cwd=REPO, input=input, timeout=timeout)
    return proc, time.monotonic() - started


def clusters_json(home, *args, site=LOCAL_SITE, timeout=60):
    proc, elapsed = slurmkit(home, "clusters", "--json", "--site", site, *args, timeout=timeout)
    assert proc.stdout.strip(), "no output (exit %d): %s" % (proc.returncode, proc.stderr)
    return proc, {s["name"]: s for s in json.loads(proc.stdout)}, elapsed


def assert_healthy(dev, status):
    name = status["name"]
    want = EXPECTED[name]
    info = dev[name]
    assert status["reachable"] is True, status
    assert status["reason"] == ""
    assert status["version"] == slurm_version(name), status["version"]
    assert set(status["partitions"]) == want["partitions"] == {p["name"] for p in info.raw["partitions"]}
    assert status["nodes_total"] == want["nodes"] == len(info.nodes)
    assert 0 <= status["nodes_idle"] <= status["nodes_total"]
    gres = info.raw["gres"]
    assert {k: v["total"] for k, v in status["accelerators"].items()} == want["accelerators"] == {
        "%s:%s" % (gres["name"], gres["type"]): gres["count"] * len(info.nodes)}
    for counts in status["accelerators"].values():
        assert 0 <= counts["idle"] <= counts["total"]
    assert isinstance(status["pending_jobs"], int) and status["pending_jobs"] >= 0
    assert status["via"] == "ssh root@%s:%d" % (info.login_host, info.login_port)
    assert status["rtt_ms"] > 0


# ------------------------------------------------------------------ all up

def test_all_three_clusters_over_ssh(dev, home):
    proc, statuses, elapsed = clusters_json(home)
    assert proc.returncode == 0, proc.stderr
    assert list(statuses) == ["alpha", "beta", "gamma"]            # site order
    for status in statuses.values():
        assert_healthy(dev, status)


def test_table_and_cluster_selection(dev, home):
    proc, _ = slurmkit(home, "clusters", "--site", LOCAL_SITE)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:4] == ["CLUSTER", "REACH", "VERSION", "PARTITIONS"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert set(rows) == {"alpha", "beta", "gamma"}
    assert rows["alpha"][1] == "ok" and rows["alpha"][4].endswith("/4") and rows["alpha"][5] == "h100"
    assert rows["alpha"][6].endswith("/32")
    assert rows["gamma"][5] == "ascend910b" and rows["gamma"][6].endswith("/16")

    proc, statuses, _ = clusters_json(home, "beta")
    assert proc.returncode == 0 and list(statuses) == ["beta"]
    assert_healthy(dev, statuses["beta"])

    proc, _ = slurmkit(home, "clusters", "--site", LOCAL_SITE, "nosuchcluster")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "Error: unknown cluster 'nosuchcluster' in site 'local'; choose one of: alpha, beta, gamma"]


# ------------------------------------------------------------------ one cluster broken

def test_stopped_sshd_is_unreachable_at_once(dev, home, devcluster_control):
    with devcluster_control.sshd_stopped("gamma"):
        proc, statuses, _ = clusters_json(home)
    assert proc.returncode == 0, proc.stderr                      # some clusters answer
    # "Connection refused", not a connect timeout: nothing waited (a wall-clock bound would only
    # measure how busy CI's shared machine was).
    gamma = statuses["gamma"]
    assert gamma["reachable"] is False
    assert gamma["reason"] == ("cannot reach login node 127.0.3.2:2222 of cluster gamma: Connection refused "
                               "(is sshd running?)")
    assert gamma["nodes_total"] == 0 and gamma["accelerators"] == {}
    assert_healthy(dev, statuses["alpha"])
    assert_healthy(dev, statuses["beta"])


@pytest.mark.slow
def test_stopped_slurmctld_is_unreachable(dev, home, devcluster_control):
    with devcluster_control.ctld_stopped("gamma"):
        proc, statuses, _ = clusters_json(home)
    assert proc.returncode == 0, proc.stderr
    gamma = statuses["gamma"]
    assert gamma["reachable"] is False
    assert gamma["reason"].startswith("slurmctld of cluster gamma does not answer: ")
    assert "scontrol ping" in gamma["reason"] and "DOWN" in gamma["reason"]
    assert gamma["version"] == slurm_version("gamma")        # the login node itself answered
    # That the RPC commands (each would retry for ~10 s) are skipped after the failed ping is the
    # probe script's own test (tests/unit/test_probe.py), not a wall-clock bound here: CI's machine
    # is shared, and a loaded one took 9.2 s for what takes 1 s alone.
    assert_healthy(dev, statuses["alpha"])
    assert_healthy(dev, statuses["beta"])


# ------------------------------------------------------------------ host keys and `site trust`

@pytest.fixture
def untrusted_site(tmp_path):
    """local.yaml with every login's known_hosts an empty file in tmp_path."""
    known = tmp_path / "known_hosts"
    known.write_text("")
    text = LOCAL_SITE.read_text().replace("../.devcluster/", str(REPO / ".devcluster") + "/")
    old = "known_hosts: %s/.devcluster/ssh/known_hosts" % REPO
    assert old in text
    text = text.replace(old, "known_hosts: %s" % known)
    assert "identity_file: %s/.devcluster/ssh/id_ed25519" % REPO in text     # absolute: the copy lives elsewhere
    site = tmp_path / "untrusted.yaml"
    site.write_text(text)
    return site, known


def keygen_fingerprint(pub_path):
    out = subprocess.run(["ssh-keygen", "-lf", str(pub_path)], capture_output=True, text=True, check=True).stdout
    return out.split()[1]


def test_untrusted_keys_are_unreachable_with_the_fix(dev, home, untrusted_site):
    site, known = untrusted_site
    proc, statuses, _ = clusters_json(home, site=site)
    assert proc.returncode == 1                                   # no cluster reachable at all
    for name, status in statuses.items():
        assert status["reachable"] is False
        assert "unknown" in status["reason"] and "slurmkit site trust %s" % name in status["reason"]
        assert keygen_fingerprint(dev[name].raw["login"]["host_key_pub"]) in status["reason"]
    assert known.read_text() == ""                                # probing never trusts anything


def test_site_trust_end_to_end(dev, home, untrusted_site):
    site, known = untrusted_site
    pub = dev["beta"].raw["login"]["host_key_pub"]
    keytype, b64 = Path(pub).read_text().split()[:2]
    fp = keygen_fingerprint(pub)

    # declined: the fingerprint was shown, nothing written
    proc, _ = slurmkit(home, "site", "trust", "--site", site, "beta", input="n\n")
    assert proc.returncode == 1, proc.stderr
    assert "cluster beta: login node 127.0.2.2:2222" in proc.stdout
    assert "host key: %s %s" % (keytype, fp) in proc.stdout
    assert "known_hosts file: %s" % known in proc.stdout
    assert proc.stdout.index(fp) < proc.stdout.index("Trust this key? [y/N]")
    assert known.read_text() == ""

    # --yes: shown and written
    proc, _ = slurmkit(home, "site", "trust", "--site", site, "--yes", "beta")
    assert proc.returncode == 0, proc.stderr
    assert "host key: %s %s" % (keytype, fp) in proc.stdout
    assert known.read_text() == "[127.0.2.2]:2222 %s %s\n" % (keytype, b64)

    proc, _ = slurmkit(home, "site", "trust", "--site", site, "--yes", "beta")
    assert proc.returncode == 0 and "already trusted" in proc.stdout
    assert known.read_text() == "[127.0.2.2]:2222 %s %s\n" % (keytype, b64)

    # beta now works through SSH; the others still are not trusted
    proc, statuses, _ = clusters_json(home, site=site)
    assert proc.returncode == 0, proc.stderr
    assert_healthy(dev, statuses["beta"])
    assert statuses["alpha"]["reachable"] is False and "slurmkit site trust alpha" in statuses["alpha"]["reason"]


def test_site_trust_errors(dev, home, untrusted_site):
    site, known = untrusted_site
    proc, _ = slurmkit(home, "site", "trust", "--site", site, "--yes", "nope")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "Error: unknown cluster 'nope' in site 'local'; choose one of: alpha, beta, gamma"]
    assert known.read_text() == ""


@pytest.mark.slow
def test_probe_script_on_real_slurm_counts_pending_and_fails_fast(devcluster, devcluster_control):
    """The probe's shell script itself, run with the real Slurm commands of gamma (no SSH)."""
    from slurmkit.federation.survey import parse_probe, probe_argv

    env = devcluster["gamma"].env
    held = [slurm_cmd("gamma", "sbatch", "--parsable", "--hold", "-t", "1", "-o", "/dev/null", "--wrap", "true")
            for _ in range(2)]
    try:
        out = subprocess.run(probe_argv(), env=env, capture_output=True, text=True, timeout=30)
        status = parse_probe(out.stdout, out.stderr, out.returncode, "gamma")
        assert status.reachable and status.pending_jobs >= 2   # squeue's count crossed the pipe
    finally:
        slurm_cmd("gamma", "scancel", *held)
    with devcluster_control.ctld_stopped("gamma"):
        out = subprocess.run(probe_argv(), env=env, capture_output=True, text=True, timeout=30)
    status = parse_probe(out.stdout, out.stderr, out.returncode, "gamma")
    assert not status.reachable and "scontrol ping" in status.reason and "DOWN" in status.reason
    # The ping answers at once; the RPC commands, which would each retry for ~9 s, never ran.
    assert " begin ping" in out.stdout and " begin nodes" not in out.stdout and " begin pending" not in out.stdout


def slurm_cmd(cluster, *argv):
    return _slurm(cluster, *argv).stdout.strip().split(";")[0]
