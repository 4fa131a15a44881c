#!/usr/bin/env python3
"""Goodput under a real failure mix (make bench-goodput; the local clusters must be up).

A training job, examples/ddp_train.py (real PyTorch, gloo, torchrun on two nodes of beta,
a checkpoint every CHECKPOINT_EVERY steps with slurmkit.checkpoint, each step STEP_SECONDS
long), runs for a fixed wall time while a chaos driver injects the same failures at the same
moments into each of three ways of keeping it alive, one after the other in one run:

- ``slurmkit``: ``slurmkit submit --auto-requeue --hang-timeout`` and ``slurmkit daemon run``
  (over SSH, as from a login node);
- ``slurm-requeue``: the same script with Slurm's own ``--requeue`` and nothing else;
- ``afterany``: a chain of the same script, each ``--dependency=afterany`` on the one
  before (NeMo-style auto-resume: whatever ends a job, the next starts and resumes from the
  latest checkpoint).

The failure mix, one every SPACING seconds, in this order (see FAILURES):

  node_fail     a node of the job set DOWN (NODE_FAIL), back in service 20 s later
  worker_kill   the rank-1 worker killed with SIGKILL (exit 137, a transient failure)
  hang          the rank-1 worker stopped (SIGSTOP): no progress, nothing exits
  daemon_kill   slurmkit's daemon killed with -9 (started again 5 s later); others: nothing
  time_limit    the job's time limit moved to a minute from now (Slurm's USR1, then TIMEOUT)
  sshd_gone     beta's login sshd stopped for 20 s (slurmkit's daemon reaches beta over SSH)
  preempt       an urgent job on a node of the job (beta's urgent partition: PREEMPTED)
  node_fail     the node of the first failure DOWN again: slurmkit keeps the job off it

Loopback only; every job the bench starts is cancelled at its end.

Reported for each contender (.bench/goodput.json, and printed):

- goodput = steps that count x STEP_SECONDS / wall time, where the steps that count are the
  step the job's lineage reached (a resumed attempt repeats the steps after its checkpoint;
  they count once);
- per failure: detection (injected -> Slurm says the attempt ended), restart (ended -> the
  next attempt queued), start (ended -> the next attempt running), not stepping (how long the
  next attempt ran without stepping: its own start-up, PyTorch's imports and the rendezvous,
  its checkpoint writes and its end), work lost (steps done since the checkpoint the next
  attempt resumed from, in seconds);
- restarts lost (a failure after which nothing ran again) and duplicated (two attempts of
  the lineage alive at once): both must be 0 for slurmkit.

The issue's goal (90 % goodput at the compressed rate) assumes the restart costs little next
to the time between failures: here every restart pays PyTorch's start on two shared cores
(tens of seconds) and failures come every SPACING seconds, so the figure is the compressed
rate's, reported with its parts.  BENCH_GOODPUT_WALL and BENCH_GOODPUT_SPACING change them.
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
STATE = Path(os.environ.get("DEVCLUSTER_STATE") or (ROOT / ".devcluster"))
OUT = ROOT / ".bench"
PYTHON = str(ROOT / ".venv" / "bin" / "python")
TRAIN = str(ROOT / "examples" / "ddp_train.py")
CLUSTER = "beta"
WALL = float(os.environ.get("BENCH_GOODPUT_WALL", "480"))
SPACING = float(os.environ.get("BENCH_GOODPUT_SPACING", "55"))
STEP_SECONDS = 0.5
LATE = 15.0                            # an attempt that ended this close to the wall's end had no time to restart
CHECKPOINT_EVERY = 10                  # steps: 5 s of work
# Minutes, each attempt: well past the time between failures, so that only the injected time limit ends one.
TIME_LIMIT = str(max(5, int(3 * SPACING // 60) + 1))
# Three heartbeats (rank 0 beats every 5 s at most): a hang costs this, not the length of a start.
HANG_TIMEOUT = "0:15"
# An attempt's start before its first heartbeat (torch's imports and the rendezvous on two shared
# cores, then loading the checkpoint: 7-40 s measured): longer, so that a slow start is no hang.
HANG_STARTUP = "1:00"
# gloo's own timeout of a collective, above the hang timeout and a daemon cycle: at 60 s, as the
# hang timeout, a stopped rank made the others fail (exit 1, not a transient code) just as the
# daemon was about to end the job for its hang, and it stopped tracking it.  NCCL's default is
# 10 minutes; a site that keeps it short lists the launcher's exit code as transient.
COLLECTIVE_TIMEOUT = 300
FAILURES = ["node_fail", "worker_kill", "hang", "daemon_kill", "time_limit", "sshd_gone", "preempt", "node_fail"]
CONTENDERS = [c for c in os.environ.get("BENCH_GOODPUT_CONTENDERS", "slurmkit,slurm-requeue,afterany").split(",")]
STEP_RE = re.compile(r"^step=(\d+) ", re.M)
RESUME_RE = re.compile(r"^resume from=\S+ step=(\d+)$", re.M)
CKPT_RE = re.compile(r"^checkpoint step=(\d+) ", re.M)


def clusters():
    return json.loads((STATE / "clusters.json").read_text())


def cluster_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SLURMKIT_"))}
    env["SLURM_CONF"] = clusters()["clusters"][CLUSTER]["slurm_conf"]
    return env


def slurm(*argv, check=True):
    proc = subprocess.run([str(a) for a in argv], env=cluster_env(), capture_output=True, text=True, timeout=60)
    if check and proc.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(map(str, argv)), proc.stderr.strip()))
    return proc.stdout


def jobs_named(name):
    """{job id: (state, nodes, submit time, start time, end time)} of every job of this name Slurm shows."""
    out = slurm("squeue", "--noheader", "--states=all", "--name=" + name, "--format=%i|%T|%N|%V|%S|%e")
    found = {}
    for line in out.splitlines():
        job_id, state, nodes, submit, start, end = line.split("|")
        found[job_id] = (state, nodes, submit, start, end)
    return found


def expand(nodes):
    return slurm("scontrol", "show", "hostnames", nodes).split() if nodes else []


def worker_pid(job_id, rank):
    """The python worker of ``rank`` in job ``job_id`` (its environment says so; every node is this host)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            env = open("/proc/%s/environ" % pid, "rb").read().split(b"\0")
            cmd = open("/proc/%s/cmdline" % pid, "rb").read()
        except OSError:
            continue
        argv = cmd.split(b"\0")
        # the Python worker itself: not torchrun, not the bash wrapper that records how it ended
        if (b"SLURM_JOB_ID=%s" % job_id.encode() in env and b"RANK=%d" % rank in env
                and os.path.basename(argv[0]).startswith(b"python") and b"ddp_train.py" in cmd
                and b"torch.distributed.run" not in cmd):
            return int(pid)
    return None


class Run:
    """One contender's run: its lineage of jobs, the failures injected into it, what its jobs printed."""

    def __init__(self, contender, work):
        self.contender = contender
        self.work = work / contender
        self.work.mkdir(parents=True)
        self.ckpt = self.work / "ckpt"
        self.name = "skt-goodput-%s-%d" % (contender, os.getpid())
        self.events = []            # (t, what)
        self.failures = []          # dicts: kind, t, job, detected, restarted, lost_s
        self.samples = []           # (t, {job: state}) every second: duplicates, gaps
        self.seen = {}              # job id -> its last squeue record: squeue forgets a job MinJobAge after it ends
        self.t0 = None
        self.daemon = None
        self.first_fail_node = None
        self.env = dict(cluster_env(), HOME=str(self.work / "home"), SLURMKIT_CACHE_DIR=str(self.work / "cache"),
                        SLURMKIT_STATE_DIR=str(self.work / "state"), SLURMKIT_VIA="ssh",
                        SLURMKIT_SITE=str(self.work / "site.yaml"))
        (self.work / "home").mkdir()
        # local.yaml's paths are relative to its folder: the copy lives elsewhere.
        site = (ROOT / "site_configs" / "local.yaml").read_text().replace("../.devcluster/", str(STATE) + "/")
        # 137: a worker killed (the OOM killer, an Xid handler) is worth a restart at this site.
        site = site.replace("transient_exit_codes: [42]", "transient_exit_codes: [42, 137]")
        (self.work / "site.yaml").write_text(site)

    def now(self):
        return time.monotonic() - self.t0

    def note(self, what):
        self.events.append((round(self.now(), 1), what))
        print("  %6.1fs %s %s" % (self.now(), self.contender, what), flush=True)

    # -- the job -------------------------------------------------------------------

    def command(self):
        return [PYTHON, TRAIN, "--steps", "100000", "--step-seconds", STEP_SECONDS, "--checkpoint-every",
                CHECKPOINT_EVERY, "--log-every", 1, "--timeout", COLLECTIVE_TIMEOUT, "--checkpoint-dir", self.ckpt]

    def job_options(self):
        return ["-M", CLUSTER, "-N", 2, "--gpus-per-node", 1, "-T", "torchrun", "-t", TIME_LIMIT, "-J", self.name,
                "-o", self.work / "%j.out"]

    def slurmkit(self, *args, check=True):
        proc = subprocess.run([PYTHON, "-m", "slurmkit"] + [str(a) for a in args], env=self.env, capture_output=True,
                              text=True, timeout=120)
        if check and proc.returncode != 0:
            raise RuntimeError("slurmkit %s: %s" % (" ".join(map(str, args)), proc.stderr.strip()))
        return proc.stdout

    def start(self):
        self.t0 = time.monotonic()
        if self.contender == "slurmkit":
            self.slurmkit("submit", "--auto-requeue", "--hang-timeout", HANG_TIMEOUT,
                          "--hang-startup", HANG_STARTUP, "--checkpoint-dir", self.ckpt,
                          *self.job_options(), "--", *self.command())
            self.start_daemon()
            return
        script = self.slurmkit("render", "--token", self.name, *self.job_options(), "--", *self.command())
        path = self.work / "job.sh"
        path.write_text(script)
        if self.contender == "slurm-requeue":
            slurm("sbatch", "--parsable", "--requeue", path)
        else:                                # a chain of the same job, each after the one before, whatever it did
            previous = None
            for _ in range(30):
                dep = ["--dependency=afterany:%s" % previous] if previous else []
                previous = slurm("sbatch", "--parsable", *dep, path).strip()

    def start_daemon(self):
        log = open(self.work / "daemon.log", "a")
        self.daemon = subprocess.Popen([PYTHON, "-m", "slurmkit", "daemon", "run", "--interval", "5",
                                        "--max-interval", "5"], env=self.env, stdout=log, stderr=log)

    def stop(self):
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.terminate()
            self.daemon.wait(30)
        ids = [j for j, (state, *_rest) in jobs_named(self.name).items() if state not in FINISHED]
        if ids:
            slurm("scancel", *ids, check=False)

    # -- what is running -----------------------------------------------------------

    def running(self):
        """(job id, nodes) of the lineage's running attempt, or None."""
        for job_id, (state, nodes, *_r) in jobs_named(self.name).items():
            if state == "RUNNING":
                return job_id, nodes
        return None

    def outputs(self):
        return {p.stem: p.read_text(errors="replace") for p in self.work.glob("*.out")}

    def lineage_step(self):
        """The step the lineage reached: the highest step any attempt printed (each resumes from a
        checkpoint of the ones before, so its steps continue the count)."""
        steps = [int(s) for text in self.outputs().values() for s in STEP_RE.findall(text)]
        return max(steps) if steps else 0

    def sample(self):
        found = jobs_named(self.name)
        self.seen.update(found)
        self.samples.append((round(self.now(), 1), {j: s for j, (s, *_r) in found.items()}))

    # -- failures ------------------------------------------------------------------

    def inject(self, kind):
        live = self.running()
        record = {"kind": kind, "t": round(self.now(), 1), "job": live[0] if live else None}
        if live is None and kind not in ("daemon_kill", "sshd_gone"):
            record["skipped"] = "no attempt running"
            self.failures.append(record)
            self.note("%s: skipped, nothing running" % kind)
            return
        job_id, nodes = live if live else (None, "")
        hosts = expand(nodes)
        if kind == "node_fail":
            victim = self.first_fail_node if self.first_fail_node in hosts else hosts[0]
            if self.first_fail_node is None:
                self.first_fail_node = victim
            record["node"] = victim
            slurm("scontrol", "update", "NodeName=" + victim, "State=DOWN", "Reason=bench-goodput")
            Later.after(20, lambda v=victim: slurm("scontrol", "update", "NodeName=" + v, "State=RESUME", check=False))
        elif kind in ("worker_kill", "hang"):
            pid = worker_pid(job_id, 1)
            if pid is None:
                record["skipped"] = "no rank-1 worker found"
            else:
                os.kill(pid, signal.SIGKILL if kind == "worker_kill" else signal.SIGSTOP)
        elif kind == "time_limit":
            info = slurm("scontrol", "show", "job", "-o", job_id)
            run_time = re.search(r"RunTime=(\S+)", info).group(1)
            h, m, s = (["0"] + run_time.split("-")[-1].split(":"))[-3:]
            minutes = int(h) * 60 + int(m) + (1 if int(s) else 0) + 1
            slurm("scontrol", "update", "JobId=" + job_id, "TimeLimit=%d" % minutes)
            record["time_limit_min"] = minutes
        elif kind == "preempt":
            urgent = slurm("sbatch", "--parsable", "-p", "urgent", "-w", hosts[0], "--exclusive", "-t", "1",
                           "-J", self.name + "-urgent", "-o", "/dev/null", "--wrap", "sleep 15").strip()
            record["urgent"] = urgent
        elif kind == "daemon_kill":
            if self.daemon is None:
                record["skipped"] = "no daemon"
            else:
                os.kill(self.daemon.pid, signal.SIGKILL)
                self.daemon.wait()
                Later.after(5, self.start_daemon)
        elif kind == "sshd_gone":
            if self.daemon is None:
                record["skipped"] = "nothing of this one goes over SSH"
            else:
                devcluster("down-sshd", CLUSTER)
                Later.after(20, lambda: devcluster("up-sshd", CLUSTER))
        self.failures.append(record)
        self.note("%s%s" % (kind, " (%s)" % record["skipped"] if "skipped" in record else " on %s" % job_id))


FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL",
            "DEADLINE"}


def devcluster(*args):
    subprocess.run([sys.executable, str(ROOT / "devcluster" / "devcluster.py")] + list(args), capture_output=True,
                   timeout=60)


class Later:
    """Actions due at a later moment of the run (resume a node, start the daemon again)."""
    due = []

    @classmethod
    def after(cls, seconds, action):
        cls.due.append((time.monotonic() + seconds, action))

    @classmethod
    def run_due(cls, everything=False):
        now = time.monotonic()
        for item in [d for d in cls.due if everything or d[0] <= now]:
            cls.due.remove(item)
            try:
                item[1]()
            except Exception as exc:          # a late action that fails is reported, the run goes on
                print("  late action failed: %s" % exc, flush=True)


def slurm_time(text):
    from datetime import datetime

    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").timestamp()
    except ValueError:
        return None


def analyse(run, wall_end_epoch):
    """Detection, restart and work lost per failure, from Slurm's own times and the jobs' output.

    detection_s: injected -> Slurm's end time of the attempt; restart_s: that end -> the next
    attempt queued (its submit time; a chain's next job was queued before, so 0); start_s: that
    end -> the next attempt running; work_lost_s: the steps the failed attempt printed after the
    checkpoint the next one resumed from.  A restart is lost when the attempt ended and no
    attempt of the lineage started after it (Slurm's own requeue keeps the job id: its start
    time moves)."""
    run.seen.update(jobs_named(run.name))
    jobs = run.seen
    outputs = run.outputs()
    epoch0 = wall_end_epoch - WALL
    order = sorted(jobs, key=int)     # job ids of one cluster grow with submission
    for f in run.failures:
        job = f.get("job")
        if "skipped" in f or job is None or job not in jobs:
            continue
        if f["kind"] in ("daemon_kill", "sshd_gone"):
            # nothing of the job fails: what counts is that no restart is lost or made twice meanwhile
            f["job_state_after"] = jobs[job][0]
            continue
        later = [j for j in order if int(j) > int(job)]
        if not later:
            _same_job(run, f, job)
            continue
        state, _nodes, _submit, _start, end = jobs[job]
        ended = slurm_time(end) if state in FINISHED else None
        if ended is not None and ended >= wall_end_epoch - 1:
            ended, state = None, "RUNNING"        # ended by the bench's own cancel at the wall's end
        injected = epoch0 + f["t"]
        if ended is None:                    # ended, and the next one exists: its record is gone or moved
            f["ended_state"] = "requeued or gone (%s)" % state
        else:
            f["ended_state"] = state
            f["detection_s"] = round(max(0.0, ended - injected), 1)
        nxt = later[0]
        queued, started = slurm_time(jobs[nxt][2]), slurm_time(jobs[nxt][3])
        base = ended if ended is not None else injected
        f["next_job"] = nxt
        if queued:
            f["restart_s"] = round(max(0.0, queued - base), 1)
        if started and jobs[nxt][0] != "PENDING":
            f["start_s"] = round(started - base, 1)
        resumed = RESUME_RE.findall(outputs.get(nxt, ""))
        done = STEP_RE.findall(outputs.get(job, ""))
        if done:
            f["work_lost_s"] = round(max(0, int(done[-1]) - (int(resumed[0]) if resumed else 0)) * STEP_SECONDS, 1)
        # The next attempt's own cost: how long it ran without stepping (its start-up: PyTorch's
        # imports, the rendezvous, loading the checkpoint; and its checkpoint writes and its end).
        nstate, _, _, nstart, nend = jobs[nxt]
        n_started = slurm_time(nstart) if nstate != "PENDING" else None
        n_ended = slurm_time(nend) if nstate in FINISHED else None
        n_ended = wall_end_epoch if n_ended is None or n_ended > wall_end_epoch else n_ended
        stepped = STEP_RE.findall(outputs.get(nxt, ""))
        if n_started and stepped:
            progress = int(stepped[-1]) - (int(resumed[0]) if resumed else 0)
            f["not_stepping_s"] = round(max(0.0, (n_ended - n_started) - progress * STEP_SECONDS), 1)
    return run.failures


def _same_job(run, f, job):
    """A failure after which no new job came: from the bench's own samples (one a second), whether
    the job left RUNNING, and whether it ran again under the same id (Slurm's own requeue)."""
    after = [(t, states.get(job)) for t, states in run.samples if t > f["t"]]
    left = next(((t, s) for t, s in after if s != "RUNNING"), None)
    if left is None:
        f["ended_state"] = "still RUNNING"
        return
    f["ended_state"] = left[1] or "gone"
    f["detection_s"] = round(left[0] - f["t"], 1)
    back = next((t for t, s in after if t > left[0] and s == "RUNNING"), None)
    if back is not None:
        f["requeued_by_slurm"] = True
        f["start_s"] = round(back - left[0], 1)
    elif left[0] > WALL - LATE:
        f["ended_too_late_to_restart"] = True
    else:
        f["lost_restart"] = True


def duplicates(run):
    """Moments at which two attempts of the lineage were alive (running or pending) at once."""
    if run.contender == "afterany":
        # the chain's later jobs wait (PENDING, Dependency) by design: only two running at once count
        return sum(1 for _, states in run.samples if sum(s == "RUNNING" for s in states.values()) > 1)
    return sum(1 for _, states in run.samples
               if sum(s in ("RUNNING", "PENDING", "CONFIGURING") for j, s in states.items()
                      if not j.endswith("urgent")) > 1)


def run_one(contender, work):
    print("== %s: %d s, a failure every %d s" % (contender, WALL, SPACING), flush=True)
    run = Run(contender, work)
    try:
        run.start()
        schedule = [(SPACING * (i + 1), kind) for i, kind in enumerate(FAILURES) if SPACING * (i + 1) < WALL - 20]
        while run.now() < WALL:
            Later.run_due()
            while schedule and run.now() >= schedule[0][0]:
                run.inject(schedule.pop(0)[1])
            run.sample()
            time.sleep(1.0)
        wall_end = time.time()
        step = run.lineage_step()
    finally:
        Later.run_due(everything=True)
        run.stop()
    time.sleep(2)
    failures = analyse(run, wall_end)
    goodput = step * STEP_SECONDS / WALL
    counted = [f for f in failures if "skipped" not in f]
    result = {
        "contender": contender, "wall_s": WALL, "steps": step, "goodput": round(goodput, 3),
        "attempts": len(run.seen),
        "failures": failures,
        "restarts_lost": sum(1 for f in counted if f.get("lost_restart")),
        "duplicated_samples": duplicates(run),
        "events": run.events,
    }
    print("   %s: goodput %.1f %% (%d steps of %.1f s in %d s), %d attempts, %d restarts lost, %d samples with "
          "two alive" % (contender, 100 * goodput, step, STEP_SECONDS, WALL, result["attempts"],
                         result["restarts_lost"], result["duplicated_samples"]), flush=True)
    shown = ("ended_state", "job_state_after", "detection_s", "restart_s", "start_s", "not_stepping_s", "work_lost_s",
             "skipped",
             "lost_restart", "requeued_by_slurm", "ended_too_late_to_restart")
    for f in failures:
        print("     %-11s t=%5.1f %s" % (f["kind"], f["t"], ", ".join("%s=%s" % (k, f[k]) for k in shown if k in f)),
              flush=True)
    return result


def main():
    if not (STATE / "clusters.json").exists():
        sys.exit("the local clusters are not up: make cluster-up")
    if subprocess.run([PYTHON, "-c", "import torch"], capture_output=True).returncode != 0:
        sys.exit("PyTorch is not installed in %s: make venv-train" % PYTHON)
    OUT.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-goodput-"))
    results = [run_one(c, work) for c in CONTENDERS]
    summary = {"wall_s": WALL, "spacing_s": SPACING, "step_seconds": STEP_SECONDS,
               "checkpoint_every": CHECKPOINT_EVERY, "time_limit_min": TIME_LIMIT, "hang_timeout": HANG_TIMEOUT,
               "hang_startup": HANG_STARTUP,
               "collective_timeout_s": COLLECTIVE_TIMEOUT,
               "mix": FAILURES, "results": results}
    (OUT / "goodput.json").write_text(json.dumps(summary, indent=2) + "\n")
    print("\n== goodput (%d s each, a failure every %d s):" % (WALL, SPACING))
    for r in results:
        print("   %-14s %5.1f %%  restarts lost %d, duplicated %d" % (
            r["contender"], 100 * r["goodput"], r["restarts_lost"], r["duplicated_samples"]))
    print("results in %s" % (OUT / "goodput.json"))


if __name__ == "__main__":
    main()
