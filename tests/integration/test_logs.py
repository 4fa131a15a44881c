"""`slurmkit logs [-f]` against the real local clusters: jobs run to their end, their output read the
way Slurm named it, locally and over SSH (gamma through its login node)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import sbatch, slurm, wait_job_state
from harness import default_interrupts, one_error_line, run_slurmkit, wait_until

ROOT = Path(__file__).resolve().parents[2]
SITE = str(ROOT / "site_configs" / "local.yaml")


@pytest.fixture(scope="module", autouse=True)
def time_limited_job(devcluster, tmp_path_factory):
    """A 1-minute job, submitted before the module's first test: the last one asks why it ended."""
    out = tmp_path_factory.mktemp("timeout")
    job = sbatch("alpha", "-t", "1", "-o", str(out / "t-%j.out"), "--wrap", "sleep 600")
    yield job
    slurm("alpha", "scancel", job, check=False)


def slurmkit(*args, env=None):
    return run_slurmkit(args, env=dict(os.environ, SLURMKIT_SITE=SITE, **(env or {})))


def follow(*args, env=None) -> subprocess.Popen:
    """``slurmkit logs -f ...`` started, its output readable while it runs."""
    return subprocess.Popen([sys.executable, "-m", "slurmkit", "logs", "-f"] + [str(a) for a in args],
                            env=dict(os.environ, SLURMKIT_SITE=SITE, PYTHONUNBUFFERED="1", **(env or {})),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_interrupts)      # the user's Ctrl-C must reach it


class Reader:
    """A follow's stdout collected by a thread, so a test can wait for a line without blocking on it."""

    def __init__(self, proc):
        import threading

        self.proc, self.text = proc, ""
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            self.text += line

    def wait_for(self, text, timeout=60):
        return wait_until(lambda: text in self.text, timeout, what="%r in the followed output %r" % (text, self.text))


def script(tmp_path, body, name="job.sh"):
    path = tmp_path / name
    path.write_text("#!/bin/bash\n" + body)
    return str(path)


def test_a_followed_job_is_printed_while_it_grows_and_logs_exits_with_its_status(devcluster, tmp_path):
    go = tmp_path / "go"
    job = sbatch("alpha", "-o", str(tmp_path / "grow-%j.out"), script(tmp_path, (
        "echo line 1\n"
        "for i in $(seq 300); do [ -e %s ] && break; sleep 0.2; done\n"
        "echo line 2\nexit 7\n") % go))
    proc = follow("alpha:" + job)
    out = Reader(proc)
    # Line 1 is shown while the job is still running (it waits for the go file before writing line 2).
    out.wait_for("line 1\n")
    assert "line 2" not in out.text
    go.touch()
    assert proc.wait(timeout=90) == 7
    out.thread.join(5)
    assert out.text == "line 1\nline 2\n"


def test_a_pending_job_is_waited_for_with_its_reason_then_followed(devcluster, tmp_path):
    job = sbatch("alpha", "--begin=now+600", "-o", str(tmp_path / "p-%j.out"), "--wrap", "echo started; exit 0")
    proc = follow("alpha:" + job)
    wait_until(lambda: job_is(job, "PENDING"), 20, what="the job pending")
    time.sleep(1)   # the follow has asked once at least (it asks every 2 s)
    slurm("alpha", "scontrol", "update", "jobid=" + job, "StartTime=now")
    stdout, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 0, stderr
    assert stdout == "started\n"
    assert "alpha:%s is PENDING (BeginTime): waiting for it to start" % job in stderr


def job_is(job, state):
    from conftest import job_info

    return job_info("alpha", job).get("JobState") == state


def test_a_two_node_job_shows_each_ranks_file_labelled_and_one_rank_alone(devcluster, tmp_path):
    pattern = str(tmp_path / "r-%j-%s-%t.out")
    job = sbatch("alpha", "-N", "2", "-o", pattern, script(tmp_path, (
        "echo from the batch script\n"
        "srun -N 2 -n 2 -o '%s' bash -c 'echo hello from rank $SLURM_PROCID'\n") % pattern))
    wait_job_state("alpha", job, {"COMPLETED"}, timeout=90)
    shown = slurmkit("logs", "alpha:" + job)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == ["[batch] from the batch script", "[rank 0] hello from rank 0",
                                         "[rank 1] hello from rank 1"]
    one = slurmkit("logs", "--rank", "1", "alpha:" + job)
    assert one.returncode == 0 and one.stdout == "hello from rank 1\n", one.stderr


def test_an_array_lists_its_tasks_and_a_task_shows_its_own_file(devcluster, tmp_path):
    job = sbatch("alpha", "--array=0-1", "-o", str(tmp_path / "a-%A_%a.out"), "--wrap",
                 "echo task $SLURM_ARRAY_TASK_ID")
    wait_until(lambda: all((tmp_path / ("a-%s_%d.out" % (job, i))).exists() for i in (0, 1)), 60,
               what="both tasks' files")
    wait_job_state("alpha", job + "_1", {"COMPLETED"}, timeout=60)
    listed = slurmkit("logs", "alpha:" + job)
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines()]
    assert [r[0] for r in rows] == ["alpha:%s_0" % job, "alpha:%s_1" % job]
    assert rows[1][2] == str(tmp_path / ("a-%s_1.out" % job))
    task = slurmkit("logs", "alpha:%s_1" % job)
    assert task.returncode == 0 and task.stdout == "task 1\n", task.stderr
    refused = slurmkit("logs", "-f", "alpha:" + job)
    assert refused.returncode == 2
    assert "name one, e.g. alpha:%s_0" % job in one_error_line(refused.stderr)


def test_the_error_file_is_its_own(devcluster, tmp_path):
    job = sbatch("alpha", "-o", str(tmp_path / "oe-%j.out"), "-e", str(tmp_path / "oe-%j.err"), "--wrap",
                 "echo to stdout; echo to stderr >&2")
    wait_job_state("alpha", job, {"COMPLETED"}, timeout=60)
    assert slurmkit("logs", "alpha:" + job).stdout == "to stdout\n"
    assert slurmkit("logs", "--err", "alpha:" + job).stdout == "to stderr\n"


def test_the_last_lines_only(devcluster, tmp_path):
    job = sbatch("alpha", "-o", str(tmp_path / "n-%j.out"), "--wrap", "seq 1 5000")
    wait_job_state("alpha", job, {"COMPLETED"}, timeout=60)
    shown = slurmkit("logs", "-n", "3", "alpha:" + job)
    assert shown.returncode == 0 and shown.stdout == "4998\n4999\n5000\n", shown.stderr


def test_over_ssh_a_growing_log_is_followed_and_ctrl_c_leaves_nothing_on_the_login_node(devcluster, tmp_path):
    go = tmp_path / "go"
    out_file = tmp_path / ("ssh-%j.out")
    job = sbatch("gamma", "-o", str(out_file), script(tmp_path, (
        "echo first line\n"
        "for i in $(seq 600); do [ -e %s ] && break; sleep 0.2; done\n"
        "echo after go\n") % go))
    proc = follow("gamma:" + job, env={"SLURMKIT_VIA": "ssh"})
    out = Reader(proc)
    out.wait_for("first line\n")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 130
    path = str(out_file).replace("%j", job)
    # Every read is one short dd on the login node (this machine's loopback sshd): none is left running.
    left = subprocess.run(["pgrep", "-f", "if=" + path], stdout=subprocess.PIPE, text=True)
    assert left.stdout == "", left.stdout
    go.touch()
    wait_job_state("gamma", job, {"COMPLETED"}, timeout=60)
    again = slurmkit("logs", "gamma:" + job, env={"SLURMKIT_VIA": "ssh"})
    assert again.returncode == 0 and again.stdout == "first line\nafter go\n", again.stderr


def test_bad_references_are_one_line(devcluster):
    bad = slurmkit("logs", "alpha:12ab")
    assert bad.returncode == 2 and "is not a job id" in one_error_line(bad.stderr)
    unknown = slurmkit("logs", "alpha:99999999")
    assert unknown.returncode == 1 and "not known to cluster alpha" in one_error_line(unknown.stderr)


# --- slurmkit why -----------------------------------------------------------------------------------

def why(*args, env=None):
    proc = slurmkit("why", *args, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_why_a_job_held_by_begin_says_until_when_how_to_start_it_and_when_the_other_clusters_would(
        devcluster, tmp_path):
    job = sbatch("alpha", "--begin=now+3600", "-t", "10", "-N", "1", "-o", str(tmp_path / "b-%j.out"),
                 "--wrap", "true")
    try:
        text = why("alpha:" + job)
        lines = text.splitlines()
        assert lines[0].startswith("alpha:%s is PENDING: its --begin holds it until " % job)
        assert lines[1] == "what to do: scontrol update jobid=%s StartTime=now starts it earlier" % job
        # beta and gamma are idle: the same job would start there about an hour sooner
        sooner = [ln for ln in lines if ln.startswith("on beta") or ln.startswith("on gamma")]
        assert len(sooner) == 2 and all(" sooner (" in ln for ln in sooner), text
        assert any(ln.startswith("to move it: slurmkit cancel alpha:%s && slurmkit submit --cluster " % job)
                   for ln in lines), text
        alone = why("--here", "alpha:" + job)
        assert "on beta" not in alone and "to move it" not in alone
    finally:
        slurm("alpha", "scancel", job)


def test_why_a_job_waiting_for_a_dependency_names_it(devcluster, tmp_path):
    first = sbatch("alpha", "--begin=now+3600", "-o", str(tmp_path / "d-%j.out"), "--wrap", "true")
    second = sbatch("alpha", "--dependency=afterok:" + first, "-o", str(tmp_path / "d-%j.out"), "--wrap", "true")
    try:
        wait_until(lambda: "Dependency" in slurm("alpha", "squeue", "-h", "-o", "%r", "-j", second).stdout, 30,
                   what="the dependency reason")
        text = why("alpha:" + second)
        assert text.splitlines()[0] == ("alpha:%s is PENDING: it waits for its --dependency (afterok:%s(unfulfilled)) "
                                        "to be met" % (second, first)), text
        # Its dependency's job ids mean other jobs on another cluster: no cluster is offered instead.
        assert "to move it" not in text and "on beta" not in text, text
    finally:
        slurm("alpha", "scancel", first, second)


def test_why_an_ended_job_says_its_status_its_error_lines_and_that_nothing_restarts_it(devcluster, tmp_path):
    job = sbatch("alpha", "-o", str(tmp_path / "f-%j.out"), "-e", str(tmp_path / "f-%j.err"), "--wrap",
                 "echo fine; echo 'ValueError: lr must be positive' >&2; exit 4")
    wait_job_state("alpha", job, {"FAILED"}, timeout=60)
    lines = why("alpha:" + job).splitlines()
    assert lines[0] == "alpha:%s is FAILED: it exited with status 4" % job
    assert lines[1] == "the last lines of %s:" % (tmp_path / ("f-%s.err" % job))
    assert lines[2] == "  ValueError: lr must be positive"
    assert lines[3].startswith("the requeue daemon does not track it")


@pytest.mark.parametrize("qos, reason, limit", [
    ("test_onejob", "its QOS's limit of at most jobs per user holds it (QOSMaxJobsPerUserLimit)",
     "QOS test_onejob allows at most 1 running job(s) per user (MaxJobsPU=1); in use now: 1"),
    ("test_onecpu", "its QOS's group limit on cpu holds it (QOSGrpCpuLimit)",
     "QOS test_onecpu allows at most 1 CPU(s) in use by everyone in it together (GrpTRES[cpu]=1); in use now: 1"),
])
def test_why_a_job_held_by_a_qos_limit_says_the_limit_what_is_in_use_and_what_to_do(devcluster, tmp_path, qos,
                                                                                     reason, limit):
    # devcluster made these QOS on alpha (which enforces limits) for the tests alone: only jobs that ask for
    # one with --qos meet its limit.  The first job takes what the limit allows; the second waits on it.
    first = sbatch("alpha", "--qos=" + qos, "-t", "5", "-o", str(tmp_path / "q1-%j.out"), "--wrap", "sleep 300")
    second = sbatch("alpha", "--qos=" + qos, "-t", "5", "-o", str(tmp_path / "q2-%j.out"), "--wrap", "echo ran")
    try:
        wait_job_state("alpha", first, {"RUNNING"}, timeout=30)
        # slurmctld tries a job as it is submitted and at each scheduling pass (a few seconds here).
        code = reason.rsplit("(", 1)[1].rstrip(")")
        wait_until(lambda: slurm("alpha", "squeue", "-h", "-o", "%r", "-j", second).stdout.strip() == code, 30,
                   what="job %s held by %s" % (second, code))
        lines = why("--here", "alpha:" + second).splitlines()
        assert lines[0] == "alpha:%s is PENDING: %s" % (second, reason)
        assert lines[1] == "the limit: " + limit
        assert lines[2] == ("what to do: wait: it starts when jobs under QOS {q} end (squeue --qos={q} -t running "
                            "lists them); or cancel it and submit it with another QOS (--qos); `sacctmgr show qos "
                            "{q}` shows the limits".format(q=qos))
        # And the limit does hold it only while the first job runs: it then starts and runs to its end.
        slurm("alpha", "scancel", first)
        wait_job_state("alpha", second, {"COMPLETED"}, timeout=60)
        assert (tmp_path / ("q2-%s.out" % second)).read_text() == "ran\n"
    finally:
        slurm("alpha", "scancel", first, second)


def test_why_and_eff_of_a_job_killed_for_exceeding_its_memory(devcluster, tmp_path):
    # alpha kills a step over its memory (JobAcctGatherParams=OverMemoryKill) when it samples it: each
    # second with --acctg-freq=1.  The job touches 600 MiB of its 200 MiB, then would sleep 30 s and print.
    job = sbatch("alpha", "--mem=200M", "--acctg-freq=1", "-t", "2", "-o", str(tmp_path / "m-%j.out"),
                 "-e", str(tmp_path / "m-%j.err"), script(tmp_path, (
                     "python3 -c '\n"
                     "import time\n"
                     "x = bytearray(600 * 1024 * 1024)\n"
                     "for i in range(0, len(x), 4096): x[i] = 1\n"
                     "time.sleep(30)\n'\n"
                     "echo survived\n")))
    # Killed within a sample or two of touching the memory; a job it missed would end COMPLETED at 30 s.
    ended = wait_job_state("alpha", job, {"FAILED", "OUT_OF_MEMORY", "CANCELLED"}, timeout=60)
    assert "survived" not in (tmp_path / ("m-%s.out" % job)).read_text()
    data = accounted("alpha:" + job, lambda d: d["peak_rss_bytes"])
    assert data["peak_rss_bytes"] > 200 << 20 and data["mem_per_node_bytes"] == 200 << 20, data
    lines = why("alpha:" + job).splitlines()
    assert lines[0].startswith("alpha:%s is %s: it was killed for using more memory than it asked for: its "
                               "largest task reached " % (job, ended["JobState"])), lines
    assert lines[0].endswith(", over the 200.0 MiB per node it was given (Slurm's memory enforcement)"), lines
    assert lines[1].startswith("what to do: ask for more memory: --mem="), lines
    shown = slurmkit("eff", "alpha:" + job)
    assert shown.returncode == 0, shown.stderr
    memory = [ln for ln in shown.stdout.splitlines() if ln.startswith("memory: ")]
    assert memory and memory[0].endswith(" of 200.0 MiB per node (%.0f %%)" % (
        100.0 * data["peak_rss_bytes"] / (200 << 20))), shown.stdout
    verdicts = [ln for ln in shown.stdout.splitlines() if ln.startswith("verdict: ")]
    assert any(v.startswith("verdict: it used more memory than it asked for (peak ") for v in verdicts), shown.stdout


def test_why_a_job_that_reached_its_time_limit(time_limited_job):
    # The module's last test: its job was submitted as the module started (Slurm checks time limits about
    # once a minute, so a 1-minute job ends 60 to 120 s after it starts; the other tests ran meanwhile).
    job = time_limited_job
    wait_job_state("alpha", job, {"TIMEOUT"}, timeout=200, interval=2)
    assert why("alpha:" + job).splitlines()[0] == (
        "alpha:%s is TIMEOUT: it reached its time limit (00:01:00) and Slurm ended it" % job)


# --- slurmkit eff -----------------------------------------------------------------------------------

def accounted(ref, complete):
    """``eff --json`` once accounting holds what ``complete(data)`` needs (slurmdbd records a job a moment
    after the controller ended it; until then eff says it has no record, or part of it)."""
    import json

    def ready():
        proc = slurmkit("eff", "--json", ref)
        if proc.returncode != 0:
            assert "accounting has no record" in proc.stderr, proc.stderr
            return None
        data = json.loads(proc.stdout)
        return data if complete(data) else None
    return wait_until(ready, 30, what="accounting to hold %s" % ref)


def test_eff_of_a_busy_two_node_job_shows_its_cpu_memory_and_gpu_hours(devcluster, tmp_path):
    # Two tasks each touching 300 MiB and using 3 s of CPU time (time.process_time: what they get of a CPU,
    # however loaded the machine is); --acctg-freq=1 samples memory each second (the cluster's default, 30 s,
    # would not sample a job this short).
    job = sbatch("alpha", "-N", "2", "-n", "2", "--mem=1G", "--gres=gpu:2", "-t", "5", "--acctg-freq=1",
                 "-o", str(tmp_path / "e-%j.out"), script(tmp_path, (
                     "srun python3 -c '\n"
                     "import time\n"
                     "x = bytearray(300 * 1024 * 1024)\n"
                     "for i in range(0, len(x), 4096): x[i] = 1\n"
                     "while time.process_time() < 3: pass\n'\n")))
    wait_job_state("alpha", job, {"COMPLETED"}, timeout=90)
    data = accounted("alpha:" + job, lambda d: d["peak_rss_bytes"])
    assert data["state"] == "COMPLETED" and len(data["attempts"]) == 1
    # How much of the allocation the tasks kept busy is the machine's load, not eff's (nothing confines them to
    # their CPUs here, and other suites run: 53 % in one CI run, 16 % in another).  What eff must get right:
    # the CPU time the tasks really used (at least their 2 x 3 s), its ratio to elapsed x CPUs, and its
    # verdict on that figure.
    attempt = data["attempts"][0]
    assert attempt["cpu_s"] >= 2 * 3 * 0.95, data
    used = 100.0 * attempt["cpu_s"] / (attempt["elapsed_s"] * attempt["cpus"])   # elapsed in whole seconds
    assert data["cpu_efficiency_pct"] == pytest.approx(min(100.0, used), abs=1.0), data
    assert 300 << 20 <= data["peak_rss_bytes"] < 1 << 30, data
    assert data["mem_per_node_bytes"] == 1 << 30
    assert data["gpus"] == 4 and data["gpu_hours"] == data["elapsed_s"] * 4 / 3600.0
    assert data["gpu_util_pct"] is None and data["energy_j"] is None   # not collected here: unknown, not 0
    assert bool([v for v in data["verdicts"] if "CPUs" in v]) == (data["cpu_efficiency_pct"] < 50), data


def test_eff_says_an_idle_job_asked_for_too_many_cpus(devcluster, tmp_path):
    job = sbatch("alpha", "-c", "4", "-t", "5", "-o", str(tmp_path / "i-%j.out"), "--wrap", "sleep 3")
    wait_job_state("alpha", job, {"COMPLETED"}, timeout=60)
    accounted("alpha:" + job, lambda d: d["cpu_efficiency_pct"] is not None)
    shown = slurmkit("eff", "alpha:" + job)
    assert shown.returncode == 0, shown.stderr
    assert "verdict: asked for 4 CPUs, kept about 0.0 busy: ask for 1" in shown.stdout.splitlines(), shown.stdout


def test_eff_of_an_array_has_a_line_per_task_and_without_accounting_says_why_not(devcluster, tmp_path):
    job = sbatch("alpha", "--array=0-2", "-t", "5", "-o", str(tmp_path / "ae-%A_%a.out"), "--wrap", "true")
    for i in range(3):
        wait_job_state("alpha", "%s_%d" % (job, i), {"COMPLETED"}, timeout=60)
    # slurmdbd records each task a moment after the controller ran it: wait until it holds all three.
    data = accounted("alpha:" + job, lambda d: len(d.get("tasks", ())) == 3)
    assert [t["id"] for t in data["tasks"]] == ["alpha:%s_%d" % (job, i) for i in range(3)]
    assert all(t["state"] == "COMPLETED" for t in data["tasks"])
    refused = slurmkit("eff", "beta:1")
    assert refused.returncode == 1
    assert "cluster beta keeps no accounting" in one_error_line(refused.stderr)


def test_a_job_slurm_requeued_shows_both_attempts_in_logs_and_eff_sums_them(devcluster, tmp_path):
    # The first run waits to be requeued; the second (SLURM_RESTART_COUNT=1) ends at once.  Both append
    # to one file: the pattern has no %r (22.05 and 24.11 have none), which logs says.
    job = sbatch("alpha", "-t", "5", "--open-mode=append", "-o", str(tmp_path / "rq-%j.out"), script(tmp_path, (
        'echo "run ${SLURM_RESTART_COUNT:-0}"\n'
        'if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then sleep 3; echo waiting; sleep 300; fi\n'
        "echo done\n")))
    out = tmp_path / ("rq-%s.out" % job)
    try:
        wait_until(lambda: out.exists() and "waiting" in out.read_text(), 60, what="the first run's output")
        slurm("alpha", "scontrol", "requeue", job)
        # Slurm holds a requeued job until its launch credential expires (cred_expire=30 s here), then runs it.
        wait_job_state("alpha", job, {"COMPLETED"}, timeout=90)
    finally:
        slurm("alpha", "scancel", job, check=False)
    shown = slurmkit("logs", "alpha:" + job)
    assert shown.returncode == 0, shown.stderr
    # Between the runs, slurmstepd's own line (its prefix differs by release: "slurmstepd-an1:" on 22.05,
    # a time stamp on 26.05).
    runs = [ln for ln in shown.stdout.splitlines() if "CANCELLED AT" not in ln or "DUE TO JOB REQUEUE" not in ln]
    assert len(runs) == len(shown.stdout.splitlines()) - 1, shown.stdout
    assert runs == ["run 0", "waiting", "run 1", "done"], shown.stdout
    assert "alpha:%s: attempt 2 of 2" % job in shown.stderr
    first = slurmkit("logs", "--attempt", "1", "alpha:" + job)
    assert first.returncode == 0 and "alpha:%s: attempt 1 of 2" % job in first.stderr, first.stderr
    assert ("Slurm requeued job alpha:%s 1 time(s) and its output pattern has no %%r: every attempt wrote into "
            "the same file" % job) in first.stderr
    refused = slurmkit("logs", "--attempt", "3", "alpha:" + job)
    assert refused.returncode == 2 and "--attempt takes 1 to 2" in one_error_line(refused.stderr)
    data = accounted("alpha:" + job, lambda d: len(d["attempts"]) == 2)
    assert [a["state"] for a in data["attempts"]] == ["REQUEUED", "COMPLETED"], data
    assert data["attempts"][0]["elapsed_s"] >= 3, data          # the first run's 3 s and more
    assert data["elapsed_s"] == sum(a["elapsed_s"] for a in data["attempts"])
    eff_shown = slurmkit("eff", "alpha:" + job)
    assert eff_shown.stdout.splitlines()[0] == "alpha:%s: COMPLETED after 2 attempt(s) (sums over all of them)" % job


def through_click(*args):
    """``slurmkit ARGS`` with the entry point's fast path turned off: what the click command alone prints."""
    code = ("import sys\nfrom slurmkit.cli import fast, main\nfast.serve = lambda args: None\n"
            "sys.exit(main(sys.argv[1:]))\n")
    return subprocess.run([sys.executable, "-c", code] + [str(a) for a in args], stdin=subprocess.DEVNULL,
                          env=dict(os.environ, SLURMKIT_SITE=SITE), capture_output=True, text=True, timeout=120)


def test_the_fast_path_prints_what_the_click_commands_print(devcluster, tmp_path):
    """status, logs and why of a real ended job, and of one that never was, are served without click
    (slurmkit/cli/fast.py) and print, to the byte, what the click commands print, with their exit status."""
    job = sbatch("alpha", "-o", str(tmp_path / "f-%j.out"), "-e", str(tmp_path / "f-%j.err"), "-t", "2", "--wrap",
                 "seq 1 30; echo done >&2")
    wait_job_state("alpha", job, {"COMPLETED"}, timeout=60)
    for argv in (["status", "alpha:" + job], ["status", "--json", "alpha:" + job, "alpha:99999999"],
                 ["logs", "-n", "5", "alpha:" + job], ["logs", "--err", "alpha:" + job],
                 ["why", "--here", "alpha:" + job], ["why", "--here", "--json", "alpha:" + job],
                 ["status", "alpha:12ab"], ["logs", "alpha:99999999"]):
        fast_one, reference = slurmkit(*argv), through_click(*argv)
        assert (fast_one.returncode, fast_one.stdout, fast_one.stderr) == (
            reference.returncode, reference.stdout, reference.stderr), argv
    assert slurmkit("logs", "-n", "2", "alpha:" + job).stdout == "29\n30\n"
    assert slurmkit("logs", "--err", "alpha:" + job).stdout == "done\n"
