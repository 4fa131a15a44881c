"""--prefer green|cheap and --deadline against the three real local clusters, with test-written profiles.

Each test writes a copy of site_configs/local.yaml with its own energy
settings (carbon and price profiles, a power model per partition) and plans
with it; Slurm's own start estimates (``sbatch --test-only``) are real.
Hourly windows are written relative to this machine's current hour.  Jobs are
``true`` with short limits, and any job submitted is cancelled at the end.
"""

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from conftest import cancel_later, fill, job_info, local_site_data, slurm, wait_job_state
from harness import wait_until

ROOT = Path(__file__).resolve().parents[2]
POWER = {"gpu_idle_watts": 60, "gpu_busy_watts": 400, "node_idle_watts": 100, "node_busy_watts": 300}
ONE_GPU = ["-N", "1", "--gpus-per-node", "1", "-T", "single"]


def flat(value):
    return [{"hours": "00-24", "value": value}]


def dirty_then_clean(dirty_hours, dirty, clean):
    """``dirty`` for ``dirty_hours`` hours from this hour on, ``clean`` for the rest of the day."""
    start = datetime.now().hour
    end = (start + dirty_hours) % 24
    return [{"hours": "%02d-%02d" % (start, end), "value": dirty},
            {"hours": "%02d-%02d" % (end, start), "value": clean}]


@pytest.fixture
def green(tmp_path):
    """green(energy by cluster[, time zone by cluster]) -> run(*args): slurmkit with a copy of local.yaml holding
    those energy settings."""
    def make(energy, timezones=None, python=None):
        site = local_site_data()
        for name, cluster in site["clusters"].items():
            if name in energy:
                cluster["energy"] = energy[name]
                if python:
                    cluster["python"] = python
            if name in (timezones or {}):
                cluster["timezone"] = timezones[name]
            for part in cluster["partitions"].values():
                part["power"] = dict(POWER) if part["accelerator"] != "none" else {"node_busy_watts": 300}
        path = tmp_path / "green.yaml"
        path.write_text(yaml.safe_dump(site))
        env = dict(os.environ, SLURMKIT_SITE=str(path), SLURMKIT_CACHE_DIR=str(tmp_path / "cache"))
        env.pop("SLURMKIT_VIA", None)

        def run(*args, check=True):
            proc = subprocess.run([sys.executable, "-m", "slurmkit", *args], capture_output=True, text=True,
                                  env=env, timeout=120, cwd=str(tmp_path))   # job output files land here
            if check and proc.returncode != 0:
                raise AssertionError("slurmkit %s -> %d\n%s%s" % (" ".join(args), proc.returncode, proc.stdout,
                                                                   proc.stderr))
            return proc

        run.validated = run("site", "validate", str(path))   # exit 0, or this raised
        return run
    return make


def test_green_chooses_the_cluster_with_the_least_carbon(devcluster, green):
    run = green({"alpha": {"carbon_intensity": flat(600)}, "beta": {"carbon_intensity": flat(80)},
                 "gamma": {"carbon_intensity": flat(300)}})
    proc = run("submit", "--cluster", "auto", "--prefer", "green", "--dry-run", "--json", *ONE_GPU, "-t", "5",
               "--", "true")
    plan = json.loads(proc.stdout)
    assert plan["id"] is None                               # a dry run submits nothing
    known = [w for w in plan["windows"] if w["gco2"] is not None]
    assert {w["cluster"] for w in known} == {"alpha", "beta", "gamma"}
    assert plan["chosen"]["cluster"] == "beta"
    assert plan["chosen"]["gco2"] == min(w["gco2"] for w in known)


def test_cheap_chooses_the_lowest_cost_window_and_explains_it(devcluster, green):
    run = green({"alpha": {"price_per_kwh": 0.05}, "beta": {"price_per_kwh": 0.30}, "gamma": {"price_per_kwh": 0.20}})
    proc = run("submit", "--cluster", "alpha,beta", "--prefer", "cheap", "--explain", "--dry-run", "--json",
               *ONE_GPU, "-t", "5", "--", "true")
    plan = json.loads(proc.stdout)
    # alpha's GPU-hour price (4.0) outweighs its cheap energy: the cost is both parts.
    costs = {w["cluster"]: w["cost"] for w in plan["windows"]}
    assert plan["chosen"]["cost"] == min(costs.values())
    assert plan["chosen"]["cluster"] == min(costs, key=costs.get)
    assert "KWH" in proc.stderr and "KGCO2E" in proc.stderr   # the --explain table


def test_a_deadline_only_the_dirtiest_cluster_meets_picks_it(devcluster, green, request):
    # beta and gamma are clean but full for ten minutes; alpha is dirty and free.
    fill(request, "beta", "-N", "3", "--gpus-per-node", "4")
    fill(request, "gamma", "-N", "2", "--gres=npu:8")
    run = green({"alpha": {"carbon_intensity": flat(900)}, "beta": {"carbon_intensity": flat(20)},
                 "gamma": {"carbon_intensity": flat(30)}})
    proc = run("submit", "--cluster", "auto", "--prefer", "green", "--deadline", "+8m", "--dry-run", "--json",
               *ONE_GPU, "-t", "5", "--", "true")
    plan = json.loads(proc.stdout)
    assert plan["chosen"]["cluster"] == "alpha"
    assert not [w for w in plan["windows"] if w["cluster"] in ("beta", "gamma") and w["meets_deadline"]]


def test_a_deadline_nothing_meets_is_refused_with_the_earliest_end(devcluster, green):
    run = green({"alpha": {"carbon_intensity": flat(100)}})
    proc = run("submit", "--cluster", "alpha", "--prefer", "green", "--deadline", "+2m", *ONE_GPU, "-t", "10",
               "--", "true", check=False)
    assert proc.returncode == 2
    assert "earliest possible end" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_later_window_is_submitted_with_begin_and_held_by_slurm(devcluster, green, request):
    run = green({"alpha": {"carbon_intensity": dirty_then_clean(2, 700, 40)}})
    proc = run("submit", "--cluster", "alpha", "--prefer", "green", "--deadline", "+5h", "--json", *ONE_GPU,
               "-t", "5", "--", "true")
    placed = json.loads(proc.stdout)
    cancel_later(request, "alpha", placed["job_id"])
    chosen = placed["chosen"]
    assert chosen["begin"] is not None and chosen["gco2"] == min(w["gco2"] for w in placed["windows"])
    # Slurm holds it until the window: pending with reason BeginTime, its start the window's.
    wait_job_state("alpha", placed["job_id"], {"PENDING"})
    # The controller sets the reason on its next scheduling pass.
    info = wait_until(lambda: (lambda i: i if i.get("Reason") == "BeginTime" else None)(
        job_info("alpha", placed["job_id"])), 30, what="reason BeginTime")
    assert info["StartTime"] == chosen["begin"][:19]


def test_a_sweep_goes_to_its_greener_window_held_by_begin_then_runs(devcluster, green, request, tmp_path):
    run = green({"alpha": {"carbon_intensity": dirty_then_clean(2, 700, 40)}})
    proc = run("submit", "--sweep", "lr=1,2", "--sweep-dir", str(tmp_path / "sweep"), "--cluster", "alpha",
               "--prefer", "green", "--deadline", "+5h", "--json", *ONE_GPU, "-t", "5", "--", "echo", "lr={lr}")
    report = json.loads(proc.stdout)
    (array,) = report["submitted"]
    cancel_later(request, "alpha", array["job_id"])
    (line,) = [ln for ln in proc.stderr.splitlines() if "sweep placed by --prefer green --deadline" in ln]
    begin = line.split("held by --begin until ")[1].split(",")[0]
    # Both tasks wait for the clean hours: pending, reason BeginTime, from the window's start.
    info = wait_until(lambda: (lambda i: i if i.get("Reason") == "BeginTime" else None)(
        job_info("alpha", array["job_id"])), 30, what="reason BeginTime")
    assert info["StartTime"] == begin and datetime.fromisoformat(begin) > datetime.now(), (line, info)
    # Released now (as `slurmkit why` tells a user to), each point runs with its own value.
    slurm("alpha", "scontrol", "update", "jobid=%s" % array["job_id"], "StartTime=now")

    def ended():
        data = json.loads(run("sweep", "status", report["sweep"], "--json").stdout)
        return data if data["counts"] == {"COMPLETED": 2} else None
    data = wait_until(ended, 120, interval=2.0, what="both points to complete")
    printed = sorted((tmp_path / "sweep" / "points" / p["point"] / "output.log").read_text().split("==\n")[-1].strip()
                     for p in data["points"])
    assert printed == ["lr=1", "lr=2"], printed


def test_eff_of_a_finished_job_takes_its_energy_from_the_power_model(devcluster, green):
    run = green({"alpha": {"pue": 1.2, "carbon_intensity": flat(250), "price_per_kwh": 0.3}})
    placed = json.loads(run("submit", "--cluster", "alpha", "--json", *ONE_GPU, "-t", "2", "--", "sleep", "2").stdout)
    wait_job_state("alpha", placed["job_id"], {"COMPLETED"}, timeout=90)

    def accounted():
        # slurmdbd records the job a moment after the controller ended it
        proc = run("eff", "--json", "alpha:" + placed["job_id"], check=False)
        if proc.returncode != 0:
            assert "accounting has no record" in proc.stderr, proc.stderr
            return None
        data = json.loads(proc.stdout)
        # slurmdbd's first row of a job may say COMPLETED without its partition and time limit yet.
        whole = data["state"] == "COMPLETED" and all(a["partition"] and a["limit_s"] for a in data["attempts"])
        return data if whole else None
    data = wait_until(accounted, 30, what="accounting to hold the job")
    assert data["energy_j"] is None and data["energy_source"] == "model", json.dumps(data)   # none measured here
    kwh = (POWER["node_busy_watts"] + POWER["gpu_busy_watts"]) * 1.2 * data["elapsed_s"] / 3600.0 / 1000.0
    assert data["gpus"] == 1 and data["energy_kwh"] == pytest.approx(kwh)
    gpu_hours = data["elapsed_s"] / 3600.0                                     # alpha: 4.0 a GPU-hour as well
    assert data["gco2"] == pytest.approx(kwh * 250) and data["cost"] == pytest.approx(kwh * 0.3 + gpu_hours * 4.0)


FAKE_NVML = ROOT / "tests" / "integration" / "fakes" / "nvml"


def test_eff_takes_the_gpus_energy_from_the_nvml_samples_each_node_wrote(devcluster, green, tmp_path, request):
    """Two jobs on two nodes with two GPUs each, their counters sampled by the job script (energy.nvml_samples):
    one reads the FAKE pynvml (250 W a board, eight boards a node: only the two Slurm gave the job count), the
    other the real pynvml of the test's Python, which finds no NVIDIA driver here and says so."""
    samples = tmp_path / "nvml"
    run = green({"alpha": {"pue": 1.2, "carbon_intensity": flat(250), "nvml_samples": str(samples)}},
                python=sys.executable)
    shape = ["--cluster", "alpha", "--json", "-N", "2", "--gpus-per-node", "2", "-T", "srun", "--procs-per-node", "1",
             "-t", "2"]
    fake = json.loads(run("submit", *shape, "--env", "PYTHONPATH=%s" % FAKE_NVML, "--env",
                          "SLURMKIT_FAKE_NVML_GPUS=8", "--", "sleep", "6").stdout)["job_id"]
    real = json.loads(run("submit", *shape, "--", "sleep", "2").stdout)["job_id"]
    for job in (fake, real):
        cancel_later(request, "alpha", job)
    for job in (fake, real):
        wait_job_state("alpha", job, {"COMPLETED"}, timeout=120)
    written = sorted(p.name for p in (samples / fake / "0").iterdir())
    assert len(written) == 4 and all(n.endswith((".start.json", ".end.json")) for n in written), written
    starts = [json.loads((samples / fake / "0" / n).read_text()) for n in written if n.endswith(".start.json")]
    assert all(s["error"] is None and len(s["job_gpus"].split(",")) == 2 for s in starts), starts

    def accounted(job):
        def ready():
            proc = run("eff", "--json", "alpha:" + job, check=False)
            data = json.loads(proc.stdout) if proc.returncode == 0 else None
            whole = data and data["state"] == "COMPLETED" and all(a["partition"] and a["nodelist"]
                                                                  for a in data["attempts"])
            return data if whole else None
        return wait_until(ready, 30, what="accounting to hold job %s" % job)

    data = accounted(fake)
    gpu_kwh = data["attempts"][0]["gpu_kwh"]
    # 2 nodes x 2 GPUs x 250 W for at least the 6 s of sleep, and no longer than the job ran
    low, high = 4 * 250 * 6 / 3.6e6, 4 * 250 * (data["elapsed_s"] + 1) / 3.6e6
    assert data["energy_source"] == "nvml" and low <= gpu_kwh <= high, json.dumps(data)
    node_kwh = 2 * POWER["node_busy_watts"] * data["elapsed_s"] / 3.6e6
    assert data["energy_kwh"] == pytest.approx((gpu_kwh + node_kwh) * 1.2)
    assert data["gco2"] == pytest.approx(data["energy_kwh"] * 250)
    text = run("eff", "alpha:" + fake).stdout
    assert "the GPUs measured by NVML at the job's start and end" in text, text

    data = accounted(real)
    assert data["energy_source"] == "model", json.dumps(data)
    assert any(w.startswith("NVML on an") and "NVML" in w.split(":", 1)[1] for w in data["nvml_unread"]), data


def forecast_points(value, hours, start=None):
    """A Carbon Aware SDK forecast: hourly points from the current hour on."""
    from datetime import timedelta, timezone

    first = (start or datetime.now(timezone.utc)).replace(minute=0, second=0, microsecond=0)
    return [{"location": "local", "timestamp": (first + timedelta(hours=i)).strftime("%Y-%m-%dT%H:%M:%SZ"),
             "duration": 60, "value": value} for i in range(hours)]


def test_a_forecast_wins_over_the_profile_and_a_stale_one_falls_back_with_one_warning(devcluster, green, tmp_path):
    from datetime import timedelta, timezone

    fresh, stale = tmp_path / "alpha.json", tmp_path / "beta.json"
    fresh.write_text(json.dumps(forecast_points(15, 24)))                  # alpha: clean by its forecast
    stale.write_text(json.dumps(forecast_points(1, 24, datetime.now(timezone.utc) - timedelta(days=2))))
    run = green({"alpha": {"carbon_intensity": flat(700), "carbon_forecast": str(fresh)},
                 "beta": {"carbon_intensity": flat(200), "carbon_forecast": str(stale)}})
    proc = run("submit", "--cluster", "alpha,beta", "--prefer", "green", "--dry-run", "--json", *ONE_GPU, "-t", "5",
               "--", "true")
    plan = json.loads(proc.stdout)
    by_cluster = {w["cluster"]: w for w in plan["windows"]}
    assert plan["chosen"]["cluster"] == "alpha" and by_cluster["alpha"]["carbon_source"] == "forecast"
    assert by_cluster["beta"]["carbon_source"] == "profile"               # the stale forecast was not used
    for stderr in (proc.stderr, run.validated.stderr):                    # submit and site validate alike
        warnings = [line for line in stderr.splitlines() if "carbon forecast" in line]
        assert len(warnings) == 1 and "cluster beta" in warnings[0] and "stale" in warnings[0], stderr


def test_a_forecast_command_wins_over_the_profile_and_a_slow_one_falls_back_at_its_timeout(devcluster, green,
                                                                                            tmp_path):
    # A site's program prints the forecast (its words, no shell); one that hangs is killed at its timeout.
    data = tmp_path / "alpha.json"
    data.write_text(json.dumps(forecast_points(15, 24)))
    program = tmp_path / "forecast"
    program.write_text('#!/bin/bash\ncase $1 in alpha) cat "$2" ;; *) sleep 60 ;; esac\n')
    program.chmod(0o755)
    run = green({"alpha": {"carbon_intensity": flat(700), "carbon_forecast_command": [str(program), "alpha",
                                                                                      str(data)]},
                 "beta": {"carbon_intensity": flat(200), "carbon_forecast_command": [str(program), "beta"],
                          "carbon_forecast_timeout": 1}})
    proc = run("submit", "--cluster", "alpha,beta", "--prefer", "green", "--dry-run", "--json", *ONE_GPU, "-t", "5",
               "--", "true")
    plan = json.loads(proc.stdout)
    by_cluster = {w["cluster"]: w for w in plan["windows"]}
    assert plan["chosen"]["cluster"] == "alpha" and by_cluster["alpha"]["carbon_source"] == "forecast"
    assert by_cluster["beta"]["carbon_source"] == "profile"
    warnings = [line for line in proc.stderr.splitlines() if "carbon forecast" in line]
    assert len(warnings) == 1 and "cluster beta" in warnings[0] and "within 1 s" in warnings[0], proc.stderr


def zone_where_it_is(hour):
    """A fixed-offset IANA zone (Etc/GMT-N is UTC+N) whose local hour is ``hour`` now."""
    from datetime import timezone

    offset = (hour - datetime.now(timezone.utc).hour) % 24
    offset = offset - 24 if offset > 12 else offset
    return "Etc/GMT%+d" % -offset if offset else "UTC"


def test_each_clusters_windows_are_its_own_local_hours(devcluster, green):
    # One profile for both (clean mornings, dirty afternoons), read in each cluster's time zone: it is 06:00
    # at alpha and 18:00 at beta now, so alpha is the clean one whatever this machine's time zone.
    day = [{"hours": "00-12", "value": 100}, {"hours": "12-24", "value": 600}]
    run = green({"alpha": {"carbon_intensity": day}, "beta": {"carbon_intensity": day}},
                timezones={"alpha": zone_where_it_is(6), "beta": zone_where_it_is(18)})
    proc = run("submit", "--cluster", "alpha,beta", "--prefer", "green", "--deadline", "+1h", "--dry-run", "--json",
               *ONE_GPU, "-t", "5", "--", "true")
    plan = json.loads(proc.stdout)
    now = {w["cluster"]: w["gco2"] for w in plan["windows"] if w["gco2"] is not None}
    assert plan["chosen"]["cluster"] == "alpha" and now["beta"] == pytest.approx(6 * now["alpha"]), plan["windows"]


# Sleeps a second; the point lr=2 fails its first attempt (exit 3), so a rerun makes it a second attempt.
FAIL_ONCE = ("import os, sys, time\n"
             "once = os.path.join(os.environ['SLURMKIT_SWEEP_POINT_DIR'], 'failed-once')\n"
             "time.sleep(1)\n"
             "if sys.argv[1] == '2' and not os.path.exists(once):\n"
             "    open(once, 'w').close()\n"
             "    sys.exit(3)\n")


def test_sweep_eff_sums_every_point_and_attempt_from_accounting(devcluster, green, request, tmp_path):
    run = green({"alpha": {"pue": 1.2, "carbon_intensity": flat(250), "price_per_kwh": 0.3}})
    proc = run("submit", "--sweep", "lr=1,2,3", "--sweep-dir", str(tmp_path / "sweep"), "--cluster", "alpha",
               *ONE_GPU, "-t", "2", "--", sys.executable, "-c", FAIL_ONCE, "{lr}")
    sweep_id = proc.stdout.strip()
    request.addfinalizer(lambda: run("sweep", "cancel", sweep_id, check=False))

    def counts(want):
        data = json.loads(run("sweep", "status", sweep_id, "--json").stdout)
        return data if data["counts"] == want else None
    wait_until(lambda: counts({"COMPLETED": 2, "FAILED": 1}), 120, interval=2.0, what="the first attempts to end")
    run("sweep", "rerun", sweep_id, "--failed")
    status = wait_until(lambda: counts({"COMPLETED": 3}), 120, interval=2.0, what="the rerun to complete")
    job_ids = [a["job_id"] for a in status["arrays"] if a["job_id"]]
    # (The rerun requeues the failed task in its own array while the controller still has it: one array id.)

    def accounted():
        # slurmdbd writes a task's row (and its partition) a moment after the controller ended it.
        data = json.loads(run("sweep", "eff", sweep_id, "--json").stdout)
        return data if data["attempts"] == 4 and data["kwh"] is not None else None
    data = wait_until(accounted, 60, interval=2.0, what="accounting to hold all four attempts")
    assert data["points"] == 3 and data["points_run"] == 3
    assert sorted(p["attempts"] for p in data["by_point"]) == [1, 1, 2]
    # Slurm's own count of the seconds the tasks ran, every run of each (-D: a requeued task's earlier runs too).
    sacct = slurm("alpha", "sacct", "-X", "-D", "-n", "-P", "-o", "ElapsedRaw", "-j", ",".join(job_ids)).stdout.split()
    assert len(sacct) == 4 and data["elapsed_s"] == sum(int(s) for s in sacct)
    hours = data["elapsed_s"] / 3600.0
    kwh = (POWER["node_busy_watts"] + POWER["gpu_busy_watts"]) * 1.2 * hours / 1000.0    # one GPU, one node
    assert data["source"] == "model" and data["kwh"] == pytest.approx(kwh)
    assert data["gpu_hours"] == pytest.approx(hours)
    assert data["gco2"] == pytest.approx(kwh * 250) and data["cost"] == pytest.approx(kwh * 0.3 + hours * 4.0)
    text = run("sweep", "eff", sweep_id).stdout
    assert "3 of 3 point(s) ran, 4 attempt(s)" in text and "from the site's power model" in text, text


def test_a_green_job_runs_at_the_gpu_frequency_the_site_sets_for_green(devcluster, green, request, tmp_path):
    run = green({"alpha": {"carbon_intensity": flat(250), "gpu_freq": {"green": "medium,memory=high"}}})
    placed = json.loads(run("submit", "--cluster", "alpha", "--prefer", "green", "--json", *ONE_GPU, "-t", "2",
                            "--output", str(tmp_path / "freq-%j.out"), "--", "bash", "-c",
                            'echo "freq=$SLURM_GPU_FREQ"').stdout)
    cancel_later(request, "alpha", placed["job_id"])
    wait_job_state("alpha", placed["job_id"], {"COMPLETED"}, timeout=90)
    # Slurm took the option and handed it to the job (its steps set the clocks where NVML can).
    printed = (tmp_path / ("freq-%s.out" % placed["job_id"])).read_text()
    assert "freq=medium,memory=high" in printed, printed


def test_a_clean_hour_that_held_jobs_fill_is_not_chosen(devcluster, green, request):
    """Slurm's --test-only does not count jobs held for later (a job held for 16:00 on every node leaves a
    new one estimated at 16:00 there), so the planner reads squeue for them: the first clean hour, which a
    held job of all alpha's nodes takes, gives way to the hour after it."""
    from datetime import timedelta

    now = datetime.now()
    first_clean = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=2)
    held = slurm("alpha", "sbatch", "--parsable", "-N", "4", "--exclusive", "-p", "gpu", "-t", "60", "--begin",
                 first_clean.strftime("%Y-%m-%dT%H:%M:%S"), "-o", "/dev/null", "--wrap", "true").stdout.strip()
    cancel_later(request, "alpha", held)
    run = green({"alpha": {"carbon_intensity": dirty_then_clean(2, 700, 40)}})
    plan = json.loads(run("submit", "--cluster", "alpha", "--prefer", "green", "--deadline", "+6h", "--dry-run",
                          "--json", *ONE_GPU, "-t", "60", "--", "true").stdout)
    chosen = datetime.fromisoformat(plan["chosen"]["start"])
    assert chosen == first_clean + timedelta(hours=1), plan["chosen"]
    # Slurm itself would have said the held hour was free: the planner's own reading moved it.
    estimate = slurm("alpha", "sbatch", "--test-only", "-N", "1", "-p", "gpu", "-t", "60", "--begin",
                     first_clean.strftime("%Y-%m-%dT%H:%M:%S"), "--wrap", "true", check=False).stderr
    assert first_clean.strftime("%Y-%m-%dT%H:%M:%S") in estimate, estimate


def test_a_sweeps_clean_hour_that_held_jobs_fill_is_not_chosen(devcluster, green, request, tmp_path):
    """As for one job: a sweep placed by --prefer green is not held for a clean hour a held job of all alpha's
    nodes takes (Slurm's --test-only would say it is free), but for the hour after it."""
    from datetime import timedelta

    first_clean = datetime.now().replace(minute=0, second=0, microsecond=0) + timedelta(hours=2)
    held = slurm("alpha", "sbatch", "--parsable", "-N", "4", "--exclusive", "-p", "gpu", "-t", "60", "--begin",
                 first_clean.strftime("%Y-%m-%dT%H:%M:%S"), "-o", "/dev/null", "--wrap", "true").stdout.strip()
    cancel_later(request, "alpha", held)
    run = green({"alpha": {"carbon_intensity": dirty_then_clean(2, 700, 40)}})
    proc = run("submit", "--sweep", "lr=1,2", "--sweep-dir", str(tmp_path / "sweep"), "--cluster", "alpha",
               "--prefer", "green", "--deadline", "+6h", "--json", *ONE_GPU, "-t", "60", "--", "echo", "lr={lr}")
    (array,) = json.loads(proc.stdout)["submitted"]
    cancel_later(request, "alpha", array["job_id"])
    (line,) = [ln for ln in proc.stderr.splitlines() if "sweep placed by --prefer green" in ln]
    begin = datetime.fromisoformat(line.split("held by --begin until ")[1].split(",")[0])
    assert begin == first_clean + timedelta(hours=1), line
    assert job_info("alpha", array["job_id"])["StartTime"] == begin.strftime("%Y-%m-%dT%H:%M:%S")


def test_the_python_api_places_a_call_by_prefer_and_deadline(devcluster, green, request, tmp_path):
    """The executor's prefer= and deadline= are submit's --prefer and --deadline: among three clusters the
    cleanest takes the call, and on one cluster a later, cleaner hour holds it with --begin until then."""
    import slurmkit

    green({"alpha": {"carbon_intensity": dirty_then_clean(2, 700, 40)}, "beta": {"carbon_intensity": flat(900)},
           "gamma": {"carbon_intensity": flat(950)}})
    site = str(tmp_path / "green.yaml")
    anywhere = slurmkit.AutoExecutor(tmp_path / "jobs", cluster="auto", site=site)
    anywhere.update_parameters(timeout_min=5, gpus_per_node=1, prefer="green")
    held = slurmkit.AutoExecutor(tmp_path / "jobs", cluster="alpha", site=site)
    held.update_parameters(timeout_min=5, slurm_partition="gpu", gpus_per_node=1, prefer="green", deadline="+5h")
    try:
        # Now, beta's 900 and gamma's 950 g/kWh against alpha's 700: alpha, at once.
        now = anywhere.submit(int, "7")
        assert now.job_id.startswith("alpha:") and now.result() == 7
        later = held.submit(int, "8")
        slurm_id = later.job_id.split(":")[1]
        cancel_later(request, "alpha", slurm_id)
        info = wait_until(lambda: (lambda i: i if i.get("Reason") == "BeginTime" else None)(
            job_info("alpha", slurm_id)), 30, what="reason BeginTime")
        start = datetime.fromisoformat(info["StartTime"])
        assert (start.hour, start.minute) == ((datetime.now().hour + 2) % 24, 0), info["StartTime"]
        slurm("alpha", "scontrol", "update", "jobid=" + slurm_id, "StartTime=now")
        assert later.result() == 8
    finally:
        anywhere.close()
        held.close()
