"""submitit's JobEnvironment inside calls on the real clusters: each rank of a multi-task call sees its own
ranks and node, an array task its array's ids, and over SSH the call's files are the cluster's."""

import os
import sys
from pathlib import Path

import cloudpickle
import pytest

import slurmkit

ROOT = Path(__file__).resolve().parents[2]
SITE = str(ROOT / "site_configs" / "local.yaml")
# The nodes cannot import this test module: its functions travel with the calls.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _describe():
    # The class itself travels with the call (slurmkit.helpers is pickled by value): the nodes need no slurmkit.
    from slurmkit.helpers import JobEnvironment

    env = JobEnvironment()
    paths = env.paths
    return {"job_id": env.job_id, "raw": env.raw_job_id, "array": (env.array_job_id, env.array_task_id),
            "global": env.global_job_id, "rank": env.global_rank, "local": env.local_rank, "node": env.node,
            "tasks": env.num_tasks, "nodes": env.num_nodes, "host": env.hostname, "hosts": env.hostnames,
            "cluster": env.cluster, "slurm_node": os.environ["SLURMD_NODENAME"],
            "paths": (str(paths.folder), paths.submitted_pickle, paths.result_pickle, paths.stdout),
            "files": (os.path.exists(paths.submitted_pickle), os.path.exists(paths.stdout))}


def test_each_rank_of_a_four_task_call_on_two_nodes_sees_its_own_ranks(tmp_path):
    with slurmkit.AutoExecutor(tmp_path / "jobs", cluster="alpha", site=SITE) as ex:
        ex.update_parameters(timeout_min=3, slurm_partition="cpu", nodes=2, tasks_per_node=2)
        job = ex.submit(_describe)
        seen = job.results()
    slurm_id = job.job_id.split(":")[1]
    hosts = seen[0]["hosts"]
    assert len(hosts) == 2 and all(s["hosts"] == hosts for s in seen)
    # Slurm's block distribution: ranks 0 and 1 on the first node, 2 and 3 on the second.
    assert [(s["rank"], s["local"], s["node"], s["host"]) for s in seen] == [
        (0, 0, 0, hosts[0]), (1, 1, 0, hosts[0]), (2, 0, 1, hosts[1]), (3, 1, 1, hosts[1])]
    for rank, s in enumerate(seen):
        assert (s["job_id"], s["raw"], s["array"], s["global"]) == (slurm_id, slurm_id, (None, None), job.job_id)
        assert (s["tasks"], s["nodes"], s["cluster"], s["host"]) == (4, 2, "slurm", s["slurm_node"])
        assert s["paths"] == (str(job.paths.cluster_folder), job.paths.submitted_pickle,
                              job.paths.result_pickle.replace("_0_result", "_%d_result" % rank), job.paths.stdout)
        assert s["files"] == (True, True)


def test_array_tasks_over_ssh_see_their_array_and_the_clusters_files(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMKIT_VIA", "ssh")
    there = tmp_path / "there"
    with slurmkit.AutoExecutor(tmp_path / "here", cluster="gamma", site=SITE, python=sys.executable,
                               cluster_folder=str(there)) as ex:
        ex.update_parameters(timeout_min=3)
        jobs = ex.map_array(lambda _: _describe(), range(2))
        seen = [j.result() for j in jobs]
    array = jobs[0].job_id.split(":")[1].split("_")[0]
    for index, (job, s) in enumerate(zip(jobs, seen)):
        assert job.job_id == "gamma:%s_%d" % (array, index)
        assert (s["job_id"], s["array"], s["global"]) == ("%s_%d" % (array, index), (array, str(index)), job.job_id)
        assert (s["rank"], s["local"], s["node"], s["tasks"], s["nodes"], s["hosts"]) == (
            0, 0, 0, 1, 1, [s["slurm_node"]])
        assert s["paths"] == (str(there), job.paths.submitted_pickle, job.paths.result_pickle, job.paths.stdout)
        assert s["paths"][2].startswith(str(there)) and s["files"] == (True, True)


def test_submitit_job_environment_through_compat_in_an_unchanged_script(tmp_path):
    import subprocess

    (tmp_path / "env_example.py").write_text(
        "import submitit\n\n"
        "def rank():\n"
        "    env = submitit.JobEnvironment()\n"
        "    return env.global_rank, env.num_tasks, env.job_id\n\n"
        "executor = submitit.AutoExecutor(folder='logs')\n"
        "executor.update_parameters(timeout_min=2, slurm_partition='cpu', tasks_per_node=2)\n"
        "job = executor.submit(rank)\n"
        "print(job.job_id, job.results())\n")
    proc = subprocess.run([sys.executable, "-m", "slurmkit.compat", "env_example.py"], cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, SLURMKIT_SITE=SITE))
    assert proc.returncode == 0, proc.stderr
    job_id, _, results = proc.stdout.strip().partition(" ")
    slurm_id = job_id.split(":")[1]
    assert results == repr([(0, 2, slurm_id), (1, 2, slurm_id)])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
