"""Jobs in container images: the grammar, each runtime's adapter, the rendered scripts (golden files per
runtime), the site's ``containers`` settings, and the in-image check run in a real bash.

Golden files live in tests/golden/; after an intended change, regenerate them with
``UPDATE_GOLDEN=1 make unit`` and review the diff.
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from slurmkit.containers import catalog, grammar, runtimes
from slurmkit.errors import UsageError
from slurmkit.requeue.tracking import spec_from_plain, spec_to_plain
from slurmkit.script import container_launch, quoting, render
from slurmkit.script.topology import ClusterLayout
from slurmkit.site import load_site
from slurmkit.site.model import ContainerSettings
from slurmkit.slurm.types import Switch, Topology

from harness import assert_golden, one_error_line, run_main, site_problems

ROOT = Path(__file__).resolve().parents[2]
LOCAL = str(ROOT / "site_configs" / "local.yaml")


def _site(name):
    return load_site(str(ROOT / "site_configs" / name))


def _layout(partition, names):
    return ClusterLayout(Topology((Switch("leaf1", 0, ",".join(names), ""),)), {partition: ",".join(names)})


# ---------------------------------------------------------------------------
# The grammar

@pytest.mark.parametrize("text,mount", [
    ("/data", grammar.Mount("/data", "/data")),
    ("/data:/mnt/data", grammar.Mount("/data", "/mnt/data")),
    ("/data:/mnt/data:ro", grammar.Mount("/data", "/mnt/data", True)),
    ("/data:ro", grammar.Mount("/data", "/data", True)),
    ("/data:/data:rw", grammar.Mount("/data", "/data")),
    ("/data//x/:/y/", grammar.Mount("/data/x", "/y")),
    ("/a b/$(x)", grammar.Mount("/a b/$(x)", "/a b/$(x)")),   # a strange path, passed as one word
])
def test_a_mount_is_source_target_and_flags(text, mount):
    assert grammar.parse_mount(text) == mount


@pytest.mark.parametrize("text,says", [
    ("", "a mount is SRC[:DST[:ro]]"),
    ("data", "the source 'data' of mount 'data' is not an absolute path"),
    ("/data:mnt", "the target 'mnt' of mount '/data:mnt' is not an absolute path"),
    ("/a/../etc", "has a '..' component"),
    ("/a:/b/../../etc", "has a '..' component"),
    ("/a,/b", "contains ','"),
    ("/a:/b:ro:x", "more than SRC:DST:FLAGS"),
    ("/a:/b:rox", "must be ro or rw"),
    ("/a\n/b", "control character"),
    ("/data:/", "would hide the whole image"),
])
def test_a_mount_that_could_be_read_two_ways_is_refused(text, says):
    with pytest.raises(ValueError, match=None) as caught:
        grammar.parse_mount(text)
    assert says in str(caught.value)


@pytest.mark.parametrize("image,says", [
    ("", "it is empty"),
    ("-v", "starts with '-'"),
    ("a b", "whitespace"),
    ("img\nx", "control character"),
    ("/images/../etc", "'..' component"),
    ("x" * 5000, "longer than"),
])
def test_a_hostile_image_is_refused(image, says):
    assert says in grammar.image_problem(image)


def test_names_paths_and_references():
    assert grammar.image_problem("nvcr.io#nvidia/pytorch:25.01-py3") is None
    assert grammar.looks_like_reference("docker://debian:12") and grammar.looks_like_reference("/x.sif")
    assert not grammar.looks_like_reference("pytorch")       # a misspelt name of the site's, more likely


# ---------------------------------------------------------------------------
# Each runtime's adapter: data in, words out (quoted by the renderer, variables expanded on the node)

REQUEST = runtimes.Request(image="/img/x", mounts=(grammar.Mount("/data", "/mnt/data", True),
                                                   grammar.Mount("/scratch", "/scratch")),
                           env=("NCCL_IB_HCA", "MASTER_ADDR"), accelerator="nvidia", rdma=True)


def _text(words):
    return runtimes.words_text(words, quoting.shell_quote)


def test_pyxis_names_every_variable_that_must_win_and_mounts_the_rdma_devices():
    wrapped = runtimes.wrap("pyxis", REQUEST)
    assert _text(wrapped.srun_options) == (
        "--container-image=/img/x --container-workdir=\"$PWD\" "
        "--container-mounts=/data:/mnt/data:ro,/scratch:/scratch,/dev/infiniband:/dev/infiniband,"
        "/sys/class/infiniband:/sys/class/infiniband:ro,\"$PWD\":\"$PWD\" --container-env=NCCL_IB_HCA,MASTER_ADDR")
    assert wrapped.prefix == () and wrapped.binary == "enroot"


def test_apptainer_brings_the_gpus_and_makes_slurmkits_values_win():
    wrapped = runtimes.wrap("apptainer", REQUEST)
    assert _text(wrapped.prefix) == (
        "apptainer exec --nv --bind=/data:/mnt/data:ro --bind=/scratch:/scratch --bind=\"$PWD\":\"$PWD\" "
        "--pwd=\"$PWD\" --env=NCCL_IB_HCA=\"$NCCL_IB_HCA\" --env=MASTER_ADDR=\"$MASTER_ADDR\" /img/x")


def test_podman_hpc_runs_in_the_hosts_network_with_its_devices():
    wrapped = runtimes.wrap("podman-hpc", REQUEST)
    text = _text(wrapped.prefix)
    assert text.startswith("podman-hpc run --rm --net=host --ipc=host --env-host --gpu --device=/dev/infiniband "
                           "--volume=/sys/class/infiniband:/sys/class/infiniband:ro --volume=/data:/mnt/data:ro ")
    assert text.endswith("--volume=\"$PWD\":\"$PWD\" --workdir=\"$PWD\" /img/x")


def test_charliecloud_binds_read_write_only_and_needs_user():
    with pytest.raises(runtimes.RuntimeRefusal, match="binds read-write only: mount /data:/mnt/data:ro"):
        runtimes.wrap("charliecloud", REQUEST)
    wrapped = runtimes.wrap("charliecloud", REQUEST._replace(mounts=REQUEST.mounts[1:]))
    assert _text(wrapped.prefix) == ("ch-run --bind=/scratch:/scratch --bind=\"$PWD\":\"$PWD\" --cd=\"$PWD\" "
                                     "/img/x --")
    assert wrapped.needs_user and wrapped.binary == "ch-run"


def test_oci_takes_its_mounts_from_the_bundle():
    with pytest.raises(runtimes.RuntimeRefusal, match="config.json"):
        runtimes.wrap("oci", REQUEST)
    wrapped = runtimes.wrap("oci", REQUEST._replace(mounts=()))
    assert _text(wrapped.srun_options) == "--container=/img/x" and wrapped.prefix == ()


@pytest.mark.parametrize("runtime,starts", [
    ("apptainer", "apptainer exec --userns '--x=$(y)' --nv"),
    ("charliecloud", "ch-run --userns '--x=$(y)' --bind="),
    ("podman-hpc", "podman-hpc run --userns '--x=$(y)' --rm"),
])
def test_the_sites_own_options_follow_the_runtimes_command_as_literal_words(runtime, starts):
    request = REQUEST._replace(mounts=REQUEST.mounts[1:], options=("--userns", "--x=$(y)"))
    assert _text(runtimes.wrap(runtime, request).prefix).startswith(starts)


def test_the_sites_own_options_of_srun_runtimes_end_the_srun_options():
    request = REQUEST._replace(mounts=(), options=("--container-remap-root",))
    assert _text(runtimes.wrap("pyxis", request).srun_options).endswith(" --container-remap-root")
    assert _text(runtimes.wrap("oci", request).srun_options) == "--container=/img/x --container-remap-root"


def test_a_value_with_shell_syntax_stays_one_word():
    wrapped = runtimes.wrap("apptainer", runtimes.Request(image="/img/$(touch x)", workdir=False))
    assert _text(wrapped.prefix) == "apptainer exec '/img/$(touch x)'"


# ---------------------------------------------------------------------------
# Resolution: one function for the renderer and the federation's placement

def test_an_image_resolves_by_the_sites_name_else_as_given():
    settings = ContainerSettings(runtime="pyxis", images={"pt": "/i/pt.sqsh"})
    assert catalog.resolve(settings, "pt", "c", "p") == "/i/pt.sqsh"
    assert catalog.resolve(settings, "nvcr.io#nvidia/pytorch:25.01-py3", "c", "p") == "nvcr.io#nvidia/pytorch:25.01-py3"
    with pytest.raises(catalog.ImageRefusal, match=r"image 'ptt' is not defined on cluster c \(it has: pt\)"):
        catalog.resolve(settings, "ptt", "c", "p")
    with pytest.raises(catalog.ImageRefusal, match="runs no container images"):
        catalog.resolve(ContainerSettings(), "/i/pt.sqsh", "c", "p")
    with pytest.raises(catalog.ImageRefusal, match="named by its absolute path"):
        catalog.resolve(settings._replace(runtime="oci"), "docker://x", "c", "p")


def test_a_partitions_containers_replace_the_clusters_keys_and_add_images(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("""\
site: s
clusters:
  c:
    containers: {runtime: charliecloud, images: {a: /i/a, b: /i/b}, mounts: [/x]}
    partitions:
      one: {accelerator: none, cpus_per_node: 2}
      two:
        accelerator: none
        cpus_per_node: 2
        containers: {runtime: apptainer, images: {b: /i/b.sif, c: docker://c}, env: [HF_HOME]}
""")
    cluster = load_site(str(path)).cluster("c")
    one, two = cluster.partitions["one"].containers, cluster.partitions["two"].containers
    assert one == ContainerSettings("charliecloud", {"a": "/i/a", "b": "/i/b"}, ("/x",), ())
    assert two == ContainerSettings("apptainer", {"a": "/i/a", "b": "/i/b.sif", "c": "docker://c"}, ("/x",),
                                    ("HF_HOME",))
    rows = catalog.rows([cluster])
    assert [(r.partitions, r.runtime, r.image, r.location) for r in rows] == [
        (("one",), "charliecloud", "a", "/i/a"), (("two",), "apptainer", "a", "/i/a"),
        (("one",), "charliecloud", "b", "/i/b"), (("two",), "apptainer", "b", "/i/b.sif"),
        (("two",), "apptainer", "c", "docker://c")]


@pytest.mark.parametrize("containers,says", [
    ("{runtime: docker}", "expected one of oci, charliecloud, pyxis, apptainer, podman-hpc"),
    ("{images: {a: /i/a}}", "images need a runtime"),
    ("{runtime: oci, images: {a: 'docker://a'}}", "runtime oci starts an OCI bundle directory"),
    ("{runtime: pyxis, images: {'a b': /i/a}}", "is not a valid image name"),
    ("{runtime: pyxis, images: {a: '-rf'}}", "starts with '-'"),
    ("{runtime: pyxis, mounts: ['/a,/b']}", "contains ','"),
    ("{runtime: pyxis, env: ['1X']}", "is not a valid environment variable name"),
    ("{runtime: apptainer, options: [userns]}", "is not an option of the runtime's command"),
    ("{runtime: apptainer, options: ['--']}", "not '--'"),
    ("{runtime: apptainer, options: [\"--a\\nb\"]}", "contains a control character"),
])
def test_site_validate_refuses_bad_container_settings(tmp_path, containers, says):
    problems = site_problems(tmp_path, "site: s\nclusters:\n  c:\n    containers: %s\n    partitions:\n"
                                       "      p: {accelerator: none, cpus_per_node: 2}\n" % containers)
    assert len(problems) == 1 and says in problems[0], problems


def test_relative_image_paths_are_the_site_files_like_every_path():
    site = load_site(LOCAL)
    images = ROOT / ".devcluster" / "images"
    assert site.clusters["alpha"].containers.images["debian-12"] == str(images / "debian-12" / "rootfs")
    assert site.clusters["beta"].containers.images["debian-12"] == str(images / "debian-12")


# ---------------------------------------------------------------------------
# Rendered scripts, one golden file per runtime

def _golden(rendered, name):
    assert_golden(rendered.script, name)


def test_golden_pyxis_torchrun_under_the_requeue_daemon():
    site = _site("example-infiniband.yaml")
    cluster = site.cluster()
    partition = site.partition(cluster)
    spec = render.JobSpec(command=("python", "train.py"), nodes=2, comm="heavy", image="pytorch-25.01",
                          mounts=("/home/me/data:/data:ro",), token="0123456789abcdef",
                          checkpoint_dir="/scratch/me/ckpt/run1", attempt=2, env={"WANDB_MODE": "offline"})
    rendered = render.render(site, cluster, partition, spec, layout=_layout("gpu", ["n1", "n2"]))
    assert rendered.image == "/shared/images/nvidia+pytorch+25.01-py3.sqsh" and rendered.runtime == "pyxis"
    _golden(rendered, "infiniband-pyxis-torchrun-requeue.sh")


def test_golden_apptainer_srun():
    site = _site("example-roce.yaml")
    cluster = site.cluster()
    partition = site.partition(cluster)
    spec = render.JobSpec(command=("python", "train.py"), nodes=2, template="srun", image="pytorch",
                          token="0123456789abcdef")
    _golden(render.render(site, cluster, partition, spec), "roce-apptainer-srun.sh")


def test_golden_charliecloud_single_and_oci_srun():
    site = load_site(LOCAL)
    cluster = site.cluster("alpha")
    cpu = cluster.partitions["cpu"]
    spec = render.JobSpec(command=("/opt/slurmkit-image/venv/bin/python", "-c", "print(1)"), template="single",
                          image="debian-12", token="0123456789abcdef")
    rendered = render.render(site, cluster, cpu, spec)
    _golden(rendered._replace(script=rendered.script.replace(str(ROOT), "REPO")), "local-charliecloud-single.sh")
    oci = cpu._replace(containers=ContainerSettings(runtime="oci", images={"bundle": "/srv/oci/debian"}))
    rendered = render.render(site, cluster, oci, spec._replace(template="srun", nodes=2, image="bundle"))
    _golden(rendered, "local-oci-srun.sh")


def test_oci_warns_of_several_tasks_per_node():
    site = load_site(LOCAL)
    beta = site.cluster("beta")
    spec = render.JobSpec(command=("true",), template="srun", image="debian-12", nodes=2)
    rendered = render.render(site, beta, beta.partitions["gpu"], spec)
    assert any(w.startswith("runtime oci: Slurm 22.05 starts one task per node in a container and refuses the "
                            "step's 4") for w in rendered.warnings), rendered.warnings
    rendered = render.render(site, beta, beta.partitions["gpu"], spec._replace(gpus_per_node=1))
    assert not [w for w in rendered.warnings if "runtime oci" in w]


def test_refusals_name_the_option_and_the_cluster():
    site = load_site(LOCAL)
    cluster = site.cluster("alpha")
    cpu = cluster.partitions["cpu"]
    spec = render.JobSpec(command=("true",), template="single")
    with pytest.raises(UsageError, match="--mount applies to jobs in a container image"):
        render.render(site, cluster, cpu, spec._replace(mounts=("/a",)))
    with pytest.raises(UsageError, match=r"binds read-write only.*\(cluster alpha, partition cpu\)"):
        render.render(site, cluster, cpu, spec._replace(image="debian-12", mounts=("/a:/a:ro",)))
    with pytest.raises(UsageError, match="partition cpu of cluster alpha runs no container images"):
        render.render(site, cluster, cpu._replace(containers=ContainerSettings()), spec._replace(image="/i"))


@pytest.mark.parametrize("launcher", ["srun", "/usr/bin/mpirun", "mpiexec"])
def test_a_launcher_of_the_host_inside_the_image_is_refused(launcher):
    site = load_site(LOCAL)
    cluster = site.cluster("alpha")
    spec = render.JobSpec(command=(launcher, "python", "train.py"), template="srun", image="debian-12")
    with pytest.raises(UsageError, match="where Slurm's and MPI's launchers are not: leave '%s' out"
                       % os.path.basename(launcher)):
        render.render(site, cluster, cluster.partitions["cpu"], spec)
    # Without an image it is the user's business (srun inside srun makes a step of its own).
    render.render(site, cluster, cluster.partitions["cpu"], spec._replace(image=None))


def test_the_cli_refuses_a_bad_mount_in_one_line(capsys):
    code, out, err = run_main(capsys, "render", "--site", LOCAL, "-p", "cpu", "--image", "debian-12",
                              "--mount", "/a:/b:/c:/d", "--", "true")
    assert code == 2 and "more than SRC:DST:FLAGS" in one_error_line(err)
    code, out, err = run_main(capsys, "render", "--site", LOCAL, "-p", "cpu", "--image", "-x", "--", "true")
    assert code == 2 and one_error_line(err) == ("Error: --image: image '-x' starts with '-', which a runtime "
                                                "would read as one of its options")


def test_images_lists_what_each_cluster_can_run(capsys):
    code, out, err = run_main(capsys, "images", "--site", LOCAL)
    assert code == 0, err
    assert out.split("\n")[0].split() == ["CLUSTER", "PARTITIONS", "RUNTIME", "IMAGE", "WHERE"]
    images = ROOT / ".devcluster" / "images"
    assert [line.split() for line in out.strip().split("\n")[1:]] == [
        ["alpha", "cpu,gpu", "charliecloud", "debian-12", str(images / "debian-12" / "rootfs")],
        ["beta", "gpu,urgent", "oci", "debian-12", str(images / "debian-12")],
        ["gamma", "npu", "charliecloud", "debian-12", str(images / "debian-12" / "rootfs")]]
    code, out, err = run_main(capsys, "images", "--site", LOCAL, "--cluster", "beta", "--json")
    assert code == 0 and json.loads(out)["runtimes"] == [{"cluster": "beta", "partition": "gpu", "runtime": "oci"},
                                                         {"cluster": "beta", "partition": "urgent", "runtime": "oci"}]
    code, out, err = run_main(capsys, "images", "--site", str(ROOT / "site_configs" / "example-ascend.yaml"))
    assert code == 0 and out.startswith("no images defined")


def test_a_tracked_spec_keeps_its_image_and_mounts():
    spec = render.JobSpec(command=("python", "t.py"), image="debian-12", mounts=("/a", "/b:/c:ro"))
    assert spec_from_plain(spec_to_plain(spec)) == spec


# ---------------------------------------------------------------------------
# The in-image check, in a real bash: what a task runs before the program

def _check(*args, prefix=()):
    here = subprocess.run(["bash", "-c", "while read -r a _ _ _ m _; do [[ $m == / ]] && r=$a; done "
                           "</proc/self/mountinfo; echo $r; readlink /proc/self/ns/net"],
                          capture_output=True, text=True, check=True).stdout.split()
    return subprocess.run(list(prefix) + ["bash", "-c", container_launch.IN_IMAGE_CHECK, "slurmkit-in-image", "img:1"] +
                          [here[0], here[1]] + list(args), capture_output=True, text=True)


def test_a_task_that_runs_on_the_host_stops_with_one_line(tmp_path):
    proc = _check(str(tmp_path), "--", "echo", "ran")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("slurmkit: error: the task on ") and "runs on the host, not in image img:1" \
        in proc.stderr and proc.stderr.count("\n") == 1


needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                                reason="new namespaces need root and unshare (util-linux)")


@needs_root
def test_a_task_in_its_own_mount_namespace_runs_the_program(tmp_path):
    proc = _check(str(tmp_path), "--", "echo", "ran", prefix=("unshare", "--mount"))
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "ran\n", "")


@needs_root
def test_a_task_in_a_private_network_stops_with_one_line(tmp_path):
    proc = _check(str(tmp_path), "--", "echo", "ran", prefix=("unshare", "--mount", "--net"))
    assert proc.returncode == 1 and "runs in a network namespace of its own" in proc.stderr


@needs_root
def test_a_directory_the_image_lacks_stops_the_task(tmp_path):
    proc = _check(str(tmp_path), str(tmp_path / "gone"), "--", "echo", "ran", prefix=("unshare", "--mount"))
    assert proc.returncode == 1 and "%s is not in image img:1" % (tmp_path / "gone") in proc.stderr


# ---------------------------------------------------------------------------
# The bind targets of ch-run, checked by the batch script on the host before the runtime starts

def _bind_check(tmp_path, image_dir, mount, cwd):
    site = load_site(LOCAL)
    cluster = site.cluster("alpha")
    cpu = cluster.partitions["cpu"]._replace(containers=ContainerSettings(runtime="charliecloud",
                                                                           images={"img": str(image_dir)}))
    spec = render.JobSpec(command=("true",), template="single", image="img", mounts=(mount,))
    lines = [line for line in render.render(site, cluster, cpu, spec).script.splitlines()
             if line.startswith("for slurmkit_t in ")]
    assert len(lines) == 1, lines
    return subprocess.run(["bash", "-c", lines[0] + "\necho checked"], cwd=str(cwd), capture_output=True, text=True,
                          env=dict(os.environ, SLURMD_NODENAME="n1"))


def test_a_bind_target_the_directory_image_lacks_is_one_line_before_the_runtime(tmp_path):
    image = tmp_path / "rootfs"
    (image / "mnt").mkdir(parents=True)
    # The target is missing in the image: one line naming the image, the node and the directory; a target
    # with shell syntax in it stays one word, never run.
    proc = _bind_check(tmp_path, image, "/srv/data:/data $(touch x)", "/")
    assert proc.returncode == 1 and proc.stdout == "" and not os.path.exists("/x")
    assert proc.stderr == (
        "slurmkit: error: image img on node n1 has no directory /data $(touch x) to mount onto, and its runtime "
        "cannot make one in the image: mount at a directory the image has (--mount SOURCE:/mnt) or add "
        "/data $(touch x) to the image\n")
    # The working directory is a bind target too, at its own path (here one outside /tmp).
    proc = _bind_check(tmp_path, image, "/srv/data:/mnt", "/usr/share")
    assert proc.returncode == 1 and "has no directory /usr/share to mount onto" in proc.stderr
    # Both there (as an admin adds mount points to an image): the job goes on.
    (image / "usr" / "share").mkdir(parents=True)
    assert _bind_check(tmp_path, image, "/srv/data:/mnt", "/usr/share").stdout == "checked\n"


def test_bind_targets_under_the_hosts_tmp_and_squashfs_images_are_left_to_the_runtime(tmp_path):
    image = tmp_path / "rootfs"
    image.mkdir()
    # ch-run brings the host's /tmp itself: a working directory there needs nothing in the image.
    under_tmp = Path("/tmp") / ("slurmkit-bind-%d" % os.getpid())
    under_tmp.mkdir(exist_ok=True)
    try:
        (image / "mnt").mkdir()
        assert _bind_check(tmp_path, image, "/srv:/mnt", under_tmp).stdout == "checked\n"
    finally:
        under_tmp.rmdir()
    # A SquashFS file cannot be looked into before ch-run mounts it: nothing is checked.
    squash = tmp_path / "img.sqfs"
    squash.write_bytes(b"hsqs")
    assert _bind_check(tmp_path, squash, "/srv:/nowhere", "/").stdout == "checked\n"
