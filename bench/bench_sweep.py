#!/usr/bin/env python3
"""Sweep benchmark on the local clusters (make cluster-up): 1,000 points four ways.

1. A shell loop of plain ``sbatch`` (one job per point; submitted held, then
   cancelled: only the submission is measured), what researchers do without
   arrays.
2. One hand-written ``sbatch --array=0-999`` of a script with the values in a
   bash array, what a careful researcher writes by hand.
3. ``slurmkit submit --sweep i=0..999 ...`` (the whole command: Python,
   rendering, the journal, ``scontrol show config``, sbatch).
4. submitit's ``AutoExecutor.map_array`` of the same 1,000 calls to the same
   cluster, as a whole Python process too (importing submitit, pickling each
   call into its folder, one ``sbatch --array``), submitted held and cancelled:
   its tasks would each start a Python interpreter on this machine's two
   cores.

3 and 4 are timed in turns, ``BENCH_SWEEP_SUBMIT_REPEAT`` (5) times each,
slurmkit's arrays throttled to one task and cancelled at once: slurmkit's
first turn with an empty cache directory (its first sweep ever), the others
with the cache those left (a researcher's every later sweep).  Target:
slurmkit at most half of submitit's median time, and every turn under 1 s.

For each: the wall time of the submitting command(s) and slurmctld's
``REQUEST_SUBMIT_BATCH_JOB`` count from ``sdiag`` (target: one per array; a
concurrent test run adds its own).  The hand-written array and the slurmkit
sweep each run their 1,000 tasks to the end, in turns (ABBA...),
``BENCH_SWEEP_END_REPEAT`` (2) times each: the time from the submitting command's start until Slurm
reports the last task ended (target: slurmkit's median within 1.1 times the
hand-written array's).  While the sweep's tasks are queued
or running, ``slurmkit sweep status`` of the 1,000 tasks: the Slurm commands
one refresh runs per cluster (counted at the runner; target 1) and
slurmctld's RPCs for the command (sdiag, the least of a few calls).

Every array task counts against ``MaxJobCount`` until MinJobAge after it
ended (cancelled before it started too), and a controller at that limit
makes every sbatch wait: the benchmark adds 15,000, and refuses to start
where they do not fit.

Environment: ``BENCH_SWEEP_CLUSTER`` (default alpha), ``BENCH_SWEEP_POINTS``
(1000), ``BENCH_SWEEP_REPEAT`` (3 status calls), ``BENCH_SWEEP_RUN=0`` cancels
both arrays right after submitting instead of running them.  Results go to
``.bench/sweep.json`` and are printed.
"""

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
# sdiag's counts and the cluster's environment: one reading of them for every benchmark.
from bench_requeue import rpc_counts, rpc_delta  # noqa: E402
import bench_requeue  # noqa: E402

SITE = str(ROOT / "site_configs" / "local.yaml")
STATE = Path(os.environ.get("DEVCLUSTER_STATE") or (ROOT / ".devcluster"))
OUT = ROOT / ".bench"
CLUSTER = os.environ.get("BENCH_SWEEP_CLUSTER", "alpha")
POINTS = int(os.environ.get("BENCH_SWEEP_POINTS", "1000"))
REPEAT = int(os.environ.get("BENCH_SWEEP_REPEAT", "3"))
SUBMIT_REPEAT = int(os.environ.get("BENCH_SWEEP_SUBMIT_REPEAT", "5"))
END_REPEAT = int(os.environ.get("BENCH_SWEEP_END_REPEAT", "2"))
RUN = os.environ.get("BENCH_SWEEP_RUN", "1") != "0"
PARTITION = {"alpha": "cpu", "beta": "gpu", "gamma": "npu"}[CLUSTER]
NAME = "skt-bench-sweep"


def cluster_env():
    return bench_requeue.cluster_env(CLUSTER)


def submissions(delta):
    return delta.get("REQUEST_SUBMIT_BATCH_JOB", 0)


def run(argv, env, **kw):
    return subprocess.run(argv, env=env, capture_output=True, text=True, check=True, **kw)


def timed(action):
    start = time.perf_counter()
    value = action()
    return time.perf_counter() - start, value


def slurmkit_env(tmp):
    env = cluster_env()
    env.update(SLURMKIT_SITE=SITE, SLURMKIT_STATE_DIR=str(tmp / "state"), SLURMKIT_CACHE_DIR=str(tmp / "cache"))
    return env


def slurmkit(tmp, *args):
    return run([sys.executable, "-m", "slurmkit", *args], slurmkit_env(tmp), cwd=str(tmp))


def wait_ended(env, array_ids, timeout=1800.0):
    """Seconds until squeue says every task of these arrays ended (one squeue per half second)."""
    start = time.perf_counter()
    while True:
        states = run(["squeue", "--array", "--noheader", "--states=all", "--jobs=" + ",".join(array_ids),
                      "--format=%T"], env).stdout.split()
        if states and all(s not in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING") for s in states):
            return time.perf_counter() - start, states
        if time.perf_counter() - start > timeout:
            raise RuntimeError("tasks still running after %ss" % timeout)
        time.sleep(0.5)


# ---------------------------------------------------------------- the three ways

def shell_loop(env, tmp):
    """POINTS plain sbatch calls from a shell loop, held (never run); cancelled afterwards."""
    script = ('for i in $(seq 0 %d); do sbatch --parsable --hold -p %s -t 1 -J %s -o /dev/null '
              '--wrap "true $i" >/dev/null || exit 1; done' % (POINTS - 1, PARTITION, NAME))
    before = rpc_counts(env)
    wall, _ = timed(lambda: run(["bash", "-c", script], env))
    delta = rpc_delta(before, rpc_counts(env))
    run(["scancel", "--name", NAME], env)
    return {"wall_s": wall, "submissions": submissions(delta), "jobs": POINTS}


HAND_WRITTEN = """#!/bin/bash
#SBATCH -p {partition}
#SBATCH -t 1
#SBATCH -J {name}
#SBATCH -o {out}/%A_%a.out
values=({values})
exec true "${{values[$SLURM_ARRAY_TASK_ID]}}"
"""


def hand_written(env, tmp, hold):
    """One sbatch --array of a hand-written script; (submit wall s, sdiag delta, array id)."""
    (tmp / "hand").mkdir(exist_ok=True)
    path = tmp / "hand.sh"
    path.write_text(HAND_WRITTEN.format(partition=PARTITION, name=NAME, out=tmp / "hand",
                                        values=" ".join(str(i) for i in range(POINTS))))
    argv = ["sbatch", "--parsable", "--array=0-%d" % (POINTS - 1)] + (["--hold"] if hold else []) + [str(path)]
    before = rpc_counts(env)
    wall, done = timed(lambda: run(argv, env))
    delta = rpc_delta(before, rpc_counts(env))
    return wall, delta, done.stdout.strip().split(";")[0]


SUBMITIT = """
import sys
import submitit
folder, points, partition, name = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
executor.update_parameters(slurm_partition=partition, timeout_min=1, name=name, slurm_array_parallelism=points,
                           slurm_additional_parameters={"hold": True})
jobs = executor.map_array(int, range(points))        # int(i): a call as small as `true {i}`
print(jobs[0].job_id.split("_")[0])
"""


def submitit_map_array(env, tmp):
    """submitit's map_array of POINTS calls, held: (whole process wall s, sdiag delta), cancelled after."""
    try:
        import submitit  # noqa: F401  (installed with the bench extras)
    except ImportError:
        return None
    before = rpc_counts(env)
    wall, done = timed(lambda: run([sys.executable, "-c", SUBMITIT, str(tmp / "submitit"), str(POINTS), PARTITION,
                                    NAME], env))
    delta = rpc_delta(before, rpc_counts(env))
    run(["scancel", done.stdout.strip()], env)
    return {"wall_s": wall, "submissions": submissions(delta)}


def slurmkit_sweep(tmp, name, *options):
    """``slurmkit submit --sweep``: (whole command wall s, sdiag delta, sweep id, array ids)."""
    env = cluster_env()
    (tmp / name).mkdir(exist_ok=True)
    before = rpc_counts(env)
    wall, done = timed(lambda: slurmkit(tmp, "submit", "--sweep", "i=0..%d" % (POINTS - 1), "--sweep-name", name,
                                        "--sweep-dir", str(tmp / name), "-M", CLUSTER, "-p", PARTITION,
                                        "--gpus-per-node", "0", "-T", "single", "-t", "1", *options,
                                        "--", "true", "{i}"))
    delta = rpc_delta(before, rpc_counts(env))
    arrays = [ln.split()[1].split(":")[1].rstrip(":") for ln in done.stderr.splitlines()
              if ln.startswith("submitted ")]
    return wall, delta, done.stdout.strip(), arrays


def submit_turns(env, tmp):
    """``slurmkit submit --sweep`` and submitit's ``map_array``, in turns, SUBMIT_REPEAT times each (one
    sample of either is noise on a shared 2-core machine).  slurmkit's first turn has an empty cache
    directory (the first sweep ever submitted from this account); the later ones keep it, as a
    researcher who has submitted before does (the site's parsed form; each sweep is a new one, so its
    script is rendered afresh every time).  Each slurmkit array runs one task at a time (--max-running
    1) and is cancelled at once: only the submission is timed, and slurmctld keeps two job records of
    it, not 1,000."""
    mine, theirs = [], []
    for turn in range(SUBMIT_REPEAT):
        wall, delta, _, arrays = slurmkit_sweep(tmp, "submit-%d" % turn, "--max-running", "1")
        run(["scancel"] + arrays, env)
        mine.append({"wall_s": wall, "submissions": submissions(delta), "arrays": len(arrays)})
        other = submitit_map_array(env, tmp)
        if other is not None:
            theirs.append(other)
    warm = [m["wall_s"] for m in mine[1:]] or [mine[0]["wall_s"]]
    result = {"slurmkit_walls_s": [m["wall_s"] for m in mine], "slurmkit_cold_s": mine[0]["wall_s"],
              "slurmkit_warm_median_s": statistics.median(warm), "slurmkit_max_s": max(m["wall_s"] for m in mine),
              "slurmkit_submissions_per_array": max(m["submissions"] / max(m["arrays"], 1) for m in mine)}
    if theirs:
        median = statistics.median(t["wall_s"] for t in theirs)
        result.update(submitit_walls_s=[t["wall_s"] for t in theirs], submitit_median_s=median,
                      submitit_submissions=max(t["submissions"] for t in theirs),
                      ratio_warm=result["slurmkit_warm_median_s"] / median,
                      ratio_cold=result["slurmkit_cold_s"] / median)
    return result


def status_cost(tmp, sweep_id):
    """`sweep status` of a sweep whose tasks are queued or running: the CLI's wall time and slurmctld's
    RPCs for it (sdiag, the least of a few calls, sdiag's own taken out), and in-process the Slurm
    commands one refresh runs per cluster when every point is asked about."""
    from slurmkit.session import Session
    from slurmkit.site import find_site
    from slurmkit.sweep import state
    from slurmkit.sweep.journal import Journal

    env = cluster_env()
    own = rpc_delta(rpc_counts(env), rpc_counts(env))          # what one sdiag call adds
    walls, rpcs = [], []
    for _ in range(REPEAT):
        before = rpc_counts(env)
        wall, done = timed(lambda: slurmkit(tmp, "sweep", "status", sweep_id, "--json"))
        after = rpc_counts(env)
        walls.append(wall)
        rpcs.append({k: v - own.get(k, 0) for k, v in rpc_delta(before, after).items() if v - own.get(k, 0)})
    counts = json.loads(done.stdout)["counts"]
    commands = []
    os.environ.update(SLURMKIT_STATE_DIR=str(tmp / "state"), SLURMKIT_CACHE_DIR=str(tmp / "cache"))
    with Session(find_site(SITE)) as session, Journal() as journal:
        sweep = journal.find(sweep_id)
        backend = session.backend(CLUSTER)
        real = backend.runner.run
        backend.runner.run = lambda argv, **kw: commands.append(list(argv)[0]) or real(argv, **kw)
        state.refresh(session, journal, sweep, also=[p.point_id for p in journal.points(sweep.id)])
    best = min(rpcs, key=lambda d: sum(d.values()))
    return {"wall_s_median": statistics.median(walls), "counts_seen": counts, "slurm_commands": commands,
            "rpcs_min": sum(best.values()), "rpc_types": best}


def room(env):
    """Job records slurmctld can still take: MaxJobCount less every record it holds, each pending or
    finished array task counted (finished ones stay for MinJobAge)."""
    config = run(["scontrol", "show", "config"], env).stdout
    limit = int(re.search(r"^MaxJobCount\s*=\s*(\d+)", config, re.M).group(1))
    held = len(run(["squeue", "--array", "--noheader", "--states=all", "--format=%i"], env).stdout.split())
    return limit - held, limit, held


def main():
    env = cluster_env()
    free, limit, held = room(env)
    # Every task counts against MaxJobCount until MinJobAge, a cancelled one too.
    need = (1 + 2 * SUBMIT_REPEAT + 2 * END_REPEAT) * POINTS
    if free < need + 500:
        # A full controller makes sbatch retry for minutes and every other user's submission wait.
        print("bench_sweep: cluster %s holds %d job records of MaxJobCount %d; this benchmark adds %d (finished "
              "ones stay MinJobAge): run it later or on another cluster (BENCH_SWEEP_CLUSTER)"
              % (CLUSTER, held, limit, need), file=sys.stderr)
        return 2
    OUT.mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="slurmkit-bench-sweep-"))
    result = {"cluster": CLUSTER, "points": POINTS}
    try:
        result["shell_loop"] = shell_loop(env, tmp)
        result["submit_turns"] = turns = submit_turns(env, tmp)
        # Run to the end in turns, END_REPEAT times each, hand-written and slurmkit in the order ABBA...: every
        # run leaves 1,000 more finished records for slurmctld to walk, so each run is slower than the one
        # before (about 9 s here); in that order the drift falls on both alike.
        hands, mines = [], []

        def hand_turn():
            wall, delta, job = hand_written(env, tmp, hold=not RUN)
            hands.append({"wall_s": wall, "submissions": submissions(delta)})
            if RUN:
                ended, _ = wait_ended(env, [job])
                hands[-1]["end_to_end_s"] = wall + ended
            else:
                run(["scancel", job], env)

        def slurmkit_turn():
            wall, delta, sweep_id, arrays = slurmkit_sweep(tmp, "run-%d" % len(mines))
            mines.append({"wall_s": wall, "submissions": submissions(delta), "arrays": len(arrays)})
            if len(mines) == 1:
                result["status"] = status_cost(tmp, sweep_id)          # while its tasks are queued or running
            if RUN:
                ended, states = wait_ended(env, arrays)
                mines[-1].update(end_to_end_s=wall + ended, tasks_completed=states.count("COMPLETED"))
            else:
                slurmkit(tmp, "sweep", "cancel", sweep_id)

        for turn in range(END_REPEAT if RUN else 1):
            for action in ((hand_turn, slurmkit_turn) if turn % 2 == 0 else (slurmkit_turn, hand_turn)):
                action()
        result["hand_written_submit"], result["slurmkit_submit"] = hands[0], mines[0]
        result["submit_ratio"] = mines[0]["wall_s"] / hands[0]["wall_s"]
        if RUN:
            result["hand_written_end_to_end_s"] = [h["end_to_end_s"] for h in hands]
            result["slurmkit_end_to_end_s"] = [m["end_to_end_s"] for m in mines]
            result["slurmkit_tasks_completed"] = min(m["tasks_completed"] for m in mines)
            result["end_to_end_ratio"] = (statistics.median(result["slurmkit_end_to_end_s"])
                                          / statistics.median(result["hand_written_end_to_end_s"]))
    finally:
        subprocess.run(["scancel", "--name", NAME], env=env, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    (OUT / "sweep.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    loop, hand, mine, status = (result["shell_loop"], result["hand_written_submit"], result["slurmkit_submit"],
                                result["status"])
    print("sweep of %d points on %s" % (POINTS, CLUSTER))
    print("  shell loop of sbatch:     %7.2f s, %d submissions" % (loop["wall_s"], loop["submissions"]))
    print("  hand-written --array:     %7.3f s, %d submission(s)" % (hand["wall_s"], hand["submissions"]))
    print("  slurmkit submit --sweep:  %7.3f s, %d submission(s) for %d array(s) (target: one per array); "
          "%.1fx the hand-written sbatch" % (mine["wall_s"], mine["submissions"], mine["arrays"],
                                             result["submit_ratio"]))
    if "submitit_median_s" in turns:
        print("  submit only, %d turns each: slurmkit %s s, submitit map_array %s s (median %.3f s, %d "
              "submission(s))" % (SUBMIT_REPEAT, " ".join("%.3f" % w for w in turns["slurmkit_walls_s"]),
                                  " ".join("%.3f" % w for w in turns["submitit_walls_s"]),
                                  turns["submitit_median_s"], turns["submitit_submissions"]))
        print("    slurmkit takes %.2fx submitit's time with a cache from earlier submissions (median %.3f s), "
              "%.2fx on its first run ever (%.3f s) (target <= 0.5, and under 1 s)"
              % (turns["ratio_warm"], turns["slurmkit_warm_median_s"], turns["ratio_cold"],
                 turns["slurmkit_cold_s"]))
    else:
        print("  submitit map_array:       not installed (pip install submitit; make venv installs it)")
    print("  sweep status of %d live tasks: %.3f s, Slurm commands %s (target: 1 per cluster), slurmctld RPCs "
          "%d %s" % (POINTS, status["wall_s_median"], status["slurm_commands"], status["rpcs_min"],
                     status["rpc_types"]))
    if RUN:
        print("  submit to the last task's end, %d turns each: hand-written %s s, slurmkit %s s (%.2fx, medians; "
              "target <= 1.1), %d/%d completed" % (
                  END_REPEAT, " ".join("%.1f" % t for t in result["hand_written_end_to_end_s"]),
                  " ".join("%.1f" % t for t in result["slurmkit_end_to_end_s"]), result["end_to_end_ratio"],
                  result["slurmkit_tasks_completed"], POINTS))
    ok = mine["submissions"] == mine["arrays"] and status["slurm_commands"] == ["squeue"] and (
        not RUN or result["end_to_end_ratio"] <= 1.1) and (
        "submitit_median_s" not in turns or (turns["ratio_warm"] <= 0.5 and turns["slurmkit_max_s"] < 1.0))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
