"""submitit's JobEnvironment inside a call: Slurm's variables under submitit's names, the call's files
from the bootstrap, and the class carried to nodes that have no slurmkit."""

import os
import subprocess
import sys

import pytest

import slurmkit
import slurmkit.compat as submitit
from slurmkit import helpers
from slurmkit.api import payload

SLURM_TASK = {"SLURM_JOB_ID": "4107", "SLURM_NTASKS": "4", "SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "1",
              "SLURM_JOB_NODELIST": "an[1-2]", "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURMD_NODENAME": "an2"}


def _clear(monkeypatch):
    for name in list(os.environ):
        if name.startswith(("SLURM_", "SLURMD_")) or name == helpers.JOB_ENV:
            monkeypatch.delenv(name)


def test_its_names_are_one_class_at_every_place_submitit_has_it():
    assert slurmkit.JobEnvironment is helpers.JobEnvironment is submitit.JobEnvironment
    assert submitit.core.job_environment.JobEnvironment is helpers.JobEnvironment
    assert slurmkit.api.JobEnvironment is helpers.JobEnvironment
    assert submitit.core.utils.JobPaths is helpers.JobPaths is slurmkit.api.job.JobPaths


def test_outside_a_job_it_refuses_as_submitit_does(monkeypatch):
    _clear(monkeypatch)
    with pytest.raises(RuntimeError, match="build it inside the submitted call"):
        helpers.JobEnvironment()


def test_a_task_of_a_two_node_job_reads_slurms_variables_under_submitits_names(monkeypatch):
    _clear(monkeypatch)
    for key, value in SLURM_TASK.items():
        monkeypatch.setenv(key, value)
    env = helpers.JobEnvironment()
    assert (env.cluster, env.job_id, env.raw_job_id, env.array_job_id, env.array_task_id) == (
        "slurm", "4107", "4107", None, None)
    assert (env.global_rank, env.local_rank, env.node, env.num_tasks, env.num_nodes) == (3, 1, 1, 4, 2)
    assert env.hostname == "an2" and env.hostnames == ["an1", "an2"]
    assert repr(env) == "JobEnvironment(job_id=4107, hostname=an2, local_rank=1(2), node=1(2), global_rank=3(4))"
    with pytest.raises(RuntimeError, match="runs no call of slurmkit's Python API"):
        env.paths


def test_an_array_task_has_submitits_job_id_and_slurmkits_global_one(monkeypatch):
    _clear(monkeypatch)
    monkeypatch.setenv("SLURM_JOB_ID", "512")
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "500")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "12")
    monkeypatch.setenv("SLURM_CLUSTER_NAME", "gamma")
    env = helpers.JobEnvironment()
    assert (env.job_id, env.raw_job_id, env.array_job_id, env.array_task_id) == ("500_12", "512", "500", "12")
    assert (env.global_rank, env.local_rank, env.node, env.num_tasks, env.num_nodes) == (0, 0, 0, 1, 1)
    assert env.global_job_id == "gamma:500_12"


@pytest.mark.parametrize("nodes", ["an1", "an[1-3]", "an[1-2,7],bn[08-10]", "gpu-a[1-2]x,login", "n[1,3]-ib",
                                   "a[1-2]b[3-4]"])
def test_hostlists_expand_as_slurm_and_submitit_expand_them(nodes):
    from slurmkit.slurm import hostlist

    assert helpers.expand_nodelist(nodes) == list(hostlist.expand(nodes))
    submitit_slurm = pytest.importorskip("submitit.slurm.slurm")
    assert helpers.expand_nodelist(nodes) == submitit_slurm._parse_node_list(nodes)


def _blocked_slurmkit(tmp_path):
    """A PYTHONPATH entry whose slurmkit cannot be imported: the node's Python without slurmkit."""
    blocker = tmp_path / "block"
    (blocker / "slurmkit").mkdir(parents=True)
    (blocker / "slurmkit" / "__init__.py").write_text("raise ImportError('no slurmkit on this node')\n")
    return str(blocker)


def test_inside_a_call_on_a_node_without_slurmkit_it_knows_the_job_and_the_calls_files(tmp_path):
    from slurmkit.helpers import JobEnvironment

    def report():
        env = JobEnvironment()
        paths = env.paths
        return (env.job_id, env.global_job_id, env.global_rank, env.num_tasks, env.hostnames,
                str(paths.folder), paths.submitted_pickle, paths.result_pickle, paths.stdout, paths.stderr,
                "slurmkit" in sys.modules)

    folder = tmp_path / "on the cluster"
    folder.mkdir()
    call = folder / "tok_1_call.txt"
    call.write_text(payload.dump_calls(report, [((), {}), ((), {})], array=True))
    argv = [sys.executable, "-c", payload.BOOTSTRAP, str(call), str(folder / "tok_%a_%t_result.txt"),
            str(folder / "tok_%a_checkpoint.txt"), '{"cluster": "gamma", "log": "%s/tok_%%a_log.out"}' % folder]
    env = dict(os.environ, PYTHONPATH=_blocked_slurmkit(tmp_path), SLURM_JOB_ID="91", SLURM_ARRAY_JOB_ID="90",
               SLURM_ARRAY_TASK_ID="1", SLURM_PROCID="1", SLURM_NTASKS="2", SLURM_JOB_NODELIST="gn[1-2]")
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=60)
    assert proc.returncode == 0, proc.stderr
    outcome = payload.load_outcome((folder / "tok_1_1_result.txt").read_text())
    assert outcome.ok, outcome.traceback
    assert outcome.value == ("90_1", "gamma:90_1", 1, 2, ["gn1", "gn2"], str(folder), str(call),
                             str(folder / "tok_1_1_result.txt"), str(folder / "tok_1_log.out"),
                             str(folder / "tok_1_log.out"), False)


def test_a_call_pickled_under_slurmkit_compat_imports_slurmkit_as_submitit_on_the_node(tmp_path):
    script = tmp_path / "pickle_it.py"
    script.write_text(
        "import sys\nimport submitit\nfrom slurmkit.api import payload\n"
        "def inside():\n    import submitit\n    return submitit.__name__, submitit.JobEnvironment().job_id\n"
        "open(sys.argv[1], 'w').write(payload.dump_call(inside, (), {}))\n")
    call = tmp_path / "call.txt"
    done = subprocess.run([sys.executable, "-m", "slurmkit.compat", str(script), str(call)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    proc = subprocess.run([sys.executable, "-c", payload.BOOTSTRAP, str(call), str(tmp_path / "r_%t.txt")],
                          capture_output=True, text=True, env=dict(os.environ, SLURM_JOB_ID="7", SLURM_PROCID="0"),
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert payload.load_outcome((tmp_path / "r_0.txt").read_text()).value == ("slurmkit.compat", "7")
