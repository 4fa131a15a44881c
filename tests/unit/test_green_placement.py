"""submit --prefer soon|cheap|green --deadline: clusters x start windows, on FakeSlurm clusters and a FakeClock.

Each FakeSlurm answers ``sbatch --test-only`` with its own clock's "now", so a
cluster whose clock runs ahead is one whose job would start later.  Hourly
windows are written relative to the local hour of the planner's clock, so the
tests hold in any time zone.
"""

from datetime import datetime, timedelta

import pytest

from slurmkit.cli import display
from slurmkit.errors import UsageError
from slurmkit.federation import planner, submit_anywhere
from slurmkit.federation import windows as win
from slurmkit.federation.cooldown import Cooldown
from slurmkit.script.render import JobSpec
from slurmkit.site.model import EnergySettings, HourWindow, PowerModel
from slurmkit.testing import FakeClock, FakeSlurm, fake_session, fake_site
from slurmkit.times import parse_when

SPEC = JobSpec(command=("python", "eval.py"), nodes=1, gpus_per_node=1, time="01:00:00")
POWER = PowerModel(gpu_busy_watts=400.0, node_busy_watts=600.0)     # 1 node x 1 GPU: 1 kW


def flat(value):
    return (HourWindow(0, 24, float(value)),)


def profile(now, dirty_hours, dirty, clean):
    """An hourly profile: ``dirty`` for the ``dirty_hours`` local hours from now's hour on, ``clean`` after."""
    start = now.hour
    end = (start + dirty_hours) % 24
    return (HourWindow(start, end, float(dirty)), HourWindow(end, start, float(clean)))


def green_site(energy, power=POWER):
    """fake_site's clusters with the given EnergySettings (cluster -> settings) and a power model."""
    site = fake_site(*energy)
    clusters = {}
    for name, settings in energy.items():
        c = site.clusters[name]
        parts = {p.name: p._replace(power=power) for p in c.partitions.values()}
        clusters[name] = c._replace(partitions=parts, energy=settings)
    return site._replace(clusters=clusters)


def federation(tmp_path, energy, ahead=None, power=POWER):
    """(fakes, session, cooldown, clock): ``ahead`` gives a cluster's estimate that many hours after now."""
    clock = FakeClock()
    fakes = {}
    for name in energy:
        hours = (ahead or {}).get(name, 0)
        own = clock if not hours else FakeClock(epoch=clock.time() + hours * 3600)
        fakes[name] = FakeSlurm(name, nodes=[name[0] + "n1"], submit_once=True, clock=own)
    return fakes, fake_session(green_site(energy, power), **fakes), Cooldown(tmp_path / "cd.json"), clock


def submitted_script(fake):
    (job,) = fake.table.values()
    return job.script


# ---------------------------------------------------------------------------
# In place


def test_soon_without_deadline_is_todays_planner_unchanged(tmp_path):
    fakes, session, cooldown, clock = federation(tmp_path, {"alpha": EnergySettings(carbon_intensity=flat(900)),
                                                             "beta": EnergySettings(carbon_intensity=flat(10))})
    placement = planner.submit_best(session, SPEC, cooldown=cooldown, clock=clock)
    assert placement.submission.ref.cluster == "alpha"       # same start: the site's order, carbon ignored
    assert placement.windows == () and "windows" not in placement.to_dict()
    assert "--begin" not in submitted_script(fakes["alpha"])


def test_green_picks_the_cluster_with_the_least_carbon(tmp_path):
    fakes, session, cooldown, clock = federation(tmp_path, {"alpha": EnergySettings(carbon_intensity=flat(900)),
                                                             "beta": EnergySettings(carbon_intensity=flat(100)),
                                                             "gamma": EnergySettings(carbon_intensity=flat(400))})
    placement = planner.submit_best(session, SPEC, cooldown=cooldown, clock=clock, prefer="green")
    assert placement.submission.ref.cluster == "beta"
    assert placement.chosen.use.gco2 == pytest.approx(100.0)     # 1 kW x 1 h x 100 g/kWh
    assert min(w.use.gco2 for w in placement.windows) == placement.chosen.use.gco2
    assert fakes["alpha"].table == {} and fakes["gamma"].table == {}


def test_cheap_picks_the_lowest_cost_and_green_the_lowest_carbon_of_the_same_clusters(tmp_path):
    energy = {"alpha": EnergySettings(price_per_kwh=flat(0.10), carbon_intensity=flat(700)),
              "beta": EnergySettings(price_per_kwh=flat(0.50), carbon_intensity=flat(50))}
    _, session, cooldown, clock = federation(tmp_path, energy)
    cheap = planner.submit_best(session, SPEC, cooldown=cooldown, clock=clock, prefer="cheap", dry_run=True)
    green = planner.submit_best(session, SPEC, cooldown=cooldown, clock=clock, prefer="green", dry_run=True)
    assert (cheap.chosen.cluster, green.chosen.cluster) == ("alpha", "beta")
    assert cheap.chosen.use.cost == pytest.approx(0.10)


def test_a_cluster_with_unknown_carbon_ranks_last_not_as_clean(tmp_path):
    energy = {"alpha": EnergySettings(), "beta": EnergySettings(carbon_intensity=flat(800))}
    _, session, cooldown, clock = federation(tmp_path, energy)
    placement = planner.submit_best(session, SPEC, cooldown=cooldown, clock=clock, prefer="green", dry_run=True)
    assert placement.chosen.cluster == "beta"
    alpha = [w for w in placement.windows if w.cluster == "alpha"]
    assert alpha and all(w.use.gco2 is None for w in alpha)


# ---------------------------------------------------------------------------
# In time


def test_green_waits_for_clean_hours_before_the_deadline_and_submits_with_begin(tmp_path):
    now = FakeClock().now()
    energy = {"alpha": EnergySettings(carbon_intensity=profile(now, 3, 800, 50))}
    fakes, session, cooldown, clock = federation(tmp_path, energy)
    deadline = now + timedelta(hours=8)
    placement = planner.submit_best(session, SPEC, clusters=["alpha"], cooldown=cooldown, clock=clock,
                                    prefer="green", deadline=deadline)
    first_clean = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=3)
    assert placement.chosen.later and placement.chosen.start == first_clean
    assert placement.chosen.use.gco2 == pytest.approx(50.0)
    assert all(w.end <= deadline for w in placement.windows)
    assert "#SBATCH --begin=%s" % first_clean.strftime("%Y-%m-%dT%H:%M:%S") in submitted_script(fakes["alpha"])


def test_cheap_takes_the_night_price_when_the_deadline_allows(tmp_path):
    now = FakeClock().now()
    energy = {"alpha": EnergySettings(price_per_kwh=profile(now, 5, 0.40, 0.12))}
    _, session, cooldown, clock = federation(tmp_path, energy)
    placement = planner.submit_best(session, SPEC, clusters=["alpha"], cooldown=cooldown, clock=clock,
                                    prefer="cheap", deadline=now + timedelta(hours=12), dry_run=True)
    assert placement.chosen.use.cost == pytest.approx(0.12)
    assert placement.chosen.start == now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=5)


def test_without_a_deadline_only_the_estimates_compete(tmp_path):
    now = FakeClock().now()
    energy = {"alpha": EnergySettings(carbon_intensity=profile(now, 3, 800, 50))}
    _, session, cooldown, clock = federation(tmp_path, energy)
    placement = planner.submit_best(session, SPEC, clusters=["alpha"], cooldown=cooldown, clock=clock,
                                    prefer="green", dry_run=True)
    assert [w.later for w in placement.windows] == [False]


def test_a_deadline_only_the_dirtiest_cluster_meets_picks_it(tmp_path):
    energy = {"alpha": EnergySettings(carbon_intensity=flat(900)),
              "beta": EnergySettings(carbon_intensity=flat(20))}
    fakes, session, cooldown, clock = federation(tmp_path, energy, ahead={"beta": 5})   # beta starts in 5 h
    deadline = clock.now() + timedelta(hours=3)
    placement = planner.submit_best(session, SPEC, cooldown=cooldown, clock=clock, prefer="green",
                                    deadline=deadline)
    assert placement.submission.ref.cluster == "alpha"
    assert [w.meets for w in placement.windows if w.cluster == "beta"] == [False]
    assert fakes["beta"].table == {}


def test_a_deadline_nothing_meets_is_refused_with_the_earliest_possible_end(tmp_path):
    energy = {"alpha": EnergySettings(carbon_intensity=flat(900)), "beta": EnergySettings()}
    fakes, session, cooldown, clock = federation(tmp_path, energy, ahead={"alpha": 2, "beta": 4})
    with pytest.raises(win.DeadlineError) as caught:
        planner.submit_best(session, SPEC, cooldown=cooldown, clock=clock, prefer="green",
                            deadline=clock.now() + timedelta(minutes=90))
    message = str(caught.value)
    earliest = (clock.now() + timedelta(hours=3)).replace(microsecond=0).isoformat(sep=" ")
    assert "the earliest possible end is %s (cluster alpha" % earliest in message
    assert "\n" not in message and caught.value.exit_code == 2
    assert fakes["alpha"].table == {} and fakes["beta"].table == {}


def test_soon_with_a_deadline_refuses_a_job_that_cannot_end_in_time(tmp_path):
    _, session, cooldown, clock = federation(tmp_path, {"alpha": EnergySettings()}, ahead={"alpha": 1})
    with pytest.raises(win.DeadlineError, match="earliest possible end"):
        planner.submit_best(session, SPEC, cooldown=cooldown, clock=clock, deadline=clock.now() + timedelta(hours=1))


def test_windows_stop_at_the_deadline_and_at_a_week():
    site = green_site({"alpha": EnergySettings()})
    now = datetime(2026, 12, 4, 10, 30)
    cand = planner.Candidate("alpha", "gpu", 0, estimate=now)
    some = win.windows(site, SPEC, [cand], now + timedelta(hours=5), now, {})
    assert [w.start.hour for w in some] == [10, 11, 12, 13, 14]       # 14:00-15:00 still ends by 15:30
    many = win.windows(site, SPEC, [cand], now + timedelta(days=30), now, {})
    assert len(many) == win.MAX_WINDOWS


def test_an_unlimited_time_cannot_be_placed_under_a_deadline():
    site = green_site({"alpha": EnergySettings()})
    with pytest.raises(UsageError, match="give --time"):
        win.job_seconds(site, SPEC._replace(time="UNLIMITED"))


def test_a_refused_forecast_is_one_warning_of_the_placement(tmp_path):
    broken = tmp_path / "alpha.json"
    broken.write_text('[{"location": "x", "timestamp": "2026-11-30T12:00:00Z", "dura')
    energy = {"alpha": EnergySettings(carbon_intensity=flat(300), carbon_forecast=str(broken))}
    _, session, cooldown, clock = federation(tmp_path, energy)
    placement = planner.submit_best(session, SPEC, cooldown=cooldown, clock=clock, prefer="green", dry_run=True)
    assert len(placement.warnings) == 1 and "not valid JSON" in placement.warnings[0]
    assert placement.chosen.use.gco2 == pytest.approx(300.0)


# ---------------------------------------------------------------------------
# The command's entry point and what it prints


def test_submit_anywhere_reads_the_deadline_and_refuses_a_bad_or_past_one(tmp_path):
    _, session, _, clock = federation(tmp_path, {"alpha": EnergySettings(carbon_intensity=flat(100))})
    with pytest.raises(UsageError, match="--deadline: 'soonish' is not a moment"):
        submit_anywhere(session, SPEC, deadline="soonish", clock=clock)
    past = (clock.now() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    with pytest.raises(UsageError, match="is not in the future"):
        submit_anywhere(session, SPEC, deadline=past, clock=clock)
    outcome = submit_anywhere(session, SPEC, "alpha", prefer="green", deadline="+3h", clock=clock, dry_run=True)
    assert outcome.submission is None and len(outcome.placement.windows) == 3    # now, +1 h, +2 h


def test_the_explain_table_shows_kwh_cost_and_carbon_with_unknown_as_a_question_mark(tmp_path):
    energy = {"alpha": EnergySettings(price_per_kwh=flat(0.2), carbon_intensity=flat(500)), "beta": EnergySettings()}
    _, session, cooldown, clock = federation(tmp_path, energy)
    placement = planner.submit_best(session, SPEC, cooldown=cooldown, clock=clock, prefer="green", dry_run=True)
    text = display.candidates_table(placement)
    assert "KWH" in text and "COST" in text and "KGCO2E" in text
    alpha_row = next(line for line in text.splitlines() if line.startswith("*alpha"))
    assert "1.00" in alpha_row and "0.20" in alpha_row and "0.500" in alpha_row
    beta_row = next(line for line in text.splitlines() if line.startswith("beta") and "estimate" in line)
    assert beta_row.count("?") == 2
    assert "unknown: cluster beta has no carbon intensity" in text
    assert "no PUE set for alpha, beta" in text
    data = placement.to_dict()
    assert data["prefer"] == "green" and data["chosen"]["cluster"] == "alpha" and data["chosen"]["kwh"] == 1.0


def test_an_unknown_preference_is_refused_before_anything_is_asked(tmp_path):
    fakes, session, cooldown, clock = federation(tmp_path, {"alpha": EnergySettings()})
    with pytest.raises(UsageError, match="choose one of soon, cheap, green"):
        planner.submit_best(session, SPEC, cooldown=cooldown, clock=clock, prefer="fast")
    assert fakes["alpha"].methods_called() == []


@pytest.mark.parametrize("text, expected", [
    ("+8h", datetime(2026, 12, 4, 18, 30)), ("now+90minutes", datetime(2026, 12, 4, 12, 0)),
    ("+2d", datetime(2026, 12, 6, 10, 30)), ("08:00", datetime(2026, 12, 5, 8, 0)),
    ("11:00", datetime(2026, 12, 4, 11, 0)), ("2026-12-05T08:00", datetime(2026, 12, 5, 8, 0)),
    ("2026-12-06", datetime(2026, 12, 6, 0, 0)), ("2026-12-05 08:00:30", datetime(2026, 12, 5, 8, 0, 30)),
])
def test_parse_when(text, expected):
    assert parse_when(text, datetime(2026, 12, 4, 10, 30)) == expected


@pytest.mark.parametrize("text", ["tomorrow", "25:00", "2026-13-01T00:00", "2026-02-30", "2026-12-5", "+", ""])
def test_parse_when_refuses_what_is_not_a_moment(text):
    with pytest.raises(ValueError):
        parse_when(text, datetime(2026, 12, 4, 10, 30))


def test_a_begin_that_is_not_an_sbatch_time_is_refused_when_rendered():
    from slurmkit.jobs import prepare

    session = fake_session(alpha=FakeSlurm("alpha"))
    with pytest.raises(UsageError, match="begin 'tonight'"):
        prepare(session, SPEC._replace(begin="tonight"), "alpha")
    script = prepare(session, SPEC._replace(begin="2026-12-05T02:00:00"), "alpha").script
    assert "#SBATCH --begin=2026-12-05T02:00:00" in script


# ---------------------------------------------------------------------------
# Through the CLI's one error boundary (site_configs/local.yaml, served by FakeSlurm)


@pytest.fixture
def local_clusters(tmp_path, monkeypatch):
    import slurmkit.session

    fakes = {"alpha": FakeSlurm("alpha", partitions=("gpu", "cpu")), "beta": FakeSlurm("beta", partitions=("gpu",)),
             "gamma": FakeSlurm("gamma", partitions=("npu",))}
    monkeypatch.setattr(slurmkit.session, "make_backend", lambda cluster, **kw: fakes[cluster.name])
    monkeypatch.setenv("SLURMKIT_VIA", "local")
    monkeypatch.setenv("SLURMKIT_SITE", "local")
    monkeypatch.setenv("SLURMKIT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SLURMKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return fakes


@pytest.mark.parametrize("args, message", [
    (("submit", "--prefer", "green", "--deadline", "yesterday", "-t", "5", "--", "true"),
     "--deadline: 'yesterday' is not a moment"),
    (("submit", "--prefer", "green", "--deadline", "2020-01-01", "-t", "5", "--", "true"),
     "--deadline 2020-01-01 00:00:00 is not in the future (now: "),
    (("submit", "--prefer", "green", "--deadline", "+1m", "-t", "5", "--", "true"),
     "no cluster can end the job by the deadline"),
    (("submit", "--prefer", "fast", "--", "true"), "'fast' is not one of 'soon', 'cheap', 'green'"),
    (("submit", "--sweep", "lr=1..4", "--max-running", "2", "--deadline", "+8m", "-t", "5", "-M", "alpha", "--",
      "true", "{lr}"),
     "the sweep (4 point(s), 2 at a time: 2 round(s) of its time limit): no cluster can end the job by the deadline"),
    (("sweep", "submit", "--sweep", "lr=1", "--deadline", "tomorrow", "-M", "alpha", "--", "true", "{lr}"),
     "--deadline: 'tomorrow' is not a moment"),
    (("submit", "--sweep", "lr=1", "--auto-requeue", "--prefer", "green", "-M", "alpha", "--", "true", "{lr}"),
     "--prefer cheap|green and --deadline do not apply to --auto-requeue yet: its restarts start when a task fails"),
    (("submit", "--auto-requeue", "--prefer", "cheap", "-M", "alpha", "--", "true"),
     "--prefer cheap|green and --deadline do not apply to --auto-requeue yet"),
])
def test_usage_errors_are_one_line_and_exit_2(local_clusters, capsys, args, message):
    from harness import one_error_line, run_main

    code, out, err = run_main(capsys, *args)
    assert code == 2 and out == ""
    assert message in one_error_line(err)
    assert all(not fake.table for fake in local_clusters.values())


def test_the_command_submits_to_the_chosen_cluster_and_explains_on_stderr(local_clusters, capsys):
    from harness import run_main

    # local.yaml sets no carbon: every cluster's is unknown, so green falls to the cost (alpha's GPU-hours
    # cost the most), and the table says what is missing.
    code, out, err = run_main(capsys, "submit", "--cluster", "alpha,beta", "--prefer", "green", "--explain",
                              "-N", "1", "--gpus-per-node", "1", "-t", "5", "--", "true")
    assert code == 0
    cluster, job_id = out.strip().split(":")
    assert cluster == "beta" and job_id in local_clusters["beta"].table       # 1.2 or 3.0 a GPU-hour, not 4.0
    assert local_clusters["alpha"].table == {}
    assert "prefer green" in err and "KGCO2E" in err and "no carbon intensity" in err


def test_a_clusters_forecast_is_read_once_per_plan(tmp_path, monkeypatch):
    from slurmkit.energy import model

    reads = []

    def read(path, now, location):
        reads.append(path)
        raise model.ForecastProblem("stale: test")
    monkeypatch.setattr(model, "read_forecast", read)
    energy = {"alpha": EnergySettings(carbon_intensity=flat(300), carbon_forecast=str(tmp_path / "f.json"))}
    site = green_site(energy)
    two = site.clusters["alpha"]._replace(partitions={
        "gpu": site.clusters["alpha"].partitions["gpu"],
        "gpu2": site.clusters["alpha"].partitions["gpu"]._replace(name="gpu2")})
    site = site._replace(clusters={"alpha": two})
    clock = FakeClock()
    session = fake_session(site, alpha=FakeSlurm("alpha", partitions=("gpu", "gpu2"), clock=clock))
    placement = planner.submit_best(session, SPEC, accel=("h100",), cooldown=Cooldown(tmp_path / "cd.json"),
                                    clock=clock, prefer="green", dry_run=True)
    assert {w.candidate.partition for w in placement.windows} == {"gpu", "gpu2"}
    assert reads == [str(tmp_path / "f.json")] and len(placement.warnings) == 1


def test_a_sweep_goes_whole_to_the_preferred_cluster_and_says_where(local_clusters, capsys):
    from harness import run_main

    # As for one job: no carbon anywhere, so green falls to the cost, and beta's GPU-hours cost the least.
    code, out, err = run_main(capsys, "submit", "--sweep", "lr=1..4", "--max-running", "2", "--cluster", "alpha,beta",
                              "--prefer", "green", "-N", "1", "--gpus-per-node", "1", "-t", "5", "--", "true", "{lr}")
    assert code == 0, err
    assert local_clusters["alpha"].table == {} and len(local_clusters["beta"].table) == 1    # one array of 4
    (line,) = [ln for ln in err.splitlines() if "sweep placed by --prefer green" in ln]
    assert "beta, partition gpu, from " in line and "(2 round(s) of 2 point(s))" in line, line
    (script,) = [job.script for job in local_clusters["beta"].table.values()]
    assert "#SBATCH --array=0-3%2" in script and "--begin" not in script
