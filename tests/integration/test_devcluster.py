"""The local dev clusters themselves: nodes, partitions, gres, topology, srun
across nodes, login-node sshd with strict host key checking, loopback-only
listeners, the switch-wait cap, accounting (slurmdbd on alpha, none on beta),
preemption on beta, and `devcluster.py up` leaving others' drained nodes
alone.  Needs ``make cluster-up``.  Jobs are short (``--time=2``)."""

import os
import re
import stat
import subprocess
import time
from pathlib import Path

import pytest

from conftest import devcluster_cmd

EXPECTED = {
    "alpha": {"nodes": ["an1", "an2", "an3", "an4"], "gres": "gpu:h100:8",
              "partitions": {"gpu": ("YES", "1-00:00:00"), "cpu": ("NO", "UNLIMITED")}},
    "beta": {"nodes": ["bn1", "bn2", "bn3"], "gres": "gpu:a100:4",
             "partitions": {"gpu": ("YES", "12:00:00"), "urgent": ("NO", "12:00:00")}},
    "gamma": {"nodes": ["gn1", "gn2"], "gres": "npu:ascend910b:8",
              "partitions": {"npu": ("YES", "12:00:00")}},
}
# Healthy: idle, or busy with somebody's job (the clusters are shared by
# concurrently running test sessions); never down/drained/not responding.
HEALTHY = {"idle", "mixed", "allocated", "completing"}
OUR_PROGRAMS = {"slurmctld", "slurmd", "slurmstepd", "srun", "munged", "slurmdbd", "mariadbd"}


def scontrol_records(dc, cluster, what):
    """``scontrol show WHAT -o`` -> list of {key: value} (one per line)."""
    out = dc.slurm(cluster, "scontrol", "show", what, "-o").stdout
    records = []
    for line in out.splitlines():
        rec = {}
        for token in line.split():
            k, sep, v = token.partition("=")
            if sep:
                rec.setdefault(k, v)
        if rec:
            records.append(rec)
    return records


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_cluster_nodes_partitions_and_gres(devcluster, name):
    exp = EXPECTED[name]
    assert devcluster[name].nodes == exp["nodes"]
    nodes = {r["NodeName"]: r for r in scontrol_records(devcluster, name, "node")}
    assert sorted(nodes) == exp["nodes"]
    for node, rec in nodes.items():
        state = rec["State"].lower()
        assert state.split("+")[0] in HEALTHY, "%s/%s is %s" % (name, node, rec["State"])
        assert rec["Gres"] == exp["gres"]
        assert rec["CPUTot"] == "4" and rec["RealMemory"] == "4000"
        # Each slurmd has its own loopback address.
        assert rec["NodeAddr"] == devcluster[name].raw["nodes"][node]["addr"]
    parts = {r["PartitionName"]: r for r in scontrol_records(devcluster, name, "partition")}
    assert {p: (r["Default"], r["MaxTime"]) for p, r in parts.items()} == exp["partitions"]
    # sinfo agrees: every node is in every partition.
    lines = devcluster.slurm(name, "sinfo", "-h", "-N", "-o", "%N %P").stdout.split("\n")
    pairs = {tuple(line.split()) for line in lines if line.strip()}
    want = {(n, p + ("*" if d == "YES" else "")) for n in exp["nodes"]
            for p, (d, _) in exp["partitions"].items()}
    assert pairs == want


def test_alpha_topology_has_two_leaves_under_a_spine(devcluster):
    switches = {r["SwitchName"]: r for r in scontrol_records(devcluster, "alpha", "topology")}
    assert switches["leaf1"]["Nodes"] == "an[1-2]" and switches["leaf1"]["Level"] == "0"
    assert switches["leaf2"]["Nodes"] == "an[3-4]" and switches["leaf2"]["Level"] == "0"
    assert switches["spine"]["Switches"] == "leaf1,leaf2" and switches["spine"]["Level"] == "1"
    beta = {r["SwitchName"]: r["Nodes"] for r in scontrol_records(devcluster, "beta", "topology")}
    assert beta == {"leaf1": "bn[1-2]", "leaf2": "bn3", "spine": "bn[1-3]"}


def test_two_node_gpu_job_runs_srun_on_both_nodes_under_one_leaf(devcluster, tmp_path):
    out = tmp_path / "job.out"
    job = devcluster.sbatch("alpha", "-N2", "--gpus-per-node=2", "--switches=1", "--time=2",
                 "-J", "devcluster-2node", "-o", out,
                 "--wrap", 'srun bash -c "echo \\$SLURMD_NODENAME \\$CUDA_VISIBLE_DEVICES"',
                 cwd=tmp_path)
    info = devcluster.wait_job_state("alpha", job, "COMPLETED", timeout=40)
    assert info["ExitCode"] == "0:0"
    assert info["NodeList"] in ("an[1-2]", "an[3-4]"), info["NodeList"]  # one leaf switch
    lines = sorted(Path(out).read_text().split("\n"))
    lines = [line for line in lines if line.strip()]
    first = int(info["NodeList"][3])
    assert lines == ["an%d 0,1" % first, "an%d 0,1" % (first + 1)]


@pytest.mark.slow
def test_gamma_npu_gres_job_is_allocated_and_runs(devcluster, tmp_path):
    out = tmp_path / "npu.out"
    job = devcluster.sbatch("gamma", "-N1", "--gres=npu:8", "--time=2", "-o", out,
                 "--wrap", "sleep 2; echo npu-ok $SLURMD_NODENAME", cwd=tmp_path)
    devcluster.wait_job_state("gamma", job, {"RUNNING", "COMPLETED"}, timeout=30, interval=0.5)
    detail = devcluster.job_info("gamma", job, details=True)
    if detail["JobState"] == "RUNNING":
        assert "GRES=npu:ascend910b:8(IDX:0-7)" in detail["_raw"]
    assert detail["TresPerNode"] in ("gres:npu:8", "gres/npu:8")  # 22.05 / 24.11 spelling
    info = devcluster.wait_job_state("gamma", job, "COMPLETED", timeout=30)
    assert info["ExitCode"] == "0:0"
    assert Path(out).read_text().split() == ["npu-ok", info["NodeList"]]


def accepted_count(log):
    try:
        return Path(log).read_text(errors="replace").count("Accepted publickey")
    except FileNotFoundError:
        return 0


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_login_node_answers_with_strict_host_key_checking(devcluster, name):
    c = devcluster[name]
    before = accepted_count(c.sshd_log)
    proc = devcluster.ssh(name, "echo $SLURM_CONF; sinfo -h -o %P")
    deadline = time.monotonic() + 30
    while proc.returncode == 255 and time.monotonic() < deadline:
        # Another test session may be stopping or rekeying this login node
        # right now (devcluster_control restores it): try again.
        time.sleep(0.5)
        before = accepted_count(c.sshd_log)
        proc = devcluster.ssh(name, "echo $SLURM_CONF; sinfo -h -o %P")
    assert proc.returncode == 0, proc.stderr
    conf, *partitions = proc.stdout.split()
    assert conf == c.slurm_conf  # SetEnv in that login node's sshd_config
    want = {p + ("*" if d == "YES" else "") for p, (d, _) in EXPECTED[name]["partitions"].items()}
    assert set(partitions) == want
    deadline = time.monotonic() + 5
    while accepted_count(c.sshd_log) <= before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert accepted_count(c.sshd_log) > before


def test_login_node_refused_with_wrong_or_missing_known_hosts(devcluster, tmp_path):
    real = Path(devcluster.known_hosts).read_text().splitlines()
    beta_key = [line for line in real if line.startswith("[127.0.2.2]:2222 ")][0].split(None, 1)[1]
    wrong = tmp_path / "wrong_known_hosts"
    wrong.write_text("[127.0.1.2]:2222 %s\n" % beta_key)  # alpha's name, beta's key
    proc = devcluster.ssh("alpha", "true", known_hosts=wrong)
    assert proc.returncode == 255
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in proc.stderr
    assert "Host key verification failed" in proc.stderr

    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    proc = devcluster.ssh("alpha", "true", known_hosts=empty)
    assert proc.returncode == 255
    assert "No ED25519 host key is known for [127.0.1.2]:2222" in proc.stderr


def listening_sockets():
    """[(addr, port, pid, comm)] for every TCP/UDP listener, from ss."""
    out = subprocess.run(["ss", "-H", "-ltunp"], stdout=subprocess.PIPE,
                         universal_newlines=True, check=True).stdout
    socks = []
    for line in out.splitlines():
        parts = line.split()
        addr, _, port = parts[4].rpartition(":")
        users = re.findall(r'\("([^"]+)",pid=(\d+)', line)
        for comm, pid in users or [(None, None)]:
            socks.append((addr.strip("[]").split("%")[0], int(port), pid and int(pid), comm))
    return socks


def test_nothing_listens_outside_loopback(devcluster, tmp_path):
    # Include srun's listeners: keep a 2-node step running on beta meanwhile.
    job = devcluster.sbatch("beta", "-N2", "--time=2", "-o", tmp_path / "srun.out",
                 "--wrap", "srun sleep 30", cwd=tmp_path)
    devcluster.wait_job_state("beta", job, "RUNNING", timeout=30, interval=0.5)
    lo, hi = devcluster["beta"].raw["srun_port_range"]
    deadline = time.monotonic() + 10
    socks = listening_sockets()
    while not any(comm == "srun" and lo <= port <= hi for _, port, _, comm in socks):
        assert time.monotonic() < deadline, "no srun listener in %d-%d: %s" % (lo, hi, socks)
        time.sleep(0.3)
        socks = listening_sockets()
    sshd_pids = set()
    for c in devcluster.clusters.values():
        try:  # absent while another test session has this login node stopped
            sshd_pids.add(int(Path(c.raw["login"]["sshd_pid_file"]).read_text().split()[0]))
        except (OSError, ValueError, IndexError):
            pass
    ours = [(a, p, pid, comm) for a, p, pid, comm in socks
            if comm in OUR_PROGRAMS or pid in sshd_pids]
    outside = [s for s in ours if not s[0].startswith("127.")]
    assert not outside, "listening outside 127.0.0.0/8: %s" % outside
    bound = {(a, p) for a, p, _, _ in ours}
    for c in devcluster.clusters.values():
        assert (c.raw["ctld"]["addr"], c.raw["ctld"]["port"]) in bound
        for node in c.raw["nodes"].values():
            assert (node["addr"], node["port"]) in bound
    # alpha's slurmdbd on its own loopback address; its MariaDB has no TCP listener.
    dbd = devcluster["alpha"].raw["accounting"]["slurmdbd"]
    assert (dbd["addr"], dbd["port"]) in bound
    assert not [s for s in ours if s[3] == "mariadbd"]
    logins = [(c.login_host, c.login_port) in bound for c in devcluster.clusters.values()]
    assert sum(logins) >= 2, "login sshds listening: %s" % logins  # one may be under test elsewhere
    # srun inside a job listens on 127.0.0.1 within SrunPortRange.
    assert any(a == "127.0.0.1" and lo <= p <= hi for a, p, _, comm in ours if comm == "srun")
    devcluster.slurm("beta", "scancel", job)
    devcluster.wait_job_state("beta", job, {"CANCELLED", "COMPLETED"}, timeout=30, interval=0.5)


# ------------------------------------------------------------------ switch-wait cap

@pytest.mark.parametrize("name,effective", [("alpha", "00:02:00"), ("beta", "00:02:00"),
                                            ("gamma", "00:05:00")])
def test_slurm_caps_the_switch_wait(devcluster, name, effective):
    # alpha and beta set SchedulerParameters=max_switch_wait=120; gamma keeps
    # Slurm's default cap of 300 s.  A held job is never started.
    job = devcluster.sbatch(name, "--hold", "-N1", "--time=1", "--switches=1@10:00", "-o", "/dev/null",
                            "--wrap", "true")
    try:
        assert devcluster.job_info(name, job)["Switches"] == "1@" + effective
    finally:
        devcluster.slurm(name, "scancel", job)
    sched = [line for line in devcluster.slurm(name, "scontrol", "show", "config").stdout.splitlines()
             if line.startswith("SchedulerParameters")]
    assert ("max_switch_wait=120" in sched[0]) == (name != "gamma"), sched


# ------------------------------------------------------------------ accounting

def sacct_row(devcluster, cluster, job, timeout=30):
    """(State, ExitCode) of the job's allocation in sacct, once slurmctld has
    sent its end to slurmdbd (asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        out = devcluster.slurm(cluster, "sacct", "-n", "-P", "-X", "-j", job, "-o", "JobID,State,ExitCode")
        rows = [line.split("|") for line in out.stdout.splitlines() if line.strip()]
        if rows and rows[0][1] not in ("PENDING", "RUNNING", "COMPLETING"):
            assert rows[0][0] == job
            return rows[0][1], rows[0][2]
        assert time.monotonic() < deadline, "sacct -j %s on %s: %r" % (job, cluster, out.stdout)
        time.sleep(0.5)


def test_alpha_jobs_are_accounted_by_slurmdbd(devcluster, tmp_path):
    acct = devcluster["alpha"].raw["accounting"]
    assert acct["storage"] == "slurmdbd"
    # slurmdbd refuses a config others can read; it holds the database password.
    assert stat.S_IMODE(os.stat(acct["slurmdbd"]["conf"]).st_mode) == 0o600
    for what, comm in (("slurmdbd", "slurmdbd"), ("mariadb", "mariadbd")):
        assert Path("/proc/%d/comm" % acct[what]["pid"]).read_text().strip() == comm
    ok = devcluster.sbatch("alpha", "--time=2", "-o", tmp_path / "ok.out", "--wrap", "srun true", cwd=tmp_path)
    bad = devcluster.sbatch("alpha", "--time=2", "-o", tmp_path / "bad.out", "--wrap", "exit 3", cwd=tmp_path)
    devcluster.wait_job_state("alpha", ok, "COMPLETED", timeout=40)
    with pytest.raises(AssertionError, match="ended FAILED"):
        devcluster.wait_job_state("alpha", bad, "COMPLETED", timeout=40)
    assert sacct_row(devcluster, "alpha", ok) == ("COMPLETED", "0:0")
    assert sacct_row(devcluster, "alpha", bad) == ("FAILED", "3:0")
    # The cluster is registered, with root's association (its default account).
    assocs = devcluster.slurm("alpha", "sacctmgr", "-n", "-P", "list", "assoc", "user=root",
                              "format=cluster,account,user").stdout.split()
    assert "alpha|root|root" in assocs


def test_beta_has_no_accounting(devcluster, tmp_path):
    assert devcluster["beta"].raw["accounting"] is None
    proc = devcluster.slurm("beta", "sacct", "-n", "-j", "1", check=False)
    assert proc.returncode != 0
    assert "Slurm accounting storage is disabled" in proc.stdout + proc.stderr


# ------------------------------------------------------------------ preemption

@pytest.mark.slow
def test_urgent_job_preempts_a_gpu_job_on_beta(devcluster, tmp_path):
    victim_out = tmp_path / "victim.out"
    victim = devcluster.sbatch("beta", "-p", "gpu", "-w", "bn3", "--exclusive", "--gres=gpu:4", "--time=2",
                               "-o", victim_out, "--wrap", "echo victim-started; sleep 120", cwd=tmp_path)
    try:
        devcluster.wait_job_state("beta", victim, "RUNNING", timeout=60, interval=0.5)
        urgent = devcluster.sbatch("beta", "-p", "urgent", "-w", "bn3", "--gres=gpu:4", "--time=1",
                                   "-o", tmp_path / "urgent.out", "--wrap", "echo urgent-ran", cwd=tmp_path)
        info = devcluster.wait_job_state("beta", victim, "PREEMPTED", timeout=30, interval=0.5)
    finally:
        devcluster.slurm("beta", "scancel", victim, check=False)
    # Cancelled, not requeued: it stays PREEMPTED and never ran again.
    assert info["Restarts"] == "0"
    assert devcluster.slurm("beta", "squeue", "-h", "-t", "all", "-j", victim, "-o", "%T").stdout.split() \
        == ["PREEMPTED"]
    assert "CANCELLED AT" in victim_out.read_text() and "DUE TO PREEMPTION" in victim_out.read_text()
    done = devcluster.wait_job_state("beta", urgent, "COMPLETED", timeout=30, interval=0.5)
    assert done["NodeList"] == "bn3" and done["Partition"] == "urgent"
    assert (tmp_path / "urgent.out").read_text().strip() == "urgent-ran"


# ------------------------------------------------------------------ ownership of drained nodes

def node_state_reason(devcluster, cluster, node):
    """(State, Reason) from scontrol; the reason may contain spaces and ends
    before " [user@time]"."""
    raw = devcluster.slurm(cluster, "scontrol", "show", "node", "-o", node).stdout
    state = re.search(r"\bState=(\S+)", raw)
    reason = re.search(r"\bReason=(.*?)(?: \[[^]]*\])?\s*$", raw)
    return state.group(1) if state else "", reason.group(1) if reason else ""


def test_up_resumes_only_what_is_its_own(devcluster):
    # gn2: drained by "someone else" (a test, an admin, a slurmkit health
    # drain); gn1: drained with devcluster's own prefix.
    name = "gamma"
    drain = {"gn1": "devcluster: test drain", "gn2": "test: keep"}
    for node, reason in drain.items():
        devcluster.slurm(name, "scontrol", "update", "NodeName=%s" % node, "State=DRAIN", "Reason=%s" % reason)
    try:
        out = devcluster_cmd("up", name)
        state, reason = node_state_reason(devcluster, name, "gn2")
        assert "DRAIN" in state and reason == "test: keep", (state, reason, out)
        assert re.search(r"gn2 is \S+ with reason 'test: keep', set by someone else: left alone", out), out
        state, _ = node_state_reason(devcluster, name, "gn1")
        assert "DRAIN" not in state, (state, out)
        assert "gn1 was" in out and "-> resume" in out
    finally:
        for node in drain:
            if "DRAIN" in node_state_reason(devcluster, name, node)[0]:
                devcluster.slurm(name, "scontrol", "update", "NodeName=%s" % node, "State=RESUME")


def test_login_sshd_sets_per_source_penalties_only_where_known(devcluster):
    probe = subprocess.run(["/usr/sbin/sshd", "-G", "-f", "/dev/null", "-o", "PerSourcePenalties=no"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for c in devcluster.clusters.values():
        lines = Path(c.raw["login"]["sshd_config"]).read_text().splitlines()
        assert ("PerSourcePenalties no" in lines) == (probe.returncode == 0), c.name
