"""Parsers and argv builders of the Slurm layer, against recorded Slurm output."""

import json
from datetime import datetime
from pathlib import Path

import pytest

from slurmkit.errors import SlurmCommandError
from slurmkit.slurm import commands, parsers

DATA = Path(__file__).parent / "data"


def test_sbatch_argv_reads_the_script_from_stdin():
    assert commands.sbatch() == ["sbatch", "--parsable"]
    test_only = commands.sbatch(test_only=True)
    assert test_only[:2] == ["sh", "-c"] and test_only[2].endswith("exec sbatch --test-only")


def test_squeue_argv_asks_for_many_jobs_in_one_call():
    argv = commands.squeue_json(["1", "22", "333"], user="alice")
    assert argv[:2] == ["squeue", "--json"]
    assert "--jobs=1,22,333" in argv and "--user=alice" in argv


@pytest.mark.parametrize("out,expected", [("1234\n", "1234"), ("77;alpha\n", "77"),
                                          ("sbatch: warning: x\n42\n", "42")])
def test_parse_sbatch_parsable(out, expected):
    assert parsers.parse_sbatch_parsable(out) == expected


def test_parse_sbatch_parsable_without_id_raises():
    with pytest.raises(SlurmCommandError, match="no job id"):
        parsers.parse_sbatch_parsable("Submitted nothing\n")


def test_parse_test_only_estimate():
    est = parsers.parse_test_only(
        "sbatch: Job 1 to start at 2026-11-29T15:48:09 using 2 processors on nodes n[1-2] in partition gpu\n")
    assert est.start == datetime(2026, 11, 29, 15, 48, 9)
    assert est.nodes == "n[1-2]" and est.partition == "gpu" and est.cpus == 2


def test_parse_test_only_error_keeps_slurms_message():
    with pytest.raises(SlurmCommandError, match="Requested node configuration is not available"):
        parsers.parse_test_only("sbatch: error: Batch job submission failed: "
                                "Requested node configuration is not available\n")


def test_first_error_line_strips_prefixes():
    assert parsers.first_error_line("sbatch: error: Invalid partition name specified\n") == \
        "Invalid partition name specified"


def test_parse_squeue_json_2205_shape():
    text = json.dumps({"jobs": [{
        "job_id": 7, "name": "train", "job_state": "RUNNING", "partition": "gpu", "node_count": 2,
        "nodes": "an[1-2]", "start_time": 1795967289, "time_limit": 90, "user_name": "root",
        "state_reason": "None", "comment": "slurmkit:abc", "exit_code": 0, "cluster": "alpha",
        "standard_output": "/tmp/o-7.out"}]})
    [job] = parsers.parse_squeue_json(text)
    assert (job.job_id, job.state, job.node_count, job.nodelist) == ("7", "RUNNING", 2, "an[1-2]")
    assert job.time_limit == "01:30:00" and job.comment == "slurmkit:abc" and job.stdout == "/tmp/o-7.out"
    assert job.start_time == datetime.fromtimestamp(1795967289)


def test_parse_squeue_json_newer_shape():
    text = json.dumps({"jobs": [{
        "job_id": 8, "name": "x", "job_state": ["PENDING"], "node_count": {"set": True, "number": 3},
        "start_time": {"set": True, "infinite": False, "number": 0},
        "time_limit": {"set": True, "infinite": True, "number": 0},
        "exit_code": {"status": ["PENDING"], "return_code": {"set": True, "number": 0}}}]})
    [job] = parsers.parse_squeue_json(text)
    assert job.state == "PENDING" and job.node_count == 3 and job.start_time is None
    assert job.time_limit == "UNLIMITED" and not job.finished


def test_parse_squeue_parsable_keeps_delimiters_in_comment():
    d = commands.SQUEUE_DELIMITER
    line = d.join(["12", "n", "COMPLETED", "cpu", "1", "an3", "2026-01-02T03:04:05", "5:00", "bob", "None",
                   "slurmkit:tok" + d + "more"])
    [job] = parsers.parse_squeue_parsable(line + "\n")
    assert job.finished and job.comment == "slurmkit:tok" + d + "more"
    assert job.start_time == datetime(2026, 1, 2, 3, 4, 5)


def test_parse_topology_recorded():
    topo = parsers.parse_topology((DATA / "topology_22.05.txt").read_text())
    assert [s.name for s in topo.leaves] == ["leaf1", "leaf2"]
    spine = topo.switches[2]
    assert spine.level == 1 and spine.switches == "leaf[1-2]"


def test_parse_nodes_free_gpus():
    line = ("NodeName=an1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=2 CPUEfctv=4 CPUTot=4 Gres=gpu:h100:8 "
            "GresUsed=gpu:h100:3(IDX:0-2) NodeAddr=127.0.1.11 State=MIXED Partitions=gpu,cpu "
            "Reason=bad fan [root@2026-11-29T15:00:00]")
    [node] = parsers.parse_nodes(line)
    assert node.name == "an1" and node.state == "MIXED" and node.partitions == ("gpu", "cpu")
    assert node.total() == 8 and node.free() == 5 and node.usable
    # a reason on a node in service is a stale one (Slurm 24.11 keeps it after RESUME without accounting)
    assert (node.reason, node.reason_user, node.reason_time) == ("", "", None)
    [drained] = parsers.parse_nodes(line.replace("State=MIXED", "State=MIXED+DRAIN"))
    assert drained.reason == "bad fan" and drained.reason_user == "root" and not drained.usable


def test_parse_partitions():
    parts = parsers.parse_partitions("PartitionName=gpu AllowGroups=ALL Nodes=an[1-4] MaxTime=1-00:00:00\n"
                                     "PartitionName=cpu Nodes=an[1-4] MaxTime=UNLIMITED\n")
    assert parts["gpu"]["Nodes"] == "an[1-4]" and parts["cpu"]["MaxTime"] == "UNLIMITED"


def test_versions():
    assert parsers.parse_version("slurm 22.05.8\n") == "22.05.8"
    assert parsers.major_minor("22.05.8") == parsers.major_minor("22.5.0") == (22, 5)


def test_expand_output_pattern():
    assert parsers.expand_output_pattern("/o/%x-%j-%u.%%.%5j", "42", "train", "bob") == "/o/train-42-bob.%.00042"
    assert parsers.expand_output_pattern("/o/%N-%a", "42", "t", "b") == "/o/%N-%a"


def test_relative_output_joins_the_working_directory():
    base = {"job_id": 5, "name": "n", "user_name": "u", "current_working_directory": "/home/u/run"}
    [job] = parsers.parse_squeue_json(json.dumps({"jobs": [dict(base, standard_output="out-%j.txt")]}))
    assert job.stdout == "/home/u/run/out-5.txt"
    [job] = parsers.parse_squeue_json(json.dumps({"jobs": [base]}))
    assert job.stdout == "/home/u/run/slurm-5.out"


# Shape of `scontrol show config` on 22.05 (header, Key = Value lines, a
# plugin section after a blank line, the controller status line).
SHOW_CONFIG = """Configuration data as of 2026-11-30T15:04:11
AccountingStorageType   = accounting_storage/none
ClusterName             = alpha
MaxArraySize            = 1001
MinJobAge               = 3600 sec
SchedulerParameters     = bf_interval=5,max_switch_wait=120,nohold_on_prolog_fail
SlurmctldParameters     = (null)

Cgroup Support Configuration:
ClusterName             = not-the-controller
AllowedRAMSpace         = 100.0%

Slurmctld(primary) at 127.0.1.1 is UP
"""


def test_parse_config_keeps_the_controllers_values():
    config = parsers.parse_config(SHOW_CONFIG)
    assert config["ClusterName"] == "alpha"            # first occurrence wins
    assert config["MaxArraySize"] == "1001"
    assert config["MinJobAge"] == "3600 sec"
    assert config["SlurmctldParameters"] == "(null)"
    assert config["AllowedRAMSpace"] == "100.0%"
    assert "Configuration data as of 2026-11-30T15:04:11" not in config
    assert not any(k.startswith("Slurmctld(primary)") for k in config)


def test_scheduler_parameter_values_and_flags():
    config = parsers.parse_config(SHOW_CONFIG)
    assert parsers.scheduler_parameter(config, "max_switch_wait") == "120"
    assert parsers.scheduler_parameter(config, "bf_interval") == "5"
    assert parsers.scheduler_parameter(config, "nohold_on_prolog_fail") == ""
    assert parsers.scheduler_parameter(config, "bf_window") is None
    assert parsers.scheduler_parameter({}, "max_switch_wait") is None


def test_the_submit_once_wrapper_checks_the_renderers_own_trailer():
    # One definition: the remote wrapper refuses a script whose last line is not the trailer.
    assert '"%s" ]; then' % commands.SCRIPT_TRAILER in commands.SUBMIT_ONCE_SCRIPT
    assert "@TRAILER@" not in commands.SUBMIT_ONCE_SCRIPT


@pytest.mark.parametrize("text", ["2026-12-05T14:10:21", "2024-02-29T00:00:00", "1999-12-31T23:59:59",
                                  "2026-02-30T10:00:00", "2026-12-05T24:00:00", "2026-12-05 14:10:21",
                                  "2026-12-05", "2026-12-05T14:10:21.5", "2026-12-05T14:10:21+00:00",
                                  "2026-12-05T14:10:2x", "N/A", "Unknown", "None", ""])
def test_a_slurm_time_is_read_as_strptime_reads_slurms_form(text):
    """slurm_datetime skips strptime (its first call costs every status 2-3 ms) but reads the same."""
    try:
        expected = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        expected = None
    assert parsers.slurm_datetime(text) == expected


@pytest.mark.parametrize("text", ["2026-1-05T14:10:21", "\uff12026-12-05T14:10:21"])
def test_what_slurm_never_prints_is_not_a_time(text):
    """strptime also took unpadded fields and non-ASCII digits; Slurm prints neither, so neither is a time."""
    assert parsers.slurm_datetime(text) is None
