"""Real PyTorch training through the real templates, run to the end on the local cluster alpha.

Every job runs ``examples/ddp_train.py`` (a small DDP model, gloo on CPU: the
GPUs of the gpu partition are fake) with the repository's ``.venv/bin/python``
named by absolute path, as a researcher names their venv's Python.  Each test
waits for its job to end, then reads what every rank printed:

    rank=R world=W local_rank=L node=N host=H master=ADDR:PORT
    final rank=R step=S loss=L

and checks the world size, which nodes the ranks ran on, where they met and
that the final loss is identical on every rank.

The jobs are submitted together at the start (a module fixture) and run side
by side, so the file takes about as long as its slowest job; any job still
queued or running when the module ends is cancelled.  Needs PyTorch in the
venv (``make venv-train``, part of ``make test``); skipped with that reason
otherwise.  Being under tests/integration, ``make unit`` never collects it.
"""

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from harness import run_slurmkit
from conftest import TERMINAL_STATES, job_info, slurm, torch_missing
from training_output import PYTHON, TRAIN, check_training

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "site_configs" / "local.yaml"
STEPS = 20
WAIT_S = 240



_MISSING = torch_missing(PYTHON)
pytestmark = pytest.mark.skipif(bool(_MISSING), reason="PyTorch is not installed in %s (make venv-train): %s"
                                % (PYTHON, _MISSING))


def _env(home):
    """The environment of a user's shell: no SLURMKIT_*/SLURM_* of ours, a HOME and cache of the test's."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURMKIT_", "SLURM_", "SBATCH_", "SRUN_")) and k != "SSH_AUTH_SOCK"}
    env.update(HOME=str(home), SLURMKIT_CACHE_DIR=str(home / "cache"), SLURMKIT_SITE=str(SITE))
    return env


def slurmkit(env, *args, cwd=None, check=True, timeout=120):
    return run_slurmkit(args, env=env, cwd=cwd, check=check, timeout=timeout)


def _site_within_the_cap(tmp, ports):
    """local.yaml with a switch wait under alpha's cap and a rendezvous range of its own.

    Loaded and written back as plain YAML (anchors resolved), with its relative
    paths made absolute so the copy works from anywhere.
    """
    data = yaml.safe_load(SITE.read_text())
    for cluster in data["clusters"].values():
        cluster.pop("max_switch_wait", None)
        cluster["slurm_conf"] = str((SITE.parent / cluster["slurm_conf"]).resolve())
        for key in ("identity_file", "known_hosts"):
            if cluster.get("login", {}).get(key):
                cluster["login"][key] = str((SITE.parent / cluster["login"][key]).resolve())
    data["topology"] = {"max_switch_wait": "00:01:00"}
    data["rendezvous"] = {"ports": "%d-%d" % ports}
    path = tmp / "within-cap.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _free_ports(addr, count):
    """``count`` consecutive ports, below the ephemeral range, that nothing on ``addr`` listens on."""
    for low in range(31000, 32700, count):
        if all(socket.socket().connect_ex((addr, p)) != 0 for p in range(low, low + count)):
            return low, low + count - 1
    pytest.skip("no free ports below 32700 on %s" % addr)


class Jobs:
    """The module's jobs: submitted together, each waited for by its test."""

    def __init__(self, tmp, env):
        self.tmp, self.env = tmp, env
        self.submitted = {}      # key -> submit --json output (+ "cwd")
        self.waited = {}         # key -> wait --json output
        self.held = []           # sockets holding rendezvous ports

    def submit(self, key, *args, cwd=None, env=None):
        cwd = cwd or self.tmp
        out = slurmkit(env or self.env, "submit", "--json", "-t", "5", *args, cwd=cwd)
        data = json.loads(out.stdout)
        data["cwd"], data["stderr"] = cwd, out.stderr
        self.submitted[key] = data
        return data

    def wait(self, key):
        """``slurmkit wait --json`` of the job, once: its final state and output file."""
        if key not in self.waited:
            job = self.submitted[key]
            proc = slurmkit(self.env, "wait", "--json", "--timeout", WAIT_S, job["id"], check=False,
                            timeout=WAIT_S + 60)
            assert proc.stdout, "wait %s gave no answer: %s" % (job["id"], proc.stderr)
            self.waited[key] = json.loads(proc.stdout)
            self.waited[key]["exit"] = proc.returncode
        return self.waited[key]

    def finished(self, key):
        """The job after its end, COMPLETED, with what its ranks printed."""
        summary = self.wait(key)
        text = Path(summary["stdout"]).read_text(errors="replace") if summary.get("stdout") else ""
        assert summary["state"] == "COMPLETED" and summary["exit"] == 0, \
            "job %s ended %s:\n%s" % (self.submitted[key]["id"], summary["state"], text[-3000:])
        return summary, text

    def cancel_unfinished(self):
        for data in self.submitted.values():
            if job_info("alpha", data["job_id"]).get("JobState") not in TERMINAL_STATES:
                slurm("alpha", "scancel", data["job_id"], check=False)
        for sock in self.held:
            sock.close()


@pytest.fixture(scope="module")
def jobs(devcluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("training")
    home = tmp / "home"
    home.mkdir()
    run = Jobs(tmp, _env(home))
    addr = devcluster["alpha"].raw["nodes"]["an1"]["addr"]
    try:
        train = [PYTHON, TRAIN, "--steps", STEPS]

        def out(key):   # explicit output files, except for the exp/ job
            return str(tmp / ("%s-%%j.out" % key))

        # Two single-node torchrun jobs on the same node at the same time, submitted first so
        # that they find it free together.
        for key in ("same-a", "same-b"):
            run.submit(key, "-p", "cpu", "-w", "an1", "-J", key, "-o", out(key), "--", PYTHON, TRAIN, "--steps", 200)
        # srun, heavy, on a site whose switch wait fits under alpha's cap and whose rendezvous range
        # has three ports, two of them held by another program on the first node: the job must
        # take the third, whatever its id.
        low, high = _free_ports(addr, 3)
        for port in (low, low + 1):
            sock = socket.socket()
            sock.bind((addr, port))
            sock.listen()
            run.held.append(sock)
        run.free_port = high
        site = _site_within_the_cap(tmp, (low, high))
        run.submit("srun", "--site", site, "-T", "srun", "-p", "cpu", "-N", 2, "-w", "an[1-2]", "--comm", "heavy",
                   "-J", "srun-heavy", "-o", out("srun"), "--", *train)
        # The headline: 2 nodes x 1 worker, --comm heavy, torchrun, on the gpu partition (fake GPUs:
        # gloo); the site asks a longer switch wait than alpha allows.
        run.submit("heavy", "-N", 2, "--gpus-per-node", 1, "--comm", "heavy", "-J", "heavy", "-o", out("heavy"),
                   "--", *train)
        # 2 nodes x 2 workers on the CPU partition, checkpointing on the shared file system.
        run.submit("2x2", "-p", "cpu", "-N", 2, "--procs-per-node", 2, "-J", "two-by-two", "-o", out("2x2"), "--",
                   *train, "--checkpoint-dir", tmp / "ckpt", "--checkpoint-every", 10)
        # A name with '/', the default output file, template single.
        named = tmp / "named"
        named.mkdir()
        run.submit("named", "-T", "single", "-p", "cpu", "-J", "exp/lr3e-4", "--", *train, cwd=named)
        # A Python without PyTorch: one line in the output, nothing started.
        if subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode != 0:
            run.submit("no-torch", "-p", "cpu", "-J", "no-torch", "-o", out("no-torch"), "--", "/usr/bin/python3", TRAIN)
        yield run
    finally:
        run.cancel_unfinished()


def node_addr(devcluster, node):
    return devcluster["alpha"].raw["nodes"][node]["addr"]


def first_node(job_id):
    nodes = slurm("alpha", "scontrol", "show", "hostnames", job_info("alpha", job_id)["NodeList"]).stdout.split()
    return nodes[0], nodes


@pytest.mark.slow
def test_two_nodes_one_worker_each_heavy_torchrun(devcluster, jobs):
    submitted = jobs.submitted["heavy"]
    summary, text = jobs.finished("heavy")
    started = check_training(text, world=2, steps=STEPS)
    head, nodes = first_node(submitted["job_id"])
    assert {s[2] for s in started.values()} == set(nodes) and len(nodes) == 2
    # The workers met at the first node's NodeAddr, not at its name (which does not resolve).
    assert {s[3] for s in started.values()} == {node_addr(devcluster, head)}
    # Under one leaf switch, waiting at most what alpha allows: the site's 00:10:00 is capped to
    # max_switch_wait=120, said in a warning, and that is what Slurm holds.
    assert submitted["switches"] == 1 and len(summary["leaf_switches"]) == 1
    cap = devcluster["alpha"].raw["max_switch_wait_s"]
    assert cap == 120
    assert any("caps the wait for fewer leaf switches at 00:02:00" in w for w in submitted["warnings"])
    assert job_info("alpha", submitted["job_id"])["Switches"] == "1@00:02:00"


def test_two_nodes_two_workers_each_on_the_cpu_partition(devcluster, jobs):
    _, text = jobs.finished("2x2")
    started = check_training(text, world=4, steps=STEPS)
    by_node = {}
    for rank, (_, local, node, _, _) in started.items():
        by_node.setdefault(node, set()).add(local)
    # Both nodes appear, each with local ranks 0 and 1.
    assert len(by_node) == 2 and all(locals_ == {0, 1} for locals_ in by_node.values()), by_node
    head, _ = first_node(jobs.submitted["2x2"]["job_id"])
    assert {s[3] for s in started.values()} == {node_addr(devcluster, head)}
    assert "checkpoint step=%d" % STEPS in text and (jobs.tmp / "ckpt").is_dir()


def test_two_jobs_on_the_same_node_at_the_same_time_both_complete(jobs):
    infos = []
    for key in ("same-a", "same-b"):
        _, text = jobs.finished(key)
        check_training(text, world=1, steps=200)
        infos.append(job_info("alpha", jobs.submitted[key]["job_id"]))
    assert [i["NodeList"] for i in infos] == ["an1", "an1"]
    a, b = infos
    # They ran side by side (times to the second): each started before the other ended.
    assert a["StartTime"] <= b["EndTime"] and b["StartTime"] <= a["EndTime"], \
        "not concurrent: %s-%s and %s-%s" % (a["StartTime"], a["EndTime"], b["StartTime"], b["EndTime"])


def test_srun_template_meets_at_a_free_port_of_the_sites_range(devcluster, jobs):
    submitted = jobs.submitted["srun"]
    _, text = jobs.finished("srun")
    started = check_training(text, world=2, steps=STEPS)
    assert {s[2] for s in started.values()} == {"an1", "an2"}
    # srun starts the ranks itself; they meet at MASTER_ADDR:MASTER_PORT from the script: the first
    # node's NodeAddr, and the one port of the site's range nobody else holds.
    assert {(s[3], s[4]) for s in started.values()} == {(node_addr(devcluster, "an1"), jobs.free_port)}
    # The site's wait fits under alpha's cap: kept as asked, no warning.
    assert not [w for w in submitted["warnings"] if "caps the wait" in w]
    assert job_info("alpha", submitted["job_id"])["Switches"] == "1@00:01:00"


def test_a_job_name_with_a_slash_completes_and_its_output_is_where_wait_and_status_say(jobs):
    submitted = jobs.submitted["named"]
    summary, text = jobs.finished("named")
    check_training(text, world=1, steps=STEPS)
    expected = jobs.submitted["named"]["cwd"] / ("slurmkit-exp_lr3e-4-%s.out" % submitted["job_id"])
    assert summary["stdout"] == str(expected) and expected.is_file()
    status = json.loads(slurmkit(jobs.env, "status", "--json", submitted["id"]).stdout)["jobs"][0]
    assert status["name"] == "exp/lr3e-4" and status["stdout"] == str(expected)
    assert "output: %s" % expected in slurmkit(jobs.env, "wait", submitted["id"]).stdout


def test_a_python_without_torch_is_one_clear_line(jobs):
    if "no-torch" not in jobs.submitted:
        pytest.skip("/usr/bin/python3 has PyTorch here")
    summary = jobs.wait("no-torch")
    assert summary["state"] == "FAILED" and summary["exit"] == 1
    assert Path(summary["stdout"]).read_text() == (
        "slurmkit: error: /usr/bin/python3 cannot run torch.distributed.run (ModuleNotFoundError: No module named "
        "'torch'); install PyTorch into that environment\n")
