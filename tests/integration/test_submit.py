"""`slurmkit submit`, `status`, `cancel`, `wait` and `render` against the real local cluster alpha.

Each test runs the CLI as a user would (a separate process) and checks the
result from Slurm itself (scontrol), not from slurmkit's own report.
"""

import json
import os
import sys
from pathlib import Path

import pytest

from harness import run_slurmkit, wait_until
from conftest import cancel_later, job_info, slurm, wait_job_state

ROOT = Path(__file__).resolve().parents[2]
SITE = str(ROOT / "site_configs" / "local.yaml")
LEAVES = {"leaf1": {"an1", "an2"}, "leaf2": {"an3", "an4"}}


def slurmkit(*args, check=True, env=None):
    return run_slurmkit(args, env=dict(os.environ, SLURMKIT_SITE=SITE, **(env or {})), check=check)


def submit(*args, **kw):
    proc = slurmkit("submit", "--json", *args, **kw)
    data = json.loads(proc.stdout)
    assert data["cluster"] == "alpha" and data["id"] == "alpha:" + data["job_id"]
    return data


def nodes_of(jobid):
    out = slurm("alpha", "scontrol", "show", "hostnames", job_info("alpha", jobid)["NodeList"]).stdout
    return set(out.split())


def test_heavy_two_node_job_sits_under_one_leaf_and_sees_the_nccl_settings(devcluster, tmp_path):
    out = tmp_path / "heavy-%j.out"
    job = submit("-N", "2", "--gpus-per-node", "2", "--comm", "heavy", "-T", "srun", "-t", "3",
                 "-o", str(out), "--", "bash", "-c",
                 'echo "$SLURMD_NODENAME NCCL_SOCKET_IFNAME=$NCCL_SOCKET_IFNAME NCCL_IB_DISABLE=$NCCL_IB_DISABLE"')
    assert job["switches"] == 1
    wait_job_state("alpha", job["job_id"], {"COMPLETED"}, timeout=90)
    info = job_info("alpha", job["job_id"])
    assert info["Switches"].startswith("1@")
    nodes = nodes_of(job["job_id"])
    assert len(nodes) == 2 and any(nodes <= members for members in LEAVES.values()), nodes
    lines = Path(str(out).replace("%j", job["job_id"])).read_text().split("\n")
    seen = {ln.split()[0] for ln in lines if ln}
    assert seen == nodes  # one task per GPU, on both nodes
    assert all("NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1" in ln for ln in lines if ln)


def test_three_node_heavy_job_asks_for_two_switches(devcluster, tmp_path):
    job = submit("-N", "3", "--gpus-per-node", "1", "--comm", "heavy", "-T", "srun", "-t", "2",
                 "-o", str(tmp_path / "o-%j"), "--", "true")
    assert job["switches"] == 2
    assert job_info("alpha", job["job_id"])["Switches"].startswith("2@")
    slurm("alpha", "scancel", job["job_id"])


def test_light_job_has_no_switch_constraint(devcluster, tmp_path):
    job = submit("-N", "2", "-p", "cpu", "-T", "srun", "-t", "2", "-o", str(tmp_path / "o-%j"), "--", "true")
    assert job["switches"] is None
    assert job_info("alpha", job["job_id"]).get("Switches", "0").startswith("0")
    slurm("alpha", "scancel", job["job_id"])


HOSTILE = ["$(touch {marker})", "'; touch {marker}; '", "line1\nline2", "`touch {marker}`", 'dq"x', "back\\slash",
           "", "*", "--", "tab\there", "ünïcødé"]


def test_hostile_names_and_arguments_are_passed_literally(devcluster, tmp_path):
    marker = tmp_path / "pwned"
    args = [a.format(marker=marker) for a in HOSTILE]
    result = tmp_path / "argv.json"
    name = "$(touch %s) x\"y 'z'" % marker
    job = submit("-p", "cpu", "-T", "single", "-t", "2", "-J", name, "-o", str(tmp_path / "o-%j"),
                 "-e", "HOSTILE=$(touch %s)" % marker, "--",
                 sys.executable, "-c",
                 "import json, os, sys; json.dump([sys.argv[1:], os.environ['HOSTILE']], open(sys.argv[1], 'w'))",
                 str(result), *args)
    wait_job_state("alpha", job["job_id"], {"COMPLETED"}, timeout=90)
    received, hostile_env = json.loads(result.read_text())
    assert received == [str(result)] + args
    assert hostile_env == "$(touch %s)" % marker
    assert not marker.exists()
    assert json.loads(slurmkit("status", "--json", job["id"]).stdout)["jobs"][0]["name"] == name


@pytest.mark.slow
def test_status_cancel_round_trip(devcluster, tmp_path):
    job = submit("-p", "cpu", "-T", "single", "-t", "5", "-o", str(tmp_path / "o-%j"), "--", "sleep", "300")
    wait_job_state("alpha", job["job_id"], {"RUNNING"}, timeout=60)
    status = json.loads(slurmkit("status", "--json", job["id"], job["job_id"]).stdout)
    assert [j["state"] for j in status["jobs"]] == ["RUNNING", "RUNNING"]  # CLUSTER:ID and bare id alike
    table = slurmkit("status", job["id"]).stdout
    assert job["id"] in table and "RUNNING" in table
    assert slurmkit("cancel", job["job_id"]).stdout.strip() == "cancelled " + job["id"]
    wait_job_state("alpha", job["job_id"], {"CANCELLED"}, timeout=60)
    status = json.loads(slurmkit("status", "--json", job["id"]).stdout)
    assert status["jobs"][0]["state"] == "CANCELLED"
    mine = json.loads(slurmkit("status", "--json").stdout)["jobs"]
    assert job["id"] in {j["id"] for j in mine}
    others = json.loads(slurmkit("status", "--json", "--user", "nobody").stdout)["jobs"]
    assert job["id"] not in {j["id"] for j in others}   # by default only your own jobs are listed


def test_unknown_job_is_exit_1(devcluster):
    proc = slurmkit("status", "alpha:999999", check=False)
    assert proc.returncode == 1 and "Error: job alpha:999999 is not known" in proc.stderr


def test_same_token_never_submits_twice(devcluster, tmp_path):
    args = ["-p", "cpu", "-T", "single", "-t", "2", "-o", str(tmp_path / "o-%j"), "--token", "once-%d" % os.getpid(),
            "--", "sleep", "60"]
    first, second = submit(*args), submit(*args)
    assert first["job_id"] == second["job_id"] and second["existed"] and not first["existed"]
    slurm("alpha", "scancel", first["job_id"])


def test_render_prints_exactly_what_submit_sends(devcluster, tmp_path):
    args = ["-N", "2", "--gpus-per-node", "1", "--comm", "heavy", "-T", "torchrun", "-t", "2",
            "-o", str(tmp_path / "o-%j"), "--token", "same-%d" % os.getpid(), "--", "python", "train.py", "--lr", "3e-4"]
    rendered = slurmkit("render", *args).stdout
    job = submit(*args)
    sent = slurm("alpha", "scontrol", "write", "batch_script", job["job_id"], "-").stdout
    slurm("alpha", "scancel", job["job_id"])
    assert sent == rendered


def test_sbatch_refusal_is_shown_with_exit_1(devcluster, tmp_path):
    # A partition the site config knows but Slurm does not: only sbatch can refuse it.
    conf = json.loads((ROOT / ".devcluster" / "clusters.json").read_text())["clusters"]["alpha"]["slurm_conf"]
    bad = tmp_path / "ghost.yaml"
    bad.write_text("site: ghost\nclusters:\n  alpha:\n    slurm_conf: %s\n    partitions:\n      ghost:\n"
                   "        accelerator: none\n        cpus_per_node: 1\n" % conf)
    proc = slurmkit("submit", "--site", str(bad), "-p", "ghost", "-t", "1", "--", "true", check=False)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    # sbatch's refusal, or the same refusal of the RPC where pyslurm submitted
    assert len(lines) == 1 and lines[0].startswith(("Error: sbatch failed on cluster alpha",
                                                    "Error: submit failed on cluster alpha")), lines
    assert "invalid partition" in lines[0].lower()


@pytest.mark.slow
def test_wait_reports_output_and_leaf_switch(devcluster, tmp_path):
    job = submit("-N", "2", "--gpus-per-node", "1", "--comm", "heavy", "-T", "srun", "-t", "2",
                 "-o", str(tmp_path / "w-%j.out"), "--", "true")
    proc = slurmkit("wait", "--json", job["id"])
    summary = json.loads(proc.stdout)
    assert proc.returncode == 0 and summary["state"] == "COMPLETED"
    assert summary["stdout"] == str(tmp_path / ("w-%s.out" % job["job_id"]))
    assert len(summary["leaf_switches"]) == 1 and summary["leaf_switches"][0] in LEAVES


def test_topology_drawing_shows_the_real_tree(devcluster):
    out = slurmkit("topology").stdout
    assert out.splitlines()[1].startswith("spine (level 1")
    for leaf, nodes in LEAVES.items():
        assert any(ln.lstrip("│├└─ ").startswith(leaf) for ln in out.splitlines())
        for node in nodes:
            assert any(node in ln and "gpu free" in ln for ln in out.splitlines())


def test_a_job_held_by_its_dependency_and_begin_runs_after_them_with_its_memory(devcluster, request, tmp_path):
    """submit's --dependency, --begin and --mem reach Slurm as sbatch takes them: the second job waits for
    the first to end well (reason Dependency), the third for its --begin (BeginTime) until it is released,
    and each program sees the memory it asked for."""
    out = tmp_path / "o-%j"
    probe = 'echo "start=$(date +%s.%N) mem=$SLURM_MEM_PER_NODE"'
    first = submit("-p", "cpu", "-T", "single", "-t", "2", "-o", str(out), "--", "bash", "-c",
                   "sleep 3; echo done")["job_id"]
    cancel_later(request, "alpha", first)
    second = submit("-p", "cpu", "-T", "single", "-t", "2", "-o", str(out), "--mem", "100M",
                    "-d", "afterok:" + first, "--", "bash", "-c", probe)["job_id"]
    third = submit("-p", "cpu", "-T", "single", "-t", "2", "-o", str(out), "--mem", "1G",
                   "--begin", "now+1hour", "--", "bash", "-c", probe)["job_id"]
    for job in (second, third):
        cancel_later(request, "alpha", job)
    assert job_info("alpha", second)["Dependency"] == "afterok:%s(unfulfilled)" % first
    wait_until(lambda: job_info("alpha", third)["Reason"] == "BeginTime", 30, what="reason BeginTime")
    ended = wait_job_state("alpha", first, {"COMPLETED"}, timeout=90)
    wait_job_state("alpha", second, {"COMPLETED"}, timeout=90)
    slurm("alpha", "scontrol", "update", "jobid=" + third, "StartTime=now")
    wait_job_state("alpha", third, {"COMPLETED"}, timeout=90)
    said = {job: dict(w.split("=", 1) for w in Path(str(out).replace("%j", job)).read_text().split())
            for job in (second, third)}
    assert said[second]["mem"] == "100" and said[third]["mem"] == "1024"
    # The dependent job started only once the first had ended (scontrol's EndTime, to the second).
    import datetime

    end = datetime.datetime.fromisoformat(ended["EndTime"]).timestamp()
    assert float(said[second]["start"]) >= end, (said[second], ended["EndTime"])
