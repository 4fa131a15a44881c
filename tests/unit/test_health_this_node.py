"""slurmkit.health.this_node: the check `slurmkit health check` runs, called from Python."""

import pytest

from slurmkit.errors import UsageError
from slurmkit.health import this_node
from slurmkit.site.loader import load_site

from health_site import one_partition_site, plan


@pytest.fixture
def site(tmp_path):
    return one_partition_site(tmp_path)


@pytest.fixture(autouse=True)
def private_dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SLURMKIT_STATE_DIR", str(tmp_path / "st"))


def test_a_host_check_of_a_named_partition_asks_no_slurm_and_judges_the_node(tmp_path, site):
    good = this_node.check_this_node(load_site(site), node="c1", partition="cpu")
    assert good.report.healthy and good.report.node == "c1" and good.applied is None and good.warnings == ()
    bad = this_node.check_this_node(load_site(site), node="c2", partition="cpu")   # no scratch/c2 mount
    assert not bad.report.healthy
    assert any("scratch/c2" in r.message for r in bad.report.results if r.status == "fail"), bad.report


def test_an_unknown_partition_is_refused_before_anything_runs(site):
    with pytest.raises(UsageError, match="nope"):
        this_node.check_this_node(load_site(site), node="c1", partition="nope")


def test_a_planned_check_reads_its_plan_and_reports(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(plan(tmp_path, node="c2").to_json())
    done = this_node.check_plan(str(path))
    assert done.report.node == "c2" and not done.report.healthy and done.applied is None
