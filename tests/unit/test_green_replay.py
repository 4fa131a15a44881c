"""The green replay (slurmkit.federation.replay, make bench-green): the real planner against simulated clusters.

A short replay (two days of the documented workload) must meet every
deadline, cut carbon against the soonest cluster, never start a job before
it was submitted nor before the window it was held for, and never run more
jobs on a simulated cluster than it has nodes.  And the planner's
confirmation of a later window: a clean hour that Slurm says is taken is
not chosen blindly.
"""

from datetime import datetime, timedelta

import pytest

from slurmkit.energy import published
from slurmkit.federation import replay as rp
from slurmkit.site.loader import load_site

MONDAY = datetime(2020, 6, 8)
NODES = {"alpha": 4, "beta": 3, "gamma": 2}


@pytest.fixture(scope="module")
def site():
    return rp.with_published_grids(load_site("site_configs/local.yaml"), {"alpha": "GB", "beta": "FR", "gamma": "DE"})


@pytest.fixture(scope="module")
def two_days():
    return rp.week_workload(MONDAY, days=2)


def concurrent_max(outcomes, cluster):
    """The most jobs' nodes in use at once on ``cluster``."""
    points = sorted([(o.start, o.job.nodes) for o in outcomes if o.cluster == cluster]
                    + [(o.end, -o.job.nodes) for o in outcomes if o.cluster == cluster], key=lambda p: (p[0], p[1]))
    used = most = 0
    for _, change in points:
        used += change
        most = max(most, used)
    return most


def test_the_workload_is_the_documented_mix(two_days):
    kinds = {}
    for job in two_days:
        kinds[job.kind] = kinds.get(job.kind, 0) + 1
    # Monday and Tuesday: 6 urgent a day, 10 next-workday and 1 overnight a workday, a long urgent on Monday.
    assert kinds == {"urgent": 12, "next-workday": 20, "overnight": 2, "long urgent": 1}
    nextday = [j for j in two_days if j.kind == "next-workday"]
    assert all(j.deadline.hour == 9 and j.deadline.date() == j.submit.date() + timedelta(days=1) for j in nextday)
    assert rp.week_workload(MONDAY, days=2) == two_days          # a fixed seed: the same replay every time


def test_green_meets_every_deadline_and_cuts_carbon(site, two_days):
    base = rp.totals(rp.replay(site, two_days, NODES, baseline=True))
    green_outcomes = rp.replay(site, two_days, NODES)
    green = rp.totals(green_outcomes)
    assert green.deadlines == 22 and green.deadlines_met == 22
    assert green.gco2 < base.gco2 * 0.9
    assert green.mean_delay_hours > base.mean_delay_hours     # the cut is bought with waiting
    # The clean grid (beta: France's) gets the deadline-tolerant work.
    tolerant = [o for o in green_outcomes if o.job.prefer == "green"]
    assert sum(o.cluster == "beta" for o in tolerant) > len(tolerant) / 2


def test_no_job_starts_before_its_submission_and_no_cluster_runs_more_than_its_nodes(site, two_days):
    for outcomes in (rp.replay(site, two_days, NODES, baseline=True), rp.replay(site, two_days, NODES)):
        assert all(o.start >= o.job.submit for o in outcomes)
        for cluster, nodes in NODES.items():
            assert concurrent_max(outcomes, cluster) <= nodes


def test_time_only_on_one_grid_shifts_tolerant_jobs_to_cleaner_hours(site, two_days):
    base = rp.replay(site, two_days, NODES, clusters=["alpha"], baseline=True)
    green = rp.replay(site, two_days, NODES, clusters=["alpha"])
    assert {o.cluster for o in green} == {"alpha"}
    assert all(o.met for o in green)

    def nextday(outs):
        return sum(o.use.gco2 for o in outs if o.job.kind == "next-workday")

    assert nextday(green) <= nextday(base) * (1 - published.STUDY_CUT_NEXT_WORKDAY["GB"])
    # Urgent jobs ask for "soon": they are not held for a later window.
    assert all(o.start - o.job.submit < timedelta(hours=12) for o in green if o.job.kind == "urgent")


def test_simulated_cluster_books_whole_nodes_and_waits_for_them():
    clock = rp.SimulatedClock(MONDAY)
    cluster = rp.SimulatedCluster("x", 2, clock)
    assert cluster.run(MONDAY, 2, 3600) == MONDAY
    assert cluster.run(MONDAY, 1, 1800) == MONDAY + timedelta(hours=1)      # both nodes busy for an hour
    assert cluster.earliest(MONDAY, 2, 3600) == MONDAY + timedelta(hours=1, minutes=30)
    script = "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --time=00:30:00\n#SBATCH --begin=2020-06-08T%s\n"
    assert cluster.estimate_start(script % "00:10:00").start == MONDAY + timedelta(hours=1)   # a node frees then
    assert cluster.estimate_start(script % "02:00:00").start == MONDAY + timedelta(hours=2)   # held till --begin
    with pytest.raises(ValueError, match="2 nodes, not 3"):
        cluster.earliest(MONDAY, 3, 60)


def test_a_later_window_slurm_says_is_taken_is_not_chosen_blindly(site):
    """Jobs due tomorrow 09:00, each 3 h on all of beta's 3 nodes would pile up in France's cleanest hours: the
    planner asks Slurm about the held window (sbatch --test-only --begin) and moves on, so each meets its
    deadline; without the confirmation the second one would be held for the same hour and end too late."""
    submit = MONDAY + timedelta(hours=14)
    jobs = [rp.ReplayJob("j%d" % i, "next-workday", submit, 3, 3 * 3600, MONDAY + timedelta(days=1, hours=9),
                         "green") for i in range(4)]
    outcomes = rp.replay(site, jobs, NODES, clusters=["beta"])
    assert all(o.met for o in outcomes)
    starts = sorted(o.start for o in outcomes)
    assert all(b - a >= timedelta(hours=3) for a, b in zip(starts, starts[1:]))   # one after the other


def test_estimates_blind_to_held_jobs_as_real_slurms_still_book_them():
    """Real Slurm's --test-only does not count jobs held for later (measured on alpha): the simulation
    estimates so, while the job itself still waits for the held ones when it runs; squeue lists them."""
    clock = rp.SimulatedClock(MONDAY)
    cluster = rp.SimulatedCluster("x", 1, clock)
    held = MONDAY + timedelta(hours=2)
    assert cluster.run(held, 1, 3600) == held                          # held for 02:00 on the only node
    script = "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --time=01:00:00\n#SBATCH --begin=2020-06-08T02:00:00\n"
    assert cluster.estimate_start(script).start == held                # blind: "02:00"
    (queued,) = cluster.jobs()
    assert (queued.state, queued.reason, queued.start_time, queued.time_limit) == ("PENDING", "BeginTime", held,
                                                                                   "01:00:00")
    assert cluster.partitions()["gpu"]["TotalNodes"] == "1"
    assert cluster.run(held, 1, 3600) == held + timedelta(hours=1)     # but it runs after the held one
    seeing = rp.SimulatedCluster("y", 1, clock, sees_held=True)
    seeing.run(held, 1, 3600)
    assert seeing.estimate_start(script).start == held + timedelta(hours=1)
