"""Bad input on the real local clusters (issue 11): never lost, never twice, never misrouted.

Every test runs the CLI as a separate process, as a user would, and checks
the outcome with Slurm's own commands (squeue, scontrol), not with
slurmkit's report.  Jobs are cancelled at the end of each test.
"""

import json
import os
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from harness import one_error_line, run_slurmkit
from conftest import job_info, slurm, slurm_version, wait_job_state

ROOT = Path(__file__).resolve().parents[2]
SITE = str(ROOT / "site_configs" / "local.yaml")
CPU = ["-p", "cpu", "-T", "single", "-t", "2"]


def slurmkit(*args, env=None, cwd=None, stdout=subprocess.PIPE, timeout=120):
    return run_slurmkit(args, env=dict(os.environ, SLURMKIT_SITE=SITE, **(env or {})), cwd=cwd, stdout=stdout,
                        timeout=timeout)


def jobs_with_token(cluster, token):
    """Ids of every job (any state) whose comment is exactly slurmkit:TOKEN, from squeue itself."""
    out = slurm(cluster, "squeue", "--noheader", "--states=all", "--format=%i %k").stdout
    return sorted(line.split()[0] for line in out.splitlines() if line.split()[1:] == ["slurmkit:" + token])


def cancel(cluster, *ids):
    if ids:
        slurm(cluster, "scancel", *ids, check=False)


def unique_token(what):
    return "%s-%d-%d" % (what, os.getpid(), time.monotonic_ns() % 10 ** 9)


# --------------------------------------------------------------------- never twice

@pytest.mark.slow
@pytest.mark.parametrize("via", ["local", "ssh"])
def test_twenty_parallel_submits_with_one_token_make_exactly_one_job(devcluster, tmp_path, via):
    token = unique_token("par-" + via)
    args = ["submit", "--json", *CPU, "-o", str(tmp_path / "o-%j"), "--token", token, "--", "sleep", "60"]
    with ThreadPoolExecutor(max_workers=20) as pool:
        procs = list(pool.map(lambda _: slurmkit(*args, env={"SLURMKIT_VIA": via}, timeout=180), range(20)))
    created = jobs_with_token("alpha", token)
    try:
        assert len(created) == 1, created                              # Slurm has exactly one job ...
        for proc in procs:
            assert proc.returncode == 0, proc.stderr
        answers = [json.loads(p.stdout) for p in procs]
        assert {a["id"] for a in answers} == {"alpha:" + created[0]}     # ... and every process names it
        if via == "local":
            # Locally slurmkit itself looks, under its lock: the other 19 say the job existed.
            assert sum(not a["existed"] for a in answers) == 1
    finally:
        cancel("alpha", *created)


def test_parallel_federated_submits_with_one_token_make_one_job_on_one_cluster(devcluster, tmp_path):
    token = unique_token("fed")
    args = ["submit", "--json", "--cluster", "alpha,beta", "-N", "1", "--gpus-per-node", "1", "-T", "single",
            "-t", "2", "-o", str(tmp_path / "o-%j"), "--token", token, "--", "sleep", "60"]
    with ThreadPoolExecutor(max_workers=8) as pool:
        procs = list(pool.map(lambda _: slurmkit(*args, timeout=240), range(8)))
    created = {c: jobs_with_token(c, token) for c in ("alpha", "beta")}
    try:
        assert sum(len(ids) for ids in created.values()) == 1, created
        (cluster, ids), = [(c, ids) for c, ids in created.items() if ids]
        for proc in procs:
            assert proc.returncode == 0, proc.stderr
        assert {json.loads(p.stdout)["id"] for p in procs} == {"%s:%s" % (cluster, ids[0])}
    finally:
        for c, ids in created.items():
            cancel(c, *ids)


# --------------------------------------------------------------------- bounded reads, through the CLI

def _merge_bomb():
    lines = ["x-a0: &a0 {cluster: nope}"] + ["x-a%d: &a%d {<<: [*a%d, *a%d]}" % (i, i, i - 1, i - 1)
                                            for i in range(1, 64)]
    return "\n".join(lines) + "\nsite: bomb\ndefaults:\n  <<: [*a63, *a63]\nclusters: {a: {partitions: " \
                              "{p: {accelerator: none, cpus_per_node: 1}}}}\n"


def _product_bomb():
    return ("site: bomb\nx-p: &p {accelerator: none, cpus_per_node: 1}\nx-ps: &ps\n"
            + "\n".join("  p%d: *p" % i for i in range(4000)) + "\nx-c: &c {partitions: *ps}\nclusters:\n"
            + "\n".join("  c%d: *c" % i for i in range(4000)) + "\n")


@pytest.fixture
def hostile_site_files(tmp_path):
    merge = tmp_path / "merge.yaml"
    merge.write_text(_merge_bomb())
    product = tmp_path / "product.yaml"
    product.write_text(_product_bomb())
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    return {"merge": (str(merge), "unknown cluster 'nope'"), "product": (str(product), "alias bomb"),
            "fifo": (str(fifo), "FIFO"), "zero": ("/dev/zero", "device"), "dir": (str(tmp_path), "directory")}


@pytest.mark.parametrize("which", ["merge", "product", "fifo", "zero", "dir"])
@pytest.mark.parametrize("command", [["site", "validate", "{FILE}"], ["render", "--site", "{FILE}", "--", "true"],
                                     ["status", "--site", "{FILE}"]])
def test_hostile_site_files_answer_within_seconds(hostile_site_files, which, command):
    path, needle = hostile_site_files[which]
    args = [a.replace("{FILE}", path) for a in command]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = slurmkit(*args, timeout=30)
    took = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # Expanded, the bombs would take minutes of CPU and gigabytes, a FIFO or
    # /dev/zero forever.  The process's own CPU time (0.2-0.3 s) is what the
    # input decides; its wall time is the machine's: 1-3.4 s on the 2 shared
    # cores under a load of 15-30, for the same 0.2 s of CPU.
    assert cpu < 1.0 and took < 10.0, "%s took %.2fs (%.2fs of CPU)" % (which, took, cpu)
    assert proc.returncode == 2
    if command[0] == "site":
        # validate prints the problems as FILE:LINE lines, then its summary.
        assert needle in proc.stderr and path in proc.stderr and "Traceback" not in proc.stderr
    else:
        line = one_error_line(proc.stderr)
        assert needle in line and path in line and proc.stdout == ""


# --------------------------------------------------------------------- never lost

def test_an_output_slurm_could_not_create_is_refused_before_sbatch(devcluster, tmp_path):
    (tmp_path / "adir").mkdir()
    cases = [("-o", str(tmp_path / "missing" / "o-%j.out"), "does not exist"),
             ("-o", str(tmp_path / "adir"), "names a directory"),
             ("-o", "nodir/%u/o-%j.out", "does not exist")]
    for option, value, needle in cases:
        token = unique_token("out")
        proc = slurmkit("submit", *CPU, option, value, "--token", token, "--", "true", cwd=str(tmp_path))
        line = one_error_line(proc.stderr)
        assert proc.returncode == 2 and "--output/-o" in line and needle in line and proc.stdout == ""
        assert jobs_with_token("alpha", token) == []                   # nothing reached Slurm


def test_a_working_directory_that_takes_no_files_is_refused_and_a_job_launched_there_is_explained(devcluster,
                                                                                                      tmp_path):
    # /proc: root passes access(2) there, yet no file can be made.  slurmkit refuses before sbatch
    # (the job used to be reported submitted, then fail at launch with no output anywhere) ...
    token = unique_token("proc")
    proc = slurmkit("submit", *CPU, "--token", token, "--", "true", cwd="/proc")
    line = one_error_line(proc.stderr)
    assert proc.returncode == 2 and line.startswith("Error: the working directory /proc ") and proc.stdout == ""
    assert "--output/-o" in line
    assert jobs_with_token("alpha", token) == []
    # ... and where it cannot know (plain sbatch; over SSH), wait says what the launch failure means.
    job_id = slurm("alpha", "sbatch", "--parsable", "-p", "cpu", "-t", "1", "-D", "/proc", "-J", "slurmkit-proc-" + token,
                   "--wrap", "true").stdout.strip()
    try:
        waited = slurmkit("wait", "--timeout", "90", "alpha:" + job_id)
        assert waited.returncode == 1 and "FAILED" in waited.stdout, waited.stdout + waited.stderr
        # 22.05 and 24.11 say JobLaunchFailure (ExitCode 0:53); 26.05 says neither: the directory is tried
        assert ("Slurm could not launch the job (JobLaunchFailure)" in waited.stderr
                or "its directory /proc takes no new files (a kernel file system such as /proc), so Slurm could "
                   "not create it" in waited.stderr), waited.stderr
    finally:
        cancel("alpha", job_id)


SYSTEM_PYTHON = "/usr/bin/python3"


def _as_nobody_possible():
    import shutil

    if os.getuid() != 0 or not shutil.which("setpriv") or not os.path.exists(SYSTEM_PYTHON):
        return False
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                           text=True)
    return probe.stdout.strip() == str(tuple(sys.version_info[:2]))


@pytest.mark.skipif(not _as_nobody_possible(), reason="needs root, setpriv and a system Python of this version to "
                                                       "run slurmkit as user nobody")
def test_an_unwritable_working_directory_is_refused_for_a_real_user(devcluster, tmp_path):
    # root may write anywhere, so the check is seen only as another user: nobody, in a directory of root's.
    import shutil
    import site as pysite
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="slurmkit-nobody-", dir="/tmp"))   # pytest's own tmp is closed to others
    top.chmod(0o755)
    workdir = top / "roots"
    workdir.mkdir()
    closed = top / "closed"
    closed.mkdir(mode=0o700)
    cache = top / "nobody-cache"
    cache.mkdir()
    os.chown(cache, 65534, 65534)
    paths = [str(ROOT)] + [p for p in pysite.getsitepackages() if p.startswith(sys.prefix)]
    env = dict(os.environ, HOME=str(cache), SLURMKIT_CACHE_DIR=str(cache / "c"), PYTHONPATH=":".join(paths),
               SLURMKIT_SITE=SITE)
    try:
        for extra, needle in [([], "the working directory %s is not writable" % workdir),
                              (["-o", str(workdir / "x-%j.out")], "directory %s is not writable" % workdir),
                              (["-o", str(closed / "sub" / "x-%j.out")], "cannot be reached (Permission denied)")]:
            proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", SYSTEM_PYTHON,
                                   "-m", "slurmkit", "submit", *CPU, *extra, "--", "true"], capture_output=True,
                                  text=True, cwd=str(workdir), env=env, timeout=60)
            line = one_error_line(proc.stderr)
            assert proc.returncode == 2 and needle in line and proc.stdout == "", proc.stderr
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_over_ssh_a_job_whose_output_directory_is_missing_fails_on_22_05_and_gets_it_made_later(devcluster,
                                                                                                   tmp_path):
    # Over SSH the login node's file system is not looked at before sbatch.  Slurm 22.05
    # fails the job without a trace, and wait says why; 23.02 and later create the
    # directory on the node (seen on 24.11 and 26.05) and the job runs.
    proc = slurmkit("submit", "--json", *CPU, "-o", str(tmp_path / "missing" / "o-%j.out"), "--",
                    "echo", "written", env={"SLURMKIT_VIA": "ssh"})
    assert proc.returncode == 0, proc.stderr
    job = json.loads(proc.stdout)
    version = slurm_version("alpha")
    try:
        waited = slurmkit("wait", "--timeout", "90", job["id"], env={"SLURMKIT_VIA": "ssh"})
        output = tmp_path / "missing" / ("o-%s.out" % job["job_id"])
        if version.startswith("22."):
            assert waited.returncode == 1 and "FAILED" in waited.stdout
            assert "its directory %s does not exist" % (tmp_path / "missing") in waited.stderr
        else:
            assert waited.returncode == 0 and "COMPLETED" in waited.stderr, waited.stdout + waited.stderr
            assert output.read_text() == "written\n"
    finally:
        cancel("alpha", job["job_id"])


def test_a_job_id_that_cannot_be_printed_goes_to_stderr_and_the_job_exists(devcluster, tmp_path):
    token = unique_token("full")
    with open("/dev/full", "w") as full:
        proc = slurmkit("submit", *CPU, "-o", str(tmp_path / "o-%j"), "--token", token, "--", "sleep", "30",
                        stdout=full)
    created = jobs_with_token("alpha", token)
    try:
        assert len(created) == 1
        line = one_error_line(proc.stderr)
        assert proc.returncode == 1 and "job alpha:%s was submitted" % created[0] in line
        assert "No space left on device" in line
    finally:
        cancel("alpha", *created)


def test_cancel_of_an_unknown_job_is_exit_1_and_the_known_one_is_cancelled(devcluster, tmp_path):
    proc = slurmkit("submit", "--json", *CPU, "-o", str(tmp_path / "o-%j"), "--", "sleep", "120")
    job = json.loads(proc.stdout)
    try:
        wait_job_state("alpha", job["job_id"], {"RUNNING", "PENDING"}, timeout=30)
        proc = slurmkit("cancel", job["id"], "alpha:999999")
        assert proc.returncode == 1
        assert proc.stdout.strip() == "cancelled " + job["id"]
        assert "job alpha:999999 is not known to cluster alpha" in one_error_line(proc.stderr)
        wait_job_state("alpha", job["job_id"], {"CANCELLED"}, timeout=30)
        proc = slurmkit("cancel", job["id"])                           # already ended: said, not an error
        assert proc.returncode == 0 and proc.stdout == "" and "had already ended (CANCELLED)" in proc.stderr
    finally:
        cancel("alpha", job["job_id"])


# --------------------------------------------------------------------- the command reaches the program as given

@pytest.mark.slow
def test_options_after_the_program_reach_it_and_a_dash_program_runs(devcluster, tmp_path):
    # A program whose name starts with '-', found on PATH (sbatch exports the submitting environment).
    dash = tmp_path / "-show"
    dash.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$SHOW_TO.$SLURM_PROCID"\n')
    dash.chmod(0o755)
    env = {"PATH": "%s:%s" % (tmp_path, os.environ["PATH"])}
    submitted = []
    try:
        # A first word starting with '-' is an option to slurmkit until '--' says otherwise ...
        proc = slurmkit("submit", "--json", *CPU, "-o", str(tmp_path / "a-%j"), "-e", "SHOW_TO=%s/plain" % tmp_path,
                        "-show", env=env)
        assert proc.returncode == 2 and "No such option '-s'" in one_error_line(proc.stderr)
        # ... after '--' it is the program, and the launchers (exec, srun) run it instead of reading it.
        proc = slurmkit("submit", "--json", *CPU, "-o", str(tmp_path / "a-%j"), "-e", "SHOW_TO=%s/single" % tmp_path,
                        "--", "-show", "-N", "7", "--json", "--debug", env=env)
        assert proc.returncode == 0, proc.stderr
        submitted.append(json.loads(proc.stdout)["job_id"])
        proc = slurmkit("submit", "--json", "-p", "cpu", "-T", "srun", "-t", "2", "-N", "2",
                        "-o", str(tmp_path / "b-%j"), "-e", "SHOW_TO=%s/srun" % tmp_path, "--", "-show", "x y",
                        env=env)
        assert proc.returncode == 0, proc.stderr
        submitted.append(json.loads(proc.stdout)["job_id"])
        # Without '--': everything after the program's first word is the program's.
        proc = slurmkit("submit", "--json", "-p", "cpu", "-T", "single", "-t", "2", "-o", str(tmp_path / "c-%j"),
                        "sh", "-c", 'printf "%s\\n" "$@" > ' + str(tmp_path / "after"), "sh", "-c", "2", "-N", "3",
                        env=env)
        assert proc.returncode == 0, proc.stderr
        submitted.append(json.loads(proc.stdout)["job_id"])
        for job_id in submitted:
            wait_job_state("alpha", job_id, {"COMPLETED"}, timeout=90)
        assert (tmp_path / "single.0").read_text() == "-N\n7\n--json\n--debug\n"
        assert {(tmp_path / ("srun.%d" % i)).read_text() for i in (0, 1)} == {"x y\n"}
        assert (tmp_path / "after").read_text() == "-c\n2\n-N\n3\n"
        assert job_info("alpha", submitted[2])["NumNodes"] == "1"         # -N 3 was the program's, not ours
    finally:
        cancel("alpha", *submitted)


def test_values_that_would_misroute_the_job_are_refused_before_sbatch(devcluster, tmp_path):
    token = unique_token("misroute")
    cases = [(["-e", "SLURM_JOB_ID=1"], "'--env' / '-e'"), (["-p", "cpu\n"], "'--partition' / '-p'"),
             (["-J", "x\n#SBATCH -p gpu"], "'--job-name' / '-J'"), (["--switches", "1"], "--comm heavy"),
             (["-t", "0", "-p", "gpu", "--gpus-per-node", "1"], "no time limit"), (["-N", "٢"], "'--nodes' / '-N'")]
    for extra, needle in cases:
        args = ["submit", "-T", "single", "-o", str(tmp_path / "o-%j"), "--token", token] + \
               (["-p", "cpu"] if "-p" not in extra else []) + extra + ["--", "true"]
        proc = slurmkit(*args)
        assert proc.returncode == 2 and needle in one_error_line(proc.stderr), (extra, proc.stderr)
    assert jobs_with_token("alpha", token) == []


# --------------------------------------------------------------------- messages

def test_a_broken_slurm_conf_is_named_by_its_first_error(devcluster, tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=alpha\nBogusKey=1\n")
    site = tmp_path / "site.yaml"
    site.write_text(Path(SITE).read_text().replace("slurm_conf: ../.devcluster/alpha/etc/slurm.conf",
                                                   "slurm_conf: %s" % conf)
                    .replace("../.devcluster", str(ROOT / ".devcluster")))
    proc = slurmkit("status", "--site", str(site), "alpha:1", env={"SLURMKIT_VIA": "local",
                                                                    "SLURMKIT_BACKEND": "commands"})
    line = one_error_line(proc.stderr)
    assert proc.returncode == 1 and "unrecognized key: BogusKey" in line
