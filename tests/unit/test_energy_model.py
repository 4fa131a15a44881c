"""Green compute, first floor: the site's energy keys, forecasts checked or refused, a job's kWh, cost and gCO2e."""

import json
import os
import re
import textwrap
import time
from datetime import datetime, timedelta, timezone

import pytest

from slurmkit.cli import display
from slurmkit.errors import ConfigError
from slurmkit.energy import forecast as fc
from slurmkit.energy.model import CarbonSource, carbon_source, expected, job_watts, window_value
from slurmkit.site import load_site, validate_files
from slurmkit.site.model import Cluster, EnergySettings, HourWindow, Partition, PowerModel, PriceWindow

SITE = """\
site: green
clusters:
  alpha:
    price_per_gpu_hour: 2.0
    energy:
      pue: 1.25
      price_per_kwh: [{{hours: "08-20", price: 0.40}}, {{hours: "20-08", price: 0.10}}]
      carbon_intensity: [{{hours: "00-12", value: 100}}, {{hours: "12-24", value: 300}}]
{forecast}
    partitions:
      gpu:
        accelerator: nvidia
        gpu_model: h100
        gpus_per_node: 8
        cpus_per_node: 64
        power: {{gpu_idle_watts: 70, gpu_busy_watts: 700, node_idle_watts: 300, node_busy_watts: 800}}
      cpu:
        accelerator: none
        cpus_per_node: 64
"""


def write_site(tmp_path, forecast=""):
    path = tmp_path / "green.yaml"
    path.write_text(SITE.format(forecast=forecast))
    return path


def problems(tmp_path, energy="", power="{node_busy_watts: 800, gpu_busy_watts: 700}", accel="nvidia"):
    gpu = "gpu_model: h100\n        gpus_per_node: 8\n        " if accel == "nvidia" else ""
    path = tmp_path / "p.yaml"
    path.write_text(textwrap.dedent("""\
        site: p
        clusters:
          a:
            energy: {energy}
            partitions:
              gpu:
                accelerator: {accel}
                {gpu}cpus_per_node: 4
                power: {power}
        """).format(energy=energy or "{}", power=power, accel=accel, gpu=gpu))
    return [p.message for p in validate_files([path])]


# ---------------------------------------------------------------------------
# The site's keys


def test_a_site_with_energy_settings_loads_into_the_model(tmp_path):
    site = load_site(write_site(tmp_path))
    alpha = site.clusters["alpha"]
    assert alpha.energy.pue == 1.25
    assert alpha.energy.price_per_kwh == (HourWindow(8, 20, 0.40), HourWindow(20, 8, 0.10))
    assert alpha.energy.carbon_intensity == (HourWindow(0, 12, 100.0), HourWindow(12, 24, 300.0))
    assert alpha.partitions["gpu"].power == PowerModel(70.0, 700.0, 300.0, 800.0)
    assert alpha.partitions["cpu"].power is None   # absent: unknown, not zero


def test_a_fixed_carbon_intensity_is_the_whole_day(tmp_path):
    assert not problems(tmp_path, energy="{carbon_intensity: 420}")


@pytest.mark.parametrize("energy, expected_text", [
    ("{carbon_intensity: .nan}", "finite"),
    ("{carbon_intensity: -5}", "at least 0"),
    ("{carbon_intensity: 90000}", "at most 2000"),
    ("{pue: 0.9}", "at least 1"),
    ("{price_per_kwh: -0.1}", "at least 0"),
    ("{carbon_intensity: [{hours: '00-12', value: 100}]}", "carbon intensity windows leave hours 12-24 uncovered"),
    ("{price_per_kwh: [{hours: '00-24', price: 1}, {hours: '10-12', price: 2}]}", "energy price windows overlap"),
    ("{carbon: 3}", "carbon"),
])
def test_bad_energy_settings_are_refused_by_site_validate(tmp_path, energy, expected_text):
    found = problems(tmp_path, energy=energy)
    assert any(expected_text in message for message in found), found


@pytest.mark.parametrize("power, accel, expected_text", [
    ("{gpu_busy_watts: 700}", "nvidia", "node_busy_watts is required"),
    ("{node_busy_watts: 800}", "nvidia", "gpu_busy_watts is required"),
    ("{node_busy_watts: 800, gpu_busy_watts: 700, gpu_idle_watts: 900}", "nvidia", "idle draws less than busy"),
    ("{node_busy_watts: 800, gpu_busy_watts: 700}", "none", "only apply to a partition with accelerators"),
    ("{node_busy_watts: 800, gpu_busy_watts: 70000}", "nvidia", "at most 5000"),
])
def test_bad_power_models_are_refused(tmp_path, power, accel, expected_text):
    found = problems(tmp_path, power=power, accel=accel)
    assert any(expected_text in message for message in found), found


def test_energy_settings_survive_the_site_cache_round_trip(tmp_path):
    from slurmkit.site.model import as_plain, site_from_plain

    site = load_site(write_site(tmp_path))
    assert site_from_plain(json.loads(json.dumps(as_plain(site)))) == site


# ---------------------------------------------------------------------------
# Forecasts

NOW = datetime(2026, 12, 4, 22, 0, tzinfo=timezone.utc)


def points(*values, start=NOW, minutes=60, location="westeurope"):
    return [{"location": location, "timestamp": (start + timedelta(minutes=minutes * i)).strftime("%Y-%m-%dT%H:%M:%SZ"),
             "duration": minutes, "value": v} for i, v in enumerate(values)]


def test_a_forecast_in_the_sdk_point_shape_is_read():
    forecast = fc.parse_forecast(json.dumps(points(100, 200, 50)), NOW)
    assert forecast.location == "westeurope"
    assert forecast.at(NOW + timedelta(minutes=30)) == 100
    assert forecast.at(NOW + timedelta(minutes=150)) == 50
    assert forecast.at(NOW + timedelta(hours=3)) is None      # past its end: the profile's hour
    assert forecast.at(NOW - timedelta(minutes=1)) is None


def test_a_forecast_in_the_sdk_web_response_shape_is_read():
    body = [{"generatedAt": "2026-12-04T21:55:00Z", "location": "eastus",
             "forecastData": [{"timestamp": "2026-12-04T22:00:00+00:00", "duration": 30, "value": 333.5}]}]
    forecast = fc.parse_forecast(json.dumps(body), NOW)
    assert forecast.at(NOW + timedelta(minutes=10)) == 333.5
    assert forecast.at(NOW + timedelta(minutes=31)) is None


@pytest.mark.parametrize("text, expected_text", [
    (json.dumps(points(100, 200))[:-20], "not valid JSON"),                               # truncated
    (json.dumps(points(100, float("nan"))), "not a finite number"),                       # NaN
    (json.dumps(points(100, -3)), "negative"),
    (json.dumps(points(100, 25000)), "beyond any grid"),                                  # huge
    (json.dumps(points(100, start=NOW - timedelta(hours=3))), "stale"),
    (json.dumps(points(100) + points(50, location="eastus")), "several locations"),
    (json.dumps([{"location": "x", "timestamp": "2026-12-04T22:00:00", "duration": 60, "value": 1}]), "no time zone"),
    (json.dumps([{"location": "x", "timestamp": "2026-12-04T22:00:00Z", "value": 1}]), "no 'duration'"),
    (json.dumps(points(1, 2, minutes=60)[:1] + points(3, minutes=60, start=NOW + timedelta(minutes=30))),
     "overlap"),
    ("[]", "expected a JSON list"),
])
def test_bad_forecasts_are_refused_with_the_reason(text, expected_text):
    with pytest.raises(fc.ForecastProblem) as caught:
        fc.parse_forecast(text, NOW)
    assert expected_text in str(caught.value)


def test_a_location_picks_its_points_from_a_forecast_of_several():
    forecast = fc.parse_forecast(json.dumps(points(100) + points(50, location="eastus")), NOW, "eastus")
    assert forecast.at(NOW) == 50
    with pytest.raises(fc.ForecastProblem, match="no points for location 'north'"):
        fc.parse_forecast(json.dumps(points(100)), NOW, "north")


def test_a_refused_forecast_falls_back_to_the_profile_with_one_warning(tmp_path):
    bad = tmp_path / "fc.json"
    bad.write_text(json.dumps(points(100, start=NOW - timedelta(days=1))))
    site = load_site(write_site(tmp_path, "      carbon_forecast: %s" % bad))
    source = carbon_source(site.clusters["alpha"], NOW)
    assert source.forecast is None and source.profile == site.clusters["alpha"].energy.carbon_intensity
    assert "stale" in source.warning and "using the hourly profile" in source.warning
    assert source.warning.count("\n") == 0


def test_site_validate_warns_once_for_a_bad_forecast_and_still_passes_the_file(tmp_path):
    bad = tmp_path / "fc.json"
    bad.write_text(json.dumps(points(100, 300))[:-5])
    path = write_site(tmp_path, "      carbon_forecast: %s" % bad)
    found, warnings, ok = display.validate_report([str(path)], now=NOW)
    assert found == [] and ok == [str(path)]
    forecast_warnings = [w for w in warnings if "carbon forecast" in w]
    assert len(forecast_warnings) == 1 and "not valid JSON" in forecast_warnings[0]


def test_a_good_forecast_passes_site_validate_without_a_warning(tmp_path):
    good = tmp_path / "fc.json"
    good.write_text(json.dumps(points(100, 300)))
    path = write_site(tmp_path, "      carbon_forecast: %s" % good)
    assert not [w for w in display.validate_report([str(path)], now=NOW)[1] if "carbon" in w]


def forecast_command(tmp_path, body):
    """A real program (bash) printing or failing as ``body`` says; its words for carbon_forecast_command."""
    program = tmp_path / "forecast"
    program.write_text("#!/bin/bash\n" + body)
    program.chmod(0o755)
    return str(program)


def with_command(tmp_path, argv, timeout=None):
    site = load_site(write_site(tmp_path, "      carbon_forecast_command: %s%s" % (
        json.dumps(argv), "\n      carbon_forecast_timeout: %s" % timeout if timeout else "")))
    return site.clusters["alpha"]


def test_a_forecast_command_prints_the_forecast_the_planner_uses(tmp_path):
    data = tmp_path / "fc.json"
    data.write_text(json.dumps(points(40, 60)))
    program = forecast_command(tmp_path, 'echo "asked for $1" >&2; cat "$2"\n')
    source = carbon_source(with_command(tmp_path, [program, "westeurope", str(data)]), NOW)
    assert source.warning is None and source.forecast.at(NOW + timedelta(minutes=61)) == 60


@pytest.mark.parametrize("body, argv_tail, problem", [
    ("echo 'grid API said 503' >&2; exit 3\n", [], "exited with status 3: grid API said 503"),
    ("head -c 9000000 /dev/zero\n", [], "printed 9000000 bytes, more than a forecast's"),
    ("echo '[{\"location\": \"x\", \"timestamp\"'\n", [], "not valid JSON"),
], ids=["fails", "too-much", "cut-off"])
def test_a_forecast_command_that_fails_is_refused_with_one_line(tmp_path, body, argv_tail, problem):
    program = forecast_command(tmp_path, body)
    source = carbon_source(with_command(tmp_path, [program] + argv_tail), NOW)
    assert source.forecast is None and source.profile and problem in source.warning, source.warning
    assert source.warning.startswith("cluster alpha: carbon forecast command %s refused: " % program)
    assert "using the hourly profile" in source.warning and "\n" not in source.warning


def test_a_slow_forecast_command_is_killed_at_its_timeout(tmp_path):
    pid_file = tmp_path / "pid"
    program = forecast_command(tmp_path, 'sleep 30 & echo $! > "$1"; wait\n')     # its child goes too
    source = carbon_source(with_command(tmp_path, [program, str(pid_file)], timeout=0.5), NOW)
    assert "printed no forecast within 0.5 s (carbon_forecast_timeout)" in source.warning, source.warning
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 10                # SIGKILL is delivered at once; its reaping is init's
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(pid), "the forecast command's child still runs"


def running(pid):
    """Whether ``pid`` exists and is not a zombie (a killed orphan waits for init to reap it)."""
    try:
        with open("/proc/%d/stat" % pid) as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_forecast_command_that_cannot_start_is_refused(tmp_path):
    source = carbon_source(with_command(tmp_path, [str(tmp_path / "no-such-program")]), NOW)
    assert "could not start" in source.warning and "No such file" in source.warning, source.warning


@pytest.mark.parametrize("lines, problem", [
    ("      carbon_forecast: /tmp/fc.json\n      carbon_forecast_command: [forecast]",
     "carbon_forecast_command: give the forecast as a file (carbon_forecast) or as a command"),
    ("      carbon_forecast_timeout: 5", "carbon_forecast_timeout applies to carbon_forecast_command"),
    ("      carbon_forecast_command: []", "carbon_forecast_command"),
])
def test_forecast_source_settings_are_checked(tmp_path, lines, problem):
    with pytest.raises(ConfigError, match=re.escape(problem)):
        load_site(write_site(tmp_path, lines))


def test_hour_windows_are_the_clusters_local_hours(tmp_path):
    # 22:00 UTC is 07:00 the next day in Tokyo and 16:00 in Chicago (CST, UTC-6 in December).
    day = (HourWindow(0, 12, 100.0), HourWindow(12, 24, 300.0))
    assert window_value(day, NOW, "Asia/Tokyo") == 100.0 and window_value(day, NOW, "America/Chicago") == 300.0
    assert window_value(day, NOW.replace(tzinfo=None), "Asia/Tokyo") == \
        window_value(day, NOW.replace(tzinfo=None).astimezone(), "Asia/Tokyo")   # a naive time is this machine's
    power = PowerModel(gpu_idle_watts=0, gpu_busy_watts=1000, node_idle_watts=0, node_busy_watts=0)
    partition = Partition("gpu", "nvidia", "h100", 1, power=power)
    tokyo, chicago = (Cluster(name, {"gpu": partition}, timezone=tz, price_per_gpu_hour=(PriceWindow(0, 12, 1.0),
                                                                                        PriceWindow(12, 24, 5.0)),
                              energy=EnergySettings(carbon_intensity=day))
                      for name, tz in (("tokyo", "Asia/Tokyo"), ("chicago", "America/Chicago")))
    one_hour = [expected(c, partition, 1, 1, NOW, 3600) for c in (tokyo, chicago)]
    assert [e.gco2 for e in one_hour] == [100.0, 300.0] and [e.cost for e in one_hour] == [1.0, 5.0]
    from slurmkit.federation.planner import price_at
    assert price_at(tokyo, NOW) == 1.0 and price_at(chicago, NOW) == 5.0


def test_a_clusters_timezone_is_checked_and_kept_by_the_site_cache(tmp_path):
    path = write_site(tmp_path)
    text = path.read_text().replace("    price_per_gpu_hour: 2.0", "    timezone: Mars/Olympus\n    price_per_gpu_hour: 2.0")
    path.write_text(text)
    with pytest.raises(ConfigError, match="unknown time zone 'Mars/Olympus': give an IANA name"):
        load_site(path)
    path.write_text(text.replace("Mars/Olympus", "Europe/Paris"))
    from slurmkit.site.model import as_plain, site_from_plain
    site = load_site(path)
    assert site.clusters["alpha"].timezone == "Europe/Paris"
    assert site_from_plain(json.loads(json.dumps(as_plain(site)))) == site


def test_a_refused_forecast_without_profile_leaves_carbon_unknown(tmp_path):
    cluster = Cluster("c", {}, energy=EnergySettings(carbon_forecast=str(tmp_path / "missing.json")))
    source = carbon_source(cluster, NOW)
    assert "no such file" in source.warning and "carbon is unknown" in source.warning


# ---------------------------------------------------------------------------
# The arithmetic

GPU = Partition("gpu", accelerator="nvidia", gpu_model="h100", gpus_per_node=8,
                power=PowerModel(gpu_busy_watts=500.0, node_busy_watts=1000.0))
NO_MODEL = Partition("gpu", accelerator="nvidia", gpu_model="h100", gpus_per_node=8)


def cluster(**energy):
    gpu_price = energy.pop("gpu_price", ())
    return Cluster("c", {"gpu": GPU}, price_per_gpu_hour=gpu_price, energy=EnergySettings(**energy))


def local(hour, minute=0):
    return datetime(2026, 12, 4, hour, minute)   # naive: this machine's local time, as Slurm prints


def test_job_watts_are_nodes_times_node_plus_gpus():
    assert job_watts(GPU, 2, 8) == (2 * (1000 + 8 * 500), None)
    assert job_watts(GPU, 1, 0) == (1000, None)
    watts, why = job_watts(NO_MODEL, 1, 8)
    assert watts is None and "no power model" in why


def test_kwh_cost_and_carbon_of_a_job_within_one_window():
    c = cluster(pue=1.5, price_per_kwh=(HourWindow(0, 24, 0.2),), carbon_intensity=(HourWindow(0, 24, 400.0),))
    got = expected(c, GPU, 2, 8, local(10), 3 * 3600)
    kwh = 2 * (1000 + 8 * 500) / 1000.0 * 3 * 1.5         # 10 kW x 3 h x PUE 1.5 = 45 kWh
    assert got.kwh == pytest.approx(kwh)
    assert got.cost == pytest.approx(kwh * 0.2)
    assert got.gco2 == pytest.approx(kwh * 400)
    assert got.gpu_hours == 48 and got.carbon_source == "profile" and got.why == ()


def test_a_job_across_windows_pays_each_hour_at_its_own_price_and_intensity():
    c = cluster(price_per_kwh=(HourWindow(8, 20, 0.4), HourWindow(20, 8, 0.1)),
                carbon_intensity=(HourWindow(0, 12, 100.0), HourWindow(12, 24, 300.0)),
                gpu_price=(PriceWindow(0, 24, 2.0),))
    got = expected(c, GPU, 1, 8, local(19, 30), 3600)     # 19:30-20:30: half at 0.4, half at 0.1
    kw = 5.0                                               # no PUE: IT energy only
    assert got.pue is None
    assert got.cost == pytest.approx(kw * 0.5 * 0.4 + kw * 0.5 * 0.1 + 8 * 1 * 2.0)
    assert got.gco2 == pytest.approx(kw * 300)
    across_noon = expected(c, GPU, 1, 8, local(11), 2 * 3600)
    assert across_noon.gco2 == pytest.approx(kw * 100 + kw * 300)


def test_missing_data_is_unknown_never_zero():
    bare = cluster()
    got = expected(bare, GPU, 1, 8, local(10), 3600)
    assert got.kwh == pytest.approx(5.0)
    assert got.cost is None and got.gco2 is None
    assert any("no price" in w for w in got.why) and any("no carbon intensity" in w for w in got.why)
    priced = cluster(price_per_kwh=(HourWindow(0, 24, 0.3),), carbon_intensity=(HourWindow(0, 24, 50.0),))
    no_model = Cluster("c", {"gpu": NO_MODEL}, energy=priced.energy)
    got = expected(no_model, NO_MODEL, 1, 8, local(10), 3600)
    assert got.kwh is None and got.cost is None and got.gco2 is None
    # A GPU-hour price alone needs no energy: the cost is known, the carbon is not.
    gpu_priced = Cluster("c", {"gpu": NO_MODEL}, price_per_gpu_hour=(PriceWindow(0, 24, 2.0),))
    assert expected(gpu_priced, NO_MODEL, 1, 8, local(10), 3600).cost == pytest.approx(16.0)


def test_the_forecast_wins_where_it_covers_and_the_profile_elsewhere():
    start = datetime(2026, 12, 4, 22, 0, tzinfo=timezone.utc)
    forecast = fc.parse_forecast(json.dumps(points(10, start=start)), start)   # one hour at 10 g/kWh
    c = cluster(carbon_intensity=(HourWindow(0, 24, 500.0),))
    got = expected(c, GPU, 1, 8, start, 2 * 3600, CarbonSource(c.energy.carbon_intensity, forecast))
    assert got.gco2 == pytest.approx(5.0 * 10 + 5.0 * 500)
    assert got.carbon_source == "forecast+profile"
    only_forecast = cluster()
    got = expected(only_forecast, GPU, 1, 8, start, 2 * 3600, CarbonSource((), forecast))
    assert got.gco2 is None and any("does not cover" in w for w in got.why)


def test_window_value_reads_the_local_hour_and_wraps_midnight():
    windows = (HourWindow(20, 8, 1.0), HourWindow(8, 20, 2.0))
    assert window_value(windows, local(3)) == 1.0
    assert window_value(windows, local(8)) == 2.0
    assert window_value(windows, local(20)) == 1.0
    assert window_value((), local(3)) is None
