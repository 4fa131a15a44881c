"""Sweeps on the real local clusters: `slurmkit submit --sweep` / `slurmkit sweep ...` as a user runs them.

Every test runs its tasks to their end (or cancels them) and checks what each task printed in its
point's own output file, and what Slurm itself says (squeue), not only slurmkit's report.  Tasks are
tiny (a Python one-liner), so a 200-point sweep over alpha and beta takes well under a minute.
"""

import json
import os
import re
import sys
import time
from pathlib import Path

import pytest

from harness import run_slurmkit
from conftest import node_lock, slurm

ROOT = Path(__file__).resolve().parents[2]
SITE = str(ROOT / "site_configs" / "local.yaml")
# Prints its arguments and its sweep variables as one JSON line; the point with seed 7 fails once
# (exit 3), then passes: a rerun must run exactly the failed points again.
PROGRAM = ("import json, os, sys\n"
           "print(json.dumps({'argv': sys.argv[1:], 'env': {k: v for k, v in os.environ.items() "
           "if k.startswith('SLURMKIT_SWEEP_')}}))\n"
           "once = os.path.join(os.environ['SLURMKIT_SWEEP_POINT_DIR'], 'failed-once')\n"
           "if os.environ.get('SLURMKIT_SWEEP_SEED') == os.environ.get('FAIL_SEED', '7') and not os.path.exists(once):\n"
           "    open(once, 'w').close()\n"
           "    print('seed %s fails on purpose' % os.environ['SLURMKIT_SWEEP_SEED'], file=sys.stderr)\n"
           "    sys.exit(3)\n")
HOSTILE = ["it's", '"dq"', "$(touch {marker})", "`touch {marker}`", "a b  c", "*", "back\\slash", "--", "ünï",
           "semi;colon", "{x}", "$HOME", "tab\there", "-x", "a|b", "&&", "#hash", "'; touch {marker}; '", "~",
           "new\nline"]


def slurmkit(tmp_path, *args, check=True, env=None, timeout=120):
    environment = dict(os.environ, SLURMKIT_SITE=SITE, SLURMKIT_STATE_DIR=str(tmp_path / "state"),
                       SLURMKIT_CACHE_DIR=str(tmp_path / "cache"), **(env or {}))
    return run_slurmkit(args, env=environment, cwd=tmp_path, check=check, timeout=timeout)


def status(tmp_path, sweep_id, *extra, env=None):
    return json.loads(slurmkit(tmp_path, "sweep", "status", sweep_id, "--json", *extra, env=env).stdout)


def wait_settled(tmp_path, sweep_id, timeout=240, env=None, done=None):
    """Poll `sweep status` until no task is queued or running (or ``done(status)``)."""
    deadline = time.monotonic() + timeout
    while True:
        data = status(tmp_path, sweep_id, env=env)
        live = {s: n for s, n in data["counts"].items() if s in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING")}
        if (done(data) if done else not live):
            return data
        if time.monotonic() > deadline:
            raise AssertionError("sweep %s still %s after %ss" % (sweep_id, data["counts"], timeout))
        time.sleep(2)


@pytest.fixture
def cancel_after(tmp_path):
    """Sweeps a test made are cancelled at its end, whatever happened: no job is left behind."""
    made = []
    yield made
    for sweep_id, env in made:
        slurmkit(tmp_path, "sweep", "cancel", sweep_id, check=False, env=env)


def outputs(data, sweep_dir):
    """{point id: the JSON lines its attempts printed, in order} from each point's output.log."""
    out = {}
    for point in data["points"]:
        text = (Path(sweep_dir) / "points" / point["point"] / "output.log").read_text()
        out[point["point"]] = [json.loads(ln) for ln in text.splitlines() if ln.startswith("{")]
    return out


@pytest.mark.slow
def test_200_points_over_alpha_and_beta_with_hostile_values_then_rerun_only_the_failed(devcluster, tmp_path,
                                                                                       cancel_after):
    marker = tmp_path / "pwned"
    values = [v.replace("{marker}", str(marker)) for v in HOSTILE]
    points = tmp_path / "values.jsonl"
    points.write_text("".join(json.dumps({"v": v}) + "\n" for v in values))
    sweep_dir = tmp_path / "sweep"
    proc = slurmkit(tmp_path, "submit", "--sweep-file", str(points), "--sweep", "seed=0..9", "--sweep-dir",
                    str(sweep_dir), "--cluster", "alpha,beta", "-p", "gpu", "--gpus-per-node", "0", "-T", "single",
                    "-t", "3", "--", sys.executable, "-c", PROGRAM, "{v}", "--seed={seed}")
    sweep_id = proc.stdout.strip()
    cancel_after.append((sweep_id, None))
    assert len(proc.stdout.splitlines()) == 1 and sweep_id.startswith("python")
    submitted = [ln for ln in proc.stderr.splitlines() if ln.startswith("submitted ")]
    assert {ln.split()[1].split(":")[0] for ln in submitted} == {"alpha", "beta"}      # split between both
    assert sum(int(ln.split(": ")[1].split()[0]) for ln in submitted) == 200

    data = wait_settled(tmp_path, sweep_id)
    assert data["counts"] == {"COMPLETED": 180, "FAILED": 20} and data["total"] == 200
    clusters = {a["cluster"] for a in data["arrays"]}
    assert clusters == {"alpha", "beta"}
    printed = outputs(data, sweep_dir)
    for point in data["points"]:
        (line,) = printed[point["point"]]
        assert line["argv"] == [point["values"]["v"], "--seed=" + point["values"]["seed"]]
        assert line["env"]["SLURMKIT_SWEEP_V"] == point["values"]["v"]
        assert line["env"]["SLURMKIT_SWEEP_POINT"] == point["point"]
    assert not marker.exists()

    failed = status(tmp_path, sweep_id, "--failed")["points"]
    assert len(failed) == 20 and {p["values"]["seed"] for p in failed} == {"7"}
    assert {(p["state"], p["exit_code"], p["signal"]) for p in failed} == {("FAILED", 3, None)}
    assert all(p["error_tail"] == "seed 7 fails on purpose" for p in failed)
    slurmkit(tmp_path, "sweep", "status", sweep_id, "--failed", "--output", str(tmp_path / "failed.jsonl"))
    written = [json.loads(ln) for ln in (tmp_path / "failed.jsonl").read_text().splitlines()]
    assert sorted(w["v"] for w in written) == sorted(values) and {w["seed"] for w in written} == {"7"}

    rerun = slurmkit(tmp_path, "sweep", "rerun", sweep_id)
    assert all(ln.startswith("requeued ") for ln in rerun.stdout.splitlines())    # Slurm still has them
    assert sum(int(ln.split(": ")[1].split()[0]) for ln in rerun.stdout.splitlines()) == 20
    data = wait_settled(tmp_path, sweep_id)
    assert data["counts"] == {"COMPLETED": 200}
    printed = outputs(data, sweep_dir)
    ran = {p["point"]: len(printed[p["point"]]) for p in data["points"]}
    assert {pid for pid, n in ran.items() if n == 2} == {p["point"] for p in failed}   # only those ran again
    assert set(ran.values()) == {1, 2}
    # Slurm's own view: the failed tasks were requeued (Restarts=1) in their own arrays, at their index.
    again = [p for p in data["points"] if p["point"] in {f["point"] for f in failed}]
    assert {p["restarts"] for p in again} == {1} and {p["task"] for p in again} == {f["task"] for f in failed}


@pytest.mark.slow
def test_an_edited_grid_skips_completed_points_and_adds_the_new_ones(devcluster, tmp_path, cancel_after):
    sweep_dir = tmp_path / "sweep"
    common = ["--sweep-dir", str(sweep_dir), "--cluster", "alpha", "-p", "cpu", "-T", "single", "-t", "2", "--",
              sys.executable, "-c", PROGRAM, "x", "{seed}"]
    first = slurmkit(tmp_path, "submit", "--sweep", "seed=0..3", *common, env={"FAIL_SEED": "2"})
    sweep_id = first.stdout.strip()
    cancel_after.append((sweep_id, None))
    assert wait_settled(tmp_path, sweep_id)["counts"] == {"COMPLETED": 3, "FAILED": 1}
    second = slurmkit(tmp_path, "submit", "--sweep", "seed=0..5", *common, env={"FAIL_SEED": "2"})
    assert second.stdout.strip() == sweep_id                       # the same experiment: the same sweep
    lines = second.stderr.splitlines()
    assert any(ln.startswith("requeued alpha:") and ln.endswith("array 2") for ln in lines), lines
    assert any(ln.startswith("submitted alpha:") and ln.endswith("2 task(s), array 0-1") for ln in lines), lines
    assert "skipped: 3 completed earlier" in second.stderr
    data = wait_settled(tmp_path, sweep_id)
    assert data["counts"] == {"COMPLETED": 6}
    runs = {p["values"]["seed"]: len(v) for p in data["points"] for v in [outputs(data, sweep_dir)[p["point"]]]}
    assert runs == {"0": 1, "1": 1, "2": 2, "3": 1, "4": 1, "5": 1}


@pytest.mark.slow
def test_more_points_than_max_array_size_split_and_a_canary_holds_a_broken_sweep(devcluster, tmp_path,
                                                                                 cancel_after):
    """1,100 points on alpha (MaxArraySize 1001): two arrays of 550, each indexed from 0; the broken
    command fails its first two tasks with one exit status, and the other 1,098 are held, then cancelled."""
    proc = slurmkit(tmp_path, "sweep", "submit", "--sweep", "i=0..1099", "--canary", "2", "--sweep-dir",
                    str(tmp_path / "sweep"), "--cluster", "alpha", "-p", "cpu", "-T", "single", "-t", "2", "--",
                    "bash", "-c", 'echo "task {i} is broken" >&2; exit 4')
    sweep_id = proc.stdout.strip()
    cancel_after.append((sweep_id, None))
    submitted = [ln for ln in proc.stderr.splitlines() if ln.startswith("submitted ")]
    assert [ln.split(", array ")[1] for ln in submitted] == ["0-549%1", "0-549"]
    ids = [ln.split()[1].split(":")[1].rstrip(":") for ln in submitted]
    tasks = slurm("alpha", "squeue", "-r", "-h", "-t", "all", "-j", ",".join(ids), "-o", "%F %K").stdout.split("\n")
    per_array = {i: sorted(int(t.split()[1]) for t in tasks if t.startswith(i + " ")) for i in ids}
    assert all(v == list(range(550)) for v in per_array.values())
    data = wait_settled(tmp_path, sweep_id, timeout=90,
                        done=lambda d: d["counts"].get("FAILED") == 2 and
                        all(p["reason"] in ("JobHeldUser", "JobHeldAdmin") for p in d["points"]
                            if p["state"] == "PENDING"))
    assert data["counts"] == {"FAILED": 2, "PENDING": 1098}
    (verdict,) = data["canary_holds"].values()
    assert verdict.startswith("the first 2 tasks failed with exit status 4 and none passed")
    failed = status(tmp_path, sweep_id, "--failed")["points"]
    assert {p["exit_code"] for p in failed} == {4} and all("is broken" in p["error_tail"] for p in failed)
    time.sleep(3)
    assert status(tmp_path, sweep_id)["counts"] == {"FAILED": 2, "PENDING": 1098}   # held: nothing else started
    cancelled = slurmkit(tmp_path, "sweep", "cancel", sweep_id)
    assert cancelled.stdout.startswith("cancelled 1098 task(s)")
    assert status(tmp_path, sweep_id)["counts"] == {"CANCELLED": 1098, "FAILED": 2}


@pytest.mark.slow
def test_a_sweep_above_gammas_max_array_size_and_max_array_tasks_is_split_within_both(devcluster, tmp_path,
                                                                                      cancel_after):
    """gamma: MaxArraySize=50, max_array_tasks=20 (SchedulerParameters).  120 points become arrays of at
    most 20 tasks, each indexed from 0 (Slurm itself lists them so); sbatch refuses none, every point runs
    exactly once with its own values, and the counts add up."""
    config = slurm("gamma", "scontrol", "show", "config").stdout
    assert re.search(r"(?m)^MaxArraySize\s*=\s*50$", config) and "max_array_tasks=20" in config
    sweep_dir = tmp_path / "sweep"
    proc = slurmkit(tmp_path, "submit", "--sweep", "i=0..119", "--sweep-dir", str(sweep_dir), "--cluster", "gamma",
                    "-p", "npu", "--gpus-per-node", "0", "-T", "single", "-t", "2", "--",
                    "bash", "-c", 'echo "point {i} env=$SLURMKIT_SWEEP_I id=$SLURMKIT_SWEEP_POINT '
                                  'task=${SLURM_ARRAY_JOB_ID}_$SLURM_ARRAY_TASK_ID"')
    sweep_id = proc.stdout.strip()
    cancel_after.append((sweep_id, None))
    submitted = [ln for ln in proc.stderr.splitlines() if ln.startswith("submitted ")]
    assert not [ln for ln in proc.stderr.splitlines() if "rror" in ln], proc.stderr
    sizes = [int(ln.split(": ")[1].split()[0]) for ln in submitted]
    assert sum(sizes) == 120 and max(sizes) <= 20 and len(sizes) == 6, submitted
    assert all(ln.startswith("submitted gamma:") for ln in submitted)
    assert [ln.split(", array ")[1] for ln in submitted] == ["0-%d" % (n - 1) for n in sizes]
    ids = [ln.split()[1].split(":")[1] for ln in submitted]
    tasks = slurm("gamma", "squeue", "-r", "-h", "-t", "all", "-j", ",".join(ids), "-o", "%F %K").stdout.split("\n")
    per_array = {i: sorted(int(t.split()[1]) for t in tasks if t.startswith(i + " ")) for i in ids}
    assert [per_array[i] for i in ids] == [list(range(n)) for n in sizes]        # Slurm's own view
    data = wait_settled(tmp_path, sweep_id, timeout=300)
    assert data["counts"] == {"COMPLETED": 120} and data["total"] == 120
    assert {a["cluster"] for a in data["arrays"]} == {"gamma"} and len(data["arrays"]) == 6
    seen = {}
    for point in data["points"]:
        text = (sweep_dir / "points" / point["point"] / "output.log").read_text()
        lines = [ln for ln in text.splitlines() if ln.startswith("point ")]
        assert len(lines) == 1, (point, text)                                     # ran exactly once
        i = point["values"]["i"]
        words = lines[0].split()
        assert words[1] == i and words[2] == "env=" + i and words[3] == "id=" + point["point"]
        seen[i] = words[4]
    assert sorted(seen, key=int) == [str(i) for i in range(120)]
    assert len(set(seen.values())) == 120                                         # 120 distinct tasks


@pytest.mark.slow
def test_a_passing_canary_widens_the_throttle_and_the_sweep_completes(devcluster, tmp_path, cancel_after):
    proc = slurmkit(tmp_path, "submit", "--sweep", "i=0..7", "--canary", "1", "--max-running", "4", "--sweep-dir",
                    str(tmp_path / "sweep"), "--cluster", "beta", "-p", "gpu", "--gpus-per-node", "0", "-T", "single",
                    "-t", "2", "--", "bash", "-c", 'echo "point {i} on $SLURMD_NODENAME"')
    sweep_id = proc.stdout.strip()
    cancel_after.append((sweep_id, None))
    assert proc.stderr.splitlines()[0].endswith("array 0-7%1")
    data = wait_settled(tmp_path, sweep_id, timeout=120)
    assert data["counts"] == {"COMPLETED": 8}
    logs = sorted((tmp_path / "sweep" / "points").glob("*/error.log"))
    assert sum("passed: the array now runs up to 4 tasks at a time" in p.read_text() for p in logs) == 1
    said = sorted(ln for p in (tmp_path / "sweep" / "points").glob("*/output.log")
                  for ln in p.read_text().splitlines() if ln.startswith("point "))
    assert [ln.split()[1] for ln in said] == [str(i) for i in range(8)]


@pytest.mark.slow
def test_a_sweep_over_ssh_reads_failed_output_on_the_login_node(devcluster, tmp_path, cancel_after):
    env = {"SLURMKIT_VIA": "ssh"}
    proc = slurmkit(tmp_path, "submit", "--sweep", "seed=6..8", "--sweep-dir", str(tmp_path / "sweep"),
                    "--cluster", "beta", "-p", "gpu", "--gpus-per-node", "0", "-T", "single", "-t", "2", "--",
                    sys.executable, "-c", PROGRAM, "{seed}", env=env)
    sweep_id = proc.stdout.strip()
    cancel_after.append((sweep_id, env))
    data = wait_settled(tmp_path, sweep_id, env=env)
    assert data["counts"] == {"COMPLETED": 2, "FAILED": 1}
    (failed,) = status(tmp_path, sweep_id, "--failed", env=env)["points"]
    assert failed["values"] == {"seed": "7"} and failed["error_tail"] == "seed 7 fails on purpose"
    # `sweep logs`: a point's own output and error files, read on the login node too (the second point is seed 7)
    # (each attempt's lines under the sweep script's header naming the task)
    err = slurmkit(tmp_path, "sweep", "logs", "--err", sweep_id, "#2", env=env).stdout.splitlines()
    assert len(err) == 2 and err[0].startswith("== slurmkit sweep %s point %s: task " % (sweep_id, failed["point"]))
    assert err[1] == "seed 7 fails on purpose"
    out = slurmkit(tmp_path, "sweep", "logs", sweep_id, failed["point"][:6], env=env)
    assert [json.loads(line)["argv"] for line in out.stdout.splitlines() if line.startswith("{")] == [["7"]], (out.stdout, out.stderr)
    wrong = slurmkit(tmp_path, "sweep", "logs", sweep_id, "#9", check=False, env=env)
    assert wrong.returncode == 2 and "has no point '#9'" in wrong.stderr


# Slurm keeps an array's pending tasks in the array's own record; cancelled there, squeue prints that record as
# one line without a task id.  beta keeps no accounting, so that line is all there is to know: before it was
# read, a move from beta moved nothing, and one from alpha only once slurmdbd had the cancel (it failed in
# whole-file runs, with slurmdbd busy).
@pytest.mark.slow
@pytest.mark.parametrize("source,options", [("alpha", ("-p", "cpu")), ("beta", ("-p", "gpu", "--gpus-per-node", "0"))])
def test_pending_tasks_move_to_another_cluster_and_every_point_runs_once(devcluster, tmp_path, cancel_after, source,
                                                                         options):
    sweep_dir = tmp_path / "sweep"
    proc = slurmkit(tmp_path, "submit", "--sweep", "i=0..5", "--max-running", "1", "--sweep-dir", str(sweep_dir),
                    "--cluster", source, *options, "-T", "single", "-t", "2", "--",
                    "bash", "-c", 'sleep 6; echo "point {i} on $SLURM_CLUSTER_NAME"')
    sweep_id = proc.stdout.strip()
    cancel_after.append((sweep_id, None))
    wait_settled(tmp_path, sweep_id, timeout=60, done=lambda d: d["counts"].get("RUNNING") == 1)
    moved = json.loads(slurmkit(tmp_path, "sweep", "move", sweep_id, "--from", source, "--to", "gamma",
                                "--json").stdout)
    assert len(moved["moved"]) == 5 and [a["cluster"] for a in moved["submitted"]] == ["gamma"]
    data = wait_settled(tmp_path, sweep_id, timeout=120)
    assert data["counts"] == {"COMPLETED": 6}
    said = {}
    for point in data["points"]:
        lines = [ln for ln in (sweep_dir / "points" / point["point"] / "output.log").read_text().splitlines()
                 if ln.startswith("point ")]
        said[point["values"]["i"]] = lines
    assert all(len(lines) == 1 for lines in said.values())          # every point ran exactly once
    clusters = sorted(lines[0].split()[-1] for lines in said.values())
    assert clusters == sorted([source] + ["gamma"] * 5)



# Trains 30 steps with slurmkit.checkpoint, one checkpoint per step in the point's own directory, resuming
# from the checkpoint the requeue daemon chose (SLURMKIT_RESUME_FROM); the point with seed SLOW_SEED takes
# 1 s a step in its first attempt (time to fail its node), every other run 0.1 s.
CHECKPOINTING = ("import json, os, sys, time\n"
                 "from slurmkit import checkpoint\n"
                 "seed, steps = sys.argv[1], 30\n"
                 "root, path = checkpoint.checkpoint_root(), checkpoint.resume_path()\n"
                 "start = json.load(open(os.path.join(path, 'state.json')))['step'] if path else 0\n"
                 "print('attempt=%s resume from=%s step=%d' % (checkpoint.attempt(), path, start), flush=True)\n"
                 "slow = seed == os.environ['SLOW_SEED'] and checkpoint.attempt() == 1\n"
                 "step = start\n"
                 "for step in range(start + 1, steps + 1):\n"
                 "    time.sleep(1.0 if slow else 0.1)\n"
                 "    with checkpoint.checkpoint_dir(root, step) as tmp:\n"
                 "        json.dump({'step': step, 'seed': seed}, open(os.path.join(tmp, 'state.json'), 'w'))\n"
                 "print('final seed=%s step=%d node=%s' % (seed, step, os.environ['SLURMD_NODENAME']), flush=True)\n")


def node_fields(cluster, node):
    out = slurm(cluster, "scontrol", "show", "node", "-o", node).stdout
    return dict(tok.split("=", 1) for tok in out.split() if "=" in tok)


def attempts_of(sweep_dir, point_id):
    """The lines each attempt of a point printed, attempt by attempt (after the sweep's '== ...' lines)."""
    runs = []
    for line in (sweep_dir / "points" / point_id / "output.log").read_text().splitlines():
        if line.startswith("== slurmkit sweep "):
            runs.append([])
        elif runs:
            runs[-1].append(line)
    return runs


@pytest.mark.slow
def test_auto_requeue_restarts_only_the_task_whose_node_failed_from_its_own_checkpoint(devcluster, tmp_path,
                                                                                      cancel_after):
    """Four points on alpha, each on a node of its own (--exclusive: only this sweep's task dies with the
    node); the slow point's node is set DOWN (NODE_FAIL) after a few checkpoints.  `slurmkit daemon once`
    restarts just that point, as a one-task array on another node, from its newest complete checkpoint; it
    ends at step 30, the others ran once, and `sweep status` shows every point COMPLETED."""
    sweep_dir = tmp_path / "sweep"
    # --env, not the submitting shell's environment: the daemon's restarts are submitted from its own.
    proc = slurmkit(tmp_path, "submit", "--sweep", "seed=0..3", "--auto-requeue", "--max-restarts", "3",
                    "--sweep-dir", str(sweep_dir), "--cluster", "alpha", "-p", "cpu", "-T", "single", "-t", "3",
                    "--exclusive", "--env", "SLOW_SEED=2", "--", sys.executable, "-c", CHECKPOINTING, "{seed}")
    sweep_id = proc.stdout.strip()
    cancel_after.append((sweep_id, None))
    assert "its tasks are tracked" in proc.stderr
    tracked = json.loads(slurmkit(tmp_path, "daemon", "jobs", "--json").stdout)
    assert sorted(t["name"] for t in tracked) == sorted("%s/%s" % (sweep_id, p["point"])
                                                        for p in status(tmp_path, sweep_id)["points"])

    def slow_is_checkpointing(data):
        slow = next(p for p in data["points"] if p["values"]["seed"] == "2")
        others = [p["state"] for p in data["points"] if p is not slow]
        steps = list((sweep_dir / "points" / slow["point"] / "checkpoint").glob("step-*"))
        return slow["state"] == "RUNNING" and len(steps) >= 3 and others == ["COMPLETED"] * 3

    data = wait_settled(tmp_path, sweep_id, timeout=180, done=slow_is_checkpointing)
    slow = next(p for p in data["points"] if p["values"]["seed"] == "2")
    (victim,) = slurm("alpha", "scontrol", "show", "hostnames", slow["nodes"]).stdout.split()
    reason = "slurmkit-test: sweep auto-requeue node failure %d" % os.getpid()
    with node_lock(devcluster):
        slurm("alpha", "scontrol", "update", "NodeName=" + victim, "State=DOWN", "Reason=" + reason)
        try:
            failed = wait_settled(tmp_path, sweep_id, timeout=60, done=lambda d: any(
                p["state"] == "NODE_FAIL" for p in d["points"]))
            assert failed["counts"] == {"COMPLETED": 3, "NODE_FAIL": 1}
            newest = max(int(p.name.split("-")[1]) for p in
                         (sweep_dir / "points" / slow["point"] / "checkpoint").glob("step-*"))
            report = json.loads(slurmkit(tmp_path, "daemon", "once", "--json").stdout)
        finally:
            if node_fields("alpha", victim).get("Reason", "").startswith("slurmkit-test"):
                slurm("alpha", "scontrol", "update", "NodeName=" + victim, "State=RESUME", check=False)
            deadline = time.monotonic() + 90
            while any(s in node_fields("alpha", victim).get("State", "") for s in ("DOWN", "DRAIN", "NOT_RESP")):
                assert time.monotonic() < deadline, "node %s not back in service" % victim
                time.sleep(1)
    assert sorted(state for _, state in report["finished"]) == ["COMPLETED"] * 3 + ["NODE_FAIL"]
    assert len(report["restarted"]) == 1 and report["errors"] == []

    data = wait_settled(tmp_path, sweep_id, timeout=180)
    assert data["counts"] == {"COMPLETED": 4}
    again = next(p for p in data["points"] if p["point"] == slow["point"])
    (first_array,) = {p["task"].split("_")[0] for p in data["points"] if p["point"] != slow["point"]}
    assert again["task"].split("_")[0] != first_array and again["task"].endswith("_%s" % slow["task"].split("_")[1])
    assert len(data["arrays"]) == 2                                   # the sweep's array + a one-task array
    for point in data["points"]:
        runs = attempts_of(sweep_dir, point["point"])
        seed = point["values"]["seed"]
        if point["point"] != slow["point"]:
            assert len(runs) == 1 and runs[0][0] == "attempt=1 resume from=None step=0", runs   # not touched
            assert runs[0][-1].startswith("final seed=%s step=30 " % seed)
            continue
        assert len(runs) == 2, runs                                    # the failed attempt and the restart
        assert runs[0] == ["attempt=1 resume from=None step=0"]        # died with its node, before its end
        resumed = "%s/step-%06d" % (sweep_dir / "points" / point["point"] / "checkpoint", newest)
        assert runs[1][0] == "attempt=2 resume from=%s step=%d" % (resumed, newest), runs
        assert runs[1][-1].startswith("final seed=2 step=30 node=") and not runs[1][-1].endswith("=" + victim)

    last = json.loads(slurmkit(tmp_path, "daemon", "once", "--json").stdout)
    assert [state for _, state in last["finished"]] == ["COMPLETED"] and last["restarted"] == []
    tracked = {t["name"]: t for t in json.loads(slurmkit(tmp_path, "daemon", "jobs", "--all", "--json").stdout)}
    assert {t["state"] for t in tracked.values()} == {"completed"} and len(tracked) == 4
    mine = tracked["%s/%s" % (sweep_id, slow["point"])]
    assert [(a["state"], a["resume_step"]) for a in mine["attempts"]] == [("NODE_FAIL", None), ("COMPLETED", newest)]


# Saves a checkpoint only when asked to stop (SIGUSR1, which Slurm sends --signal seconds before the time limit)
# and exits 75, "saved, resume me"; resumes from the checkpoint the daemon chose.
SAVES_ON_USR1 = ("import json, os, sys, time\n"
                 "from slurmkit import checkpoint\n"
                 "stop = checkpoint.StopFlag()\n"
                 "root, path = checkpoint.checkpoint_root(), checkpoint.resume_path()\n"
                 "start = json.load(open(os.path.join(path, 'state.json')))['step'] if path else 0\n"
                 "print('attempt=%s resume from=%s step=%d' % (checkpoint.attempt(), path, start), flush=True)\n"
                 "slow = sys.argv[1] == os.environ['SLOW_SEED'] and checkpoint.attempt() == 1\n"
                 "open(os.path.join(root, '..', 'running-%s' % checkpoint.attempt()), 'w').close()\n"
                 "step = start\n"
                 "for step in range(start + 1, 41):\n"
                 "    time.sleep(0.5 if slow else 0.05)\n"
                 "    if stop:\n"
                 "        with checkpoint.checkpoint_dir(root, step) as tmp:\n"
                 "            json.dump({'step': step}, open(os.path.join(tmp, 'state.json'), 'w'))\n"
                 "        print('saved at step %d on signal %d' % (step, stop.signum), flush=True)\n"
                 "        sys.exit(checkpoint.EXIT_SAVED)\n"
                 "print('final step=%d' % step, flush=True)\n")


@pytest.mark.slow
def test_auto_requeue_a_task_that_saved_on_usr1_resumes_from_that_checkpoint(devcluster, tmp_path, cancel_after):
    """The time-limit path of one task: USR1 to its batch shell (what --signal=B:USR1 sends before the limit)
    goes through the sweep's supervisor and slurmkit_run_step to the program, which saves and exits 75; the
    daemon restarts that task only, from the checkpoint it saved, and it runs to step 40."""
    sweep_dir = tmp_path / "sweep"
    proc = slurmkit(tmp_path, "submit", "--sweep", "seed=0..1", "--auto-requeue", "--sweep-dir", str(sweep_dir),
                    "--cluster", "alpha", "-p", "cpu", "-T", "single", "-t", "3", "--env", "SLOW_SEED=1", "--",
                    sys.executable, "-c", SAVES_ON_USR1, "{seed}")
    sweep_id = proc.stdout.strip()
    cancel_after.append((sweep_id, None))
    data = wait_settled(tmp_path, sweep_id, timeout=120, done=lambda d: any(
        (sweep_dir / "points" / p["point"] / "running-1").exists() and p["state"] == "RUNNING"
        for p in d["points"] if p["values"]["seed"] == "1"))
    slow = next(p for p in data["points"] if p["values"]["seed"] == "1")
    time.sleep(2)                                                      # a few steps in (0.5 s each)
    slurm("alpha", "scancel", "--batch", "--signal=USR1", slow["task"].split(":")[1])
    data = wait_settled(tmp_path, sweep_id, timeout=60)
    saved = next(p for p in data["points"] if p["point"] == slow["point"])
    assert (saved["state"], saved["exit_code"]) == ("FAILED", 75), saved
    report = json.loads(slurmkit(tmp_path, "daemon", "once", "--json").stdout)
    assert sorted(state for _, state in report["finished"]) == ["COMPLETED", "FAILED"]
    assert len(report["restarted"]) == 1 and report["errors"] == []
    data = wait_settled(tmp_path, sweep_id, timeout=120)
    assert data["counts"] == {"COMPLETED": 2}
    runs = attempts_of(sweep_dir, slow["point"])
    assert len(runs) == 2 and runs[0][0] == "attempt=1 resume from=None step=0", runs
    step = int(runs[0][1].split()[3])
    assert 2 <= step < 40
    assert runs[0][1:] == ["saved at step %d on signal 10" % step], runs      # SIGUSR1 reached the program
    resumed = "%s/step-%06d" % (sweep_dir / "points" / slow["point"] / "checkpoint", step)
    assert runs[1] == ["attempt=2 resume from=%s step=%d" % (resumed, step), "final step=40"], runs
    other = next(p for p in data["points"] if p["point"] != slow["point"])
    assert [r[-1] for r in attempts_of(sweep_dir, other["point"])] == ["final step=40"]     # not touched


@pytest.mark.slow
def test_auto_requeue_restarts_only_the_preempted_task_from_its_own_checkpoint(devcluster, tmp_path, cancel_after):
    """Three points on beta, a node each (--exclusive); an urgent job takes the slow point's node (beta's
    urgent partition preempts gpu, PreemptMode=CANCEL): that task alone ends PREEMPTED, and `daemon once`
    restarts it from its newest complete checkpoint; every point ends COMPLETED at step 30."""
    sweep_dir = tmp_path / "sweep"
    proc = slurmkit(tmp_path, "submit", "--sweep", "seed=0..2", "--auto-requeue", "--sweep-dir", str(sweep_dir),
                    "--cluster", "beta", "-p", "gpu", "--gpus-per-node", "0", "-T", "single", "-t", "3",
                    "--exclusive", "--env", "SLOW_SEED=1", "--", sys.executable, "-c", CHECKPOINTING, "{seed}")
    sweep_id = proc.stdout.strip()
    cancel_after.append((sweep_id, None))

    def slow_is_checkpointing(data):
        slow = next(p for p in data["points"] if p["values"]["seed"] == "1")
        steps = list((sweep_dir / "points" / slow["point"] / "checkpoint").glob("step-*"))
        return slow["state"] == "RUNNING" and len(steps) >= 3 and \
            sorted(p["state"] for p in data["points"] if p is not slow) == ["COMPLETED"] * 2

    data = wait_settled(tmp_path, sweep_id, timeout=180, done=slow_is_checkpointing)
    slow = next(p for p in data["points"] if p["values"]["seed"] == "1")
    (node,) = slurm("beta", "scontrol", "show", "hostnames", slow["nodes"]).stdout.split()
    urgent = slurm("beta", "sbatch", "--parsable", "-p", "urgent", "-w", node, "--exclusive", "-t", "1",
                   "-J", "slurmkit-test-urgent", "-o", "/dev/null", "--wrap", "sleep 5").stdout.strip()
    try:
        preempted = wait_settled(tmp_path, sweep_id, timeout=60)
        assert preempted["counts"] == {"COMPLETED": 2, "PREEMPTED": 1}
        newest = max(int(p.name.split("-")[1]) for p in
                     (sweep_dir / "points" / slow["point"] / "checkpoint").glob("step-*"))
        report = json.loads(slurmkit(tmp_path, "daemon", "once", "--json").stdout)
        assert sorted(state for _, state in report["finished"]) == ["COMPLETED", "COMPLETED", "PREEMPTED"]
        assert len(report["restarted"]) == 1 and report["errors"] == []
        data = wait_settled(tmp_path, sweep_id, timeout=180)
    finally:
        slurm("beta", "scancel", urgent, check=False)
    assert data["counts"] == {"COMPLETED": 3}
    for point in data["points"]:
        runs = attempts_of(sweep_dir, point["point"])
        if point["point"] != slow["point"]:
            assert len(runs) == 1 and runs[0][-1].startswith("final seed=%s step=30 " % point["values"]["seed"])
            continue
        resumed = "%s/step-%06d" % (sweep_dir / "points" / point["point"] / "checkpoint", newest)
        assert len(runs) == 2 and runs[0] == ["attempt=1 resume from=None step=0"], runs
        assert runs[1][0] == "attempt=2 resume from=%s step=%d" % (resumed, newest), runs
        assert runs[1][-1].startswith("final seed=1 step=30 ")
