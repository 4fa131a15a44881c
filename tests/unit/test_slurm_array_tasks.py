"""Array tasks as Slurm reports them (slurmkit.slurm.commands/parsers: ``squeue --array``, ``sacct``,
``scontrol update``), against output recorded on the dev clusters (Slurm 22.05.8 unless a test says)."""

import pytest

from slurmkit.slurm import commands, parsers


D = "\x1f"
SQUEUE = "".join(D.join(f) + D + "\n" for f in [
    ("659", "3", "664", "COMPLETED", "None", "0", "an1", "0", "slurmkit:exp1"),
    ("659", "5", "659", "FAILED", "NonZeroExitCode", "512", "an1", "0", "slurmkit:exp1"),
    ("659", "1", "662", "PENDING", "BeginTime", "256", "", "1", "slurmkit:exp1"),
    ("660", "20", "660", "PENDING", "JobHeldUser", "0", "", "0", "slurmkit:exp2"),
    ("661", "0", "667", "CANCELLED", "None", "15", "an2", "0", "slurmkit:exp3"),
    ("662", "N/A", "662", "RUNNING", "None", "0", "an1", "0", "(null)"),
])


def test_squeue_array_tasks_parse_with_exit_status_and_signal():
    tasks = {t.key: t for t in parsers.parse_array_tasks(SQUEUE)}
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


def test_sacct_array_tasks_parse_with_batch_exit_and_pending_ranges():
    tasks = {t.key: t for t in parsers.parse_sacct_array_tasks(SACCT)}
    assert tasks[("659", 0)].state == "COMPLETED" and tasks[("659", 0)].exit_code == 0
    assert tasks[("659", 1)].exit_code == 1 and tasks[("659", 1)].job_id == "662"
    assert tasks[("659", 4)].state == "CANCELLED" and tasks[("659", 4)].signal == 15   # the batch step's end
    pending = [k for k in tasks if k[0] == "660"]
    assert sorted(i for _, i in pending) == list(range(10)) + [20]
    assert tasks[("660", 20)].state == "PENDING" and tasks[("660", 20)].exit_code is None


def test_argv_builders():
    argv = commands.squeue_array_tasks(["659", "660"])
    assert argv[:4] == ["squeue", "--array", "--noheader", "--states=all"] and "--jobs=659,660" in argv
    assert argv[-1].startswith("--Format=ArrayJobID:\x1f,ArrayTaskID:\x1f,") and argv[-1].endswith("Comment:\x1f")
    assert "--user=bob" in commands.squeue_array_tasks(user="bob")
    with pytest.raises(ValueError):
        commands.squeue_array_tasks()
    assert commands.update_jobs(["659_1", "659_4"], StartTime="now") == \
        ["scontrol", "update", "JobId=659_1,659_4", "StartTime=now"]
    assert commands.sacct_array_tasks(["659"])[:3] == ["sacct", "--noheader", "--parsable2"]



def test_squeue_exit_as_a_pair_or_not_at_all():
    lines = "".join(D.join(f) + D + "\n" for f in [
        ("700", "0", "701", "FAILED", "NonZeroExitCode", "3:0", "an1", "0", ""),
        ("700", "1", "702", "CANCELLED", "None", "0:15", "an1", "0", ""),
        ("700", "2", "703", "FAILED", "None", "N/A", "an1", "0", ""),
    ])
    tasks = {t.index: t for t in parsers.parse_array_tasks(lines)}
    assert (tasks[0].exit_code, tasks[0].signal) == (3, None)
    assert (tasks[1].exit_code, tasks[1].signal) == (None, 15)
    assert (tasks[2].exit_code, tasks[2].signal) == (None, None)

def test_task_times_are_read_only_once_they_mean_it_and_lines_without_them_still_parse():
    from datetime import datetime

    d = "\x1f"
    lines = ["7" + d + "0" + d + "8" + d + "PENDING" + d + "Priority" + d + "0" + d + "" + d + "0" + d +
             "2026-11-30T19:00:00" + d + "2026-11-30T19:05:00" + d + "slurmkit:t" + d,      # estimates
             "7" + d + "1" + d + "9" + d + "RUNNING" + d + "None" + d + "0" + d + "an1" + d + "0" + d +
             "2026-11-30T18:00:00" + d + "2026-11-30T18:05:00" + d + "slurmkit:t" + d,      # end: its limit
             "7" + d + "2" + d + "10" + d + "FAILED" + d + "NonZeroExitCode" + d + "768" + d + "an2" + d + "0" +
             d + "2026-11-30T18:00:00" + d + "2026-11-30T18:00:07" + d + "slurmkit:t" + d,
             "7" + d + "3" + d + "11" + d + "COMPLETED" + d + "None" + d + "0" + d + "an3" + d + "0" + d +
             "slurmkit:t" + d]                                                              # the old 9 fields
    tasks = {t.index: t for t in parsers.parse_array_tasks("\n".join(lines) + "\n")}
    at = datetime(2026, 11, 30, 18, 0, 0).timestamp()
    assert (tasks[0].start_time, tasks[0].end_time) == (None, None)
    assert (tasks[1].start_time, tasks[1].end_time) == (at, None)
    assert (tasks[2].start_time, tasks[2].end_time, tasks[2].exit_code) == (at, at + 7, 3)
    assert (tasks[3].state, tasks[3].comment, tasks[3].start_time) == ("COMPLETED", "slurmkit:t", None)
    assert all(t.comment == "slurmkit:t" for t in tasks.values())


# squeue --array of array 3935 on the dev cluster alpha (22.05.8) after `scancel 3935_1 ... 3935_5` of its
# five pending tasks while task 0 ran: the ended array record that held them, then the running task.
SQUEUE_AFTER_CANCELLING_PENDING = ("3935\x1fN/A\x1f3935\x1fCANCELLED\x1fJobArrayTaskLimit\x1f0\x1f\x1f0\x1fslurmkit:sw-1\x1f\n"
                                   "3935\x1f0\x1f3936\x1fRUNNING\x1fNone\x1f0\x1fan1\x1f0\x1fslurmkit:sw-1\x1f\n"
                                   "3940\x1fN/A\x1f3940\x1fCOMPLETED\x1fNone\x1f0\x1fan2\x1f0\x1f(null)\x1f\n")


def test_an_ended_array_record_stands_for_the_tasks_that_never_started():
    tasks = parsers.parse_array_tasks(SQUEUE_AFTER_CANCELLING_PENDING)
    assert [(t.key, t.state) for t in tasks] == [(("3935", 0), "RUNNING")]     # no line per cancelled task
    rest = parsers.parse_unstarted_arrays(SQUEUE_AFTER_CANCELLING_PENDING)
    assert {k: v.state for k, v in rest.items()} == {"3935": "CANCELLED", "3940": "COMPLETED"}   # 3940: no array
