"""slurmkit on this machine against a federation of three Slurm releases at once.

``make cluster-up RELEASES=mixed`` (scripts/releases/mixed.sh) starts alpha on
this machine's Slurm (22.05 on Debian 12), beta on Slurm 24.11 (a Debian 13
root) and gamma on Slurm 26.05 (a Debian unstable root), on 127.0.21-23.x
with their state in .devcluster/mixed, beside the default clusters.  The
site .devcluster/mixed/site.yaml reaches alpha with this machine's commands
and beta and gamma only through their login nodes, whose sshd and Slurm
commands are those of their roots: what a user of several sites, each on the
Slurm its admins run, has.

Everything here goes through the slurmkit CLI, as that user would run it.
Without the mixed federation up, the module is skipped (``make test-releases``
brings it up, runs this file and stops it).
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import run_slurmkit

REPO = Path(__file__).resolve().parents[2]
MIXED = Path(os.environ.get("MIXED_STATE") or (REPO / ".devcluster" / "mixed"))
SITE = MIXED / "site.yaml"
DEVCLUSTER = REPO / "devcluster" / "devcluster.py"
RELEASES = {"beta": "24.11.", "gamma": "26.05."}


def _load():
    try:
        data = json.loads((MIXED / "clusters.json").read_text())
        layout = json.loads((MIXED / "layout.json").read_text())
    except (OSError, ValueError):
        return None
    if not layout.get("roots") or not SITE.exists():
        return None
    # Up means every controller and login sshd recorded there is alive (down
    # leaves the files behind).
    for c in data["clusters"].values():
        for pid in (c["ctld"].get("pid"), c["login"].get("sshd_pid")):
            if not pid or not os.path.exists("/proc/%d" % pid):
                return None
    return data


DATA = _load()
pytestmark = pytest.mark.skipif(DATA is None, reason="the mixed-release federation is not up "
                                "(make cluster-up RELEASES=mixed; make test-releases runs this file)")


def slurmkit(*args, timeout=120, check=True):
    return run_slurmkit(["--site", SITE] + list(args), cwd=REPO, check=check, timeout=timeout)


def devcluster(*args):
    env = dict(os.environ, DEVCLUSTER_STATE=str(MIXED))
    for var in ("DEVCLUSTER_NET_OFFSET", "DEVCLUSTER_ROOTS"):
        env.pop(var, None)          # layout.json says where each cluster runs
    proc = subprocess.run([sys.executable, str(DEVCLUSTER)] + list(args), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=180)
    assert proc.returncode == 0, proc.stdout
    return proc.stdout


def host_version():
    conf = DATA["clusters"]["alpha"]["slurm_conf"]
    out = subprocess.run(["sinfo", "--version"], env=dict(os.environ, SLURM_CONF=conf), stdout=subprocess.PIPE,
                         universal_newlines=True, check=True).stdout
    return out.split()[1]


@pytest.fixture
def jobs():
    """Job ids ("cluster:id") a test submitted: cancelled at the end, whatever happened."""
    ids = []
    yield ids
    if ids:
        slurmkit("cancel", *ids, check=False)


@pytest.fixture
def outdir():
    # Under the repository: the roots see it at the same path, so a job's output
    # written inside the 26.05 root is read here.
    d = MIXED / "out"
    d.mkdir(exist_ok=True)
    return d


def submit(jobs, *args):
    out = slurmkit("submit", "--json", *args).stdout
    job = json.loads(out)
    jobs.append(job["id"])
    return job


def wait(job_id, timeout=90):
    proc = slurmkit("wait", "--json", "--timeout", timeout, job_id, check=False, timeout=timeout + 30)
    return json.loads(proc.stdout)


# ------------------------------------------------------------------ the federation itself

def test_each_cluster_runs_its_own_release():
    clusters = DATA["clusters"]
    assert clusters["alpha"]["root"] is None and clusters["alpha"]["slurm_version"] == host_version()
    for name, prefix in RELEASES.items():
        assert clusters[name]["root"] and clusters[name]["slurm_version"].startswith(prefix), name
        # its login node's sshd runs in the root: its / is the root (devcluster/in-root.sh pivots into it,
        # so /proc/PID/root reads "/"; the files it reaches there are the root's)
        pid = int(Path(clusters[name]["login"]["sshd_pid_file"]).read_text())
        assert os.path.samefile("/proc/%d/root/etc/debian_version" % pid,
                                os.path.join(clusters[name]["root"], "etc", "debian_version"))
    assert len({c["slurm_version"][:5] for c in clusters.values()}) == 3


def test_probe_reads_every_release():
    proc = slurmkit("clusters", "--json")
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert all(r["reachable"] for r in rows.values()), rows
    assert rows["alpha"]["version"] == host_version()
    for name, prefix in RELEASES.items():
        # the version the login node's own Slurm reported over SSH
        assert rows[name]["version"].startswith(prefix), rows[name]
    assert rows["alpha"]["accelerators"]["gpu:h100"]["total"] == 32
    assert rows["beta"]["accelerators"]["gpu:a100"]["total"] == 12 and rows["beta"]["nodes_total"] == 3
    assert rows["gamma"]["accelerators"]["npu:ascend910b"]["total"] == 16
    assert rows["gamma"]["partitions"] == ["npu"]


@pytest.mark.parametrize("cluster", ["beta", "gamma"])
def test_topology_of_a_newer_release(cluster):
    text = slurmkit("topology", "--cluster", cluster).stdout
    assert "cluster %s" % cluster in text
    if cluster == "beta":
        # 24.11 lists the spine's children as leaf1,leaf2
        assert text.index("spine") < text.index("leaf1") < text.index("bn1") < text.index("leaf2") < text.index("bn3")
    else:
        assert "leaf1" in text and "gn1" in text and "gn2" in text and "spine" not in text


# ------------------------------------------------------------------ jobs on each release

@pytest.mark.parametrize("cluster", ["alpha", "beta", "gamma"])
def test_submit_and_wait_on_each_release(cluster, jobs, outdir):
    job = submit(jobs, "--cluster", cluster, "-N", "1", "--gpus-per-node", "1", "--time", "5",
                 "--template", "single", "--output", str(outdir / ("%s-%%j.out" % cluster)), "--",
                 "bash", "-c", 'echo "on $SLURM_CLUSTER_NAME"; exit 3')
    assert job["id"].startswith(cluster + ":")
    end = wait(job["id"])
    assert (end["state"], end["exit_code"], end["signal"]) == ("FAILED", 3, None), end
    assert end["nodelist"] and end["leaf_switches"] == ["leaf1"] or end["leaf_switches"], end
    # the job ran inside the cluster's root; its output is at the same path here
    assert Path(end["stdout"]).read_text().strip() == "on %s" % cluster


@pytest.mark.parametrize("cluster", ["beta", "gamma"])
def test_a_signalled_job_on_a_newer_release(cluster, jobs, outdir):
    job = submit(jobs, "--cluster", cluster, "-N", "1", "--gpus-per-node", "1", "--time", "5",
                 "--template", "single", "--output", str(outdir / "sig-%j.out"), "--",
                 "bash", "-c", "kill -TERM $$; sleep 5")
    end = wait(job["id"])
    assert (end["state"], end["exit_code"], end["signal"]) == ("FAILED", None, 15), end


def test_status_and_cancel_across_three_releases(jobs, outdir):
    ids = []
    for cluster in ("alpha", "beta", "gamma"):
        ids.append(submit(jobs, "--cluster", cluster, "-N", "1", "--gpus-per-node", "1", "--time", "5",
                          "--template", "single", "--output", str(outdir / "sleep-%j.out"), "--",
                          "sleep", "300")["id"])
    deadline = time.monotonic() + 60
    while True:
        states = {j["id"]: j["state"] for j in json.loads(slurmkit("status", "--json", *ids).stdout)["jobs"]}
        if set(states.values()) == {"RUNNING"} or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert states == {i: "RUNNING" for i in ids}
    slurmkit("cancel", *ids)
    deadline = time.monotonic() + 60
    while True:
        ended = {j["id"]: (j["state"], j["signal"]) for j in json.loads(slurmkit("status", "--json", *ids).stdout)["jobs"]}
        if all(s == "CANCELLED" for s, _ in ended.values()) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert {i: s for i, (s, _) in ended.items()} == {i: "CANCELLED" for i in ids}


# ------------------------------------------------------------------ ranking and failover

def plan(*args):
    proc = slurmkit("submit", "--cluster", "auto", "--dry-run", "--json", "-N", "1", "--gpus-per-node", "1",
                    "--time", "5", "--template", "single", *args, "--", "true")
    return json.loads(proc.stdout)


def test_ranking_uses_each_release_own_estimate():
    p = plan("--accel", "nvidia,ascend")
    viable = [c for c in p["candidates"] if c["viable"]]
    # every release answered sbatch --test-only with an estimate slurmkit could read
    assert {c["cluster"] for c in viable} == {"alpha", "beta", "gamma"}, p["candidates"]
    assert all(c["estimate"] for c in viable)
    # all idle, so the cheapest wins: gamma (26.05), then beta (24.11), then alpha (22.05)
    assert [c["cluster"] for c in viable][0] == "gamma"
    order = [c["cluster"] for c in viable]
    assert order.index("beta") < order.index("alpha")


def test_a_busy_newer_release_loses_to_an_idle_older_one(jobs, outdir):
    # beta (24.11, cheaper) filled: its estimate moves to when the filler ends,
    # and alpha (22.05), which can start now, wins on time.
    submit(jobs, "--cluster", "beta", "-N", "3", "--gpus-per-node", "4", "--time", "5", "--template", "srun",
           "--output", str(outdir / "fill-%j.out"), "--", "sleep", "300")
    # Partition gpu only: beta's urgent partition preempts gpu's jobs, so it
    # could start at once.
    deadline = time.monotonic() + 60
    while True:
        p = plan("--accel", "nvidia", "-p", "gpu")
        beta = [c for c in p["candidates"] if c["cluster"] == "beta"][0]
        alpha = [c for c in p["candidates"] if c["cluster"] == "alpha"][0]
        if beta["estimate"] and alpha["estimate"] and beta["estimate"] > alpha["estimate"]:
            break
        assert time.monotonic() < deadline, p
        time.sleep(1)
    assert [c["cluster"] for c in p["candidates"] if c["viable"]] == ["alpha", "beta"], p


def test_failover_when_a_newer_release_login_node_is_down(jobs, outdir):
    devcluster("down-sshd", "beta")
    try:
        job = submit(jobs, "--cluster", "auto", "--accel", "nvidia", "-N", "1", "--gpus-per-node", "1",
                     "--time", "5", "--template", "single", "--output", str(outdir / "fo-%j.out"), "--", "true")
        assert job["id"].startswith("alpha:"), job
        probe = {r["name"]: r for r in json.loads(slurmkit("clusters", "--json", check=False).stdout)}
        assert not probe["beta"]["reachable"] and "127.0.22.2" in probe["beta"]["reason"], probe["beta"]
        assert probe["gamma"]["reachable"] and probe["gamma"]["version"].startswith("26.05.")
    finally:
        devcluster("up-sshd", "beta")
    assert wait(job["id"])["state"] == "COMPLETED"


def test_a_newer_release_controller_down_and_back(jobs):
    # devcluster restarts gamma's slurmctld from its root (layout.json): the
    # federation sees it go and come back.
    devcluster("down-ctld", "gamma")
    try:
        probe = {r["name"]: r for r in json.loads(slurmkit("clusters", "--json", check=False).stdout)}
        assert not probe["gamma"]["reachable"] and probe["alpha"]["reachable"] and probe["beta"]["reachable"]
    finally:
        devcluster("up-ctld", "gamma")
    probe = {r["name"]: r for r in json.loads(slurmkit("clusters", "--json", "gamma").stdout)}
    assert probe["gamma"]["reachable"] and probe["gamma"]["version"].startswith("26.05.")
