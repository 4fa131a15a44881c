"""The site's GPU frequency per preference (energy.gpu_freq), rendered as sbatch --gpu-freq.

A job placed by ``--prefer cheap|green`` carries that preference in its spec;
the renderer gives it the frequency its cluster's site entry sets for it (the
caller's own ``gpu_freq`` wins); site validate refuses a value sbatch would
not take, in one line.
"""

from pathlib import Path

import pytest

from harness import assert_golden, site_problems
from slurmkit.errors import UsageError
from slurmkit.federation import planner
from slurmkit.federation.cooldown import Cooldown
from slurmkit.script import render
from slurmkit.site.loader import load_site
from slurmkit.site.model import EnergySettings
from slurmkit.testing import FakeClock, FakeSlurm, fake_session, fake_site

ROOT = Path(__file__).resolve().parents[2]
SPEC = render.JobSpec(command=("/home/me/venvs/torch/bin/python", "eval.py"), nodes=1, gpus_per_node=2,
                      template="single", time="00:30:00", token="0123456789abcdef")


def site_with(freq, name="alpha"):
    site = load_site(str(ROOT / "site_configs" / "local.yaml"))
    cluster = site.clusters[name]
    clusters = dict(site.clusters, **{name: cluster._replace(energy=EnergySettings(gpu_freq=freq))})
    return site._replace(clusters=clusters)


def rendered(site, spec, cluster="alpha", partition=None):
    c = site.cluster(cluster)
    return render.render(site, c, site.partition(c, partition), spec).script


def test_golden_green_job_at_the_sites_gpu_frequency():
    site = site_with({"green": "medium,memory=high", "cheap": "low"})
    assert_golden(rendered(site, SPEC._replace(prefer="green")), "local-green-gpu-freq.sh")


def test_each_preference_gets_its_own_frequency_and_soon_none():
    site = site_with({"green": "medium,memory=high", "cheap": "1410"})
    assert "#SBATCH --gpu-freq=1410\n" in rendered(site, SPEC._replace(prefer="cheap"))
    assert "--gpu-freq" not in rendered(site, SPEC)                          # not placed by cheap or green
    assert "--gpu-freq" not in rendered(site, SPEC._replace(prefer="green"), cluster="beta")   # beta sets none


def test_the_callers_own_frequency_wins_and_a_job_without_gpus_gets_none():
    site = site_with({"green": "low"})
    assert "#SBATCH --gpu-freq=high\n" in rendered(site, SPEC._replace(prefer="green", gpu_freq="high"))
    assert "--gpu-freq" not in rendered(site, SPEC._replace(prefer="green", gpus_per_node=0), partition="cpu")


@pytest.mark.parametrize("value", ["max", "medium;rm -rf /", "memory=", "low,medium,high", "0", ""])
def test_a_frequency_sbatch_would_not_take_is_refused(value):
    with pytest.raises(UsageError, match="--gpu-freq: .* is not an sbatch --gpu-freq"):
        rendered(site_with({}), SPEC._replace(gpu_freq=value))


@pytest.mark.parametrize("energy,says", [
    ("{gpu_freq: {green: turbo}}", "'turbo' is not an sbatch --gpu-freq"),
    ("{gpu_freq: {soon: low}}", "soon"),
    ("{gpu_freq: {green: 1410}}", "expected"),                    # a number, not the text sbatch takes
])
def test_site_validate_refuses_a_bad_gpu_freq_in_one_line(tmp_path, energy, says):
    problems = site_problems(tmp_path, "site: s\nclusters:\n  c:\n    energy: %s\n    partitions:\n      p: "
                                       "{accelerator: nvidia, gpu_model: h100, gpus_per_node: 8, cpus_per_node: 2}\n"
                                       % energy)
    assert len(problems) == 1 and says in problems[0], problems


def test_site_validate_takes_a_good_gpu_freq_and_the_loader_keeps_it(tmp_path):
    from slurmkit.site import validate_files

    path = tmp_path / "s.yaml"
    path.write_text("site: s\nclusters:\n  c:\n    energy: {gpu_freq: {green: 'medium,memory=high', cheap: '1410'}}\n"
                    "    partitions:\n      p: {accelerator: nvidia, gpu_model: h100, gpus_per_node: 8, "
                    "cpus_per_node: 2}\n")
    assert validate_files([path]) == []
    assert load_site(str(path)).clusters["c"].energy.gpu_freq == {"green": "medium,memory=high", "cheap": "1410"}


def test_the_planner_submits_a_green_job_at_the_sites_frequency_and_a_soon_one_without(tmp_path):
    site = fake_site("alpha")
    alpha = site.clusters["alpha"]
    site = site._replace(clusters={"alpha": alpha._replace(energy=EnergySettings(gpu_freq={"green": "low"}))})
    for prefer, expect in (("green", True), ("soon", False)):
        fake = FakeSlurm("alpha", nodes=["an1"], submit_once=True)
        session = fake_session(site, alpha=fake)
        placement = planner.submit_best(session, SPEC._replace(template=None, token=None), prefer=prefer,
                                        cooldown=Cooldown(tmp_path / ("cd-%s.json" % prefer)), clock=FakeClock())
        (job,) = fake.table.values()
        assert ("#SBATCH --gpu-freq=low\n" in job.script) is expect, prefer
        assert placement.submission.ref.cluster == "alpha"
