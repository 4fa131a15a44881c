"""Array limits, chunks, specs and shares (slurmkit.sweep.arrays), and the Slurm calls of sweeps
(slurmkit.sweep.slurmio) against output recorded on the dev clusters (Slurm 22.05.8)."""

import pytest

from slurmkit.errors import UsageError
from slurmkit.sweep import arrays as arr
from slurmkit.sweep import slurmio


def test_limits_come_from_max_array_size_and_max_array_tasks():
    assert arr.limits_from_config({"MaxArraySize": "1001"}) == arr.ArrayLimits(1000, 1001)
    limits = arr.limits_from_config({"MaxArraySize": "1001",
                                     "SchedulerParameters": "bf_interval=5,max_array_tasks=300,max_switch_wait=120"})
    assert limits == arr.ArrayLimits(1000, 300) and limits.chunk == 300
    assert arr.limits_from_config({}).chunk == 1001           # Slurm's default
    with pytest.raises(UsageError, match="cluster alpha does not run job arrays .MaxArraySize=0"):
        arr.limits_from_config({"MaxArraySize": "0"}, "alpha")


@pytest.mark.parametrize("count,limits,sizes", [
    (10, arr.ArrayLimits(3, 4), [4, 3, 3]),
    (1001, arr.ArrayLimits(999, 1000), [501, 500]),
    (1001, arr.ArrayLimits(1000, 1001), [1001]),
    (2500, arr.ArrayLimits(1000, 300), [278] * 7 + [277] * 2),
    (0, arr.ArrayLimits(3, 4), []),
])
def test_chunks_fit_the_limits_evenly(count, limits, sizes):
    got = arr.chunks(count, limits)
    assert sum(got) == count
    assert all(s <= limits.chunk for s in got)
    assert max(got, default=0) - min(got, default=0) <= 1
    assert len(got) == len(sizes) and sorted(got) == sorted(sizes)


def test_array_specs_compress_ranges_and_carry_the_throttle():
    assert arr.array_spec([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert arr.array_spec([42, 3, 17], throttle=4) == "3,17,42%4"
    assert arr.array_spec(range(1001), limits=arr.ArrayLimits(1000, 1001)) == "0-1000"
    with pytest.raises(UsageError, match="index 1001 is above the cluster's largest, 1000"):
        arr.array_spec([0, 1001], limits=arr.ArrayLimits(1000, 1001))
    with pytest.raises(UsageError, match="5 tasks in one array; the cluster takes at most 4"):
        arr.array_spec(range(5), limits=arr.ArrayLimits(10, 4))
    with pytest.raises(ValueError):
        arr.array_spec([])


def test_parse_indices_reads_what_sbatch_squeue_and_sacct_print():
    assert arr.parse_indices("0-2,5%4") == [0, 1, 2, 5]
    assert arr.parse_indices("[0-9,20]") == list(range(10)) + [20]
    assert arr.parse_indices("0-10:5") == [0, 5, 10]
    assert arr.parse_indices(arr.array_spec([3, 4, 9, 11, 12])) == [3, 4, 9, 11, 12]


def test_split_total_gives_each_at_least_one_and_keeps_the_total():
    assert arr.split_total(10, [16, 12]) in ([6, 4], [5, 5])
    assert arr.split_total(10, [16, 12]) == [6, 4]
    assert arr.split_total(3, [100, 1, 1]) == [1, 1, 1]
    assert sum(arr.split_total(7, [5, 3, 1])) == 7
    with pytest.raises(ValueError):
        arr.split_total(1, [1, 1])


def test_points_go_where_they_end_soonest():
    fast = arr.ClusterCapacity("alpha", 0, 16)
    slow = arr.ClusterCapacity("beta", 0, 8)
    split = arr.split_points(240, [fast, slow], 600)
    assert split == {"alpha": 160, "beta": 80}            # in proportion to what each runs at once
    late = arr.ClusterCapacity("gamma", 3600, 16)
    split = arr.split_points(48, [fast, late], 600)
    assert split == {"alpha": 48, "gamma": 0}              # starting in an hour: alpha is done before that
    split = arr.split_points(200, [fast, late], 600)
    assert split["alpha"] > split["gamma"] > 0 and sum(split.values()) == 200


def test_equal_clusters_split_evenly_and_ties_go_to_the_cheaper():
    a = arr.ClusterCapacity("a", 0, 4, price=4.0, order=0)
    b = arr.ClusterCapacity("b", 0, 4, price=1.2, order=1)
    assert arr.split_points(8, [a, b], 60) == {"a": 4, "b": 4}
    assert arr.split_points(1, [a, b], 60) == {"a": 0, "b": 1}


def test_slots_from_the_job_directives():
    one_gpu = [("nodes", "1"), ("ntasks-per-node", "1"), ("gpus-per-node", "h100:1")]
    assert arr.slots_for(one_gpu, 4, 4, 8) == 16              # 4 nodes x min(4 CPUs, 8 GPUs)
    assert arr.slots_for(one_gpu + [("cpus-per-task", "2")], 4, 4, 8) == 8
    assert arr.slots_for([("nodes", "2"), ("gres", "npu:ascend910b:8")], 3, 4, 8) == 1
    assert arr.slots_for([("nodes", "1"), ("ntasks-per-node", "1")], None, 4, 0) == 4


# -- slurmio: recorded on alpha (squeue --array --Format=..., sacct --parsable2) ----------------

D = "\x1f"
SQUEUE = "".join(D.join(f) + D + "\n" for f in [
    ("659", "3", "664", "COMPLETED", "None", "0", "an1", "0", "slurmkit:exp1"),
    ("659", "5", "659", "FAILED", "NonZeroExitCode", "512", "an1", "0", "slurmkit:exp1"),
    ("659", "1", "662", "PENDING", "BeginTime", "256", "", "1", "slurmkit:exp1"),
    ("660", "20", "660", "PENDING", "JobHeldUser", "0", "", "0", "slurmkit:exp2"),
    ("661", "0", "667", "CANCELLED", "None", "15", "an2", "0", "slurmkit:exp3"),
    ("662", "N/A", "662", "RUNNING", "None", "0", "an1", "0", "(null)"),
])


def test_squeue_tasks_parse_with_exit_status_and_signal():
    tasks = {t.key: t for t in slurmio.parse_squeue_tasks(SQUEUE)}
    assert set(tasks) == {("659", 3), ("659", 5), ("659", 1), ("660", 20), ("661", 0)}   # 662 is not an array
    assert tasks[("659", 5)].state == "FAILED" and tasks[("659", 5)].exit_code == 2
    assert tasks[("659", 5)].signal is None and tasks[("659", 5)].job_id == "659"
    assert tasks[("659", 1)].exit_code is None and tasks[("659", 1)].restarts == 1    # requeued: not ended
    assert tasks[("660", 20)].reason == "JobHeldUser" and tasks[("659", 3)].reason == ""
    assert tasks[("661", 0)].signal == 15 and tasks[("661", 0)].exit_code is None
    assert tasks[("659", 3)].comment == "slurmkit:exp1" and tasks[("659", 3)].nodes == "an1"


SACCT = """659_0|661|COMPLETED|0:0|an1
659_0.batch|661.batch|COMPLETED|0:0|an1
659_1|662|FAILED|1:0|an1
659_1.batch|662.batch|FAILED|1:0|an1
659_4|665|CANCELLED by 0|0:0|an2
659_4.batch|665.batch|CANCELLED|0:15|an2
660_[0-9,20]|660|PENDING|0:0|None assigned
"""


def test_sacct_tasks_parse_with_batch_exit_and_pending_ranges():
    tasks = {t.key: t for t in slurmio.parse_sacct_tasks(SACCT)}
    assert tasks[("659", 0)].state == "COMPLETED" and tasks[("659", 0)].exit_code == 0
    assert tasks[("659", 1)].exit_code == 1 and tasks[("659", 1)].job_id == "662"
    assert tasks[("659", 4)].state == "CANCELLED" and tasks[("659", 4)].signal == 15   # the batch step's end
    pending = [k for k in tasks if k[0] == "660"]
    assert sorted(i for _, i in pending) == list(range(10)) + [20]
    assert tasks[("660", 20)].state == "PENDING" and tasks[("660", 20)].exit_code is None


def test_argv_builders():
    argv = slurmio.squeue_tasks(["659", "660"])
    assert argv[:4] == ["squeue", "--array", "--noheader", "--states=all"] and "--jobs=659,660" in argv
    assert argv[-1].startswith("--Format=ArrayJobID:\x1f,ArrayTaskID:\x1f,") and argv[-1].endswith("Comment:\x1f")
    assert "--user=bob" in slurmio.squeue_tasks(user="bob")
    with pytest.raises(ValueError):
        slurmio.squeue_tasks()
    assert slurmio.update_jobs(["659_1", "659_4"], StartTime="now") == \
        ["scontrol", "update", "JobId=659_1,659_4", "StartTime=now"]
    assert slurmio.sacct_tasks(["659"])[:3] == ["sacct", "--noheader", "--parsable2"]


def test_tails_round_trip_through_a_real_shell(tmp_path):
    import subprocess

    a, b = tmp_path / "a b.log", tmp_path / "missing.log"
    a.write_text("x" * 100 + "\nlast line\n")
    out = subprocess.run(slurmio.tails([str(a), str(b)], 20), capture_output=True, text=True, check=True).stdout
    got = slurmio.parse_tails(out)
    assert got == {str(a): "x" * 9 + "\nlast line\n", str(b): ""}


def test_squeue_exit_as_a_pair_or_not_at_all():
    lines = "".join(D.join(f) + D + "\n" for f in [
        ("700", "0", "701", "FAILED", "NonZeroExitCode", "3:0", "an1", "0", ""),
        ("700", "1", "702", "CANCELLED", "None", "0:15", "an1", "0", ""),
        ("700", "2", "703", "FAILED", "None", "N/A", "an1", "0", ""),
    ])
    tasks = {t.index: t for t in slurmio.parse_squeue_tasks(lines)}
    assert (tasks[0].exit_code, tasks[0].signal) == (3, None)
    assert (tasks[1].exit_code, tasks[1].signal) == (None, 15)
    assert (tasks[2].exit_code, tasks[2].signal) == (None, None)
