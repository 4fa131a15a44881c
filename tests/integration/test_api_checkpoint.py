"""Checkpointing on the real clusters: a Checkpointable call sent USR1 (as Slurm sends it before the time
limit, or on preemption) is requeued by Slurm under its own id and resumes from its own state to the right
value: a single call, a map_array task and a call inside a ``with executor.batch()`` block (an array whose
tasks each carry their own function), each locally on alpha and over SSH (gamma through its login node).

The six are submitted together and signalled together by one module-scoped fixture, so that Slurm's hold
of a requeued job (the launch credential's life, 30 s on the devclusters) is waited for once, not six
times; each test then reads its own case.  Then slurm_max_num_timeout on its own: Slurm's own USR1 before
the time limit restarts a call that many times and no more.
"""

import json
import os
import sys
from pathlib import Path

import cloudpickle
import pytest

import slurmkit
from slurmkit.helpers import Checkpointable
from slurmkit.site import find_site

from conftest import job_info, slurm
from harness import wait_until

ROOT = Path(__file__).resolve().parents[2]
SITE = str(ROOT / "site_configs" / "local.yaml")
# The nodes cannot import this test module: its classes travel with the calls.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.slow


def requeue_hold_s(cluster) -> int:
    """How long Slurm holds a requeued job before it may start again: until its launch credential has expired
    (AuthInfo's cred_expire: 120 s by default, 30 s on the devclusters, devcluster/daemons.py), read from the
    cluster's own config; then it is scheduled (backfill every 5 s here) and starts."""
    import re

    m = re.search(r"cred_expire=(\d+)", slurm(cluster, "scontrol", "show", "config").stdout)
    return (int(m.group(1)) if m else 120) + 1


class Count(Checkpointable):
    """Counts to ``total`` keeping its progress in itself; a first run given ``pause`` waits there for USR1."""

    def __init__(self):
        self.step, self.starts = 0, []

    def __call__(self, total, pause=None):
        import time

        from slurmkit.helpers import JobEnvironment

        self.starts.append(self.step)
        while self.step < total:
            if pause is not None and len(self.starts) == 1 and self.step == pause:
                print("paused at", self.step, flush=True)
                while True:          # until USR1: the checkpoint saves this object as it is
                    time.sleep(0.1)
            self.step += 1
        return {"step": self.step, "starts": self.starts, "restarts": os.environ.get("SLURM_RESTART_COUNT"),
                "job": JobEnvironment().global_job_id}


def add(a, b):
    return a + b


def _remote_gamma():
    """The site with gamma reached only through its login node (its slurm.conf unknown here), alpha locally."""
    site = find_site(SITE)
    gamma = site.clusters["gamma"]._replace(slurm_conf=None)
    return site._replace(clusters=dict(site.clusters, gamma=gamma))


@pytest.fixture(scope="module")
def restarted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("checkpoint")
    local = slurmkit.AutoExecutor(tmp / "local", cluster="alpha", site=SITE)
    local.update_parameters(timeout_min=5, slurm_partition="cpu")   # Slurm's own USR1 at 3.5 min: after the test
    remote = slurmkit.AutoExecutor(tmp / "here", cluster="gamma", site=_remote_gamma(), python=sys.executable,
                                   cluster_folder=str(tmp / "there"))
    remote.update_parameters(timeout_min=5)
    try:
        from slurmkit.session import reach

        assert reach(remote.session.site.cluster("gamma")) == "ssh"
        jobs = {"local": local.submit(Count(), 20, 7), "ssh": remote.submit(Count(), 20, 7)}
        for where, ex in (("local", local), ("ssh", remote)):
            jobs["array", where] = ex.map_array(Count(), [5, 20, 12], [None, 7, None])
            with ex.batch():
                jobs["batch", where] = [ex.submit(add, 2, 3), ex.submit(Count(), 15, 4)]
        signalled = [jobs["local"], jobs["ssh"]] + [jobs[case, where][1] for case in ("array", "batch")
                                                    for where in ("local", "ssh")]
        for job in signalled:
            wait_until(lambda: "paused at" in (job.stdout() or ""), 60, what="%s to reach its pause" % job.job_id)
        for job in signalled:
            slurm(job.cluster, "scancel", "--signal=USR1", "--batch", job.job_id.split(":")[1])
        deadline = max(requeue_hold_s("alpha"), requeue_hold_s("gamma")) + 60
        for job in signalled:
            job.wait(timeout=deadline)
        yield jobs
    finally:
        local.close()
        remote.close()


def _restarted_once(job, total, pause):
    cluster, slurm_id = job.job_id.split(":")
    assert job.result() == {"step": total, "starts": [0, pause], "restarts": "1", "job": job.job_id}
    info = job_info(cluster, slurm_id)
    assert info["Restarts"] == "1" and info["JobState"] == "COMPLETED", info
    return info


def test_a_local_call_sent_usr1_is_requeued_once_under_its_id_and_resumes_from_its_own_state(restarted):
    job = restarted["local"]
    info = _restarted_once(job, 20, 7)          # continued from 7, not from 0, under the same id
    assert info["Requeue"] == "1" and job.job_id.startswith("alpha:")


def test_over_ssh_the_checkpoint_is_written_and_read_on_the_cluster(restarted):
    job = restarted["ssh"]
    assert job.job_id.startswith("gamma:")
    _restarted_once(job, 20, 7)
    # The saved call stayed in the cluster's folder, beside the call: nothing came through this machine's folder,
    # which holds the job records alone (this call's, and those of the SSH array and batch).
    there = Path(job.paths.cluster_folder)
    assert (there / (Path(job.paths.submitted_pickle).name.replace("_call", "_checkpoint"))).exists()
    here = [p.name for p in Path(job.paths.folder).iterdir()]
    assert job.job_id.replace(":", "_") + ".job.json" in here and all(n.endswith(".job.json") for n in here), here


@pytest.mark.parametrize("where", ["local", "ssh"])
def test_an_array_task_sent_usr1_restarts_alone_from_its_own_checkpoint(restarted, where):
    first, signalled, third = restarted["array", where]
    assert first.job_id.startswith("alpha:" if where == "local" else "gamma:")
    _restarted_once(signalled, 20, 7)
    for job, total in ((first, 5), (third, 12)):     # the other tasks ran once, to their end
        assert job.result() == {"step": total, "starts": [0], "restarts": None, "job": job.job_id}
        assert job_info(job.cluster, job.job_id.split(":")[1])["Restarts"] == "0"
    token = Path(first.paths.submitted_pickle).name[:-len("_call.txt")]       # the array's files
    checkpoints = sorted(Path(first.paths.cluster_folder).glob(token + "_*_checkpoint.txt"))
    assert [p.name for p in checkpoints] == [token + "_1_checkpoint.txt"]


@pytest.mark.parametrize("where", ["local", "ssh"])
def test_a_checkpointable_call_in_a_batch_is_requeued_and_its_neighbour_is_not_disturbed(restarted, where):
    plain, counted = restarted["batch", where]
    array = plain.job_id.rsplit("_", 1)[0]
    assert (plain.job_id, counted.job_id) == (array + "_0", array + "_1")
    assert array.startswith("alpha:" if where == "local" else "gamma:")
    assert plain.result() == 5 and job_info(plain.cluster, plain.job_id.split(":")[1])["Restarts"] == "0"
    info = _restarted_once(counted, 15, 4)
    assert info["Requeue"] == "1"                 # the batch's array asked for --requeue: one call is checkpointable


class Endless(Checkpointable):
    """Runs until its time limit on every start, counting its starts in itself (the saved call carries them)."""

    def __init__(self):
        self.starts = 0

    def __call__(self):
        import time

        self.starts += 1
        print("start", self.starts, flush=True)
        while True:
            time.sleep(0.1)


def test_slurm_max_num_timeout_restarts_a_call_that_many_times_after_its_time_limit_and_no_more(tmp_path):
    # Slurm's own USR1, 90 s before a 2-minute limit (up to a minute late: slurmctld checks limits about every
    # 30 s), is the limit's each time: the first run is requeued, the second ends with submitit's message.
    with slurmkit.AutoExecutor(tmp_path, cluster="alpha", site=SITE, slurm_max_num_timeout=1) as ex:
        ex.update_parameters(timeout_min=2, slurm_partition="cpu")
        job = ex.submit(Endless())
        job.wait(timeout=2 * 120 + requeue_hold_s("alpha") + 60)
        with pytest.raises(slurmkit.UncompletedJobError,
                           match=r"timed-out too many times \(2; max_num_timeout=1\)"):
            job.result()
    info = job_info("alpha", job.job_id.split(":")[1])
    assert (info["Restarts"], info["JobState"]) == ("1", "FAILED"), info
    saved = Path(job.paths.cluster_folder) / Path(job.paths.submitted_pickle).name.replace("_call", "_checkpoint")
    assert json.loads(saved.read_text().split("\n")[0])["timeouts"] == 1     # the first limit, counted once
