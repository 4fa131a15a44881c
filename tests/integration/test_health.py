"""Node health against the real clusters: SSH to every node, drain and resume on the real slurmctld,
and slurmd itself running ``slurmkit health check --slurm`` as gamma's HealthCheckProgram.

The sweeps act on beta (the tests that stop or rekey login sshds use
gamma); what fails a node is decided by the test alone: a per-node directory
under tmp_path that the site requires to be writable.  Everything a test
drains is resumed at teardown, and only that: a node drained by anyone else
(another suite) is never touched.
"""

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import needs_ch_run
from harness import run_slurmkit, wait_until

REPO = Path(__file__).resolve().parents[2]
ADMIN = "health-test admin"          # the reason this file's "admins" drain with (plus a token)


def node_state(cluster, node, devcluster):
    out = devcluster.slurm(cluster, "scontrol", "--oneliner", "show", "node", node).stdout
    from slurmkit.slurm.parsers import parse_nodes

    return parse_nodes(out)[0]


def write_site(tmp_path, devcluster, cap="100%", resume_after=2, fanout=16, relays=False, runtime=None,
               fabric=None, ib_sysfs=None):
    """A site of the three local clusters whose health checks only the test can fail (and, with
    ``runtime``, the partitions' container runtime; with ``fabric``, their fabric as YAML, its RDMA devices
    read from ``ib_sysfs``)."""
    raw = devcluster.raw
    lines = ["site: health-test",
             "health:",
             "  resume_after: %d" % resume_after,
             "  drain_cap: %s" % json.dumps(cap),
             "  fanout: %d" % fanout,
             "  relays: %s" % ("true" if relays else "false"),
             "  node_timeout: 60",
             "  state_dir: %s" % json.dumps(str(tmp_path / "state")),
             # the click-free entry of the same check (python -m slurmkit.health)
             "  command: %s" % json.dumps([sys.executable, "-m", "slurmkit.health"]),
             "clusters:"]
    for name, c in raw["clusters"].items():
        gres = c["gres"]
        ascend = gres["name"] == "npu"
        lines += ["  %s:" % name,
                  "    slurm_conf: %s" % json.dumps(c["slurm_conf"]),
                  "    login: {host: %s, port: %d, user: root, identity_file: %s, known_hosts: %s}" % (
                      c["login"]["host"], c["login"]["port"], json.dumps(raw["ssh"]["identity"]),
                      json.dumps(raw["ssh"]["known_hosts"])),
                  "    partitions:"]
        for part in c["partitions"]:
            lines += ["      %s:" % part["name"],
                      "        accelerator: %s" % ("ascend" if ascend else "nvidia"),
                      "        gpu_model: %s" % gres["type"],
                      "        gres_name: %s" % gres["name"],
                      "        gpus_per_node: %d" % gres["count"],
                      "        cpus_per_node: %d" % c["cpus_per_node"],
                      "        memory_mb: %d" % c["memory_mb_per_node"]]
            if runtime:
                lines += ["        containers: {runtime: %s}" % runtime]
            if fabric:
                lines += ["        fabric: %s" % fabric]
            lines += ["        health:",
                      # no NVML on this machine; load and D state belong to whatever else runs here
                      "          skip: %s" % ("[load, dstate]" if ascend else "[gpu, load, dstate]"),
                      "          device_dir: %s" % json.dumps(gres["device_dir"])]
            if ib_sysfs:
                lines += ["          ib_sysfs: %s" % json.dumps(str(ib_sysfs))]
            lines += ["          mounts:",
                      "            - {path: %s, writable: true}" % json.dumps(str(tmp_path / "scratch" / "%n")),
                      "            - {path: %s}" % json.dumps(str(tmp_path / "scratch2" / "%n"))]
    path = tmp_path / "site.yaml"
    path.write_text("\n".join(lines) + "\n")
    for c in raw["clusters"].values():
        for node in c["node_names"]:
            (tmp_path / "scratch" / node).mkdir(parents=True, exist_ok=True)
            (tmp_path / "scratch2" / node).mkdir(parents=True, exist_ok=True)
    return str(path)


def slurmkit(*args, tmp_path, timeout=180):
    env = {"SLURMKIT_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/local/bin:/usr/bin:/bin"}
    return run_slurmkit(args, env=env, cwd=REPO, timeout=timeout)


def sweep(site, tmp_path, *args):
    proc = slurmkit("health", "sweep", "--site", site, "--json", *args, tmp_path=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, {r["node"]: r for r in json.loads(proc.stdout)["nodes"]}


@pytest.fixture
def beta(devcluster, tmp_path):
    """beta's nodes, every one in service at the start; what the test drained is resumed at the end."""
    names = devcluster["beta"].nodes
    token = "%s %d" % (ADMIN, time.time())

    def ours(info):
        return info.reason.startswith(("slurmkit: mount:%s" % tmp_path, "slurmkit: container_runtime",
                                       "slurmkit: ib_port:mlx5_0:1", token))

    busy = [n for n in names if node_state("beta", n, devcluster).reason]
    if busy:
        pytest.skip("beta nodes %s are drained by someone else right now" % busy)
    yield token
    for node in names:
        info = node_state("beta", node, devcluster)
        if info.reason and ours(info):
            devcluster.slurm("beta", "scontrol", "update", "NodeName=" + node, "State=RESUME")


def test_every_node_reached_over_ssh_at_its_own_address(devcluster, tmp_path):
    site = write_site(tmp_path, devcluster)
    code, rows = sweep(site, tmp_path, "--cluster", "all")
    every = [n for c in devcluster.clusters.values() for n in c.nodes]
    assert sorted(rows) == sorted(every)
    for node, row in rows.items():
        if row["cluster"] == "gamma" and row["status"] == "unreachable":
            continue   # other suites stop and rekey gamma's sshd on purpose
        assert row["status"] == "healthy", row
        report = row["report"]
        assert report["node"] == node and report["cluster"] == row["cluster"]
        names = {r["name"]: r for r in report["results"]}
        # checked as that node: its own slurmd (-N node), its own directory
        assert names["daemon:slurmd"]["status"] == "ok"
        assert "mount:%s" % (tmp_path / "scratch" / node) in names
        if row["cluster"] == "gamma":
            assert names["npu_count"]["message"] == "8 NPUs"          # against Slurm's Gres=npu:8 too
    assert not any(row["action"] for row in rows.values())          # no --drain: nothing changed


def test_relays_check_their_groups_over_ssh_between_the_nodes(devcluster, tmp_path, beta):
    """fanout 2: each cluster's nodes go through relays, which reach their peers over real SSH (strict
    known_hosts); a failing node's report comes back through its relay, and --drain acts on it."""
    site = write_site(tmp_path, devcluster, fanout=2, relays=True)
    victim = devcluster["beta"].nodes[-1]
    (tmp_path / "scratch" / victim).rmdir()
    proc = slurmkit("health", "sweep", "--site", site, "--json", "--cluster", "all", "--drain", tmp_path=tmp_path)
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout)
    rows = {r["node"]: r for r in result["nodes"]}
    every = [n for c in devcluster.clusters.values() for n in c.nodes]
    assert sorted(rows) == sorted(every)
    for cluster in ("alpha", "beta"):
        names = devcluster[cluster].nodes
        via = {rows[n]["via"] for n in names}
        # more nodes than the fan-out: all of them through relays, each relay one of the cluster's own nodes
        assert None not in via and via <= set(names) and len(via) == 2, (cluster, via)
    for node, row in rows.items():
        if row["cluster"] == "gamma" and row["status"] == "unreachable":
            continue   # other suites stop and rekey gamma's sshd on purpose
        assert row["report"]["node"] == node, row
        names = {r["name"]: r for r in row["report"]["results"]}
        assert names["daemon:slurmd"]["status"] == "ok"           # its own slurmd -N, on its own address
        assert row["status"] == ("unhealthy" if node == victim else "healthy"), row
    assert rows[victim]["report"]["failing"] == ["mount:%s" % (tmp_path / "scratch" / victim)]
    assert rows[victim]["action"].startswith("drained")
    assert node_state("beta", victim, devcluster).reason.startswith("slurmkit: mount:%s" % tmp_path)
    assert result["relays"] >= 4 and not any(f.startswith(("alpha", "beta")) for f in result["relays_failed"])


def test_a_check_told_its_node_checks_as_that_node(devcluster, tmp_path):
    site = write_site(tmp_path, devcluster)
    own = slurmkit("health", "check", "--site", site, "-M", "beta", "--node", "bn2", "--json", tmp_path=tmp_path)
    assert own.returncode == 0, own.stdout + own.stderr
    report = json.loads(own.stdout)
    assert report["node"] == "bn2" and report["partition"] == "gpu"
    # no slurmd serves "bn9" here: checked as bn9, the slurmd check fails (and Slurm does not know it)
    other = slurmkit("health", "check", "--site", site, "-M", "beta", "--node", "bn9", "--partition", "gpu",
                     "--json", tmp_path=tmp_path)
    assert other.returncode == 1
    failing = json.loads(other.stdout)["failing"]
    assert "daemon:slurmd" in failing and "mount:%s" % (tmp_path / "scratch" / "bn9") in failing


@pytest.mark.slow
def test_drain_names_every_failing_check_and_resume_after_n_clean_checks(devcluster, tmp_path, beta):
    site = write_site(tmp_path, devcluster, resume_after=2)
    (tmp_path / "scratch" / "bn2").rmdir()
    (tmp_path / "scratch2" / "bn2").rmdir()
    code, rows = sweep(site, tmp_path, "--cluster", "beta", "--drain")
    expected = "slurmkit: mount:%s, mount:%s" % (tmp_path / "scratch" / "bn2", tmp_path / "scratch2" / "bn2")
    assert code == 1 and rows["bn2"]["action"] == "drained (%s)" % expected
    info = node_state("beta", "bn2", devcluster)
    assert "DRAIN" in info.state and info.reason == expected and info.reason_user == "root"
    assert node_state("beta", "bn1", devcluster).reason == ""
    (tmp_path / "scratch" / "bn2").mkdir()
    (tmp_path / "scratch2" / "bn2").mkdir()
    code, rows = sweep(site, tmp_path, "--cluster", "beta", "--drain")
    assert code == 0 and rows["bn2"]["action"].startswith("drained by slurmkit, clean 1/2")
    assert node_state("beta", "bn2", devcluster).reason == expected + "; clean 1/2"   # still drained
    code, rows = sweep(site, tmp_path, "--cluster", "beta", "--drain")
    assert rows["bn2"]["action"] == "resumed: 2 clean checks in a row: resume"
    info = node_state("beta", "bn2", devcluster)
    assert "DRAIN" not in info.state and info.reason == ""


def test_a_node_whose_hca_or_socket_interface_is_gone_is_drained_naming_them(devcluster, tmp_path, beta):
    """The partition's fabric against the node: its HCA in a fake sysfs (named as one: this machine has no
    HCA), its socket_ifname against the node's real /sys/class/net (beta's slurmds run on this machine).
    Both present, the check passes; the HCA gone and a name no interface has, it fails with the fixes,
    and a sweep drains the node naming both (the plan carries them to the node over SSH)."""
    from slurmkit.health.sources.fakes import write_ib_port

    fake_sysfs = tmp_path / "fake-sys-class-infiniband"
    write_ib_port(fake_sysfs, "mlx5_0")
    fabric = '{type: infiniband, hcas: ["=mlx5_0:1"], socket_ifname: "%s"}'
    good = write_site(tmp_path, devcluster, fabric=fabric % "=lo", ib_sysfs=fake_sysfs)
    proc = slurmkit("health", "check", "--site", good, "-M", "beta", "--node", "bn1", "--json", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stdout
    names = {r["name"]: r["status"] for r in json.loads(proc.stdout)["results"]}
    assert names["ib_port:mlx5_0:1"] == names["socket_ifname:lo"] == "ok"
    shutil.rmtree(str(fake_sysfs / "mlx5_0"))                 # the HCA disappeared
    site = write_site(tmp_path, devcluster, fabric=fabric % "=slurmkit-gone0", ib_sysfs=fake_sysfs)
    proc = slurmkit("health", "check", "--site", site, "-M", "beta", "--node", "bn2", "--json", tmp_path=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["failing"] == ["ib_port:mlx5_0:1", "socket_ifname:slurmkit-gone0"]
    messages = {r["name"]: r["message"] for r in report["results"]}
    assert messages["ib_port:mlx5_0:1"].startswith("mlx5_0:1 missing: no HCA mlx5_0; jobs here would fall back to "
                                                   "sockets: reseat or replace the HCA")
    assert messages["socket_ifname:slurmkit-gone0"].startswith(
        "no interface slurmkit-gone0 on the node: NCCL and Gloo find no socket")
    assert "set the partition's fabric.socket_ifname" in messages["socket_ifname:slurmkit-gone0"]
    code, rows = sweep(site, tmp_path, "--cluster", "beta", "--node", "bn2", "--drain")
    expected = "slurmkit: ib_port:mlx5_0:1, socket_ifname:slurmkit-gone0"
    assert code == 1 and rows["bn2"]["action"] == "drained (%s)" % expected, rows
    info = node_state("beta", "bn2", devcluster)
    assert "DRAIN" in info.state and info.reason == expected


@needs_ch_run
def test_nodes_whose_container_runtime_cannot_start_are_drained_and_resumed_once_it_can(devcluster, tmp_path,
                                                                                      beta):
    # podman-hpc is in no Debian release (Apptainer is in sid, whose root runs this suite too): every beta
    # node fails the check; Charliecloud is everywhere (make install-system, the release roots).
    assert shutil.which("podman-hpc") is None, "this test needs a machine without podman-hpc"
    site = write_site(tmp_path, devcluster, runtime="podman-hpc")
    code, rows = sweep(site, tmp_path, "--cluster", "beta", "--drain")
    assert code == 1
    for node in devcluster["beta"].nodes:
        (result,) = [r for r in rows[node]["report"]["results"] if r["name"] == "container_runtime"]
        assert result["status"] == "fail" and result["message"].startswith(
            "runtime podman-hpc cannot start images: podman-hpc not on PATH"), result
        assert rows[node]["action"] == "drained (slurmkit: container_runtime)", rows[node]
        assert node_state("beta", node, devcluster).reason == "slurmkit: container_runtime"
    site = write_site(tmp_path, devcluster, runtime="charliecloud", resume_after=1)
    code, rows = sweep(site, tmp_path, "--cluster", "beta", "--drain")
    for node in devcluster["beta"].nodes:
        (result,) = [r for r in rows[node]["report"]["results"] if r["name"] == "container_runtime"]
        assert result["status"] == "ok" and result["message"].startswith("runtime charliecloud: /usr/bin/ch-run (")
        assert rows[node]["action"].startswith("resumed"), rows[node]
        assert node_state("beta", node, devcluster).reason == ""


@pytest.mark.slow
def test_never_resumes_a_node_drained_by_someone_else(devcluster, tmp_path, beta):
    site = write_site(tmp_path, devcluster, resume_after=1)
    devcluster.slurm("beta", "scontrol", "update", "NodeName=bn3", "State=DRAIN", "Reason=%s: fan" % beta)
    # bn1: slurmkit drains it, then an admin changes the reason: it is theirs from then on
    (tmp_path / "scratch" / "bn1").rmdir()
    sweep(site, tmp_path, "--cluster", "beta", "--drain")
    assert node_state("beta", "bn1", devcluster).reason.startswith("slurmkit: ")
    devcluster.slurm("beta", "scontrol", "update", "NodeName=bn1", "State=DRAIN", "Reason=%s: rma" % beta)
    (tmp_path / "scratch" / "bn1").mkdir()
    for _ in range(2):                           # resume_after is 1: slurmkit would resume its own at once
        code, rows = sweep(site, tmp_path, "--cluster", "beta", "--drain")
        assert rows["bn1"]["status"] == rows["bn3"]["status"] == "healthy"
        assert "left alone" in rows["bn1"]["action"] and "left alone" in rows["bn3"]["action"]
    for node, reason in (("bn1", "%s: rma" % beta), ("bn3", "%s: fan" % beta)):
        info = node_state("beta", node, devcluster)
        assert "DRAIN" in info.state and info.reason == reason
    # and a failing node someone else drained keeps their reason too
    (tmp_path / "scratch" / "bn3").rmdir()
    code, rows = sweep(site, tmp_path, "--cluster", "beta", "--drain")
    assert rows["bn3"]["status"] == "unhealthy" and "left alone" in rows["bn3"]["action"]
    assert node_state("beta", "bn3", devcluster).reason == "%s: fan" % beta


@pytest.mark.slow
def test_the_drain_cap(devcluster, tmp_path, beta):
    site = write_site(tmp_path, devcluster, cap=1)
    for node in ("bn1", "bn2"):
        (tmp_path / "scratch" / node).rmdir()
    (tmp_path / "scratch2" / "bn2").rmdir()             # bn2 fails two checks: drained first
    dry_code, dry = sweep(site, tmp_path, "--cluster", "beta", "--dry-run")
    assert dry["bn2"]["action"].startswith("would drain") and dry["bn1"]["action"].startswith("not drained")
    assert node_state("beta", "bn2", devcluster).reason == ""          # a dry run changes nothing
    code, rows = sweep(site, tmp_path, "--cluster", "beta", "--drain")
    assert code == 1 and rows["bn2"]["action"].startswith("drained (slurmkit: ")
    assert rows["bn1"]["action"] == ("not drained: partition gpu has 1 of its 3 nodes drained by slurmkit, "
                                     "its drain_cap (1) allows 1") or "partition urgent" in rows["bn1"]["action"]
    assert node_state("beta", "bn1", devcluster).reason == ""
    # the next sweep still holds: the cap counts the drain slurmkit already keeps
    code, rows = sweep(site, tmp_path, "--cluster", "beta", "--drain")
    assert rows["bn1"]["action"].startswith("not drained") and node_state("beta", "bn1", devcluster).reason == ""


# ---------------------------------------------------------------- slurmd's HealthCheckProgram (gamma)

@pytest.fixture
def gamma_health(devcluster):
    health = devcluster["gamma"].raw.get("health_check")
    if not health:
        pytest.fail("gamma has no HealthCheckProgram: restart the clusters (make cluster-up)", pytrace=False)
    scratch = Path(health["scratch"])
    for node in ("gn1", "gn2"):
        if node_state("gamma", node, devcluster).reason:
            pytest.skip("gamma's %s is out of service right now (%s)" % (
                node, node_state("gamma", node, devcluster).reason))
    token = "%s %d" % (ADMIN, time.time())
    yield scratch, token
    (scratch / "gn2").mkdir(exist_ok=True)
    for node in ("gn1", "gn2"):
        info = node_state("gamma", node, devcluster)
        if info.reason.startswith(token):
            devcluster.slurm("gamma", "scontrol", "update", "NodeName=" + node, "State=RESUME")
    # slurmd resumes its own drain within two checks; make sure before leaving
    try:
        wait_until(lambda: not node_state("gamma", "gn2", devcluster).reason.startswith("slurmkit:"), 30,
                 what="gn2 resumed by its health check")
    finally:
        info = node_state("gamma", "gn2", devcluster)
        if info.reason.startswith("slurmkit: mount:%s" % scratch):
            devcluster.slurm("gamma", "scontrol", "update", "NodeName=gn2", "State=RESUME")


@pytest.mark.slow
def test_slurmd_runs_the_check_drains_its_node_and_resumes_it(devcluster, gamma_health):
    scratch, token = gamma_health
    config = devcluster.slurm("gamma", "scontrol", "show", "config").stdout
    assert "HealthCheckProgram      = %s" % devcluster["gamma"].raw["health_check"]["program"] in config
    # an admin's drain on the other node, which the program sees at every run
    devcluster.slurm("gamma", "scontrol", "update", "NodeName=gn1", "State=DRAIN", "Reason=%s: cabling" % token)
    (scratch / "gn2").rmdir()
    expected = "slurmkit: mount:%s" % (scratch / "gn2")
    info = wait_until(lambda: (lambda i: i if i.reason == expected else None)(node_state("gamma", "gn2", devcluster)),
                    40, what="gn2 drained by slurmd's health check")
    assert "DRAIN" in info.state and info.reason_user == "root"
    # The program writes its report as it ends, after the drain (and after the drain cap's wait for
    # the drain's second to be over), and each run starts the file afresh: read a finished run's.
    log = Path(devcluster["gamma"].raw["health_check"]["log_dir"]) / "last.gn2.log"
    wait_until(lambda: "UNHEALTHY (mount:%s)" % (scratch / "gn2") in log.read_text(), 30, interval=0.2,
             what="the check's report in %s" % log)
    (scratch / "gn2").mkdir()
    wait_until(lambda: "; clean 1/2" in node_state("gamma", "gn2", devcluster).reason, 30, interval=0.2,
             what="one clean check counted")
    wait_until(lambda: node_state("gamma", "gn2", devcluster).reason == "", 30, what="gn2 resumed")
    assert "DRAIN" not in node_state("gamma", "gn2", devcluster).state
    # gn1 passed every check all along, yet its admin drain is untouched
    info = node_state("gamma", "gn1", devcluster)
    assert "DRAIN" in info.state and info.reason == "%s: cabling" % token


@pytest.mark.slow
def test_a_failure_both_nodes_share_drains_one_of_them_under_a_cap_of_one(devcluster, gamma_health):
    """gamma's health site has drain_cap 1.  A failure both nodes see at once (their scratch mounts
    both gone) used to drain both: slurmd runs the check on both nodes in the same second (one
    HealthCheckInterval), each read "none drained yet" and drained itself.  The nodes share nothing
    but Slurm; the cap must hold all the same, and one of them must still be drained."""
    scratch, _ = gamma_health
    site = devcluster["gamma"].raw["health_check"]["site"]
    interval = devcluster["gamma"].raw["health_check"]["interval_s"]

    def drained():
        return sorted(n for n in ("gn1", "gn2")
                      if node_state("gamma", n, devcluster).reason.startswith("slurmkit: mount:%s" % scratch))

    def both_at_once():
        """Both nodes' checks started in the same instant, as two slurmds would: their reports."""
        argv = [sys.executable, "-m", "slurmkit", "health", "check", "--slurm", "--json", "--site", site,
                "--cluster", "gamma", "--node"]
        procs = [subprocess.Popen(argv + [n], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  cwd=str(REPO)) for n in ("gn1", "gn2")]
        outs = [p.communicate(timeout=120) for p in procs]
        for p, (out, err) in zip(procs, outs):
            assert p.returncode == 1 and "Traceback" not in err, err
        return [json.loads(out)["slurm"] for out, _ in outs]

    import threading

    samples, stop = [], threading.Event()

    def sample():                          # (time, nodes drained by this failure), 4 times a second
        while not stop.is_set():
            samples.append((time.monotonic(), drained()))
            stop.wait(0.25)
    sampler = threading.Thread(target=sample, daemon=True)
    try:
        for node in ("gn1", "gn2"):
            (scratch / node).rmdir()
        sampler.start()
        # Our own simultaneous rounds, besides slurmd's checks every few seconds on both nodes.
        for _ in range(4):
            reports = both_at_once()
            assert [r["error"] for r in reports] == [None, None], reports
            assert sum(r["done"] for r in reports) <= 1, reports      # at most one of a round drained
        # Then slurmd's own checks for a few intervals.
        time.sleep(3 * interval)
        stop.set()
        sampler.join(10)
        # Both drained only for the moment between a drain and its undoing, in the check that made
        # it (seconds at most on a loaded machine); the old race left both drained for good.
        longest, since = 0.0, None
        for when, nodes in samples:
            if len(nodes) == 2:
                since = when if since is None else since
                longest = max(longest, when - since)
            else:
                since = None
        assert longest < 10, [(round(t - samples[0][0], 2), n) for t, n in samples]
        assert len(samples[-1][1]) == 1 and len(drained()) == 1, samples[-5:]
    finally:
        stop.set()
        for node in ("gn1", "gn2"):
            (scratch / node).mkdir(exist_ok=True)
        wait_until(lambda: drained() == [], 60, what="both nodes resumed by their checks")
