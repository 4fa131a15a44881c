"""Array limits, chunks, specs and shares (slurmkit.sweep.arrays)."""

import pytest

from slurmkit.errors import UsageError
from slurmkit.slurm.parsers import parse_array_indices
from slurmkit.sweep import arrays as arr


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


def test_array_indices_read_what_sbatch_squeue_and_sacct_print():
    assert parse_array_indices("0-2,5%4") == [0, 1, 2, 5]
    assert parse_array_indices("[0-9,20]") == list(range(10)) + [20]
    assert parse_array_indices("0-10:5") == [0, 5, 10]
    assert parse_array_indices(arr.array_spec([3, 4, 9, 11, 12])) == [3, 4, 9, 11, 12]


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
