"""``slurmkit site init`` against the local clusters, compared with the hand-written site_configs/local.yaml.

The proof the issue asks for, written as that comparison: for alpha (22.05
with accounting), beta and gamma (NPUs), the drafted file validates, and its
partitions, accelerators, GPUs per node, gres names, CPUs, memory, sizes,
time limits, switch-group features, the switch-wait cap Slurm applies, the
default partition and how each cluster is reached equal those of local.yaml;
a job rendered from the draft equals the same job rendered from local.yaml
except where the test says why.

Nothing here changes a cluster: init only reads (scontrol show ...), and
the drift for the bad-input tests lives in temporary site files.  One test
holds gamma's two nodes with a job of its own for a few seconds, so that a
probe job cannot start.
"""

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from harness import one_error_line, run_slurmkit
from site_drafts import assert_same_cluster, slurm_switch_cap, unexplained_differences
from slurmkit.health.sources.fakes import write_ib_port
from slurmkit.site import load_site

REPO = Path(__file__).resolve().parents[2]
LOCAL_SITE = REPO / "site_configs" / "local.yaml"
CLUSTERS = ("alpha", "beta", "gamma")


def slurmkit(home, *args, via=None, timeout=120):
    env = dict(os.environ, HOME=str(home))
    for name in ("SLURMKIT_SITE", "SLURM_CONF", "SSH_AUTH_SOCK", "SLURMKIT_VIA"):
        env.pop(name, None)
    if via:
        env["SLURMKIT_VIA"] = via
    return run_slurmkit(args, env=env, cwd=REPO, timeout=timeout)


@pytest.fixture(scope="module")
def drafted(devcluster, tmp_path_factory):
    """local.yaml's three clusters drafted into one file, once for the module: (path, home)."""
    home = tmp_path_factory.mktemp("home")
    path = tmp_path_factory.mktemp("init") / "drafted.yaml"
    proc = slurmkit(home, "site", "init", "--site", LOCAL_SITE, "-o", path)
    assert proc.returncode == 0, proc.stderr
    assert "written (alpha, beta, gamma)" in proc.stdout
    return path, home


def test_the_draft_validates(drafted):
    path, home = drafted
    proc = slurmkit(home, "site", "validate", path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "%s: ok" % path


@pytest.mark.parametrize("name", CLUSTERS)
def test_the_draft_says_what_local_yaml_says(drafted, name):
    assert_same_cluster(load_site(str(LOCAL_SITE)), load_site(str(drafted[0])), name, slurm_switch_cap(REPO / ".devcluster" / name / "etc" / "slurm.conf"))


def _render(home, site, cluster, partition, nodes):
    proc = slurmkit(home, "render", "--site", site, "-M", cluster, "-p", partition, "-N", nodes, "--comm", "heavy",
                    "-t", "00:10:00", "--token", "init-compare", "-J", "compare", "--", "python", "train.py")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("name,partition,nodes", [("alpha", "gpu", 4), ("alpha", "cpu", 2), ("beta", "gpu", 3),
                                                  ("beta", "urgent", 2), ("gamma", "npu", 2)])
def test_a_job_rendered_from_the_draft_equals_the_hand_written_ones(drafted, name, partition, nodes):
    path, home = drafted
    hand = _render(home, LOCAL_SITE, name, partition, nodes)
    ours = _render(home, path, name, partition, nodes)
    assert unexplained_differences(hand, ours) == []


def test_gamma_over_ssh_drafts_what_it_drafts_locally(devcluster, tmp_path):
    local = slurmkit(tmp_path, "site", "init", "--site", LOCAL_SITE, "--cluster", "gamma", via="local")
    remote = slurmkit(tmp_path, "site", "init", "--site", LOCAL_SITE, "--cluster", "gamma", via="ssh")
    assert local.returncode == 0 and remote.returncode == 0, remote.stderr
    # Only the first line (when it was written) may differ.
    assert local.stdout.splitlines()[1:] == remote.stdout.splitlines()[1:]
    assert "ascend910b" in remote.stdout
    # The same cluster as if in no site file: --login with the key and known_hosts local.yaml uses.
    gamma = devcluster["gamma"]
    alone = slurmkit(tmp_path, "site", "init", "--login", "%s:%d" % (gamma.login, gamma.login_port),
                     "--identity-file", gamma.identity, "--known-hosts", gamma.known_hosts)
    assert alone.returncode == 0, alone.stderr
    # The same draft but for what only the site knew: its name (now Slurm's ClusterName) and gamma's
    # slurm_conf on this machine (a cluster reached at its login node has none here).
    site_route = [ln for ln in remote.stdout.splitlines()[1:] if not ln.startswith("    slurm_conf: ")]
    assert alone.stdout.splitlines()[1:] == [ln.replace('site: "local"', 'site: "gamma"') for ln in site_route]
    assert '\n    login:\n      host: "%s"\n      port: %d\n      user: "root"\n' % (
        gamma.login_host, gamma.login_port) in alone.stdout


def test_login_refuses_a_host_key_it_does_not_know_and_keeps_known_hosts_as_it_was(devcluster, tmp_path):
    gamma = devcluster["gamma"]
    known = tmp_path / "known_hosts"
    known.write_text("")
    proc = slurmkit(tmp_path, "site", "init", "--login", "%s:%d" % (gamma.login, gamma.login_port),
                    "--identity-file", gamma.identity, "--known-hosts", known, "--no-probe")
    assert proc.returncode == 1
    line = one_error_line(proc.stderr)
    assert line.startswith("Error: host key of %s:%d is unknown: ssh-" % (gamma.login_host, gamma.login_port))
    assert line.endswith("add its key to %s (`ssh-keyscan -p %d %s >> %s`) and run site init again"
                         % (known, gamma.login_port, gamma.login_host, known)), line
    assert known.read_text() == ""


def test_a_probe_that_never_starts_is_bounded_names_the_partition_and_marks_the_guess(devcluster, tmp_path):
    """gamma's npu nodes all held by one exclusive job of the test: the probe gives up after --probe-wait."""
    from conftest import sbatch, slurm, wait_job_state

    hold = sbatch("gamma", "--exclusive", "-N2", "-p", "npu", "-t", "1", "-J", "sk-hold-probe", "--wrap", "sleep 60")
    try:
        try:
            wait_job_state("gamma", hold, {"RUNNING"}, timeout=10, interval=0.2)
        except AssertionError:
            pytest.skip("gamma's nodes are busy with other jobs: the test cannot hold them all")
        started = time.monotonic()
        proc = slurmkit(tmp_path, "site", "init", "--site", LOCAL_SITE, "--cluster", "gamma", "--probe-wait", "2")
        took = time.monotonic() - started
    finally:
        slurm("gamma", "scancel", hold)
    assert proc.returncode == 0, proc.stderr
    assert took < 15, took
    assert proc.stderr.startswith("Warning: cluster gamma: the probe job in partition npu did not start within 2 s (")
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr
    guess = [ln.strip() for ln in proc.stdout.splitlines() if "guess: the probe did not run" in ln]
    assert len(guess) == 1 and "partition npu did not start within 2 s" in guess[0], proc.stdout
    assert "written as ethernet without an interface" in guess[0]
    draft = tmp_path / "held.yaml"
    draft.write_text(proc.stdout)
    assert load_site(str(draft)).clusters["gamma"].partitions["npu"].fabric.type == "ethernet"


def test_an_existing_file_is_kept_without_force(devcluster, tmp_path):
    target = tmp_path / "mine.yaml"
    target.write_text("site: mine\n")
    proc = slurmkit(tmp_path, "site", "init", "--site", LOCAL_SITE, "-M", "beta", "-o", target)
    assert proc.returncode == 2
    assert one_error_line(proc.stderr) == "Error: %s exists; pass --force to replace it, or write elsewhere with -o" \
        % target
    assert target.read_text() == "site: mine\n"
    proc = slurmkit(tmp_path, "site", "init", "--site", LOCAL_SITE, "-M", "beta", "-o", target, "--force")
    assert proc.returncode == 0, proc.stderr
    assert "a100" in target.read_text()


def test_a_cluster_that_does_not_answer_is_named(devcluster, tmp_path):
    # beta's login node, at a port where nothing listens: the SSH connection is refused at once.
    site = tmp_path / "gone.yaml"
    site.write_text("site: gone\nclusters:\n  beta:\n    login: {host: 127.0.2.2, port: 1, user: root, "
                    "connect_timeout: 5}\n    partitions:\n      gpu: {accelerator: none, cpus_per_node: 1}\n")
    proc = slurmkit(tmp_path, "site", "init", "--site", site, "-o", tmp_path / "out.yaml")
    assert proc.returncode == 1
    assert one_error_line(proc.stderr).startswith("Error: cluster beta did not answer: ")
    assert not (tmp_path / "out.yaml").exists()


def test_without_a_site_the_local_cluster_is_named_as_slurm_names_it(devcluster, tmp_path):
    env = dict(os.environ, HOME=str(tmp_path), SLURM_CONF=str(REPO / ".devcluster" / "beta" / "etc" / "slurm.conf"))
    env.pop("SLURMKIT_SITE", None)
    proc = run_slurmkit(["site", "init"], env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert '\nsite: "beta"\n' in proc.stdout
    assert "\n  beta:\n" in proc.stdout and "\n      urgent:\n" in proc.stdout


def test_rdma_ports_in_a_fake_sysfs_become_the_fabric(devcluster, tmp_path):
    # A FAKE /sys/class/infiniband (this machine has no HCA), laid out as the health checks' fakes lay it
    # out, named to the probe through the partition's health.ib_sysfs: one active InfiniBand port, one down.
    fake = tmp_path / "fake-sys-class-infiniband"
    write_ib_port(fake, "mlx5_0", 1)
    write_ib_port(fake, "mlx5_1", 1, state="1: DOWN", phys_state="3: Disabled")
    site = tmp_path / "ib.yaml"
    site.write_text("site: ib\nclusters:\n  alpha:\n    slurm_conf: %s\n    partitions:\n      gpu:\n"
                    "        accelerator: none\n        cpus_per_node: 1\n        health: {ib_sysfs: %s}\n"
                    % (REPO / ".devcluster" / "alpha" / "etc" / "slurm.conf", fake))
    out = tmp_path / "drafted.yaml"
    proc = slurmkit(tmp_path, "site", "init", "--site", site, "-o", out)
    assert proc.returncode == 0, proc.stderr
    fabric = load_site(str(out)).clusters["alpha"].partitions["gpu"].fabric
    assert (fabric.type, fabric.hcas, fabric.socket_ifname) == ("infiniband", ("=mlx5_0:1",), "lo")
    text = out.read_text()
    assert "RDMA ports not active, left out: mlx5_1:1 (DOWN)" in text
    assert "RDMA devices read from %s" % fake in text


# ----------------------------------------------------------------------------- site check --live
# Each drift is made in a temporary copy of local.yaml (its relative paths made absolute), never in the
# clusters: the shared clusters' configuration is what every other test relies on.

def _drifted(tmp_path, *edits):
    """A copy of local.yaml with each (old, new) replaced exactly once: the file's path."""
    text = LOCAL_SITE.read_text().replace("../.devcluster", str(REPO / ".devcluster"))
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path = tmp_path / "drifted.yaml"
    path.write_text(text)
    return path


ALPHA_GPU = '        max_time: "24:00:00"\n        fabric: *loopback\n'


def _check(tmp_path, site, *args):
    # --probe-wait 120: a node still busy with an earlier test's job is waited for (bounded), not a warning.
    proc = slurmkit(tmp_path, "site", "check", "--live", "--site", site, "--json", "--probe-wait", "120", *args,
                    timeout=600)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)["findings"]


def test_check_live_finds_only_the_switch_wait_local_yaml_asks_for_on_purpose(devcluster, tmp_path):
    code, findings = _check(tmp_path, LOCAL_SITE)
    # local.yaml asks alpha and gamma for a 10-minute wait above their caps (beta's fits): a warning, exit 0.
    assert [(f["cluster"], f["key"], f["severity"]) for f in findings] == [
        ("alpha", "max_switch_wait", "warning"), ("gamma", "max_switch_wait", "warning")]
    assert code == 0


@pytest.mark.parametrize("cluster,edit,key,fix", [
    # A partition the cluster no longer has: the file still names beta's urgent partition as "retired".
    ("beta", ("      urgent:\n", "      retired:\n"), "partitions.retired", "remove it or rename it"),
    ("alpha", ("        gpu_model: h100\n", "        gpu_model: b200\n"), "partitions.gpu.gpu_model",
     "set gpu_model: h100"),
    ("beta", ("        gpus_per_node: 4\n        cpus_per_node: 4\n        memory_mb: 4000\n        max_nodes: 3\n"
              "        max_time: \"12:00:00\"\n        fabric: *loopback\n      # Same",
              "        gpus_per_node: 8\n        cpus_per_node: 4\n        memory_mb: 4000\n        max_nodes: 3\n"
              "        max_time: \"12:00:00\"\n        fabric: *loopback\n      # Same"),
     "partitions.gpu.gpus_per_node", "set gpus_per_node: 4"),
    ("gamma", ("        max_nodes: 2\n        max_time: \"12:00:00\"\n        fabric: *loopback\n\n",
               "        max_nodes: 6\n        max_time: \"12:00:00\"\n        fabric: *loopback\n\n"),
     "partitions.npu.max_nodes", "set max_nodes: 2"),
    ("alpha", (ALPHA_GPU, ALPHA_GPU.replace("24:00:00", "48:00:00")), "partitions.gpu.max_time",
     'set max_time: "1-00:00:00"'),
    ("beta", ("    default_partition: gpu\n    max_switch_wait", "    default_partition: gpu\n"
              "    switch_group_features: [spine-gone]\n    max_switch_wait"), "switch_group_features", "remove it"),
])
def test_check_live_finds_a_drift_in_what_slurm_says(devcluster, tmp_path, cluster, edit, key, fix):
    site = _drifted(tmp_path, edit)
    code, findings = _check(tmp_path, site, "--cluster", cluster, "--no-probe")
    harmful = [f for f in findings if f["severity"] != "warning"]
    assert [(f["cluster"], f["key"], f["severity"]) for f in harmful] == [(cluster, key, "fail")]
    assert fix in harmful[0]["message"]
    assert code == 1


def test_check_live_without_the_probe_says_the_fabrics_went_unchecked(devcluster, tmp_path):
    proc = slurmkit(tmp_path, "site", "check", "--live", "--site", LOCAL_SITE, "-M", "beta", "--no-probe")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "beta: 0 findings, 0 that make jobs fail or run slower; fabrics not checked (--no-probe)\n"


def test_check_live_names_an_hca_no_node_has_from_a_fake_sysfs(devcluster, tmp_path):
    # A FAKE /sys/class/infiniband (this machine has no HCA), as the health checks' fakes lay it out, named
    # to the probe job through the partition's health.ib_sysfs: the nodes "have" mlx5_0, the file says mlx5_7.
    fake = tmp_path / "fake-sys-class-infiniband"
    write_ib_port(fake, "mlx5_0", 1)
    site = _drifted(tmp_path, (ALPHA_GPU, '        max_time: "24:00:00"\n        fabric: {type: infiniband, hcas: '
                                          '["=mlx5_7:1"], socket_ifname: lo}\n        health: {ib_sysfs: %s}\n' % fake))
    code, findings = _check(tmp_path, site, "--cluster", "alpha")
    hcas = [f for f in findings if f["key"] == "partitions.gpu.fabric.hcas"]
    assert len(hcas) == 1 and hcas[0]["severity"] == "slower"
    assert re.fullmatch(r"no probed node \(an\d\) has HCA mlx5_7:1: NCCL falls back to sockets and jobs run slower; "
                        r"set hcas to the active ports: =mlx5_0:1", hcas[0]["message"]), hcas[0]["message"]
    assert code == 1


def test_check_live_names_a_socket_interface_the_nodes_do_not_have(devcluster, tmp_path):
    site = _drifted(tmp_path, (ALPHA_GPU, ALPHA_GPU.replace("*loopback", "{type: ethernet, socket_ifname: ib9}")))
    proc = slurmkit(tmp_path, "site", "check", "--live", "--site", site, "--cluster", "alpha", "--probe-wait", "120",
                    timeout=300)
    assert proc.returncode == 1, proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("fail: ")]
    assert len(lines) == 1
    assert re.fullmatch(r"fail: clusters\.alpha\.partitions\.gpu\.fabric\.socket_ifname: ib9 names no interface that "
                        r"is up on the probed nodes \(an\d\): NCCL and Gloo find no socket and jobs fail; set socket_ifname: lo "
                        r"\(the interface that carries the nodes' addresses\)", lines[0]), lines[0]
    assert proc.stdout.splitlines()[-1] == "alpha: 2 findings, 1 that make jobs fail or run slower"


def test_check_live_names_a_cluster_that_does_not_answer(devcluster, tmp_path):
    # beta's login node, at a port where nothing listens: the SSH connection is refused at once.
    site = tmp_path / "gone.yaml"
    site.write_text("site: gone\nclusters:\n  beta:\n    login: {host: 127.0.2.2, port: 1, user: root, "
                    "connect_timeout: 5}\n    partitions:\n      gpu: {accelerator: none, cpus_per_node: 1}\n")
    proc = slurmkit(tmp_path, "site", "check", "--live", "--site", site)
    assert proc.returncode == 1
    assert one_error_line(proc.stderr).startswith("Error: cluster beta did not answer: ")
    assert proc.stdout == ""


def test_check_without_live_only_validates(tmp_path):
    proc = slurmkit(tmp_path, "site", "check", "--site", LOCAL_SITE)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "%s: ok (validated only; --live compares it with the clusters)\n" % LOCAL_SITE
