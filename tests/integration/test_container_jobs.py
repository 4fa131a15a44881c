"""Jobs in container images on the real clusters: alpha with Charliecloud's ch-run, beta with Slurm's own
``--container`` run by runc through the oci.conf devcluster writes (the site's ``containers`` in
site_configs/local.yaml).

The image is a Debian 12 root made without a registry (scripts/images/mkimage.sh, kept for the
machine like the release roots) whose Python lives at /opt/slurmkit-image/venv, a path this
machine does not have: a task that prints it ran in the image.  Each job runs to its end and
the test reads what the program printed.
"""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import (HAS_CH_RUN, IMAGE, IMAGE_PYTHON, alpha_with_runtime, job_info, needs_apptainer, needs_image,
                      needs_runc, slurm_version, wait_job_state)
from harness import one_error_line, run_slurmkit, wait_until
from training_output import TRAIN, check_training

ROOT = Path(__file__).resolve().parents[2]
SITE = str(ROOT / "site_configs" / "local.yaml")
pytestmark = needs_image


@pytest.fixture(scope="module")
def image(container_image):
    return container_image


def slurmkit(*args, check=True, cwd=None):
    return run_slurmkit(args, env=dict(os.environ, SLURMKIT_SITE=SITE), check=check, cwd=cwd)


def run_to_end(tmp_path, *args, timeout=120, cluster="alpha", partition="cpu", site=SITE):
    """Submit from ``tmp_path`` (the job's working directory), wait for the end: (the submit report, output)."""
    out = tmp_path / "job-%j.out"
    job = json.loads(slurmkit("submit", "--json", "--site", site, "-M", cluster, "-p", partition, "-t", "3",
                              "-o", str(out), *args, cwd=tmp_path).stdout)
    wait_job_state(cluster, job["job_id"], {"COMPLETED", "FAILED"}, timeout=timeout)
    text = Path(str(out).replace("%j", job["job_id"])).read_text()
    return job, text


PROBE = ("import os, sys; print('rank', os.environ['SLURM_PROCID'], sys.prefix, open('/etc/debian_version').read()"
         ".strip(), os.environ['MASTER_ADDR'], os.environ['GLOO_SOCKET_IFNAME'], os.environ['RUN_LABEL'], "
         "os.getcwd())")


def check_probe(text, label, cwd):
    """Both tasks of a 2-node PROBE job ran in the image and saw what slurmkit rendered on the host."""
    lines = sorted(line.split(" ", 6) for line in text.splitlines() if line.startswith("rank "))
    assert [line[1] for line in lines] == ["0", "1"], text
    for line in lines:
        # The image's Python (a path this machine lacks) and Debian 12 (the host may be newer).
        assert line[2] == "/opt/slurmkit-image/venv" and line[3].startswith("12."), text
        # What slurmkit rendered on the host reached the program inside: the rendezvous, the
        # fabric's gloo interface, --env literally, and the working directory at its own path.
        assert line[4].startswith("127.0.1.") and line[5] == "lo", text
        assert line[6] == "%s %s" % (label, cwd), text


def test_a_two_node_job_runs_every_task_in_the_image_with_the_jobs_variables(image, tmp_path):
    job, text = run_to_end(tmp_path, "-N", "2", "-T", "srun", "--image", "debian-12", "-e", "RUN_LABEL=it's $(x)",
                           "--", IMAGE_PYTHON, "-c", PROBE)
    assert job["image"].endswith("/.devcluster/images/debian-12/rootfs") and job["runtime"] == "charliecloud"
    check_probe(text, "it's $(x)", tmp_path)


# Each real runtime that can run a multi-node step here: Charliecloud on alpha, Apptainer where Debian has
# it (alpha's runtime replaced; --userns: see test_apptainer_runs_a_two_node_job_in_the_image_for_real).
# Slurm's OCI runtime takes its mounts from the bundle alone, so the repository's training program is
# not there: its 2-node case is test_several_tasks_of_an_oci_step_without_their_slurm_variables_...
MULTI_NODE_RUNTIMES = [pytest.param("charliecloud", id="charliecloud"),
                       pytest.param("apptainer", id="apptainer", marks=needs_apptainer)]


def site_for(tmp_path, runtime):
    """The site file whose alpha runs ``runtime``."""
    return SITE if runtime == "charliecloud" else alpha_with_runtime(tmp_path, runtime, options=["--userns"])


@pytest.mark.slow
@pytest.mark.parametrize("runtime", MULTI_NODE_RUNTIMES)
def test_two_node_ddp_trains_in_the_image_with_torchrun(image, tmp_path, runtime):
    # The torchrun template: one launcher per node, each in the image, meeting at the first node's
    # NodeAddr; gloo over the fabric's interface; checkpoints into the mounted checkpoint directory.
    job, text = run_to_end(tmp_path, "-N", "2", "--procs-per-node", "2", "--image", IMAGE, "--mount", str(ROOT),
                           "--", IMAGE_PYTHON, TRAIN, "--steps", "20", "--checkpoint-dir", str(tmp_path / "ckpt"),
                           "--checkpoint-every", "10", timeout=240, site=site_for(tmp_path, runtime))
    assert job["template"] == "torchrun" and job["runtime"] == runtime
    started = check_training(text, world=4, steps=20)
    assert len({s[2] for s in started.values()}) == 2 and {s[3] for s in started.values()} <= {
        "127.0.1.%d" % n for n in range(11, 15)}, started
    assert "checkpoint step=20" in text and (tmp_path / "ckpt").is_dir()


@pytest.mark.parametrize("runtime", [
    pytest.param("charliecloud", id="charliecloud"),
    pytest.param("oci", id="oci", marks=needs_runc),
    pytest.param("apptainer", id="apptainer", marks=needs_apptainer)])
def test_a_sweep_runs_each_point_in_the_image(image, tmp_path, runtime):
    # Each point an array task in the image: Charliecloud and Apptainer on alpha, Slurm's OCI on beta.
    program = ("import json, os, sys; print(json.dumps({'prefix': sys.prefix, 'lr': sys.argv[1], "
               "'point': os.environ['SLURMKIT_SWEEP_POINT']}))")
    where = ("-M", "beta", "-p", "gpu") if runtime == "oci" else ("-M", "alpha", "-p", "cpu")
    env = dict(os.environ, SLURMKIT_SITE=site_for(tmp_path, runtime), SLURMKIT_STATE_DIR=str(tmp_path / "state"))
    proc = run_slurmkit(["submit", "--sweep", "lr=0.1,0.01", "--sweep", "seed=0..1", "--sweep-dir",
                         tmp_path / "sweep", *where, "-T", "single", "-t", "3", "--image", IMAGE, "--",
                         IMAGE_PYTHON, "-c", program, "{lr}"], env=env, cwd=tmp_path, check=True)
    sweep_id = proc.stdout.strip()

    def settled():
        data = json.loads(run_slurmkit(["sweep", "status", sweep_id, "--json"], env=env, cwd=tmp_path,
                                       check=True).stdout)
        return data if set(data["counts"]) <= {"COMPLETED", "FAILED"} and data["total"] == 4 else None
    data = wait_until(settled, 180, interval=2.0, what="the sweep's four points to end")
    # A point that did not complete says why on the failure's first line (CI shows only that line).
    unfinished = {p["point"]: (p["state"], p["exit_code"], p["signal"], p["nodes"], p["reason"], p.get("error_tail"))
                  for p in data["points"] if p["state"] != "COMPLETED"}
    assert not unfinished, ("points that did not complete under %s (state, exit, signal, nodes, reason, error.log): "
                            "%r" % (runtime, unfinished))
    for point in data["points"]:
        lines = (tmp_path / "sweep" / "points" / point["point"] / "output.log").read_text().splitlines()
        printed = [json.loads(line) for line in lines if line.startswith("{")]
        assert printed == [{"prefix": "/opt/slurmkit-image/venv", "lr": point["values"]["lr"],
                            "point": point["point"]}], lines


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


def _ch_run_mounts_squashfs():
    proc = subprocess.run(["ch-run", "--feature=squash"], capture_output=True, env=dict(os.environ, USER="root"))
    return proc.returncode == 0


@pytest.mark.skipif(not HAS_CH_RUN or not _ch_run_mounts_squashfs(), reason="this ch-run cannot mount SquashFS images "
                    "(Debian 12's 0.31 is built without squashfuse; the 24.11 and 26.05 roots' 0.38 and 0.45 are not, "
                    "and make test-releases runs this there)")
def test_a_squashfs_image_runs_on_two_nodes(image, tmp_path):
    # The same root as a SquashFS file (scripts/images/mkimage.sh; without the venv's packages), named by its
    # path: ch-run mounts it with squashfuse on each node.  The bind-target check looks into directories only.
    squash = str(Path(image) / "image.sqfs")
    assert os.path.isfile(squash), "make image made no image.sqfs (is mksquashfs installed? make install-system)"
    job, text = run_to_end(tmp_path, "-N", "2", "-T", "srun", "--image", squash, "-e", "RUN_LABEL=squashed",
                           "--", IMAGE_PYTHON, "-c", PROBE)
    assert job["runtime"] == "charliecloud" and job["image"] == squash
    check_probe(text, "squashed", tmp_path)


def test_a_mount_onto_a_directory_the_image_lacks_is_one_line_from_the_job(image, tmp_path):
    # ch-run 0.31 binds only onto a directory the image has (it would answer "can't mkdir ... Read-only
    # file system" on every node); the batch script looks into the directory image first.
    job, text = run_to_end(tmp_path, "-N", "2", "-T", "srun", "--image", IMAGE, "--mount",
                           "%s:/no-such-dir-in-image" % tmp_path, "--", IMAGE_PYTHON, "-c", "print('ran')")
    assert text.splitlines() == [
        "slurmkit: error: image %s on node an1 has no directory /no-such-dir-in-image to mount onto, and its "
        "runtime cannot make one in the image: mount at a directory the image has (--mount SOURCE:/mnt) or add "
        "/no-such-dir-in-image to the image" % IMAGE], text
    assert job_info("alpha", job["job_id"])["JobState"] == "FAILED"


def test_an_image_the_site_does_not_define_is_refused_before_sbatch(image):
    proc = slurmkit("render", "-p", "cpu", "--image", "pytorch", "--", "true", check=False)
    assert proc.returncode == 2
    assert one_error_line(proc.stderr) == ("Error: --image: image 'pytorch' is not defined on cluster alpha (it has: "
                                           "debian-12); give its path or registry reference instead")
    proc = slurmkit("render", "-p", "cpu", "--image", "docker://debian:12", "--", "true", check=False)
    assert proc.returncode == 2 and "runtime charliecloud on cluster alpha starts an image directory or a " \
        "SquashFS file, named by its absolute path" in one_error_line(proc.stderr)


# ---------------------------------------------------------------------------
# Slurm's own OCI containers (beta: runc through oci.conf)



@needs_runc
def test_a_task_in_an_oci_bundle_runs_in_the_image_in_the_jobs_directory(image, tmp_path):
    job, text = run_to_end(tmp_path, "-T", "single", "--image", IMAGE, "-e", "RUN_LABEL=oci",
                           "--", IMAGE_PYTHON, "-c", "import os, sys; print('in', sys.prefix, open('/etc/debian_"
                           "version').read().strip(), os.getcwd(), os.environ['RUN_LABEL']); "
                           "print('cgroups', *sorted({ln.split(':', 2)[2].strip() for ln in open('/proc/self/cgroup')}))",
                           cluster="beta", partition="gpu")
    assert job["runtime"] == "oci" and job["image"] == str(ROOT / ".devcluster" / "images" / IMAGE)
    (line,) = [ln for ln in text.splitlines() if ln.startswith("in ")]
    # The bundle's config.json has the host's /tmp, where the job works: it starts there, not at /.
    prefix, debian, cwd, label = line.split()[1:]
    assert (prefix, cwd, label) == ("/opt/slurmkit-image/venv", str(tmp_path), "oci") and debian.startswith("12.")
    # runc names the container's cgroup after the container, at the top of the machine's hierarchies that
    # every cluster here shares (the release suites' too, at the same job ids): the name carries this
    # cluster's own word (devcluster's oci-instance), so two clusters' containers never meet there.
    instance = (ROOT / ".devcluster" / "beta" / "oci-instance").read_text().strip()
    (line,) = [ln for ln in text.splitlines() if ln.startswith("cgroups ")]
    own = re.compile(r"/%s\.bn\d\.[^.]+\.%s\.0\.0$" % (re.escape(instance), job["job_id"]))
    assert any(own.match(path) for path in line.split()[1:]), (instance, line)


@needs_runc
def test_several_tasks_of_an_oci_step_without_their_slurm_variables_stop_with_one_line(image, tmp_path):
    # Slurm 22.05's --container hands the container only srun's variables: no SLURM_PROCID, so two tasks
    # could not tell each other apart.  The job says so instead of training two rank-less programs.
    job, text = run_to_end(tmp_path, "-N", "2", "--gpus-per-node", "1", "-T", "srun", "--image", IMAGE, "--",
                           IMAGE_PYTHON, "-c", "print('started')", cluster="beta", partition="gpu", timeout=180)
    if "started" in text:                 # a Slurm that passes the task's own variables
        assert job_info("beta", job["job_id"])["JobState"] == "COMPLETED", text
        return
    assert "without its own Slurm variables (SLURM_PROCID" in text, text
    assert job_info("beta", job["job_id"])["JobState"] == "FAILED"


@pytest.mark.slow
@needs_runc
def test_two_node_ddp_trains_in_an_oci_bundle_with_torchrun(image, tmp_path, oci_site_with_repo):
    # The torchrun template under Slurm's OCI runtime: one launcher per node, each in its own runc container
    # on beta, meeting at the first node's address.  The bundle has the clone (the training program), as
    # an OCI job's mounts come from the bundle alone; the checkpoints go to the job's directory (/tmp).
    if slurm_version("beta").startswith("22.05"):
        pytest.skip("Slurm 22.05's --container passes only srun's variables: several tasks of a step stop with "
                    "one line (test_several_tasks_of_an_oci_step_without_their_slurm_variables_stop_with_one_line)")
    job, text = run_to_end(tmp_path, "-N", "2", "--procs-per-node", "2", "--image", IMAGE, "--", IMAGE_PYTHON,
                           TRAIN, "--steps", "20", "--checkpoint-dir", str(tmp_path / "ckpt"), "--checkpoint-every",
                           "10", timeout=240, cluster="beta", partition="gpu", site=oci_site_with_repo)
    assert job["template"] == "torchrun" and job["runtime"] == "oci"
    started = check_training(text, world=4, steps=20)
    assert len({s[2] for s in started.values()}) == 2 and {s[3] for s in started.values()} <= {
        "127.0.2.%d" % n for n in range(11, 14)}, started
    assert "checkpoint step=20" in text and (tmp_path / "ckpt").is_dir()


@pytest.mark.parametrize("runtime", ["apptainer", "podman-hpc"])
def test_the_command_lines_of_apptainer_and_podman_hpc_run_a_two_node_job_through_stand_ins(image, tmp_path,
                                                                                            runtime, monkeypatch):
    # Neither is in Debian 12: tests/integration/fakes has a FAKE of each that reads exactly the options
    # slurmkit renders for it (refusing any other) and runs the task with the real ch-run (whose bind
    # targets must exist in the image: /mnt does; the job's output file is seen there through the mount).
    monkeypatch.setenv("PATH", "%s:%s" % (ROOT / "tests" / "integration" / "fakes", os.environ["PATH"]))
    job, text = run_to_end(tmp_path, "-N", "2", "-T", "srun", "--image", IMAGE, "-e", "RUN_LABEL=%s run" % runtime,
                           "--mount", "%s:/mnt" % tmp_path, "--", IMAGE_PYTHON, "-c",
                           PROBE + "; import os; print('extra', os.path.exists('/mnt/job-%s.out' % "
                           "os.environ['SLURM_JOB_ID']))",
                           site=alpha_with_runtime(tmp_path, runtime))
    assert job["runtime"] == runtime
    check_probe(text, "%s run" % runtime, tmp_path)
    assert text.count("extra True") == 2, text


@needs_apptainer
def test_apptainer_runs_a_two_node_job_in_the_image_for_real(image, tmp_path):
    # The real Apptainer (sid's package) on the image's root as a sandbox directory: what slurmkit renders
    # for it (--bind, --pwd, --env NAME=$NAME) reaches both tasks, in the host's network.  The site's own
    # option --userns (containers.options): as root Apptainer asks for every capability, and this
    # machine's bounding set lacks CAP_SYS_RESOURCE; in a user namespace it starts, as it does for the
    # unprivileged users of most sites.
    job, text = run_to_end(tmp_path, "-N", "2", "-T", "srun", "--image", IMAGE, "-e", "RUN_LABEL=apptainer run",
                           "--mount", "%s:/mnt" % tmp_path, "--", IMAGE_PYTHON, "-c",
                           PROBE + "; import os; print('extra', os.path.exists('/mnt/job-%s.out' % "
                           "os.environ['SLURM_JOB_ID']))",
                           site=site_for(tmp_path, "apptainer"), timeout=180)
    assert job["runtime"] == "apptainer"
    check_probe(text, "apptainer run", tmp_path)
    assert text.count("extra True") == 2, text


@needs_runc
def test_a_container_job_slurm_runs_on_the_host_stops_with_one_line(image, tmp_path):
    # alpha has no oci.conf: Slurm runs an --container job there on the host, silently.
    site = alpha_with_runtime(tmp_path, "oci", bundle=True)
    job, text = run_to_end(tmp_path, "-T", "single", "--image", IMAGE, "--", "echo", "ran", site=site)
    assert job["runtime"] == "oci"
    assert "runs on the host, not in image %s" % IMAGE in text and "oci.conf" in text, text
    assert "ran" not in text.split() and job_info("alpha", job["job_id"])["JobState"] == "FAILED"


@needs_runc
def test_a_bundle_in_a_network_namespace_of_its_own_stops_with_one_line(image, tmp_path):
    # The same image, its config.json with the network namespace `runc spec` gives (only a loopback of its
    # own): a multi-node rendezvous could never reach it, and the job says so.
    # The bundle beside the image: hard links need one file system, and in a release's root /tmp is
    # another one.  Removed at the end.
    bundle = Path(image).parent / ("private-net-%d" % os.getpid())
    shutil.rmtree(bundle, ignore_errors=True)
    bundle.mkdir()
    try:
        subprocess.run(["cp", "-al", str(Path(image) / "rootfs"), str(bundle / "rootfs")], check=True)
        config = json.loads((Path(image) / "config.json").read_text())
        config["linux"]["namespaces"].append({"type": "network"})
        (bundle / "config.json").write_text(json.dumps(config))
        job, text = run_to_end(tmp_path, "-T", "single", "--image", str(bundle), "--", "echo", "ran",
                               cluster="beta", partition="gpu")
    finally:
        shutil.rmtree(bundle, ignore_errors=True)
    assert "runs in a network namespace of its own" in text, text
    assert "ran" not in text.split() and job_info("beta", job["job_id"])["JobState"] == "FAILED"
