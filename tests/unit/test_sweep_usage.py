"""slurmkit sweep eff (slurmkit.sweep.usage): a sweep's GPU-hours, kWh, cost and gCO2e summed over points and attempts.

The journal is real (a temporary SQLite file); the clusters' accounting
answers are sacct rows given by a stand-in backend (accounting cannot exist
here; tests/integration/test_green.py sums a real sweep on alpha).
"""

import pytest

from slurmkit.session import Session
from slurmkit.site.model import EnergySettings, HourWindow, PowerModel
from slurmkit.sweep.journal import Journal
from slurmkit.sweep.points import Point
from slurmkit.sweep.usage import sweep_usage
from slurmkit.testing import fake_site

POWER = PowerModel(gpu_busy_watts=400.0, node_busy_watts=600.0)     # 1 node x 1 GPU: 1 kW


class Accounting:
    """The one backend call sweep_usage makes: sacct rows for the asked ids, or None (no accounting)."""

    def __init__(self, rows):
        self.rows, self.asked = rows, []

    def usage_records(self, job_ids):
        self.asked.append(list(job_ids))
        return None if self.rows is None else [r for r in self.rows if r["JobID"].split("_")[0] in job_ids]

    def close(self):
        pass


def row(job, seconds, gpus=1, start="2026-12-05T10:00:00", partition="gpu", energy=""):
    return {"JobID": job, "JobIDRaw": job, "State": "COMPLETED", "ElapsedRaw": str(seconds), "TimelimitRaw": "10",
            "NCPUS": "1", "NNodes": "1", "AllocTRES": "cpu=1,node=1" + (",gres/gpu=%d" % gpus if gpus else ""),
            "TotalCPU": "00:00:01", "MaxRSS": "", "TRESUsageInAve": "", "TRESUsageInMax": "",
            "ConsumedEnergyRaw": energy, "Start": start, "End": "Unknown", "Partition": partition}


def site_with_energy(**energy):
    site = fake_site("alpha", "beta", gpus_per_node=1)
    clusters = {}
    for name, c in site.clusters.items():
        parts = {p.name: p._replace(power=POWER) for p in c.partitions.values()}
        clusters[name] = c._replace(partitions=parts, energy=energy.get(name, EnergySettings()),
                                    price_per_gpu_hour=())
    return site._replace(clusters=clusters)


@pytest.fixture
def journal(tmp_path):
    with Journal(str(tmp_path / "sweeps.db")) as j:
        j.save_sweep(sweep_id="sw-1", name="sw", site="test", sweep_dir=str(tmp_path), params=["lr"],
                     command=["train", "{lr}"], spec={"gpus_per_node": 1}, max_running=None, canary=None)
        j.add_points("sw-1", [Point("p%d" % i, (("lr", str(i)),)) for i in range(3)])
        first = j.begin_array(sweep_id="sw-1", cluster="alpha", partition="gpu", token="t1", indices="0-2",
                              throttle=None, accounting=True, rows=[(0, "p0"), (1, "p1"), (2, "p2")])
        j.submitted(first, "100")
        # p2 moved to beta and ran there again: the same table, another array
        moved = j.begin_array(sweep_id="sw-1", cluster="beta", partition="gpu", token="t2", indices="2",
                              throttle=None, accounting=True, table_of=first)
        j.submitted(moved, "7")
        yield j


FLAT = EnergySettings(pue=1.5, price_per_kwh=(HourWindow(0, 24, 0.2),), carbon_intensity=(HourWindow(0, 24, 100.0),))


def test_sums_every_point_and_attempt_over_clusters(journal):
    site = site_with_energy(alpha=FLAT, beta=FLAT)
    alpha = Accounting([row("100_0", 3600), row("100_1", 1800), row("100_2", 600)])
    beta = Accounting([row("7_2", 1800, energy=str(int(0.5 * 3.6e6)))])       # beta measured 0.5 kWh
    with Session(site, backend_factory=lambda c: {"alpha": alpha, "beta": beta}[c.name]) as session:
        usage = sweep_usage(session, journal, "sw-1")
    assert alpha.asked == [["100"]] and beta.asked == [["7"]]                     # one sacct per cluster
    assert (usage.points, usage.points_run, usage.used.attempts) == (3, 3, 4)
    assert [p.used.attempts for p in usage.by_point] == [1, 1, 2]
    assert usage.used.elapsed_s == 7800 and usage.used.gpu_hours == pytest.approx(7800 / 3600)
    # The model (1 kW) on alpha for 6000 s, Slurm's 0.5 kWh on beta; PUE 1.5 on both.
    kwh = (6000 / 3600 * 1.0 + 0.5) * 1.5
    assert usage.used.kwh == pytest.approx(kwh) and usage.source == "model+slurm"
    assert usage.used.gco2 == pytest.approx(kwh * 100) and usage.used.cost == pytest.approx(kwh * 0.2)
    data = usage.to_dict()                                    # --json: flat sums, and each point's
    assert data["attempts"] == 4 and data["kwh"] == pytest.approx(kwh) and "used" not in data
    assert data["by_point"][2]["point_id"] == "p2" and data["by_point"][2]["attempts"] == 2
    assert "3 of 3 point(s) ran, 4 attempt(s)" in usage.lines()[0]


def test_unknown_carbon_anywhere_makes_the_sum_unknown_and_says_why(journal):
    site = site_with_energy(alpha=FLAT, beta=EnergySettings(price_per_kwh=(HourWindow(0, 24, 0.2),)))
    alpha = Accounting([row("100_0", 3600), row("100_1", 1800), row("100_2", 600)])
    beta = Accounting([row("7_2", 1800)])
    with Session(site, backend_factory=lambda c: {"alpha": alpha, "beta": beta}[c.name]) as session:
        usage = sweep_usage(session, journal, "sw-1")
    assert usage.used.gco2 is None and usage.used.kwh is not None and usage.used.cost is not None
    assert any("p2" in why and "no carbon intensity" in why for why in usage.unknown)
    assert "carbon: unknown" in usage.lines()


def test_a_cluster_without_accounting_is_named_and_its_points_not_counted_as_free(journal):
    site = site_with_energy(alpha=FLAT, beta=FLAT)
    alpha = Accounting(None)
    beta = Accounting([row("7_2", 1800)])
    with Session(site, backend_factory=lambda c: {"alpha": alpha, "beta": beta}[c.name]) as session:
        usage = sweep_usage(session, journal, "sw-1")
    assert usage.no_accounting == ["alpha"] and usage.points_run == 1 and usage.used.attempts == 1
    assert any("cluster alpha keeps no accounting" in line for line in usage.lines())


def test_gpus_not_counted_by_accounting_come_from_the_sweeps_own_ask(journal):
    site = site_with_energy(alpha=FLAT, beta=FLAT)
    alpha = Accounting([row("100_0", 3600, gpus=0), row("100_1", 3600, gpus=0), row("100_2", 3600, gpus=0)])
    beta = Accounting([])
    with Session(site, backend_factory=lambda c: {"alpha": alpha, "beta": beta}[c.name]) as session:
        usage = sweep_usage(session, journal, "sw-1")
    assert usage.used.gpu_hours == pytest.approx(3.0) and usage.used.kwh == pytest.approx(3.0 * 1.5)
    assert usage.by_point[2].used.attempts == 1                   # beta has no row for it yet
