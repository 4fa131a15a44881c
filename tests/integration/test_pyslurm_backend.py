"""PyslurmBackend against a real pyslurm and the local dev clusters.

Skipped, with the reason, where pyslurm is not installed (PyPI only carries
25.11, which needs Slurm 25.11) or does not fit the running Slurm (a
pyslurm 25.11 on Slurm 22.05.8).  Where it is usable (pyslurm 22.5.x on the
dev clusters' Slurm 22.05), a tiny job is submitted through pyslurm, read
back, found by its token, compared field by field with what the Slurm
commands (CommandBackend) say about the same job, and cancelled.

pyslurm is never imported at collection time: libslurm initialises when
pyslurm is imported and calls fatal() (ending the whole pytest process) when
no slurm.conf can be found, so the import happens inside
``unusable_reason``, after ``scontrol --version`` has worked with the
cluster's SLURM_CONF.
"""

import dataclasses
import tempfile
import time
import uuid

import pytest

from slurmkit import times
from slurmkit.site.model import Cluster
from slurmkit.slurm import pyslurm_backend as pb
from slurmkit.slurm.backend import CommandBackend
from slurmkit.slurm.runner import LocalRunner

from harness import wait_until

if not pb.pyslurm_installed():
    pytest.skip("pyslurm is not installed (PyPI only has 25.11, which needs Slurm 25.11)",
                allow_module_level=True)

# A partition of each dev cluster that takes a 1-CPU job; alpha's "cpu" is the
# one the brief's script names.  libslurm reads one slurm.conf per process, so
# if another test already initialised pyslurm for beta or gamma, that one is used.
PARTITION = {"alpha": "cpu", "beta": "gpu", "gamma": "npu"}
# Fields the squeue --format fallback of CommandBackend cannot report; they
# are compared only when the command backend does report them.
OPTIONAL_IN_COMMANDS = ("cluster", "exit_code", "stdout")


@pytest.fixture(scope="module")
def pair(devcluster):
    """(PyslurmBackend, CommandBackend, cluster name, partition) for one dev cluster."""
    initialised = pb.initialised_conf()
    names = [n for n in PARTITION if initialised is None or devcluster[n].slurm_conf == initialised]
    name = names[0] if names else "alpha"
    conf = devcluster[name].slurm_conf
    cluster = Cluster(name=name, partitions={}, slurm_conf=conf)
    runner = LocalRunner({"SLURM_CONF": conf})
    reason = pb.unusable_reason(runner, cluster)
    if reason is not None:
        pytest.skip(reason)
    backend = pb.PyslurmBackend(cluster)
    commands = CommandBackend(LocalRunner({"SLURM_CONF": conf}), name)
    yield backend, commands, name, PARTITION[name]
    backend.close()
    commands.close()


def script(token, partition, out_dir, extra=()):
    # Several options on one #SBATCH line, as sbatch allows: our directive
    # parser must split them the way sbatch does.
    lines = ["#!/bin/bash",
             "#SBATCH --job-name=skpy-%s" % token[:8],
             "#SBATCH --time=1 --partition=%s --comment=slurmkit:%s -n 1" % (partition, token),
             "#SBATCH --output=%s/pyslurm-%%j.out" % out_dir]
    lines += list(extra)
    lines += ["sleep 50", ""]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def job(pair, tmp_path_factory):
    backend, commands, name, partition = pair
    token = uuid.uuid4().hex
    out_dir = tmp_path_factory.mktemp("pyslurm-out")
    job_id = backend.submit(script(token, partition, out_dir))
    yield job_id, token, out_dir
    commands.runner.run(["scancel", job_id])  # whatever a test left running


def wait_for(fetch, predicate, timeout=60.0):
    """Best effort, unlike harness.wait_until: the last value once ``predicate`` holds or ``timeout``
    has passed (a busy shared cluster may keep a job pending, which the callers compare as well)."""
    deadline = time.monotonic() + timeout
    value = fetch()
    while not predicate(value) and time.monotonic() < deadline:
        time.sleep(1)
        value = fetch()
    return value


def test_submit_went_through_pyslurm(pair, job):
    backend = pair[0]
    job_id, _, _ = job
    assert job_id.isdigit()
    assert backend.last_submit_via == "pyslurm"


def test_jobs_returns_the_job_with_its_name_partition_and_comment(pair, job):
    backend, _, name, partition = pair
    job_id, token, out_dir = job
    found = backend.jobs([job_id, "999999999"])
    assert [j.job_id for j in found] == [job_id]
    info = found[0]
    assert info.name == "skpy-%s" % token[:8]
    assert info.partition == partition
    assert info.comment == "slurmkit:%s" % token
    assert info.time_limit == "00:01:00"
    assert info.cluster == name
    if hasattr(info, "stdout"):
        assert info.stdout == "%s/pyslurm-%s.out" % (out_dir, job_id)
    assert backend.jobs([]) == [] and backend.jobs(["999999999"]) == []


def test_find_by_token(pair, job):
    backend = pair[0]
    job_id, token, _ = job
    assert [j.job_id for j in backend.find_by_token("slurmkit:%s" % token)] == [job_id]
    assert backend.find_by_token("slurmkit:%s" % uuid.uuid4().hex) == []


def _same_snapshot(pair, job_id):
    """The job as both backends see it, taken when nothing changed in between."""
    backend, commands = pair[0], pair[1]
    for _ in range(10):
        before = commands.jobs([job_id])
        # two ids: pyslurm's own list (one id is squeue's, test_one_job_is_looked_up_alone...)
        mine = backend.jobs([job_id, "999999"])
        after = commands.jobs([job_id])
        if before == after and len(before) == 1 and len(mine) == 1:
            return mine[0], after[0]
        time.sleep(1)
    pytest.fail("job %s kept changing while both backends read it" % job_id)


def test_every_field_matches_the_command_backend(pair, job):
    commands = pair[1]
    job_id = job[0]
    # Compare while it runs (start time, nodes, reason all set); a busy shared
    # cluster may keep it pending, which compares just as well.
    wait_for(lambda: commands.jobs([job_id]), lambda js: js and js[0].state != "PENDING", timeout=30)
    mine, theirs = _same_snapshot(pair, job_id)
    for f in dataclasses.fields(theirs):
        a, b = getattr(mine, f.name), getattr(theirs, f.name)
        if f.name in OPTIONAL_IN_COMMANDS and b in ("", None):
            continue
        if f.name == "time_limit":
            # squeue --json gives minutes (00:01:00), --format gives squeue's own text (1:00)
            assert times.parse_minutes(a) == times.parse_minutes(b), f.name
            continue
        assert a == b, "%s: pyslurm %r != commands %r" % (f.name, a, b)


def test_one_job_is_looked_up_alone_and_reads_as_in_pyslurms_list(pair, job, devcluster):
    """jobs([id]) asks for that job alone (squeue --Format --local: REQUEST_JOB_INFO_SINGLE), not for
    every job of the cluster, and reads as the same job in pyslurm's slurm_load_jobs list."""
    from conftest import rpc_count

    backend, name, job_id = pair[0], pair[2], job[0]
    for _ in range(10):
        listed = {j.job_id: j for j in backend.jobs([job_id, "999999"])}   # two ids: the whole list
        before = devcluster.slurm(name, "sdiag").stdout
        one = backend.jobs([job_id])
        after = devcluster.slurm(name, "sdiag").stdout
        if one == [listed[job_id]]:
            break
        time.sleep(1)
    assert one == [listed[job_id]]
    assert rpc_count(after, "REQUEST_JOB_INFO_SINGLE") > rpc_count(before, "REQUEST_JOB_INFO_SINGLE")
    assert rpc_count(after, "REQUEST_JOB_INFO") == rpc_count(before, "REQUEST_JOB_INFO")
    assert backend.jobs(["999999"]) == []


def test_inherited_command_methods_still_work(pair):
    backend, commands = pair[0], pair[1]
    assert backend.version() == commands.version()
    assert backend.partitions() == commands.partitions()
    assert "pyslurm" in backend.describe()


def test_accounting_agrees_with_sacct(pair, job):
    backend, commands = pair[0], pair[1]
    job_id = job[0]
    # alpha keeps accounting in slurmdbd (beta and gamma have none: both empty there).
    mine = {j.job_id: (j.name, j.state, j.exit_code, j.signal) for j in backend.accounting([job_id])}
    theirs = {j.job_id: (j.name, j.state, j.exit_code, j.signal) for j in commands.accounting([job_id])}
    assert mine == theirs


def test_a_script_pyslurm_cannot_express_goes_to_sbatch(pair, tmp_path):
    backend, _, _, partition = pair
    token = uuid.uuid4().hex
    # pyslurm accepts `switches` but never sends it (submission.pyx): sbatch must take it.
    job_id = backend.submit(script(token, partition, tmp_path, ["#SBATCH --switches=1@00:01:00"]))
    try:
        assert backend.last_submit_via == "sbatch"
        assert [j.comment for j in backend.jobs([job_id])] == ["slurmkit:%s" % token]
    finally:
        backend.cancel([job_id])


def test_a_script_with_a_long_line_goes_through_pyslurm_and_runs_to_its_end(pair, tmp_path, monkeypatch):
    # pyslurm tries the script's text as a path first: 300 bytes without a slash made that raise
    # (File name too long), a traceback out of `slurmkit submit`.
    backend, commands, _, partition = pair
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))      # where the script's file is written
    token = uuid.uuid4().hex
    word = "x" * 300
    text = script(token, partition, tmp_path).replace("sleep 50", "echo %s | wc -c" % word)
    job_id = backend.submit(text)
    assert backend.last_submit_via == "pyslurm"
    (done,) = wait_until(lambda: [j for j in commands.jobs([job_id]) if j.finished], 60, what="the job's end")
    assert done.state == "COMPLETED", done
    assert (tmp_path / ("pyslurm-%s.out" % job_id)).read_text() == "301\n"
    assert not list(scratch.iterdir())                          # the script's file is gone


def test_status_logs_and_why_of_one_job_leave_pyslurm_alone(pair, job, tmp_path):
    """The commands typed all day ask squeue and scontrol about one job whether pyslurm is there or
    not, so they neither ask Slurm's version nor import pyslurm (30 ms each time); status of two
    jobs loads their list through pyslurm, and only then is it checked and imported."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from conftest import sbatch, wait_job_state

    name, job_id = pair[2], job[0]
    ended = sbatch(name, "-t", "1", "-o", str(tmp_path / "ended-%j.out"), "--wrap", "echo ended-here")
    wait_job_state(name, ended, "COMPLETED")
    code = ("import sys, json, io, contextlib\n"
            "from slurmkit.cli import main\n"
            "out = io.StringIO()\n"
            "with contextlib.redirect_stdout(out):\n"
            "    code = main(sys.argv[1:])\n"
            "print(json.dumps([code, 'pyslurm' in sys.modules, out.getvalue()]))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("SLURMKIT_BACKEND", "SLURMKIT_VIA")}
    env["SLURMKIT_SITE"] = str(Path(__file__).resolve().parents[2] / "site_configs" / "local.yaml")

    def run(*argv):
        proc = subprocess.run([sys.executable, "-c", code] + list(argv), env=env, capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])

    ref, other = "%s:%s" % (name, ended), "%s:%s" % (name, job_id)
    for argv in (["status", ref], ["logs", "-n", "5", ref], ["why", "--here", ref]):
        result = run(*argv)
        assert result[:2] == [0, False], (argv, result)
        assert (ref in result[2] or "ended-here" in result[2]), (argv, result)
    both = run("status", "--json", ref, other)
    assert both[:2] == [0, True]
    assert {j["id"] for j in json.loads(both[2])["jobs"]} == {ref, other}


def test_cancel(pair, job):
    backend, commands = pair[0], pair[1]
    job_id = job[0]
    backend.cancel([job_id])
    done = wait_for(lambda: commands.jobs([job_id]), lambda js: not js or js[0].finished, timeout=30)
    assert not done or done[0].state == "CANCELLED"
    mine = backend.jobs([job_id])
    assert not mine or mine[0].state == "CANCELLED"
    backend.cancel([job_id])  # cancelling a finished job again is not an error with pyslurm
