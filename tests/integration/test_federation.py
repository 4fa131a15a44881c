"""Federation over SSH against the three real local clusters.

Every command here reaches the clusters through their login nodes
(SLURMKIT_VIA=ssh), each test with its own cache directory so that one
test's cool-downs never leak into another.
"""

import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import cancel_later, fill, slurm, wait_job_state

ROOT = Path(__file__).resolve().parents[2]
SITE = str(ROOT / "site_configs" / "local.yaml")
ONE_GPU = ["-N", "1", "--gpus-per-node", "1", "-T", "single", "-t", "2"]


@pytest.fixture
def fed(tmp_path):
    env = dict(os.environ, SLURMKIT_SITE=SITE, SLURMKIT_VIA="ssh", SLURMKIT_CACHE_DIR=str(tmp_path / "cache"))

    def run(*args, check=True, timeout=120):
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "slurmkit", *args], capture_output=True, text=True, env=env,
                              timeout=timeout)
        proc.elapsed = time.monotonic() - start
        if check and proc.returncode != 0:
            raise AssertionError("slurmkit %s -> %d\n%s%s" % (" ".join(args), proc.returncode, proc.stdout,
                                                               proc.stderr))
        return proc

    run.env = env
    run.out = str(tmp_path / "o-%j")
    return run


def candidates(proc):
    return {c["cluster"]: c for c in json.loads(proc.stdout)["candidates"]}


def test_auto_picks_the_cluster_where_the_job_starts_first(devcluster, fed, request):
    # alpha is the most expensive cluster at every hour: only its earlier start can make it win.
    fill(request, "beta", "-N", "3", "--gpus-per-node", "4")
    fill(request, "gamma", "-N", "2", "--gres=npu:8")
    proc = fed("submit", "--cluster", "auto", "--explain", "--json", "-o", fed.out, *ONE_GPU, "--", "true")
    placed = json.loads(proc.stdout)
    cancel_later(request, "alpha", placed["job_id"])
    assert placed["cluster"] == "alpha"
    c = candidates(proc)
    assert all(c[n]["viable"] for n in ("alpha", "beta", "gamma"))
    assert c["alpha"]["estimate"] < c["beta"]["estimate"] and c["alpha"]["estimate"] < c["gamma"]["estimate"]
    assert "ESTIMATED START" in proc.stderr and "*alpha" in proc.stderr  # the --explain table


def test_explain_says_why_clusters_are_skipped(devcluster, fed):
    proc = fed("submit", "--cluster", "auto", "--dry-run", "--json", "-N", "3", "--gpus-per-node", "6",
               "-t", "2", "--", "true")
    c = candidates(proc)
    assert json.loads(proc.stdout)["id"] is None  # a dry run submits nothing
    assert c["alpha"]["viable"]
    assert c["beta"]["skip"] == "ineligible" and "6 gpu per node" in c["beta"]["reason"]
    assert c["gamma"]["skip"] == "ineligible" and "3 nodes" in c["gamma"]["reason"]


def test_accel_filter_and_vendor_templates(devcluster, fed, request):
    proc = fed("submit", "--cluster", "auto", "--accel", "ascend910b", "--json", "-o", fed.out, *ONE_GPU,
               "--", "true")
    placed = json.loads(proc.stdout)
    cancel_later(request, "gamma", placed["job_id"])
    assert placed["cluster"] == "gamma" and placed["partition"] == "npu"
    assert candidates(proc)["alpha"]["skip"] == "ineligible"
    script = slurm("gamma", "scontrol", "write", "batch_script", placed["job_id"], "-").stdout
    assert "#SBATCH --gres=npu:ascend910b:1" in script and "HCCL_SOCKET_IFNAME=lo" in script


@pytest.mark.slow
@pytest.mark.parametrize("outage,needles", [
    ("sshd_stopped", ["Connection refused"]),
    # the controller ping fails at once, where sbatch alone would retry for ~18 s
    ("ctld_stopped", ["slurm controller", "scontrol ping"]),
    ("rekeyed", ["HAS CHANGED", "SHA256:"]),
])
def test_an_unreachable_cluster_is_skipped_with_its_reason(devcluster, devcluster_control, fed, request,
                                                          outage, needles):
    # gamma is cheaper than alpha at every hour: only its outage can send the job to alpha.
    with getattr(devcluster_control, outage)("gamma"):
        proc = fed("submit", "--cluster", "gamma,alpha", "--explain", "--json", "-o", fed.out, *ONE_GPU,
                   "--", "true")
    placed = json.loads(proc.stdout)
    cancel_later(request, "alpha", placed["job_id"])
    assert placed["cluster"] == "alpha"
    gamma = candidates(proc)["gamma"]
    assert gamma["skip"] == "unreachable"
    assert all(n.lower() in gamma["reason"].lower() for n in needles), gamma["reason"]
    assert "unreachable" in proc.stderr   # the --explain table shows why
    assert proc.elapsed < 15


def test_a_failing_cluster_is_cooled_down(devcluster, devcluster_control, fed):
    args = ("submit", "--cluster", "gamma,alpha", "--dry-run", "--json", *ONE_GPU, "--", "true")
    with devcluster_control.sshd_stopped("gamma"):
        for _ in range(2):
            assert candidates(fed(*args))["gamma"]["skip"] == "unreachable"
        third = fed(*args)
    gamma = candidates(third)["gamma"]
    assert gamma["skip"] == "cooling" and "Connection refused" in gamma["reason"]
    # still cooling after sshd is back: the point is not to retry it on every call
    assert candidates(fed(*args))["gamma"]["skip"] == "cooling"


@pytest.mark.slow
def test_status_and_cancel_across_clusters(devcluster, devcluster_control, fed):
    ids = [json.loads(fed("submit", "--cluster", name, "--json", "-o", fed.out, "-N", "1", "-T", "single",
                          "-t", "5", "--", "sleep", "300").stdout)["id"] for name in ("alpha", "beta")]
    mine = {j["id"]: j for j in json.loads(fed("status", "--json").stdout)["jobs"]}
    assert set(ids) <= set(mine)
    with devcluster_control.sshd_stopped("gamma"):
        proc = fed("status", "--json")
    data = json.loads(proc.stdout)
    assert set(ids) <= {j["id"] for j in data["jobs"]}
    assert [u["cluster"] for u in data["unreachable"]] == ["gamma"]
    assert "Warning: cluster gamma not reachable" in proc.stderr
    assert fed("cancel", *ids).stdout.split("\n")[:2] == ["cancelled %s" % i for i in ids]
    for ref in ids:
        cluster, job = ref.split(":")
        wait_job_state(cluster, job, {"CANCELLED"}, timeout=60)


def _lock_path(token):
    return "/tmp/slurmkit-submit-%d-%s.lock" % (os.getuid(), token)


def _lock_is_waited_on(path):
    """Whether a process other than this one has the lock file open (the remote wrapper)."""
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        if fd_dir.parent.name == str(os.getpid()):
            continue
        try:
            if any(os.readlink(str(fd)) == path for fd in fd_dir.iterdir()):
                return True
        except OSError:
            continue
    return False


def test_connection_cut_mid_submit_leaves_exactly_one_job(devcluster, tmp_path, monkeypatch):
    from slurmkit.federation import planner
    from slurmkit.remote import pool
    from slurmkit.script.render import JobSpec
    from slurmkit.session import Session
    from slurmkit.site import load_site

    monkeypatch.setenv("SLURMKIT_VIA", "ssh")
    monkeypatch.setenv("SLURMKIT_CACHE_DIR", str(tmp_path / "cache"))
    token = "cut-%d-%d" % (os.getpid(), int(time.time()))
    spec = JobSpec(command=("sleep", "120"), template="single", time="3", gpus_per_node=0, token=token,
                   output=str(tmp_path / "o-%j"))
    lock_path = _lock_path(token)
    opened_before = pool.connection_count()
    # Hold the login node's per-token lock: the remote submit then waits *after*
    # the whole script has arrived, the moment we cut the connection.
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with Session(load_site(SITE)) as session:
            result = {}

            def submit():
                try:
                    result["placement"] = planner.submit_best(session, spec, ["beta"], partition="gpu")
                except Exception as exc:  # reported below
                    result["error"] = exc

            thread = threading.Thread(target=submit)
            thread.start()
            deadline = time.monotonic() + 30
            while not _lock_is_waited_on(lock_path):
                assert time.monotonic() < deadline, "the remote submit never reached its lock"
                time.sleep(0.1)
            session.backend("beta").runner.transport().close()   # the cut
            time.sleep(1.0)
            fcntl.flock(lock, fcntl.LOCK_UN)
            thread.join(timeout=90)
    assert not thread.is_alive()
    assert "error" not in result, result.get("error")
    job_id = result["placement"].submission.ref.job_id
    jobs = slurm("beta", "squeue", "--noheader", "--states=all", "--format=%i %k").stdout.split("\n")
    carrying = [ln.split()[0] for ln in jobs if ln.strip().endswith("slurmkit:" + token)]
    slurm("beta", "scancel", job_id, check=False)
    assert carrying == [job_id]
    # The cut really happened mid-call: the answer was lost and a second connection asked again.
    assert pool.connection_count() - opened_before == 2
