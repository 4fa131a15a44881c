"""A job's GPU energy from NVML's counters (energy.nvml_samples): the rendered sampler, the files it writes, eff's
arithmetic over them, and every way a sample is not to be trusted.

The sampler's Python is taken from the rendered script and run here against the FAKE pynvml of
tests/integration/fakes/nvml (this machine has no NVIDIA GPU); test_green.py runs it in real jobs.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness import assert_golden, site_problems
from slurmkit.energy import nvml
from slurmkit.observe import eff
from slurmkit.script import render
from slurmkit.site.loader import load_site
from slurmkit.site.model import Cluster, EnergySettings, HourWindow, Partition, PowerModel, Site

ROOT = Path(__file__).resolve().parents[2]
FAKE_NVML = ROOT / "tests" / "integration" / "fakes" / "nvml"
SPEC = render.JobSpec(command=("/home/me/venvs/torch/bin/python", "eval.py"), nodes=1, gpus_per_node=2,
                      template="single", time="00:30:00", token="0123456789abcdef")


def sampled_site(directory="/shared/energy", python=None):
    site = load_site(str(ROOT / "site_configs" / "local.yaml"))
    alpha = site.clusters["alpha"]._replace(energy=EnergySettings(nvml_samples=directory), python=python)
    return site._replace(clusters=dict(site.clusters, alpha=alpha))


def rendered(site, spec, partition=None):
    cluster = site.cluster("alpha")
    return render.render(site, cluster, site.partition(cluster, partition), spec).script


# --- the rendered script -------------------------------------------------------------------------------

def test_golden_single_job_whose_gpus_energy_is_sampled():
    assert_golden(rendered(sampled_site(), SPEC), "local-nvml-energy-single.sh")


def test_every_template_samples_before_its_work_and_on_the_way_out():
    for template in ("single", "srun", "torchrun"):
        script = rendered(sampled_site(python="/opt/py/bin/python3"), SPEC._replace(template=template))
        start = script.index("slurmkit_energy_sample start || true\n")
        assert "trap 'slurmkit_energy_sample end || true' EXIT\n" in script[start:]
        assert start < script.index("eval.py", start)                     # before the program starts
        assert "/opt/py/bin/python3 -c \"$slurmkit_energy_code\"" in script   # the cluster's node Python
    single = rendered(sampled_site(), SPEC)
    assert "exec -- /home/me" not in single and "\nslurmkit_energy_run /home/me/venvs/torch/bin/python eval.py\n" in single


def test_nothing_is_sampled_without_the_setting_nvidia_gpus_or_gpus_at_all():
    assert "slurmkit_energy" not in rendered(sampled_site(directory=None), SPEC)
    assert "slurmkit_energy" not in rendered(sampled_site(), SPEC._replace(gpus_per_node=0), partition="cpu")
    assert "slurmkit_energy" not in rendered(sampled_site(), SPEC._replace(gpus_per_node=0))
    assert "exec -- /home/me" in rendered(sampled_site(directory=None), SPEC)


def test_a_directory_with_spaces_and_quotes_is_one_word_and_a_relative_one_is_refused(tmp_path):
    script = rendered(sampled_site(directory="/shared/it's energy"), SPEC)
    assert "slurmkit_energy_dir='/shared/it'\"'\"'s energy'/$slurmkit_energy_job/" in script
    base = (ROOT / "site_configs" / "local.yaml").read_text()
    problems = site_problems(tmp_path, base.replace("    price_per_gpu_hour:", "    energy: {nvml_samples: energy}\n"
                                                          "    price_per_gpu_hour:", 1))
    assert any("'energy' must be an absolute path" in p for p in problems), problems


def sampler_code():
    script = rendered(sampled_site(), SPEC)
    return re.search(r"(?s)\nslurmkit_energy_code='(.*?)'\n", script).group(1)


def run_sampler(tmp_path, phase, **env):
    out = tmp_path / "samples"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}     # none of a job's own
    environ.update(PYTHONPATH=str(FAKE_NVML), SLURMD_NODENAME="an1", **env)
    subprocess.run([sys.executable, "-c", sampler_code(), phase, str(out)], env=environ, check=True, timeout=60)
    return json.loads((out / ("an1.%s.json" % phase)).read_text())


def test_the_sampler_writes_each_gpus_counter_and_slurms_gpu_list(tmp_path):
    sample = run_sampler(tmp_path, "start", SLURM_STEP_GPUS="1,2", SLURMKIT_FAKE_NVML_GPUS="4")
    assert sample["node"] == "an1" and sample["phase"] == "start" and sample["error"] is None
    assert sample["job_gpus"] == "1,2" and [g["minor"] for g in sample["gpus"]] == [0, 1, 2, 3]
    assert all(isinstance(g["energy_mj"], int) and g["energy_mj"] > 0 for g in sample["gpus"])
    assert not list((tmp_path / "samples").glob("*.tmp"))                   # written whole, then renamed


def test_a_node_without_nvml_writes_why(tmp_path):
    sample = run_sampler(tmp_path, "end", SLURMKIT_FAKE_NVML_ERROR="NVML Shared Library Not Found")
    assert sample["gpus"] == [] and sample["error"] == "NVMLError: NVML Shared Library Not Found"


# --- reading the samples --------------------------------------------------------------------------------

DIR = "/shared/energy"
T0 = 1_800_000_000.0


def sample(node, phase, counters, when, job_gpus=None, error=None):
    gpus = [{"index": i, "minor": i, "energy_mj": c, "error": None} for i, c in enumerate(counters)]
    return json.dumps({"phase": phase, "node": node, "time": when, "gpus": gpus, "error": error,
                       "job_gpus": job_gpus})


def texts(job="131", attempt=0, **by_node):
    """{path: text} for nodes given as NAME=(start counters, end counters[, job_gpus])."""
    out = {}
    for node, spec in by_node.items():
        start, end, gpus = (spec + (None,))[:3]
        paths = nvml.sample_paths(DIR, job, attempt, [node])
        if start is not None:
            out[paths[0]] = sample(node, "start", start, T0 + 1, gpus)
        if end is not None:
            out[paths[1]] = sample(node, "end", end, T0 + 3599, gpus)
    return out


def test_the_gpus_slurm_gave_the_job_are_summed_over_every_node():
    files = texts(an1=([0, 1000, 5000], [0, 3_601_000, 5000], "1"),           # GPU 1 only: 3,600 J
                  an2=([10, 20, 30], [3_600_010, 20, 7_200_030]))               # no list: all three
    use = nvml.attempt_energy(files, DIR, "131", 0, ["an1", "an2"], T0, 3600)
    assert use.why is None and use.kwh == pytest.approx((3600 + 3600 + 7200) / 3.6e6)
    assert nvml.parse_gpu_list("0-2,5") == [0, 1, 2, 5] and nvml.parse_gpu_list("(null)") is None


@pytest.mark.parametrize("files, why", [
    (texts(an1=([0], [10])), "no NVML sample of its start on an2"),
    (texts(an1=([0], None), an2=([0], [1])), "no NVML sample of its end on an1 (it ended before its script did"),
    (dict(texts(an1=([0], [1]), an2=([0], [1])), **{nvml.sample_paths(DIR, "131", 0, ["an2"])[1]:
                                                     sample("an2", "end", [], T0 + 9, error="NVMLError: lost")}),
     "NVML on an2: NVMLError: lost"),
    (texts(an1=([0], [1], "3"), an2=([0], [1])), "NVML on an1 did not give GPU 3's energy at the job's start"),
    (texts(an1=([50], [10]), an2=([0], [1])), "GPU 0's energy counter on an1 went back"),
    ({nvml.sample_paths(DIR, "131", 0, ["an1"])[0]: "{\"phase\": \"st"}, "no NVML sample of its start on an1"),
])
def test_a_sample_that_cannot_be_trusted_says_why(files, why):
    use = nvml.attempt_energy(files, DIR, "131", 0, ["an1", "an2"], T0, 3600)
    assert use.kwh is None and why in use.why


def test_samples_of_an_earlier_job_with_the_same_id_are_not_this_ones():
    files = texts(an1=([0], [1]))
    use = nvml.attempt_energy(files, DIR, "131", 0, ["an1"], T0 + 86400, 3600)
    assert use.kwh is None and "taken outside this attempt" in use.why


# --- eff ------------------------------------------------------------------------------------------------

GPU = Partition("gpu", accelerator="nvidia", gpu_model="h100", gpus_per_node=8,
                power=PowerModel(gpu_busy_watts=500.0, node_busy_watts=1000.0))
ENERGY = EnergySettings(pue=1.5, carbon_intensity=(HourWindow(0, 24, 400.0),), nvml_samples=DIR)


def attempt(gpu_kwh=None, gpu_why=None, partition=GPU, energy_j=None):
    site = Site("s", "/dev/null", {"alpha": Cluster("alpha", {"gpu": partition}, energy=ENERGY)})
    a = eff.Attempt(cluster="alpha", job_id="131", state="COMPLETED", elapsed_s=3600, limit_s=7200, cpus=8, nodes=2,
                    cpu_s=None, mem_bytes=None, peak_rss_bytes=None, gpus=4, gpu_util=None, gpu_mem_bytes=None,
                    energy_j=energy_j, partition="gpu", start="2026-12-04T10:00:00", nodelist="an[1-2]",
                    gpu_kwh=gpu_kwh, gpu_why=gpu_why)
    return eff.report("alpha:131", [a], site=site)


def test_nvml_measures_the_gpus_and_the_power_model_the_rest_of_each_node():
    report = attempt(gpu_kwh=1.2)
    kwh = (1.2 + 2 * 1000 / 1000.0) * 1.5                  # measured GPUs + two nodes' 1 kW for an hour, x PUE
    assert report.data["energy_source"] == "nvml" and report.data["energy_kwh"] == pytest.approx(kwh)
    assert report.data["gco2"] == pytest.approx(kwh * 400)
    assert "energy: %.3f kWh, the GPUs measured by NVML at the job's start and end" % kwh in "\n".join(report.lines)


def test_slurms_own_measurement_still_wins_and_without_samples_the_model_says_why_nvml_was_not_used():
    assert attempt(gpu_kwh=1.2, energy_j=3_600_000).data["energy_source"] == "slurm"
    report = attempt(gpu_why="no NVML sample of its end on an2 (it ended before its script did: ...)")
    assert report.data["energy_source"] == "model"
    assert report.data["energy_kwh"] == pytest.approx((2 * 1000 + 4 * 500) / 1000.0 * 1.5)
    assert "NVML not used: no NVML sample of its end on an2" in "\n".join(report.lines)


def test_without_the_nodes_power_the_gpus_measurement_alone_is_not_the_jobs_energy():
    report = attempt(gpu_kwh=1.2, partition=GPU._replace(power=None))
    assert report.data["energy_kwh"] is None and report.data["energy_source"] is None
    assert "NVML measured the GPUs (1.200 kWh), but the rest of the nodes is unknown: partition gpu has no power " \
           "model" in report.data["energy_unknown"]
