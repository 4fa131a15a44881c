"""slurmkit eff's energy, cost and carbon: Slurm's measurement where there is one, the power model otherwise."""

import pytest

from slurmkit.observe import eff
from slurmkit.site.model import Cluster, EnergySettings, HourWindow, Partition, PowerModel, PriceWindow, Site
from slurmkit.slurm import commands, parsers

GPU = Partition("gpu", accelerator="nvidia", gpu_model="h100", gpus_per_node=8,
                power=PowerModel(gpu_busy_watts=500.0, node_busy_watts=1000.0))
CPU = Partition("cpu", cpus_per_node=4)
ENERGY = EnergySettings(pue=1.5, price_per_kwh=(HourWindow(0, 24, 0.2),), carbon_intensity=(HourWindow(0, 24, 400.0),))


def site(energy=ENERGY, gpu_price=()):
    alpha = Cluster("alpha", {"gpu": GPU, "cpu": CPU}, energy=energy, price_per_gpu_hour=gpu_price)
    return Site("s", "/dev/null", {"alpha": alpha})


def attempts(*job_rows):
    """Job rows: (elapsed s, AllocTRES, ConsumedEnergyRaw, Start, Partition)."""
    lines = ["%d|%d|COMPLETED|%d|120|8|1|%s|||||%s|%s|x|%s|an1" % (131 + i, 131 + i, elapsed, tres, joules, start, part)
             for i, (elapsed, tres, joules, start, part) in enumerate(job_rows)]
    rows = parsers.parse_sacct_records("\n".join(lines), commands.SACCT_USAGE_FIELDS)
    return eff.attempts_from_rows("alpha", rows)


TWO_GPUS = "cpu=8,gres/gpu=2,mem=8G,node=1"


def test_without_a_measurement_the_power_model_gives_the_energy_and_says_so():
    report = eff.report("alpha:131", attempts((3600, TWO_GPUS, "0", "2026-12-04T10:00:00", "gpu")), site=site())
    kwh = (1000 + 2 * 500) / 1000.0 * 1.5            # one node, 2 GPUs, one hour, PUE 1.5
    assert report.data["energy_kwh"] == pytest.approx(kwh) and report.data["energy_source"] == "model"
    assert report.data["cost"] == pytest.approx(kwh * 0.2)
    assert report.data["gco2"] == pytest.approx(kwh * 400)
    assert report.data["energy_j"] is None               # what Slurm measured: nothing, still unknown
    text = "\n".join(report.lines)
    assert "energy: 3.000 kWh, from the site's power model" in text and "carbon: 1.200 kgCO2e" in text


def test_slurms_measurement_wins_over_the_model():
    report = eff.report("alpha:131", attempts((1800, TWO_GPUS, "3600000", "2026-12-04T10:00:00", "gpu")),
                        site=site())
    assert report.data["energy_source"] == "slurm"
    assert report.data["energy_kwh"] == pytest.approx(1.0 * 1.5)        # 1 kWh measured, x PUE
    assert report.data["gco2"] == pytest.approx(1.5 * 400)


def test_every_attempt_counts_and_a_gpu_hour_price_is_charged_for_the_hours_it_ran():
    report = eff.report("alpha:131", attempts((3600, TWO_GPUS, "0", "2026-12-04T10:00:00", "gpu"),
                                              (1800, TWO_GPUS, "0", "2026-12-04T12:00:00", "gpu")),
                        site=site(energy=EnergySettings(), gpu_price=(PriceWindow(0, 24, 3.0),)))
    assert report.data["energy_kwh"] == pytest.approx(2.0 * 1.5)           # 2 kW for 1.5 h, no PUE
    assert report.data["cost"] == pytest.approx(2 * 1.5 * 3.0)             # 3 GPU-hours
    assert report.data["gco2"] is None and "carbon: unknown" in report.lines


def test_what_cannot_be_known_stays_unknown():
    no_model = eff.report("alpha:131", attempts((600, "cpu=4,mem=8G,node=1", "0", "2026-12-04T10:00:00", "cpu")),
                          site=site())
    assert no_model.data["energy_kwh"] is None and no_model.data["gco2"] is None
    assert any("partition cpu has no power model" in w for w in no_model.data["energy_unknown"])
    no_gpus = eff.report("alpha:131", attempts((600, "cpu=8,mem=8G,node=1", "0", "2026-12-04T10:00:00", "gpu")),
                         site=site())
    assert no_gpus.data["energy_kwh"] is None and "its GPUs were not recorded" in no_gpus.data["energy_unknown"][0]
    early = eff.report("alpha:131", attempts((600, TWO_GPUS, "0", "2026-12-04T10:00:00", "")), site=site())
    assert early.data["energy_kwh"] is None and "accounting holds no partition" in early.data["energy_unknown"][0]
    never_started = attempts((0, TWO_GPUS, "0", "Unknown", "gpu"))
    assert never_started[0].start is None


def test_without_a_site_the_report_is_as_before():
    report = eff.report("alpha:131", attempts((600, TWO_GPUS, "0", "2026-12-04T10:00:00", "gpu")))
    assert "energy_kwh" not in report.data
    assert report.lines[-1] == "energy: not measured (the cluster has no AcctGatherEnergyType plugin)"
