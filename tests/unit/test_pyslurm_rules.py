"""The pyslurm backend's pure parts, without pyslurm.

pyslurm is never faked here.  ``job_to_info`` is fed ``SimpleNamespace``
records carrying the attribute names and value types pyslurm's Job and
db.Job really have (read in PySlurm/pyslurm: 22.5.x ``core/job/job.pxd`` and
``db/job.pyx``, 25.11 ``core/job/job.pyx``), which tests our conversion, not
pyslurm.  ``unusable_reason`` is driven through a tiny Runner and, where a
test needs "pyslurm absent" on a machine that has it, through our own
``pyslurm_installed`` probe.
"""

import json
import os
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from slurmkit.errors import SlurmUnavailableError, UsageError
from slurmkit.site.model import Cluster
from slurmkit.session import make_backend
import slurmkit.slurm
from slurmkit.slurm import commands, parsers
from slurmkit.slurm.backend import CommandBackend
from slurmkit.slurm import directives
from slurmkit.slurm import pyslurm_backend as pb
from slurmkit.slurm import pyslurm_rules as rules
from slurmkit.slurm.runner import CommandResult, Runner
from slurmkit.slurm.types import JobInfo

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
START = 1795967289  # a unix time, as Job.start_time gives it


class VersionRunner(Runner):
    """Answers ``scontrol --version`` like a Slurm 22.05.8 login node; counts calls."""

    def __init__(self, stdout="slurm 22.05.8\n", returncode=0, stderr="", raises=None):
        self.stdout, self.returncode, self.stderr, self.raises = stdout, returncode, stderr, raises
        self.calls = []

    def run(self, argv, stdin=None, timeout=None):
        self.calls.append(tuple(argv))
        if self.raises:
            raise self.raises
        return CommandResult(tuple(argv), self.returncode, self.stdout, self.stderr)

    def describe(self):
        return "test"


@pytest.fixture(autouse=True)
def fresh_cache():
    pb.forget_answers()
    yield
    pb.forget_answers()


def cluster(name="alpha", conf="/srv/alpha/slurm.conf"):
    return Cluster(name=name, partitions={}, slurm_conf=conf)


# ---------------------------------------------------------------------------
# versions
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("pyslurm,slurm,expected", [
    ("22.5.0", "22.05.8", True),
    ("22.5.2", "22.05.8", True),
    ("23.2.2", "23.02.7", True),
    ("25.11.0", "25.11.1", True),
    ("25.11.0", "22.05.8", False),
    ("23.11.1", "23.02.7", False),
    ("", "22.05.8", False),
    ("22.5.2", "", False),
])
def test_versions_match_compares_major_minor_only(pyslurm, slurm, expected):
    assert pb.versions_match(pyslurm, slurm) is expected


# ---------------------------------------------------------------------------
# job_to_info
# ---------------------------------------------------------------------------

def core_job(**overrides):
    """A pyslurm ``Job`` as 22.5.2's job.pxd documents it (same names in 25.11's job.pyx)."""
    values = dict(id=7, name="train", state="RUNNING", state_reason="None", partition="gpu", num_nodes=2,
                  allocated_nodes="an[1-2]", required_nodes=None, start_time=START, time_limit=90,
                  user_name="root", comment="slurmkit:abc", exit_code=0, exit_code_signal=0, cluster="alpha",
                  standard_output="/tmp/o-7.out")
    values.update(overrides)
    return SimpleNamespace(**values)


def test_job_to_info_running_job_matches_the_squeue_json_parser():
    """The same job read by pyslurm and by squeue --json gives the same JobInfo."""
    squeue = parsers.parse_squeue_json(json.dumps({"jobs": [{
        "job_id": 7, "name": "train", "job_state": "RUNNING", "partition": "gpu", "node_count": 2,
        "nodes": "an[1-2]", "start_time": START, "time_limit": 90, "user_name": "root",
        "state_reason": "None", "comment": "slurmkit:abc", "exit_code": 0, "cluster": "alpha",
        "standard_output": "/tmp/o-7.out"}]}))[0]
    assert rules.job_to_info(core_job()) == squeue


def test_job_to_info_running_job_fields():
    info = rules.job_to_info(core_job())
    assert isinstance(info, JobInfo)
    assert (info.job_id, info.name, info.state, info.partition) == ("7", "train", "RUNNING", "gpu")
    assert (info.node_count, info.nodelist, info.user, info.reason) == (2, "an[1-2]", "root", "None")
    assert info.start_time == datetime.fromtimestamp(START)
    assert info.time_limit == "01:30:00"
    # pyslurm says exit_code 0 while a job runs, as squeue does: not an exit status yet
    assert (info.comment, info.exit_code, info.signal, info.cluster) == ("slurmkit:abc", None, None, "alpha")


def test_job_to_info_pending_job_with_unset_values():
    # job.pyx: allocated_nodes is None while pending; _raw_time() gives None
    # for an unknown start and for NO_VAL/INFINITE limits; u32_parse gives None.
    info = rules.job_to_info(core_job(state="PENDING", state_reason="Resources", allocated_nodes=None,
                                   start_time=None, time_limit=None, num_nodes=None, comment=None,
                                   standard_output=None))
    assert info.state == "PENDING" and info.reason == "Resources"
    assert info.nodelist == "" and info.start_time is None and info.node_count == 0
    assert info.time_limit == "UNLIMITED" and info.comment == ""
    assert not info.finished


def test_job_to_info_25_11_job_with_days_and_finished_state():
    # 25.11's Job has many more attributes (stats, pids, ...); only ours are read.
    job = core_job(state="FAILED", exit_code=3, time_limit=2 * 1440 + 5, stats=object(), pids={},
                   run_time_remaining=0, elapsed_cpu_time=120)
    info = rules.job_to_info(job)
    assert info.time_limit == "2-00:05:00"
    assert (info.exit_code, info.signal) == (3, None) and info.finished
    killed = rules.job_to_info(core_job(state="CANCELLED", exit_code=0, exit_code_signal=15))
    assert (killed.exit_code, killed.signal) == (None, 15)


def test_job_to_info_db_job_shape():
    # db/job.pyx: nodelist instead of allocated_nodes, no standard_output, and
    # time_limit is _raw_time(timelimit, "PartitionLimit").
    record = SimpleNamespace(id=12, name="old", state="TIMEOUT", state_reason="None", partition="cpu",
                             num_nodes=1, nodelist="an3", start_time=START, time_limit="PartitionLimit",
                             user_name="root", comment="", exit_code=0, cluster="alpha")
    info = rules.job_to_info(record)
    assert (info.job_id, info.nodelist, info.time_limit, info.state) == ("12", "an3", "PartitionLimit", "TIMEOUT")
    assert info.finished


def test_job_to_info_stdout_when_jobinfo_has_it():
    info = rules.job_to_info(core_job())
    if hasattr(info, "stdout"):
        assert info.stdout == "/tmp/o-7.out"


class ClusterMap:
    """The shape of pyslurm's MultiClusterMap (xcollections.pyx): data[cluster][id]; values() walks all."""

    def __init__(self, data):
        self.data = data

    def __iter__(self):  # like MultiClusterMap: iterating yields keys, not jobs
        for per_cluster in self.data.values():
            yield from per_cluster

    def values(self):
        for per_cluster in self.data.values():
            yield from per_cluster.values()


def test_records_of_every_collection_shape():
    a, b = core_job(id=1), core_job(id=2)
    assert rules.records_of({1: a, 2: b}) == [a, b]                       # 22.5.2 Jobs(dict)
    assert rules.records_of(ClusterMap({"alpha": {1: a, 2: b}})) == [a, b]  # 22.5.3+ MultiClusterMap
    assert rules.records_of([a, b]) == [a, b]                             # some db.Jobs(list)


# ---------------------------------------------------------------------------
# #SBATCH directives
# ---------------------------------------------------------------------------

def test_directives_of_a_rendered_golden_script():
    found = directives.sbatch_directives((GOLDEN / "infiniband-torchrun.sh").read_text())
    names = [n for n, _ in found]
    assert ("job-name", "train") in found and ("gpus-per-node", "h100:8") in found
    assert ("comment", "slurmkit:0123456789abcdef") in found
    assert any(v is directives.UNSUPPORTED and n.startswith("--switches") for n, v in found)
    assert "partition" in names and "time" in names


def test_directives_several_per_line_quotes_and_comments():
    script = ("#!/bin/bash\n"
              "#SBATCH --time=1 --partition=cpu --comment=slurmkit:TOKEN\n"
              '#SBATCH --job-name="my job" # a trailing comment\n'
              "#SBATCH -J x -t 5 -pgpu\n"
              "  #SBATCH --qos=ignored-leading-space\n"
              "## #SBATCH --account=commented-out\n"
              "\n"
              "echo hi\n"
              "#SBATCH --account=after-the-first-command\n")
    assert directives.sbatch_directives(script) == [
        ("time", "1"), ("partition", "cpu"), ("comment", "slurmkit:TOKEN"),
        ("job-name", "my job"),
        ("job-name", "x"), ("time", "5"), ("partition", "gpu")]


def test_directive_args_follow_sbatch_quoting():
    assert directives.directive_args(' --job-name="a \\"b\\" c" --x') == ['--job-name=a "b" c', "--x"]
    assert directives.directive_args(" --comment='single' ") == ["--comment='single'"]  # single quotes are literal
    assert directives.directive_args(' --comment="a#b" --qos=q') == ["--comment=a"]    # '#' ends the line, even quoted
    assert directives.directive_args(' --comment=a\\#b') == ["--comment=a#b"]
    assert directives.directive_args(' "" --qos=q') == []                              # an empty argument ends it
    # sbatch tests for whitespace before it looks at a pending escape: "\ " still splits
    assert directives.directive_args(" -J x\\ y") == ["-J", "x", "y"]


def test_directive_value_in_the_next_argument_and_unknown_options():
    assert directives.sbatch_directives("#!/bin/sh\n#SBATCH --time 10 --exclusive\n") == [("time", "10"), ("exclusive", None)]
    found = directives.sbatch_directives("#!/bin/sh\n#SBATCH --array=1-3 --time\n")
    assert [v is directives.UNSUPPORTED for _, v in found] == [True, True]


# ---------------------------------------------------------------------------
# JobSubmitDescription arguments
# ---------------------------------------------------------------------------

def desc(script_lines):
    return rules.submit_description(directives.sbatch_directives("#!/bin/bash\n" + "\n".join(script_lines) + "\nhostname\n"))


def test_submit_description_of_the_integration_test_script():
    assert desc(["#SBATCH --time=1 --partition=cpu --comment=slurmkit:TOKEN", "#SBATCH --job-name=t -n 1"]) == {
        "time_limit": 1, "partitions": "cpu", "comment": "slurmkit:TOKEN", "name": "t", "ntasks": 1}


def test_submit_description_single_node_gpu_job_as_slurmkit_renders_it():
    kw = desc(["#SBATCH --job-name=python", "#SBATCH --partition=gpu", "#SBATCH --nodes=1",
               "#SBATCH --ntasks-per-node=8", "#SBATCH --gpus-per-node=h100:8", "#SBATCH --cpus-per-task=4",
               "#SBATCH --time=04:00:00", "#SBATCH --account=ml", "#SBATCH --qos=normal", "#SBATCH --exclusive",
               "#SBATCH --output=slurmkit-%x-%j.out", "#SBATCH --comment=slurmkit:0123"])
    assert kw == {"name": "python", "partitions": "gpu", "nodes": 1, "ntasks_per_node": 8, "ntasks": 8,
                  "gres_per_node": {"gpu:h100": 8}, "cpus_per_task": 4, "time_limit": 240,
                  "account": "ml", "qos": "normal", "resource_sharing": "no",
                  "standard_output": "slurmkit-%x-%j.out", "comment": "slurmkit:0123"}


def test_submit_description_derives_ntasks_like_sbatch():
    assert desc(["#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4"])["ntasks"] == 8
    assert desc(["#SBATCH --nodes=2", "#SBATCH --ntasks=3"])["ntasks"] == 3
    # pyslurm would force ntasks=1 where sbatch leaves the count unset (the job
    # would get SLURM_NTASKS=1 and SLURM_NPROCS=1): leave that to sbatch
    assert desc(["#SBATCH --nodes=2"]) is None
    assert desc(["#SBATCH --nodes=1"]) is None
    assert desc(["#SBATCH --time=5"]) is None


@pytest.mark.parametrize("value,minutes", [("1", 1), ("00:00:30", 1), ("1:30", 2), ("04:00:00", 240),
                                           ("1-00:00:00", 1440), ("0", "UNLIMITED"), ("UNLIMITED", "UNLIMITED")])
def test_submit_description_time_as_int_minutes(value, minutes):
    assert desc(["#SBATCH --time=%s -n 1" % value])["time_limit"] == minutes


@pytest.mark.parametrize("lines", [
    ["#SBATCH --switches=2@00:30:00"],                             # pyslurm never sends switches
    ["#SBATCH --gres=gpu:2", "#SBATCH --gpus-per-node=2"],          # sbatch merges these itself
    ["#SBATCH --time=1", "#SBATCH --time=2"],                       # last one wins in sbatch
    ["#SBATCH --time=soon"],                                         # sbatch's own error message
    ["#SBATCH --nodes=two"],
    ["#SBATCH --gres=gpu:h100:8(S:0)"],
    ["#SBATCH --exclusive=user"],
    ["#SBATCH --mem=4G", "#SBATCH --mem-per-cpu=1G"],
    ["#SBATCH --array=1-4"],
])
def test_submit_description_leaves_what_pyslurm_cannot_express_to_sbatch(lines):
    assert desc(lines) is None


def test_submit_description_nodelist_and_the_default_name():
    assert desc(["#SBATCH -w an[2-3] -n 1"])["required_nodes"] == "an[2-3]"
    assert desc(["#SBATCH --nodelist=/tmp/hosts -n 1"]) is None      # sbatch reads a file there
    # sbatch names a script read from stdin "sbatch"
    assert desc(["#SBATCH --nodes=1 -n 1"])["name"] == "sbatch"
    assert desc(["#SBATCH -J mine -n 1"])["name"] == "mine"


def test_submit_description_gres_and_output_none():
    kw = desc(["#SBATCH --gres=npu:ascend910b:8,gpu -n 1", "#SBATCH --output=none", "#SBATCH -e NONE"])
    assert kw["gres_per_node"] == {"npu:ascend910b": 8, "gpu": 1}
    assert kw["standard_output"] == "/dev/null" and kw["standard_error"] == "/dev/null"
    assert desc(["#SBATCH --gpus-per-node=4 -n 1"])["gres_per_node"] == {"gpu": 4}


def test_sbatch_option_environment_is_what_sbatch_exports_for_the_options():
    # Seen in jobs submitted with sbatch on the dev cluster (and compared for
    # real with pyslurm's in tests/integration/test_backend_parity.py).
    script = ("#!/bin/bash\n#SBATCH --job-name=train -p gpu --nodes=2 --ntasks-per-node=4 -c 02\n"
              "#SBATCH --gpus-per-node=h100:2 --mem=10G\nhostname\n")
    assert rules.sbatch_option_environment(directives.sbatch_directives(script)) == {
        "SLURM_JOB_NAME": "train", "SLURM_NTASKS_PER_NODE": "4", "SLURM_CPUS_PER_TASK": "2",
        "SLURM_GPUS_PER_NODE": "h100:2"}
    assert rules.sbatch_option_environment(directives.sbatch_directives("#!/bin/sh\n#SBATCH -n 2\n")) == {}


def test_from_23_11_cpus_per_task_is_also_a_tres_per_task():
    # The 24.11 sbatch job of test_backend_parity printed SLURM_TRES_PER_TASK=cpu=2 for -c 2
    options = directives.sbatch_directives("#!/bin/sh\n#SBATCH -c 02 --ntasks-per-node=1\n")
    assert rules.sbatch_option_environment(options, (24, 11))["SLURM_TRES_PER_TASK"] == "cpu=2"
    assert "SLURM_TRES_PER_TASK" not in rules.sbatch_option_environment(options, (22, 5))


MPI_VARIABLES = {"HYDRA_BOOTSTRAP": "slurm", "HYDRA_LAUNCHER_EXTRA_ARGS": "--external-launcher",
                 "I_MPI_HYDRA_BOOTSTRAP": "slurm", "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS": "--external-launcher",
                 "OMPI_MCA_plm_slurm_args": "--external-launcher", "PRTE_MCA_plm_slurm_args": "--external-launcher"}


def test_from_23_11_mpi_launchers_get_what_sbatch_gives_them():
    # exactly what the 24.11 and 26.05 sbatch put in a job's environment on the dev clusters
    assert rules.mpi_launcher_environment({}, (24, 11)) == MPI_VARIABLES
    assert rules.mpi_launcher_environment({}, (22, 5)) == {}
    # the user's own Hydra bootstrap: no --external-launcher for it (Slurm 23.11 NEWS)
    own = rules.mpi_launcher_environment({"I_MPI_HYDRA_BOOTSTRAP": "ssh"}, (24, 11))
    assert "I_MPI_HYDRA_BOOTSTRAP" not in own and "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS" not in own
    assert own["HYDRA_BOOTSTRAP"] == "slurm"
    # MpiParams=disable_slurm_hydra_bootstrap (24.05+): the Hydra variables are not injected
    off = rules.mpi_launcher_environment({}, (24, 11), "ports=12000-12999,disable_slurm_hydra_bootstrap")
    assert off == {"OMPI_MCA_plm_slurm_args": "--external-launcher", "PRTE_MCA_plm_slurm_args": "--external-launcher"}
    env = rules.submit_environment({}, [], (24, 11))
    assert {k: env[k] for k in MPI_VARIABLES} == MPI_VARIABLES


def test_submit_environment_options_win_over_an_inherited_value(monkeypatch):
    # Submitting from inside a job: sbatch sets the new job's values over the outer ones.
    monkeypatch.setenv("SLURM_JOB_NAME", "outer")
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "7")
    env = rules.submit_environment({}, [("job-name", "inner"), ("time", "5")])
    assert env["SLURM_JOB_NAME"] == "inner" and env["SLURM_CPUS_PER_TASK"] == "7"


def test_submit_environment_carries_the_cluster_and_what_sbatch_adds(monkeypatch):
    monkeypatch.delenv("SLURM_SUBMIT_DIR", raising=False)
    env = rules.submit_environment({"SLURM_CONF": "/srv/alpha/slurm.conf"})
    assert env["SLURM_CONF"] == "/srv/alpha/slurm.conf"
    assert env["SLURM_SUBMIT_DIR"] == os.getcwd()
    assert env["SLURM_SUBMIT_HOST"] and len(env["SLURM_UMASK"]) == 4
    assert env.get("PATH") == os.environ.get("PATH")


# ---------------------------------------------------------------------------
# unusable_reason
# ---------------------------------------------------------------------------

def test_unusable_reason_on_this_machine_says_not_installed():
    """This machine has no pyslurm (PyPI's only build needs Slurm 25.11)."""
    if pb.pyslurm_installed():
        pytest.skip("pyslurm is installed here; test_unusable_reason_without_pyslurm covers the message")
    runner = VersionRunner()
    reason = pb.unusable_reason(runner, cluster())
    assert "not installed" in reason
    assert runner.calls == []  # nothing to compare: no scontrol needed


def test_unusable_reason_without_pyslurm(monkeypatch):
    monkeypatch.setattr(pb, "pyslurm_installed", lambda: False)
    assert pb.unusable_reason(VersionRunner(), cluster()) == "pyslurm is not installed"


@pytest.fixture
def installed_but_not_imported(monkeypatch):
    """pyslurm 'installed' as far as our probe knows; importing it would be a test failure."""
    monkeypatch.setattr(pb, "pyslurm_installed", lambda: True)
    monkeypatch.setattr(pb, "initialised_conf", lambda: None)

    def no_import(conf):
        raise AssertionError("pyslurm must not be imported here")

    monkeypatch.setattr(pb, "import_pyslurm", no_import)


def test_version_mismatch_is_found_before_importing(monkeypatch, installed_but_not_imported):
    monkeypatch.setattr(pb, "installed_version", lambda: "25.11.0")
    runner = VersionRunner()
    assert pb.unusable_reason(runner, cluster()) == "pyslurm 25.11.0 does not match Slurm 22.05.8"
    assert runner.calls == [("scontrol", "--version")]


def test_unreadable_slurm_version_never_imports_pyslurm(monkeypatch, installed_but_not_imported):
    # libslurm calls fatal() when it finds no configuration: scontrol fails first.
    runner = VersionRunner(stdout="", returncode=1,
                           stderr="scontrol: fatal: Could not establish a configuration source\n")
    reason = pb.unusable_reason(runner, cluster())
    assert "Slurm version" in reason and "configuration source" in reason
    down = VersionRunner(raises=SlurmUnavailableError("scontrol is not installed or not on PATH"))
    assert "not on PATH" in pb.unusable_reason(down, cluster("beta"))


def test_unusable_reason_is_cached_per_cluster(monkeypatch, installed_but_not_imported):
    monkeypatch.setattr(pb, "installed_version", lambda: "23.2.2")
    runner = VersionRunner()
    first = pb.unusable_reason(runner, cluster())
    assert first == "pyslurm 23.2.2 does not match Slurm 22.05.8"
    assert pb.unusable_reason(runner, cluster()) == first
    assert len(runner.calls) == 1
    pb.unusable_reason(runner, cluster("beta", "/srv/beta/slurm.conf"))
    assert len(runner.calls) == 2


def test_import_failure_is_the_reason(monkeypatch):
    monkeypatch.setattr(pb, "pyslurm_installed", lambda: True)
    monkeypatch.setattr(pb, "initialised_conf", lambda: None)
    monkeypatch.setattr(pb, "installed_version", lambda: "22.5.2")

    def broken(conf):
        raise ImportError("libslurm.so.38: cannot open shared object file")

    monkeypatch.setattr(pb, "import_pyslurm", broken)
    reason = pb.unusable_reason(VersionRunner(), cluster())
    assert reason.startswith("pyslurm cannot be imported") and "libslurm.so.38" in reason


def test_conf_conflict():
    assert pb.conf_conflict("/a/slurm.conf", None) is None
    assert pb.conf_conflict("/a/slurm.conf", "/a/slurm.conf") is None
    reason = pb.conf_conflict("/b/slurm.conf", "/a/slurm.conf")
    assert "/a/slurm.conf" in reason and "/b/slurm.conf" in reason and "only once" in reason
    assert "Slurm default" in pb.conf_conflict("/b/slurm.conf", "")


def test_effective_conf_is_what_the_commands_would_use(monkeypatch):
    monkeypatch.setenv("SLURM_CONF", "/etc/other/slurm.conf")
    assert pb.effective_conf(cluster()) == "/srv/alpha/slurm.conf"
    assert pb.effective_conf(cluster(conf=None)) == "/etc/other/slurm.conf"
    monkeypatch.delenv("SLURM_CONF")
    assert pb.effective_conf(cluster(conf=None)) == ""


# ---------------------------------------------------------------------------
# make_backend wiring
# ---------------------------------------------------------------------------

def test_make_backend_falls_back_to_commands_without_pyslurm(monkeypatch, tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=alpha\n")
    import slurmkit.slurm

    # Both readers of "is pyslurm installed": make_backend's (slurmkit.slurm) and the backend's own check.
    monkeypatch.setattr(slurmkit.slurm, "pyslurm_installed", lambda: False)
    monkeypatch.setattr(pb, "pyslurm_installed", lambda: False)
    monkeypatch.delenv("SLURMKIT_BACKEND", raising=False)
    monkeypatch.delenv("SLURMKIT_VIA", raising=False)
    backend = make_backend(cluster(conf=str(conf)))
    assert type(backend) is CommandBackend
    monkeypatch.setenv("SLURMKIT_BACKEND", "pyslurm")
    with pytest.raises(UsageError, match="not installed"):
        make_backend(cluster(conf=str(conf)))


class QuietSlurm(VersionRunner):
    """Answers ``scontrol --version`` like Slurm 22.05.8, and every other command with nothing."""

    def run(self, argv, stdin=None, timeout=None):
        result = super().run(argv, stdin, timeout)
        return result if tuple(argv) == tuple(commands.version()) else CommandResult(tuple(argv), 0, "", "")


def test_make_backend_leaves_the_pyslurm_check_to_the_first_call_that_needs_it(monkeypatch, tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=alpha\n")
    monkeypatch.setattr(slurmkit.slurm, "pyslurm_installed", lambda: True)
    monkeypatch.delenv("SLURMKIT_BACKEND", raising=False)
    monkeypatch.delenv("SLURMKIT_VIA", raising=False)
    checked = []
    monkeypatch.setattr(pb, "unusable_reason", lambda runner, cluster: checked.append(cluster.name))
    backend = make_backend(cluster(conf=str(conf)))
    assert type(backend) is pb.PyslurmBackend and checked == []   # no scontrol --version, no import yet


def test_a_pyslurm_backend_decides_once_at_its_first_pyslurm_call(monkeypatch):
    # pyslurm "installed" for Slurm 22.05 but failing to import: the commands answer, as before
    # when make_backend itself found it unusable.
    monkeypatch.setattr(pb, "pyslurm_installed", lambda: True)
    monkeypatch.setattr(pb, "initialised_conf", lambda: None)
    monkeypatch.setattr(pb, "installed_version", lambda: "22.5.3")
    imports = []

    def broken_import(conf):
        imports.append(conf)
        raise ImportError("libslurm.so.38: cannot open shared object file")

    monkeypatch.setattr(pb, "import_pyslurm", broken_import)
    runner = QuietSlurm()
    backend = pb.PyslurmBackend(cluster(), runner=runner, when_needed=True)
    assert runner.calls == [] and imports == []
    assert backend.jobs(["42"]) == [] and backend.jobs(user="alice") == []   # squeue's, with or without pyslurm
    assert imports == [] and tuple(commands.version()) not in runner.calls
    assert backend.jobs(["42", "43"]) == []         # pyslurm's call: decided now, and the commands answer
    assert backend.accounting(["42"]) is not None and backend.describe() == "slurm commands, test"
    assert imports == ["/srv/alpha/slurm.conf"] and runner.calls.count(tuple(commands.version())) == 1
    assert runner.calls[-1][0] == "sacct" and any(c[0] == "squeue" for c in runner.calls[3:])


def test_pyslurm_backend_refuses_when_unusable(monkeypatch):
    monkeypatch.setattr(pb, "pyslurm_installed", lambda: False)
    with pytest.raises(SlurmUnavailableError, match="pyslurm cannot be used for cluster alpha: pyslurm is not installed"):
        pb.PyslurmBackend(cluster(), runner=VersionRunner())


def test_libslurm_stderr_is_collected_not_shown(capfd):
    # libslurm writes to file descriptor 2 itself, below Python's sys.stderr.
    with pb.LibslurmStderr() as said:
        os.write(2, b"python: error: invalid partition specified: ghost\n")
    os.write(2, b"after\n")
    assert said.text == "python: error: invalid partition specified: ghost\n"
    assert capfd.readouterr().err == "after\n"
