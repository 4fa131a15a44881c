"""Rendering: golden scripts for the example sites, quoting, fit checks, lint.

Golden files live in tests/golden/; after an intended template change,
regenerate them with ``UPDATE_GOLDEN=1 make unit`` and review the diff.
"""

import os
import re
import subprocess
import sys

from pathlib import Path

import pytest

from slurmkit.script import collective, quoting, render, sbatch_header
from slurmkit.errors import JobDoesNotFitError, UsageError
from slurmkit.site import load_site
from slurmkit.site.model import Fabric, Partition, RoceSettings
from slurmkit.slurm.types import Switch, Topology
from slurmkit.script.topology import ClusterLayout
from slurmkit.testing import FakeClock

from harness import assert_golden

ROOT = Path(__file__).resolve().parents[2]
SPEC = render.JobSpec(command=("python", "train.py", "--lr", "3e-4"), nodes=4, comm="heavy", token="0123456789abcdef")


def _site(name):
    return load_site(str(ROOT / "site_configs" / name))


def _layout(partition, nodes_per_leaf, leaves):
    names = ["n%d" % i for i in range(nodes_per_leaf * leaves)]
    switches = tuple(Switch("leaf%d" % j, 0, ",".join(names[j * nodes_per_leaf:(j + 1) * nodes_per_leaf]), "")
                     for j in range(leaves))
    return ClusterLayout(Topology(switches), {partition: ",".join(names)})


def _render_default(site, spec, layout):
    cluster = site.cluster()
    partition = site.partition(cluster)
    return render.render(site, cluster, partition, spec, layout=layout)


VENV_PYTHON = "/home/me/venvs/torch/bin/python"


@pytest.mark.parametrize("config,golden,spec_changes,partition_name", [
    ("example-infiniband.yaml", "infiniband-torchrun.sh", {}, None),
    ("example-roce.yaml", "roce-torchrun.sh", {"env": {"WANDB_PROJECT": "llm run #7"}}, None),
    ("example-ascend.yaml", "ascend-srun.sh", {"template": "srun", "nodes": 2}, None),
    # CPU-only DDP: N workers per node, gloo's interface, the user's venv Python, a name with '/'.
    ("local.yaml", "local-cpu-torchrun.sh",
     {"nodes": 2, "comm": "light", "procs_per_node": 2, "name": "exp/lr3e-4", "time": "00:05:00",
      "command": (VENV_PYTHON, "-u", "train.py", "--lr", "3e-4")}, "cpu"),
    ("local.yaml", "local-single.sh",
     {"nodes": 1, "comm": "light", "template": "single", "time": "00:05:00",
      "command": (VENV_PYTHON, "train.py")}, "cpu"),
])
def test_golden_scripts(config, golden, spec_changes, partition_name):
    site = _site(config)
    cluster = site.cluster()
    partition = site.partition(cluster, partition_name)
    # 3 nodes per leaf: a 4-node heavy job needs 2 leaves, a 2-node one needs 1.
    rendered = render.render(site, cluster, partition, SPEC._replace(**spec_changes),
                             layout=_layout(partition.name, 3, 4))
    assert_golden(rendered.script, golden)


def test_ib_script_carries_fabric_and_switches():
    site = _site("example-infiniband.yaml")
    script = _render_default(site, SPEC, _layout("gpu", 3, 4)).script
    assert "#SBATCH --switches=2@00:30:00" in script
    assert "\nexport NCCL_IB_HCA==mlx5_0:1," in script
    assert "#SBATCH --comment=slurmkit:0123456789abcdef" in script
    assert "--rdzv-id=\"$SLURM_JOB_ID\"" in script and "--ntasks-per-node=1" in script
    assert "export GLOO_SOCKET_IFNAME=ib0\n" in script


def test_ascend_uses_hccl_and_npu_gres():
    site = _site("example-ascend.yaml")
    partition = site.partition(site.cluster())
    script = _render_default(site, SPEC._replace(nodes=2), _layout(partition.name, 2, 2)).script
    assert "NCCL_" not in script and "HCCL_SOCKET_IFNAME" in script
    assert "#SBATCH --gres=npu:" in script and "--gpus-per-node" not in script


def test_light_jobs_ask_for_no_switch_count():
    site = _site("example-infiniband.yaml")
    rendered = _render_default(site, SPEC._replace(comm="light"), None)
    assert rendered.switches is None and "--switches" not in rendered.script


def test_heavy_without_topology_is_a_usage_error():
    site = _site("example-infiniband.yaml")
    with pytest.raises(UsageError, match="--switches N"):
        _render_default(site, SPEC, None)


HOSTILE = ["$(touch /tmp/slurmkit-pwned)", "'; rm -rf ~'", "a\nb", "`id`", "x\"y", "\\", "", "*", "--", "{a,b}"]


def test_hostile_arguments_are_quoted_and_reach_the_program_byte_for_byte(tmp_path):
    site = _site("example-infiniband.yaml")
    marker = tmp_path / "pwned"
    args = [a.replace("/tmp/slurmkit-pwned", str(marker)) for a in HOSTILE]
    spec = SPEC._replace(command=("printf", "%s\\0", *args), template="single", nodes=1, comm="light",
                   env={"EVIL": "$(touch %s)" % marker})
    script = _render_default(site, spec, None).script
    assert "\nexec -- printf " in script
    launch = "exec -- " + script.split("\nexec -- ", 1)[1]  # a quoted newline argument spans two lines
    # Run the rendered command line and the export in a real shell: nothing executes, bytes survive.
    export = [ln for ln in script.splitlines() if ln.startswith("export EVIL=")][0]
    out = subprocess.run(["bash", "-c", export + "\n" + launch[len("exec -- "):] + "\nprintf '%s' \"$EVIL\""],
                         capture_output=True).stdout
    *received, evil = out.split(b"\0")
    assert [r.decode() for r in received] == args
    assert evil.decode() == "$(touch %s)" % marker
    assert not marker.exists()


@pytest.mark.parametrize("name", ["bad\nname", "tab\there"])
def test_control_characters_cannot_reach_an_sbatch_line(name):
    site = _site("example-infiniband.yaml")
    with pytest.raises(UsageError, match="control character"):
        _render_default(site, SPEC._replace(name=name, comm="light"), None)


def test_sbatch_quote():
    assert quoting.sbatch_quote("gpu") == "gpu"
    assert quoting.sbatch_quote("a b") == '"a b"'
    assert quoting.sbatch_quote('say "hi" \\o/') == '"say \\"hi\\" \\\\o/"'


@pytest.mark.parametrize("changes,message", [
    ({"nodes": 65}, "asks for 65 nodes but partition gpu on cluster hopper has 64"),
    ({"gpus_per_node": 9}, "asks for 9 gpu per node but partition gpu on cluster hopper has 8 per node"),
    ({"time": "3-00:00:00"}, "time limit of partition gpu on cluster hopper is 2-00:00:00"),
    ({"cpus_per_task": 500}, "500 CPUs per task"),
])
def test_jobs_that_cannot_fit_are_refused_before_sbatch(changes, message):
    site = _site("example-infiniband.yaml")
    with pytest.raises(JobDoesNotFitError, match=message):
        _render_default(site, SPEC._replace(comm="light", **changes), None)


def test_unknown_template_lists_choices():
    site = _site("example-infiniband.yaml")
    with pytest.raises(UsageError, match="choose one of: single, srun, torchrun"):
        _render_default(site, SPEC._replace(template="nope", comm="light"), None)


def test_bad_env_name_refused():
    site = _site("example-infiniband.yaml")
    with pytest.raises(UsageError, match="not a valid environment variable name"):
        _render_default(site, SPEC._replace(env={"A-B": "1"}, comm="light"), None)


@pytest.mark.parametrize("command,python,args,runs_python,name", [
    (["python3", "train.py", "-x"], "python3", ("train.py", "-x"), True, "train"),
    ([VENV_PYTHON, "-u", "train.py"], VENV_PYTHON, ("train.py",), True, "train"),   # torchrun adds -u itself
    (["python3.11", "-m", "pkg.train", "--lr", "1"], "python3.11", ("-m", "pkg.train", "--lr", "1"), True, "train"),
    (["./train.py", "a"], None, ("./train.py", "a"), True, "train"),                 # torchrun from PATH
    (["./run.sh", "a"], None, ("./run.sh", "a"), False, "run.sh"),                   # --no-python
])
def test_torchrun_launches_with_the_python_the_command_names(command, python, args, runs_python, name):
    launch = render.launcher_command(command)
    assert (launch.python, launch.args, launch.runs_python, launch.name, launch.problem) == \
        (python, args, runs_python, name, None)


@pytest.mark.parametrize("command", [["python", "-c", "print(1)"], ["python", "-O", "train.py"], ["python3"]])
def test_interpreter_options_torchrun_cannot_pass_on_are_refused(command):
    site = _site("example-infiniband.yaml")
    with pytest.raises(UsageError, match="torchrun starts a Python script or module"):
        _render_default(site, SPEC._replace(command=tuple(command), comm="light"), None)
    # The other templates run the command as given.
    assert _render_default(site, SPEC._replace(command=tuple(command), comm="light", template="srun"), None)


def _torchrun_script(**changes):
    site = _site("local.yaml")
    cluster = site.cluster()
    spec = render.JobSpec(command=(VENV_PYTHON, "train.py"), nodes=2, time="5", token="t", **changes)
    return render.render(site, cluster, site.partition(cluster, "cpu"), spec).script


def test_torchrun_uses_the_named_python_and_never_a_bare_torchrun():
    script = _torchrun_script()
    assert "\nslurmkit_python=%s\n" % VENV_PYTHON in script
    assert 'slurmkit_launcher=("$slurmkit_python" -m torch.distributed.run)' in script
    assert "slurmkit_launcher=(torchrun)" not in script and "command -v torchrun" not in script
    assert "--rdzv-endpoint=\"$slurmkit_endpoint\"" in script and "MASTER_PORT=29500" not in script  # no fixed port


def _snippet(script, start, end):
    """The lines of ``script`` from the one starting with ``start`` up to and including ``end``."""
    text = script[script.index(start):]
    return text[:text.index(end) + len(end)]


def test_a_python_without_torch_is_one_line_in_the_job_output(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'Traceback (most recent call last):' >&2\necho '  File \"<string>\", line 1' >&2\n"
                    "echo \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n")
    fake.chmod(0o755)
    script = _torchrun_script()
    check = _snippet(script, "slurmkit_python=", "\nfi\n").replace(VENV_PYTHON, str(fake))
    proc = subprocess.run(["bash", "-c", "set -euo pipefail\n" + check + "echo launched"],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == ("slurmkit: error: %s cannot run torch.distributed.run (ModuleNotFoundError: No module "
                           "named 'torch'); install PyTorch into that environment\n" % fake)


@pytest.mark.parametrize("tracked", [False, True], ids=["plain", "requeue"])
@pytest.mark.parametrize("files,expected", [
    (None, "ModuleNotFoundError: No module named 'torch'"),
    (["distributed/__init__.py"], "ModuleNotFoundError: No module named 'torch.distributed.run'"),
    (["distributed/run.py", "version.py=__version__ = '2.13.0+cpu'"], "1"),
    (["distributed/run.py", "version.py=__version__ = '2.1.2'"], "0"),
    (["distributed/run.py"], "0"),                     # no version.py: torchrun's older way, to be safe
], ids=["no torch", "no torch.distributed.run", "2.13", "2.1", "no version"])
def test_the_torch_check_finds_torch_without_importing_it(tmp_path, tracked, files, expected):
    # The Python runs without its site-packages (-S), so only this torch can be found, and this
    # torch's import fails: a check that passes read its files instead of importing it.
    packages = tmp_path / "packages"
    packages.mkdir()
    if files is not None:
        (packages / "torch").mkdir()
        (packages / "torch" / "__init__.py").write_text("raise SystemExit('torch was imported')\n")
        for entry in files:
            name, _, text = entry.partition("=")
            (packages / "torch" / name).parent.mkdir(parents=True, exist_ok=True)
            (packages / "torch" / name).write_text(text + "\n")
    python = tmp_path / "python"
    python.write_text('#!/bin/sh\nexec %s -S "$@"\n' % sys.executable)
    python.chmod(0o755)
    script = _torchrun_script(**(dict(checkpoint_dir="/c", attempt=1) if tracked else {}))
    check = _snippet(script, "slurmkit_python=", "\nfi\n").replace(VENV_PYTHON, str(python))
    proc = subprocess.run(["bash", "-c", "set -euo pipefail\n" + check + 'echo "launched ${slurmkit_error:-}"'],
                          capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(packages)))
    if expected.startswith("ModuleNotFoundError"):
        assert proc.returncode == 1 and proc.stdout == ""
        assert proc.stderr == ("slurmkit: error: %s cannot run torch.distributed.run (%s); install PyTorch into that "
                               "environment\n" % (python, expected))
    else:
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == "launched %s\n" % (expected if tracked else "")


def _fake_scontrol(tmp_path, lines, status=0):
    """A `scontrol` on PATH that prints ``lines`` for `show node -o LIST`."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    tool = bindir / "scontrol"
    tool.write_text("#!/bin/sh\ncat <<'END'\n%s\nEND\nexit %d\n" % ("\n".join(lines), status))
    tool.chmod(0o755)
    return str(bindir)


def _site_with(tmp_path, extra):
    path = tmp_path / "site.yaml"
    path.write_text("site: t\n%sclusters:\n  c:\n    default_partition: cpu\n    partitions:\n      cpu:\n        accelerator: none\n"
                    "        cpus_per_node: 4\n        fabric: {socket_ifname: lo}\n" % extra)
    return load_site(str(path))


def _run_rendezvous(tmp_path, site, job_id, scontrol_lines, env=None, status=0):
    """Run the rendezvous part of a rendered srun script as Slurm would on the first node."""
    cluster = site.cluster()
    spec = render.JobSpec(command=("true",), nodes=2, template="srun", env=env or {}, token="t")
    script = render.render(site, cluster, site.partition(cluster), spec).script
    part = _snippet(script, "# The address Slurm reaches", "\nexport MASTER_PORT\n") if not env else \
        _snippet(script, "# The address Slurm reaches", "\n# MASTER_PORT comes from --env.\n")
    environ = dict(os.environ, PATH=_fake_scontrol(tmp_path, scontrol_lines, status) + ":" + os.environ["PATH"],
                   SLURM_JOB_ID=str(job_id), SLURMD_NODENAME="an1", SLURM_JOB_NODELIST="an[1-2]", **(env or {}))
    return subprocess.run(["bash", "-c", "set -euo pipefail\n" + part + 'echo "$MASTER_ADDR $MASTER_PORT"'],
                          capture_output=True, text=True, env=environ)


NODES = ["NodeName=an1 Arch=x86_64 CPUTot=4 NodeAddr=127.0.0.1 NodeHostName=n1.example Port=6818",
         "NodeName=an2 Arch=x86_64 CPUTot=4 NodeAddr=127.0.0.2 NodeHostName=n2.example Port=6818"]


def _free_port_range(size):
    """A range of ``size`` ports on which nothing listens on 127.0.0.1 right now."""
    import socket

    for low in range(41000, 60000, size):
        if all(socket.socket().connect_ex(("127.0.0.1", p)) != 0 for p in range(low, low + size)):
            return low, low + size - 1
    pytest.skip("no free port range on 127.0.0.1")


def test_rendezvous_is_the_first_nodes_address_and_a_port_derived_from_the_job(tmp_path):
    low, high = _free_port_range(10)
    site = _site_with(tmp_path, "rendezvous: {ports: \"%d-%d\"}\n" % (low, high))
    assert site.rendezvous_ports == (low, high)
    for job_id, port in [(1230, low), (1237, low + 7), (1239, high)]:
        proc = _run_rendezvous(tmp_path, site, job_id, NODES)
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
        assert proc.stdout == "127.0.0.1 %d\n" % port      # NodeAddr, not the node name an1


def test_two_jobs_on_one_node_never_share_a_port(tmp_path):
    import socket

    low, high = _free_port_range(10)
    site = _site_with(tmp_path, "rendezvous: {ports: \"%d-%d\"}\n" % (low, high))
    # Job 1239 would take the last port; another job (or any program) listens there: the next one,
    # wrapping around to the start of the range, is taken instead.
    with socket.socket() as held:
        held.bind(("127.0.0.1", high))
        held.listen()
        proc = _run_rendezvous(tmp_path, site, 1239, NODES)
    assert proc.stdout == "127.0.0.1 %d\n" % low
    # Consecutive jobs on the same first node get different ports.
    ports = {_run_rendezvous(tmp_path, site, job_id, NODES).stdout for job_id in range(2000, 2010)}
    assert len(ports) == 10


def test_without_scontrol_the_rendezvous_falls_back_to_the_node_name(tmp_path):
    site = _site_with(tmp_path, "")
    proc = _run_rendezvous(tmp_path, site, 100, ["slurm_load_node error: Access/permission denied"], status=1)
    assert proc.returncode == 0 and proc.stdout.startswith("an1 ")
    assert proc.stderr == "slurmkit: warning: no NodeAddr of node an1 from scontrol; using its name\n"


def test_default_port_range(tmp_path):
    site = _site_with(tmp_path, "")
    assert site.rendezvous_ports == (29500, 29999)


@pytest.mark.parametrize("ports,message", [("29500", "not a port range"), ("80-90", "above 1024"),
                                           ("40000-30000", "the low one first"), ("1025-70000", "at most 65535")])
def test_bad_port_ranges_are_config_errors(tmp_path, ports, message):
    from slurmkit.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        _site_with(tmp_path, "rendezvous: {ports: \"%s\"}\n" % ports)


def test_the_users_env_wins_over_what_the_template_sets_and_says_so(tmp_path):
    site = _site_with(tmp_path, "")
    env = {"MASTER_PORT": "12345", "MASTER_ADDR": "10.0.0.1", "GLOO_SOCKET_IFNAME": "eth7"}
    rendered = render.render(site, site.cluster(), site.partition(site.cluster()),
                             render.JobSpec(command=("true",), nodes=2, template="srun", env=env))
    assert "MASTER_PORT=$((" not in rendered.script and "MASTER_ADDR=$(" not in rendered.script
    assert "# MASTER_PORT comes from --env." in rendered.script
    assert rendered.warnings == (
        "--env GLOO_SOCKET_IFNAME=eth7 replaces the site's GLOO_SOCKET_IFNAME=lo for partition cpu",
        "--env MASTER_ADDR=10.0.0.1 replaces the first node's address (its NodeAddr) (template srun)",
        "--env MASTER_PORT=12345 replaces the rendezvous port derived from the job id (template srun)")
    # In the job: the user's values, exported once, never replaced.
    proc = _run_rendezvous(tmp_path, site, 7, NODES, env=env)
    assert proc.stdout == "10.0.0.1 12345\n"


def _site_template(tmp_path, launch):
    tdir = tmp_path / "tpl"
    tdir.mkdir()
    (tdir / "mine.sh.j2").write_text('{% extends "_base.sh.j2" %}{% block launch %}' + launch + '{% endblock %}')
    return _site_with(tmp_path, "template_dirs: [%s]\n" % tdir)


@pytest.mark.parametrize("launch,message", [
    ("export MASTER_PORT=29500\nexec {{ command }}\n", "template mine sets MASTER_PORT itself after your --env"),
    ("  MASTER_PORT=1 exec {{ command }}\n", "template mine sets MASTER_PORT itself"),
])
def test_a_site_template_that_would_override_the_users_env_is_refused(tmp_path, launch, message):
    site = _site_template(tmp_path, launch)
    spec = render.JobSpec(command=("true",), template="mine", env={"MASTER_PORT": "1234"})
    with pytest.raises(UsageError, match=message):
        render.render(site, site.cluster(), site.partition(site.cluster()), spec)
    # Without that --env the same template renders.
    assert render.render(site, site.cluster(), site.partition(site.cluster()), spec._replace(env={}))


def test_a_site_template_that_drops_the_users_env_is_refused(tmp_path):
    tdir = tmp_path / "tpl"
    tdir.mkdir()
    (tdir / "bare.sh.j2").write_text("#!/bin/bash\nexec {{ command }}\n")
    site = _site_with(tmp_path, "template_dirs: [%s]\n" % tdir)
    spec = render.JobSpec(command=("true",), template="bare", env={"A": "1"})
    with pytest.raises(UsageError, match="does not export the --env variables"):
        render.render(site, site.cluster(), site.partition(site.cluster()), spec)


def _local_cpu(partition="cpu", **changes):
    site = _site("local.yaml")
    cluster = site.cluster()
    spec = render.JobSpec(command=(VENV_PYTHON, "train.py"), time="5", token="t")._replace(**changes)
    return render.render(site, cluster, site.partition(cluster, partition), spec)


def test_procs_per_node_starts_n_workers_on_a_cpu_partition():
    torchrun = _local_cpu(nodes=2, procs_per_node=3).script
    # One launcher task per node, with a CPU for each of its workers.
    assert "#SBATCH --ntasks-per-node=1\n#SBATCH --cpus-per-task=3\n" in torchrun
    assert "--nproc-per-node=3" in torchrun and "\nexport SRUN_CPUS_PER_TASK=3\n" in torchrun
    srun = _local_cpu(nodes=2, procs_per_node=3, template="srun").script
    assert "#SBATCH --ntasks-per-node=3\n" in srun and "--cpus-per-task" not in srun
    # -c is per task: torchrun's one task per node holds all its workers.
    assert "#SBATCH --cpus-per-task=4\n" in _local_cpu(procs_per_node=2, cpus_per_task=4).script


@pytest.mark.parametrize("changes,error,message", [
    ({"procs_per_node": 5}, JobDoesNotFitError, "asks for 5 workers per node but partition cpu on cluster alpha "
                                                "has 4 CPUs per node"),
    ({"procs_per_node": 3, "cpus_per_task": 2}, UsageError, "give -c 3 or more"),
    ({"procs_per_node": 2, "cpus_per_task": 3, "template": "srun"}, JobDoesNotFitError, "2 tasks per node x 3 CPUs"),
    ({"procs_per_node": 2, "template": "single"}, UsageError, "template 'single' runs one process"),
    ({"procs_per_node": 0}, UsageError, "--procs-per-node must be at least 1"),
])
def test_procs_per_node_is_checked_against_the_cpus(changes, error, message):
    with pytest.raises(error, match=message):
        _local_cpu(**changes)


def test_more_workers_than_gpus_is_a_warning():
    rendered = _local_cpu(partition="gpu", gpus_per_node=2, procs_per_node=4)
    assert "4 workers per node share 2 gpu" in " ".join(rendered.warnings)


@pytest.mark.parametrize("name,output", [
    ("train", "slurmkit-train-%j.out"),
    ("exp/lr3e-4", "slurmkit-exp_lr3e-4-%j.out"),
    ("../../etc/passwd", "slurmkit-.._.._etc_passwd-%j.out"),
    ("100%x %j", "slurmkit-100_x_j-%j.out"),              # never read as Slurm's patterns
    ("$(touch /tmp/x) 'y'", "slurmkit-touch_tmp_x_y-%j.out"),
    ("日本語", "slurmkit-%j.out"),
    ("x" * 300, "slurmkit-%s-%%j.out" % ("x" * 100)),
])
def test_default_output_file_is_safe_for_any_job_name(name, output):
    assert sbatch_header.output_file_name(name) == output
    assert "/" not in output and output.count("%") == 1


def test_a_job_name_with_a_slash_keeps_its_name_but_not_in_the_file_name():
    script = _local_cpu(name="exp/lr3e-4").script
    assert "#SBATCH --job-name=exp/lr3e-4\n" in script and "#SBATCH --output=slurmkit-exp_lr3e-4-%j.out\n" in script
    assert "%x" not in script
    # An explicit --output is the user's own.
    assert "#SBATCH --output=o/%x.out\n" in _local_cpu(name="a/b", output="o/%x.out").script


def test_nodelist_is_passed_to_sbatch():
    assert "#SBATCH --nodelist=an1\n" in _local_cpu(nodelist="an1").script


def _capped(cap, wait="00:30:00"):
    site = _site("example-infiniband.yaml")
    site = site._replace(max_switch_wait=wait)
    layout = _layout("gpu", 3, 4)
    layout = ClusterLayout(layout.topology, layout.partition_nodes, cap)
    return _render_default(site, SPEC, layout)


def test_the_clusters_cap_on_the_switch_wait_is_rendered_with_a_warning():
    rendered = _capped(120)
    assert "#SBATCH --switches=2@00:02:00\n" in rendered.script and rendered.switch_wait == "00:02:00"
    assert rendered.warnings == ("cluster hopper caps the wait for fewer leaf switches at 00:02:00 (max_switch_wait="
                                 "120 in Slurm's SchedulerParameters); the site's max_switch_wait 00:30:00 is "
                                 "rendered as 00:02:00",)
    assert rendered.to_dict() == {"cluster": "hopper", "partition": "gpu", "template": "torchrun", "switches": 2,
                                  "switch_wait": "00:02:00", "constraint": None, "image": None, "runtime": None,
                                  "warnings": list(rendered.warnings)}


@pytest.mark.parametrize("cap,wait,rendered_wait,warned", [
    (3600, "00:30:00", "00:30:00", False),      # within the cap: the site's own text
    (1800, "30", "30", False),                  # equal
    (None, "00:30:00", "00:30:00", False),      # cap unknown: as asked
    (90000, "UNLIMITED", "1-01:00:00", True),   # no limit asked, the cap applies
    (300, "00:10:00", "00:05:00", True),        # Slurm's default cap
])
def test_switch_wait_within_and_over_the_cap(cap, wait, rendered_wait, warned):
    rendered = _capped(cap, wait)
    assert "#SBATCH --switches=2@%s\n" % rendered_wait in rendered.script
    assert rendered.switch_wait == rendered_wait and bool(rendered.warnings) == warned


def test_light_jobs_have_no_switch_wait():
    assert _render_default(_site("example-infiniband.yaml"), SPEC._replace(comm="light"), None).switch_wait is None


def test_max_switch_wait_from_scheduler_parameters():
    from slurmkit.script import topology
    from slurmkit.slurm import parsers

    def cap(params):
        return topology.parse_max_switch_wait(parsers.scheduler_parameter({"SchedulerParameters": params},
                                                                          "max_switch_wait"))
    assert cap("bf_interval=5,max_switch_wait=120") == 120
    assert cap("bf_interval=5") == 300 and cap("(null)") == 300 and cap("max_switch_wait") == 300

    class Backend:
        def config(self):
            return {"SchedulerParameters": "max_switch_wait=45"}

    class Unreadable:
        def config(self):
            from slurmkit.errors import SlurmCommandError
            raise SlurmCommandError("scontrol show config failed")

    assert topology.max_switch_wait_of(Backend()) == 45 and topology.max_switch_wait_of(Unreadable()) is None


def test_layout_cache_entries_without_the_cap_are_reloaded(tmp_path):
    import json

    from slurmkit.script import topology

    layout = ClusterLayout(_layout("gpu", 2, 2).topology, {"gpu": "n[0-3]"}, 120)
    assert ClusterLayout.from_dict(json.loads(json.dumps(layout.to_dict()))) == layout
    old = layout.to_dict()
    del old["max_switch_wait"]
    (tmp_path / "k.json").write_text(json.dumps({"stored_at": 0, "layout": old}))
    cache = topology.TopologyCache(tmp_path, clock=FakeClock(epoch=1))
    assert cache.get("k", lambda: layout).max_switch_wait == 120


def _partition(**fabric_kw):
    return Partition(name="gpu", accelerator="nvidia", gpu_model="a100", gpus_per_node=8, cpus_per_node=64,
                     fabric=Fabric(**fabric_kw))


def test_lint_prefix_hca():
    warnings = collective.lint(_partition(type="infiniband", hcas=("mlx5_1", "mlx5_10")))
    assert len(warnings) == 1
    assert "'mlx5_1' has no '=' and also matches 'mlx5_10'" in warnings[0] and "'=mlx5_1,mlx5_10'" in warnings[0]


def test_lint_exclude_only_ifname_lets_lo_in():
    warnings = [w for w in collective.lint(_partition(type="infiniband", hcas=("=mlx5_0",), socket_ifname="^docker0"))
                if "NCCL" in w]
    assert len(warnings) == 1 and "'lo'" in warnings[0] and "^docker0,lo" in warnings[0]
    assert not [w for w in collective.lint(_partition(type="infiniband", hcas=("=mlx5_0",),
                                                      socket_ifname="^docker0,lo")) if "NCCL" in w]


def test_roce_env():
    env = collective.collective_env(_partition(type="roce", hcas=("=mlx5_0:1", "=mlx5_1:1"), socket_ifname="=eth0",
                                           roce=RoceSettings(gid_index=3, traffic_class=106)))
    assert env == {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_SOCKET_IFNAME": "=eth0",
                   "NCCL_IB_GID_INDEX": "3", "NCCL_IB_TC": "106", "GLOO_SOCKET_IFNAME": "eth0"}


def test_ethernet_disables_ib():
    assert collective.collective_env(_partition(type="ethernet", socket_ifname="lo"))["NCCL_IB_DISABLE"] == "1"


@pytest.mark.parametrize("accelerator,ifname,gloo", [
    ("none", "lo", "lo"),                 # CPU partitions too: DDP on CPUs is gloo
    ("nvidia", "=ib0", "ib0"),            # NCCL's exact-match '=' means nothing to gloo
    ("ascend", "enp1s0,enp2s0", "enp1s0,enp2s0"),
    ("nvidia", "^docker0,lo", None),      # an exclusion list names no interface
    ("none", None, None),
])
def test_gloo_socket_ifname_wherever_the_partition_names_an_interface(accelerator, ifname, gloo):
    partition = Partition(name="p", accelerator=accelerator, gpus_per_node=0 if accelerator == "none" else 8,
                          cpus_per_node=8, fabric=Fabric(type="ethernet", socket_ifname=ifname))
    assert collective.collective_env(partition).get("GLOO_SOCKET_IFNAME") == gloo


def test_gloo_warning_for_an_exclusion_list_unless_the_site_names_it():
    plain = _partition(type="infiniband", hcas=("=mlx5_0",), socket_ifname="^docker0,lo")
    assert ["gloo cannot use" in w for w in collective.lint(plain)] == [True]
    named = plain._replace(fabric=plain.fabric._replace(env={"GLOO_SOCKET_IFNAME": "ib0"}))
    assert collective.lint(named) == [] and collective.collective_env(named)["GLOO_SOCKET_IFNAME"] == "ib0"


def test_site_given_before_the_subcommand(capsys, monkeypatch, tmp_path):
    from slurmkit.cli import main

    ib, roce = str(ROOT / "site_configs" / "example-infiniband.yaml"), str(ROOT / "site_configs" / "example-roce.yaml")
    monkeypatch.setenv("SLURMKIT_CACHE_DIR", str(tmp_path))

    def site_of(*argv):
        assert main(list(argv) + ["--", "true"]) == 0
        return capsys.readouterr().out.split("for site ", 1)[1].split(",", 1)[0]

    monkeypatch.delenv("SLURMKIT_SITE", raising=False)
    assert site_of("--site", ib, "render") == "example-infiniband"
    assert site_of("--debug", "--site", roce, "render", "-T", "single") == "example-roce"
    # The subcommand's own --site is typed last and wins; either beats the environment.
    assert site_of("--site", ib, "render", "--site", roce) == "example-roce"
    monkeypatch.setenv("SLURMKIT_SITE", roce)
    assert site_of("--site", ib, "render") == "example-infiniband"
    assert site_of("render") == "example-roce"


def test_output_note_says_when_and_why_the_output_file_is_missing(tmp_path):
    from slurmkit.outputs import output_note

    there = tmp_path / "slurmkit-x-1.out"
    there.write_text("")
    assert output_note(str(there), "COMPLETED") is None and output_note(None, "FAILED") is None
    gone = output_note(str(tmp_path / "slurmkit-exp" / "lr3e-4-2.out"), "FAILED")
    assert gone.startswith("output file %s/slurmkit-exp/lr3e-4-2.out does not exist: its directory" % tmp_path)
    assert "does not exist yet" in output_note(str(tmp_path / "later.out"), "PENDING")
    assert "removed" in output_note(str(tmp_path / "deleted.out"), "COMPLETED")
    # On a cluster reached over SSH the caller tests the path there.
    assert output_note("/remote/o.out", "COMPLETED", exists=lambda p: p == "/remote/o.out") is None
    launch = output_note("/proc/slurmkit-x-9.out", "FAILED", reason="JobLaunchFailure")
    assert "Slurm could not launch the job (JobLaunchFailure)" in launch and "/proc is read-only there" in launch
    assert "slurmd log" in launch and "--output/-o" in launch
    # 26.05 gives no reason, only ExitCode 0:53 (Slurm's SIG_FAILURE)
    assert output_note("/proc/slurm-9.out", "FAILED", reason="None", signal=53) == launch.replace("slurmkit-x-", "slurm-")
    assert "removed" in output_note("/x/slurm-9.out", "FAILED", exists=lambda p: p == "/x", signal=9)
    # where the directory can be tried here: why it takes no file, whatever Slurm said
    refused = output_note("/x/slurm-9.out", "FAILED", exists=lambda p: p == "/x",
                          refuses=lambda d: "is on a read-only file system" if d == "/x" else None)
    assert refused.startswith("output file /x/slurm-9.out does not exist: its directory /x is on a read-only file "
                              "system, so Slurm could not create it")


def test_the_jobs_own_setup_lines_run_as_written_after_the_sites_and_before_the_launch():
    site = _site("example-infiniband.yaml")
    lines = ("source ~/venvs/torch/bin/activate", 'export RUN="$(date +%s)"  # the user\'s own shell')
    script = _render_default(site, SPEC._replace(comm="light", setup=lines), None).script
    block = "# The job's own setup lines (slurm_setup), as written.\n%s\n%s\n" % lines
    assert block in script                                     # literally: they are the user's shell
    assert script.index(site.setup[-1].splitlines()[-1]) < script.index(block) < script.rindex("torchrun")
    assert "slurm_setup" not in _render_default(site, SPEC._replace(comm="light"), None).script


@pytest.mark.parametrize("line", ["echo a\nsbatch evil.sh", "x\r", "a\0b"])
def test_a_setup_line_with_a_line_break_is_refused(line):
    site = _site("example-infiniband.yaml")
    with pytest.raises(UsageError, match="slurm_setup: .* holds a line break"):
        _render_default(site, SPEC._replace(comm="light", setup=("true", line)), None)


def test_requeue_and_signal_become_their_sbatch_lines_and_a_bad_signal_is_refused():
    site = _site("example-infiniband.yaml")
    spec = SPEC._replace(comm="light", requeue=True, signal="B:USR1@90")
    script = _render_default(site, spec, None).script
    assert "#SBATCH --requeue\n" in script and "#SBATCH --signal=B:USR1@90\n" in script
    assert "#SBATCH --no-requeue\n" in _render_default(site, spec._replace(requeue=False, signal=None), None).script
    for bad in ("KILL@1", "USR1@90;id", "USR1"):
        with pytest.raises(UsageError, match="give \\[B:\\]USR1@SECONDS"):
            _render_default(site, spec._replace(signal=bad), None)
    with pytest.raises(UsageError, match="restarted by the daemon"):
        _render_default(site, spec._replace(checkpoint_dir="/ckpt"), None)


def test_mem_begin_dependency_and_reservation_reach_sbatch_as_given_and_bad_values_are_refused():
    site = _site("example-infiniband.yaml")
    spec = SPEC._replace(comm="light", mem="64G", begin="now+2hours", dependency="afterok:1234:1240_3,afterany:7+5",
                         reservation="hero-run")
    script = _render_default(site, spec, None).script
    for line in ("--mem=64G", "--begin=now+2hours", "--dependency=afterok:1234:1240_3,afterany:7+5",
                 "--reservation=hero-run"):
        assert "#SBATCH %s\n" % line in script
    for begin in ("2026-12-05T08:00", "2026-12-05", "08:00:30", "now", "tomorrow", "now+90minutes"):
        assert "#SBATCH --begin=%s\n" % begin in _render_default(site, spec._replace(begin=begin), None).script
    assert "#SBATCH --dependency=singleton\n" in _render_default(site, spec._replace(dependency="singleton"),
                                                                  None).script
    for field, bad, needle in [("mem", "64GB", "--mem '64GB'"), ("mem", "0", "--mem '0'"),
                               ("begin", "tonight", "--begin 'tonight'"), ("begin", "now+1hour;id", "--begin"),
                               ("dependency", "afterok:alpha:12", "1234, not alpha:1234"),
                               ("dependency", "afterok:1,afterany:2?afterok:3", "--dependency"),
                               ("dependency", "afterok", "--dependency"), ("dependency", "afterok:0", "--dependency"),
                               ("reservation", "a b", "--reservation 'a b'")]:
        with pytest.raises(UsageError, match=re.escape(needle)):
            _render_default(site, spec._replace(**{field: bad}), None)


def test_mem_above_what_the_partitions_nodes_have_never_reaches_sbatch():
    site = _site("example-infiniband.yaml")
    part = site.partition(site.cluster())
    spec = SPEC._replace(comm="light")
    fits = "%dM" % part.memory_mb
    assert "#SBATCH --mem=%s\n" % fits in _render_default(site, spec._replace(mem=fits), None).script
    with pytest.raises(JobDoesNotFitError, match="asks for --mem=%dM per node, but the nodes of partition %s" % (
            part.memory_mb + 1, part.name)):
        _render_default(site, spec._replace(mem="%dM" % (part.memory_mb + 1)), None)
    assert sbatch_header.mem_megabytes("1T") == 1024 * 1024 and sbatch_header.mem_megabytes("1025K") == 2
