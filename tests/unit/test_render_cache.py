"""The rendered-script cache: same bytes as a fresh render, invalidated by every input."""

import os
import time

from pathlib import Path

import pytest

from slurmkit.script import render as rendering
from slurmkit.script.cache import PLACEHOLDER_PREFIX, render_cached
from slurmkit.site import load_site

ROOT = Path(__file__).resolve().parents[2]
SPEC = rendering.JobSpec(command=("python", "train.py", "--lr", "3e-4"), nodes=2, comm="light", token="tok-1")


@pytest.fixture
def setup(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMKIT_CACHE_DIR", str(tmp_path / "cache"))
    site = load_site(str(ROOT / "site_configs" / "example-infiniband.yaml"))
    cluster = site.cluster()
    calls = []

    def counting_render(*args, **kw):
        calls.append(1)
        return rendering.render(*args, **kw)

    def go(spec=SPEC, site=site):
        return render_cached(site, cluster, site.partition(cluster), spec, None, counting_render)

    return go, calls, site


def test_a_hit_is_byte_identical_to_a_fresh_render(setup):
    go, calls, site = setup
    first = go()
    second = go(SPEC._replace(token="tok-2"))
    assert len(calls) == 1                               # the second came from the cache
    fresh = rendering.render(site, site.cluster(), site.partition(site.cluster()), SPEC._replace(token="tok-2"))
    assert second == fresh
    assert "slurmkit:tok-1" in first.script and PLACEHOLDER_PREFIX not in first.script + second.script


def test_any_change_of_the_job_renders_again(setup):
    go, calls, _ = setup
    go()
    go(SPEC._replace(command=("python", "train.py", "--lr", "1e-4")))
    go(SPEC._replace(env={"A": "1"}))
    go(SPEC._replace(nodes=3))
    assert len(calls) == 4


def test_an_edited_template_renders_again(setup, tmp_path):
    go, calls, site = setup
    tdir = tmp_path / "templates"
    tdir.mkdir()
    own = tdir / "torchrun.sh.j2"
    own.write_text('{% extends "_base.sh.j2" %}{% block launch %}echo one\n{% endblock %}')
    site = site._replace(template_dirs=(str(tdir),))
    assert "echo one" in go(site=site).script
    own.write_text('{% extends "_base.sh.j2" %}{% block launch %}echo two\n{% endblock %}')
    future = time.time() + 5
    os.utime(own, (future, future))
    assert "echo two" in go(site=site).script
    assert len(calls) == 2


def test_without_a_token_nothing_is_cached(setup):
    go, calls, _ = setup
    spec = SPEC._replace(token=None)
    go(spec)
    go(spec)
    assert len(calls) == 2


def test_the_switch_wait_and_the_clusters_cap_are_part_of_the_key(tmp_path, monkeypatch):
    from slurmkit.script.topology import ClusterLayout
    from slurmkit.slurm.types import Switch, Topology

    monkeypatch.setenv("SLURMKIT_CACHE_DIR", str(tmp_path / "cache"))
    site = load_site(str(ROOT / "site_configs" / "example-infiniband.yaml"))
    cluster = site.cluster()
    topo = Topology((Switch("leaf0", 0, "n[0-3]", ""),))
    calls = []

    def go(cap, token):
        def counting_render(*args, **kw):
            calls.append(1)
            return rendering.render(*args, **kw)

        layout = ClusterLayout(topo, {"gpu": "n[0-3]"}, cap)
        return render_cached(site, cluster, site.partition(cluster), SPEC._replace(comm="heavy", token=token),
                             layout, counting_render)

    first, again = go(120, "a"), go(120, "b")
    assert len(calls) == 1 and again.switch_wait == first.switch_wait == "00:02:00"
    assert again.warnings == first.warnings and "caps the wait" in again.warnings[0]
    longer = go(3600, "c")   # the cluster's cap changed: rendered again
    assert len(calls) == 2 and longer.switch_wait == "00:30:00" and "--switches=1@00:30:00" in longer.script
