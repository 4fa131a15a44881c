"""Same job, same result: the very same scripts submitted with sbatch (CommandBackend)
and with pyslurm (PyslurmBackend) on the dev cluster alpha, run to their end.

For every script the two jobs must see the same environment (``env | sort``
in the batch script and in an srun step, written to the output file named
with ``%x``) and ``slurmkit status --json`` must say the same of them,
field by field, whichever backend reads it.  Only what is per job by nature
is set aside: the job id (and values made of it), its times, the pid of its
shell.  Everything else, node and GPU allocation included, must be equal: the
jobs of a pair run one after the other on the same pinned node.

Skipped where pyslurm is not installed or does not fit the running Slurm
(``make pyslurm`` builds it from shared/vendor for Slurm 22.05 and 24.11).
pyslurm submits from a process of its own for each job: libslurm reads one
slurm.conf per process, and another test of the session may have initialised
pyslurm in this one for another cluster.
"""

import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from slurmkit.slurm import pyslurm_installed
from slurmkit.slurm.backend import CommandBackend
from slurmkit.slurm.runner import LocalRunner

from conftest import slurm_version

if not pyslurm_installed():
    pytest.skip("pyslurm is not installed (make pyslurm builds it for the installed Slurm)",
                allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "site_configs" / "local.yaml"

# Values a job has of its own, whoever submitted it: its id, times, the pid of
# its shell, and the port srun listens on for each step (a free one each time).
PER_JOB = {"SLURM_JOB_ID", "SLURM_JOBID", "SLURM_TASK_PID", "SLURM_JOB_START_TIME", "SLURM_JOB_END_TIME",
           "SLURM_SRUN_COMM_PORT", "SLURM_STEP_LAUNCHER_PORT"}
# status --json fields that are per job: its id and times, and the output file
# (its name carries the job id through %j).
PER_JOB_STATUS = {"id", "job_id", "start_time", "end_time", "stdout"}


# Runs in a fresh process: prints why pyslurm cannot serve the cluster, or
# submits the script on stdin with PyslurmBackend and prints "ID VIA".
PYSLURM_SUBMIT = """
import sys
from slurmkit.site.model import Cluster
from slurmkit.slurm import pyslurm_backend as pb
from slurmkit.slurm.runner import LocalRunner
cluster = Cluster(name="alpha", partitions={}, slurm_conf=sys.argv[1])
reason = pb.unusable_reason(LocalRunner({"SLURM_CONF": sys.argv[1]}), cluster)
if reason or sys.argv[2] == "check":
    print(reason or "usable")
    sys.exit(0)
backend = pb.PyslurmBackend(cluster)
print(backend.submit(sys.stdin.read()), backend.last_submit_via)
"""


class PyslurmSubmitter:
    """Submits through PyslurmBackend, each time in a process of its own."""

    def __init__(self, conf):
        self.conf = conf

    def run(self, mode, text=""):
        # env given explicitly, as LocalRunner gives sbatch's: a child started
        # with env=None inherits the C-level environment, where something in
        # the pytest process (readline) has put COLUMNS and LINES.
        proc = subprocess.run([sys.executable, "-c", PYSLURM_SUBMIT, self.conf, mode], input=text,
                              capture_output=True, text=True, timeout=60,
                              env=dict(os.environ))
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    def submit(self, text):
        job_id, via = self.run("submit", text).split()
        assert via == "pyslurm", "this script went to %s, not pyslurm" % via
        return job_id


@pytest.fixture(scope="module")
def backends(devcluster):
    """(pyslurm submitter, command backend, node to pin the jobs to) on alpha."""
    conf = devcluster["alpha"].slurm_conf
    pys = PyslurmSubmitter(conf)
    reason = pys.run("check")
    if reason != "usable":
        pytest.skip(reason)
    cmd = CommandBackend(LocalRunner({"SLURM_CONF": conf}), "alpha")
    yield pys, cmd, devcluster["alpha"].nodes[-1]
    cmd.close()


def script(name, node, out_dir, body, options=""):
    head = ["#!/bin/bash"]
    if name:
        head.append("#SBATCH --job-name=%s" % name)
    head.append("#SBATCH -p cpu -w %s -t 2 --output=%s/%%x-%%j.out %s" % (node, out_dir, options))
    return "\n".join(head + ["", body, ""])


ENV_DUMP = ("echo '== batch'; env | sort\n"
            "echo '== step'; srun --ntasks=1 --cpus-per-task=1 bash -c 'env | sort'")

SCRIPTS = {
    # %x in the output name, -c, tasks per node, an srun step
    "env": ("parity-env", "-N 1 --ntasks-per-node=2 -c 2", ENV_DUMP),
    "gpu": ("parity-gpu", "--ntasks-per-node=1 --gpus-per-node=h100:1 -c 1", ENV_DUMP),
    "noname": (None, "-n 1", "env | sort"),
    "exit3": ("parity-exit3", "-n 1", "exit 3"),
    # a child killed by SIGTERM: bash exits 143, which pyslurm's Job API reads as 15
    "child_term": ("parity-child-term", "-n 1", "sleep 30 & kill -TERM $!; wait $!"),
    "kill_term": ("parity-kill-term", "-n 1", "kill -TERM $$; sleep 5"),
    "kill_9": ("parity-kill-9", "-n 1", "kill -9 $$; sleep 5"),
}


def run_to_end(backend, reader, text, timeout=90):
    """Submit ``text`` and wait (reading with ``reader``) until the job has ended."""
    job_id = backend.submit(text)
    deadline = time.monotonic() + timeout
    while True:
        found = reader.jobs([job_id])
        if found and found[0].finished:
            return job_id
        assert time.monotonic() < deadline, "job %s did not end: %s" % (job_id, found)
        time.sleep(0.5)


def status_json(ids, backend_name):
    env = dict(os.environ, SLURMKIT_BACKEND=backend_name)
    proc = subprocess.run([sys.executable, "-m", "slurmkit", "status", "--site", str(SITE), "--json"]
                          + ["alpha:%s" % i for i in ids], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return {j["job_id"]: j for j in json.loads(proc.stdout)["jobs"]}


def parse_env(text):
    """{section: {var: value}} of the ``== section`` blocks (one "batch" block without headers)."""
    sections = {"batch": {}}
    current = sections["batch"]
    for line in text.splitlines():
        if line.startswith("== "):
            current = sections.setdefault(line[3:], {})
        elif "=" in line:
            key, _, value = line.partition("=")
            current[key] = value
    return sections


def comparable_env(env, job_id):
    # Paths made of the job id (a per-job TMPDIR, for instance) compare with the id replaced.
    # Only in paths: on a fresh cluster job ids are small numbers, and SHLVL=4 or LANG=C.UTF-8
    # must not turn into "<id>" because the job happened to be number 4 or 8.
    word = re.compile(r"(?<![\w.])%s(?![\w.])" % re.escape(job_id))
    return {k: (word.sub("<id>", v) if "/" in v else v) for k, v in env.items() if k not in PER_JOB}


def comparable_path(path, job_id):
    """An output path with the job id of its file name (NAME-ID.out) replaced."""
    return re.sub(r"-%s\.out$" % re.escape(job_id), "-<id>.out", path)


@pytest.fixture(scope="module")
def pairs(backends, tmp_path_factory):
    """{script: (job id by sbatch, job id by pyslurm, output dir)}, every job ended."""
    pys, cmd, node = backends
    out_dir = tmp_path_factory.mktemp("parity")
    ids = {}
    for key, (name, options, body) in SCRIPTS.items():
        text = script(name, node, out_dir, body, options)
        ids[key] = (run_to_end(cmd, cmd, text), run_to_end(pys, cmd, text), out_dir)
    return ids


def unnamed_x():
    """What "%x" becomes for a job submitted without a name, whoever submitted it:
    22.05's slurmstepd writes "(null)"; 24.11 and later "sbatch", the name the job has."""
    return "(null)" if slurm_version().startswith("22.") else "sbatch"


def only_pyslurm_sets():
    """The one variable a pyslurm job has and an sbatch job has not: from 24.11 on,
    SLURM_PROFILE=None (pyslurm cannot send "profile not set" as sbatch does; on a
    cluster without a profile plugin PyslurmBackend sends "none", see its _profile)."""
    return {} if slurm_version().startswith("22.") else {"SLURM_PROFILE": "None"}


def output_of(out_dir, name, job_id):
    # "%x" is the job name; for a job without one, see unnamed_x (checked below).
    path = out_dir / ("%s-%s.out" % (name if name else unnamed_x(), job_id))
    assert path.exists(), "no output %s; there are: %s" % (path, sorted(p.name for p in out_dir.iterdir()))
    return path.read_text()


@pytest.mark.parametrize("key", ["env", "gpu", "noname"])
def test_the_job_sees_the_same_environment(pairs, key):
    by_sbatch, by_pyslurm, out_dir = pairs[key]
    name = SCRIPTS[key][0]
    mine = parse_env(output_of(out_dir, name, by_pyslurm))
    theirs = parse_env(output_of(out_dir, name, by_sbatch))
    assert sorted(mine) == sorted(theirs)
    extra = only_pyslurm_sets()
    for section in theirs:
        a, b = comparable_env(mine[section], by_pyslurm), comparable_env(theirs[section], by_sbatch)
        assert {k: a.pop(k, None) for k in extra} == extra, section
        assert sorted(a) == sorted(b), "%s: variables differ: only pyslurm %s, only sbatch %s" % (
            section, sorted(set(a) - set(b)), sorted(set(b) - set(a)))
        diff = {k: (a[k], b[k]) for k in a if a[k] != b[k]}
        assert not diff, "%s: values differ (pyslurm, sbatch): %s" % (section, diff)
    if name:
        assert theirs["batch"]["SLURM_JOB_NAME"] == name
    if key == "env":
        assert theirs["batch"]["SLURM_CPUS_PER_TASK"] == "2" and theirs["batch"]["SLURM_NTASKS_PER_NODE"] == "2"
        assert "step" in theirs and theirs["step"]["SLURM_STEP_ID"] == "0"
    if key == "gpu":
        assert theirs["batch"]["SLURM_GPUS_PER_NODE"] == "h100:1"


def test_status_json_is_the_same_whoever_submitted_and_whoever_reads(pairs):
    ids = [i for by_sbatch, by_pyslurm, _ in pairs.values() for i in (by_sbatch, by_pyslurm)]
    via_pyslurm, via_commands = status_json(ids, "pyslurm"), status_json(ids, "commands")
    # The same job read by both backends: identical, nothing set aside.
    assert via_pyslurm == via_commands
    assert sorted(via_commands) == sorted(ids)
    for key, (by_sbatch, by_pyslurm, _) in pairs.items():
        a, b = via_commands[by_pyslurm], via_commands[by_sbatch]
        assert comparable_path(a["stdout"], by_pyslurm) == comparable_path(b["stdout"], by_sbatch)
        rest_a = {k: v for k, v in a.items() if k not in PER_JOB_STATUS}
        rest_b = {k: v for k, v in b.items() if k not in PER_JOB_STATUS}
        assert rest_a == rest_b, key


@pytest.mark.parametrize("key,state,exit_code,signal", [
    ("env", "COMPLETED", 0, None),
    ("exit3", "FAILED", 3, None),
    ("child_term", "FAILED", 143, None),
    ("kill_term", "FAILED", None, 15),
    ("kill_9", "FAILED", None, 9),
])
def test_how_each_job_ended(pairs, key, state, exit_code, signal):
    by_sbatch, by_pyslurm, _ = pairs[key]
    for backend_name in ("pyslurm", "commands"):
        jobs = status_json([by_sbatch, by_pyslurm], backend_name)
        for job_id in (by_sbatch, by_pyslurm):
            job = jobs[job_id]
            assert (job["state"], job["exit_code"], job["signal"]) == (state, exit_code, signal), (backend_name, job)


def test_a_job_without_a_name_is_named_as_sbatch_names_it(pairs):
    by_sbatch, by_pyslurm, out_dir = pairs["noname"]
    jobs = status_json([by_sbatch, by_pyslurm], "commands")
    assert jobs[by_sbatch]["name"] == jobs[by_pyslurm]["name"] == "sbatch"
    assert (out_dir / ("%s-%s.out" % (unnamed_x(), by_pyslurm))).exists(), sorted(os.listdir(str(out_dir)))


@pytest.mark.slow
def test_a_torchrun_job_rendered_by_slurmkit(backends, tmp_path):
    """The built-in torchrun template, one node, through both backends alike."""
    probe = subprocess.run([sys.executable, "-c", "import torch.distributed"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("torch is not importable in this venv (make venv-train installs it)")
    pys, cmd, node = backends
    program = tmp_path / "hello_dist.py"
    program.write_text("import torch.distributed as d\nd.init_process_group('gloo')\n"
                       "print('rank', d.get_rank(), 'of', d.get_world_size(), flush=True)\n"
                       "d.destroy_process_group()\n")
    render = subprocess.run(
        [sys.executable, "-m", "slurmkit", "render", "--site", str(SITE), "--cluster", "alpha",
         "--partition", "cpu", "-N", "1", "--template", "torchrun", "--comm", "light", "--time", "5",
         "-J", "parity-torchrun", "--output", str(tmp_path / "%x-%j.out"), "--token", uuid.uuid4().hex[:16],
         "--", sys.executable, str(program)], capture_output=True, text=True, timeout=60)
    assert render.returncode == 0, render.stderr
    lines = render.stdout.splitlines(True)
    # Pinned like the others (a directive right after the #! line, where sbatch reads it).
    text = lines[0] + "#SBATCH -w %s\n" % node + "".join(lines[1:])
    by_sbatch = run_to_end(cmd, cmd, text, timeout=180)
    by_pyslurm = run_to_end(pys, cmd, text, timeout=180)
    jobs = status_json([by_sbatch, by_pyslurm], "commands")
    a, b = jobs[by_pyslurm], jobs[by_sbatch]
    assert {k: v for k, v in a.items() if k not in PER_JOB_STATUS} == \
        {k: v for k, v in b.items() if k not in PER_JOB_STATUS}
    out_a = (tmp_path / ("parity-torchrun-%s.out" % by_pyslurm)).read_text()
    out_b = (tmp_path / ("parity-torchrun-%s.out" % by_sbatch)).read_text()
    assert b["state"] == "COMPLETED", out_b
    assert "rank 0 of 1" in out_a and "rank 0 of 1" in out_b
