"""Jobs in container images on the real cluster alpha, with Charliecloud's ch-run (the site's
``containers`` of alpha in site_configs/local.yaml).

The image is a Debian 12 root made without a registry (scripts/images/mkimage.sh, kept for the
machine like the release roots) whose Python lives at /opt/slurmkit-image/venv, a path this
machine does not have: a task that prints it ran in the image.  Each job runs to its end and
the test reads what the program printed.
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import job_info, wait_job_state
from harness import one_error_line, run_slurmkit

ROOT = Path(__file__).resolve().parents[2]
SITE = str(ROOT / "site_configs" / "local.yaml")
IMAGE_PYTHON = "/opt/slurmkit-image/venv/bin/python"

pytestmark = pytest.mark.skipif(
    shutil.which("ch-run") is None,
    reason="Charliecloud's ch-run is not installed here (make install-system installs it on the host; the "
           "release roots do not have it): the container tests run on the host's Slurm")


@pytest.fixture(scope="module")
def image(devcluster):
    """The test image, linked where local.yaml says alpha keeps it."""
    made = subprocess.run(["bash", str(ROOT / "scripts" / "images" / "mkimage.sh")], check=True,
                          capture_output=True, text=True, timeout=900).stdout.strip().splitlines()[-1]
    assert not Path(IMAGE_PYTHON).exists(), "the host must not have the image's Python for the proof to hold"
    link = ROOT / ".devcluster" / "images" / "debian-12"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not (link.is_symlink() and os.readlink(link) == made):
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(made)
    return made


def slurmkit(*args, check=True, cwd=None):
    return run_slurmkit(args, env=dict(os.environ, SLURMKIT_SITE=SITE), check=check, cwd=cwd)


def run_to_end(tmp_path, *args):
    """Submit from ``tmp_path`` (the job's working directory), wait for the end: (the submit report, output)."""
    out = tmp_path / "job-%j.out"
    job = json.loads(slurmkit("submit", "--json", "-p", "cpu", "-t", "3", "-o", str(out), *args,
                              cwd=tmp_path).stdout)
    wait_job_state("alpha", job["job_id"], {"COMPLETED", "FAILED"}, timeout=120)
    text = Path(str(out).replace("%j", job["job_id"])).read_text()
    return job, text


PROBE = ("import os, sys; print('rank', os.environ['SLURM_PROCID'], sys.prefix, open('/etc/debian_version').read()"
         ".strip(), os.environ['MASTER_ADDR'], os.environ['GLOO_SOCKET_IFNAME'], os.environ['RUN_LABEL'], "
         "os.getcwd())")


def test_a_two_node_job_runs_every_task_in_the_image_with_the_jobs_variables(image, tmp_path):
    job, text = run_to_end(tmp_path, "-N", "2", "-T", "srun", "--image", "debian-12", "-e", "RUN_LABEL=it's $(x)",
                           "--", IMAGE_PYTHON, "-c", PROBE)
    assert job["image"].endswith("/.devcluster/images/debian-12") and job["runtime"] == "charliecloud"
    lines = sorted(line.split(" ", 6) for line in text.splitlines() if line.startswith("rank "))
    assert [line[1] for line in lines] == ["0", "1"], text
    for line in lines:
        # The image's Python (a path this machine lacks) and Debian 12 (the host may be newer).
        assert line[2] == "/opt/slurmkit-image/venv" and line[3].startswith("12."), text
        # What slurmkit rendered on the host reached the program inside: the rendezvous, the
        # fabric's gloo interface, --env literally, and the working directory at its own path.
        assert line[4].startswith("127.0.1.") and line[5] == "lo", text
        assert line[6] == "it's $(x) %s" % tmp_path, text


def test_a_single_task_in_the_image_exits_with_the_programs_status(image, tmp_path):
    job, text = run_to_end(tmp_path, "-T", "single", "--image", "debian-12", "--", IMAGE_PYTHON, "-c",
                           "import sys; print('in', sys.prefix); sys.exit(3)")
    assert "in /opt/slurmkit-image/venv" in text, text
    assert job_info("alpha", job["job_id"])["ExitCode"] == "3:0"


def test_an_image_missing_on_the_node_is_one_line_from_the_job(image, tmp_path):
    missing = str(tmp_path / "no-such-image")
    job, text = run_to_end(tmp_path, "--image", missing, "-T", "single", "--", "true")
    assert "slurmkit: error: image %s is not on node" % missing in text, text
    assert "Traceback" not in text


def test_an_image_the_site_does_not_define_is_refused_before_sbatch(image):
    proc = slurmkit("render", "-p", "cpu", "--image", "pytorch", "--", "true", check=False)
    assert proc.returncode == 2
    assert one_error_line(proc.stderr) == ("Error: --image: image 'pytorch' is not defined on cluster alpha (it has: debian-12); "
                                    "give its path or registry reference instead")
    proc = slurmkit("render", "-p", "cpu", "--image", "docker://debian:12", "--", "true", check=False)
    assert proc.returncode == 2 and "runtime charliecloud on cluster alpha starts an image directory or a " \
        "SquashFS file, named by its absolute path" in one_error_line(proc.stderr)
