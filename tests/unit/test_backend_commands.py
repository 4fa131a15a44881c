"""The command backend's calls for requeue and health: jobs by id (squeue, then sacct), nodes with
their reasons, drain/down/resume, requeue/hold/release; their RPC counts and their errors.

Answers come from slurmkit.testing.FakeSlurm (outputs in the recorded 22.05 shapes) and, where
the exact text matters, from the recordings in tests/unit/data/slurm replayed verbatim.
"""

import json
from pathlib import Path

import pytest

from slurmkit.errors import SlurmCommandError, SlurmUnavailableError, UsageError
from slurmkit.slurm import commands
from slurmkit.slurm.backend import CommandBackend, SlurmBackend
from slurmkit.testing import FakeSlurm

DATA = Path(__file__).parent / "data" / "slurm"
SCRIPT = "#!/bin/sh\n#SBATCH --job-name=train\n#SBATCH --time=00:30:00\npython train.py\n"


def recorded(cluster, what):
    return json.loads((DATA / ("%s-%s-22.05.json" % (cluster, what))).read_text())


def rpcs(slurm, since=0):
    """The Slurm programs run since ``since`` (each is one or more controller RPCs)."""
    return [argv[0] if argv[0] != "scontrol" else "scontrol " + next(a for a in argv[1:] if not a.startswith("--"))
            for argv in slurm.commands[since:]]


# ------------------------------------------------------------------ jobs_by_id

def test_jobs_by_id_without_accounting_is_one_squeue_whatever_the_count():
    slurm = FakeSlurm("beta")
    ids = [slurm.submit(SCRIPT) for _ in range(50)]
    for job_id in ids[:10]:
        slurm.finish(job_id, "COMPLETED")
    slurm.forget(ids[0])                                    # past MinJobAge
    before = len(slurm.commands)
    found = slurm.jobs_by_id(ids + ["999999"])
    assert set(found) == set(ids[1:])                       # forgotten and unknown ids: absent
    assert list(found) == ids[1:]                           # in the caller's order
    assert found[ids[1]].state == "COMPLETED" and found[ids[20]].state == "PENDING"
    # one squeue; sacct is not even tried (config said there is no accounting)
    assert rpcs(slurm, before) == ["squeue", "scontrol show"]
    before = len(slurm.commands)
    slurm.jobs_by_id(ids + ["999999"])
    assert rpcs(slurm, before) == ["squeue"]                # the storage type is asked once per backend


def test_jobs_by_id_with_accounting_asks_sacct_once_for_what_squeue_forgot():
    slurm = FakeSlurm("alpha", accounting=True)
    ids = [slurm.submit(SCRIPT) for _ in range(20)]
    slurm.has_accounting()
    for job_id in ids[:5]:
        slurm.set_state(job_id, "RUNNING")
        slurm.finish(job_id, "FAILED", exit_code=3)
        slurm.forget(job_id)
    slurm.finish(ids[5], "CANCELLED")                       # cancelled while pending
    slurm.forget(ids[5])
    before = len(slurm.commands)
    found = slurm.jobs_by_id(ids + ["999999"])
    assert rpcs(slurm, before) == ["squeue", "sacct"]
    sacct = slurm.commands[-1]
    assert "--jobs=%s" % ",".join(ids[:6] + ["999999"]) in sacct   # only what squeue did not know
    assert list(found) == ids
    assert [found[i].state for i in ids[:6]] == ["FAILED"] * 5 + ["CANCELLED"]
    assert found[ids[0]].nodelist == "n1" and found[ids[5]].nodelist == ""
    assert found[ids[6]].state == "PENDING"
    # everything squeue knows: no sacct at all
    before = len(slurm.commands)
    slurm.jobs_by_id(ids[6:])
    assert rpcs(slurm, before) == ["squeue"]


def test_jobs_by_id_of_nothing_costs_nothing():
    slurm = FakeSlurm()
    assert slurm.jobs_by_id([]) == {} and slurm.commands == []


def test_sacct_failing_is_an_error_not_a_missing_job():
    # With accounting configured, a slurmdbd that does not answer must not read as "the job is gone".
    slurm = FakeSlurm("alpha", accounting=True)
    job = slurm.submit(SCRIPT)
    slurm.forget(job)
    slurm.answer(["sacct"], returncode=1, stderr=(
        "sacct: error: slurm_persist_conn_open_without_init: failed to open persistent connection to host:"
        "127.0.1.3:17119: Connection refused\n"
        "sacct: error: Problem talking to the database: Connection refused\n"))
    with pytest.raises(SlurmUnavailableError) as caught:
        slurm.jobs_by_id([job])
    # The first error line (where) and the last (what it means), in one line.
    assert str(caught.value) == ("slurmdbd on cluster alpha does not answer (sacct): slurm_persist_conn_open_without_"
                                 "init: failed to open persistent connection to host:127.0.1.3:17119: Connection "
                                 "refused (Problem talking to the database: Connection refused)")
    slurm.answer(["sacct"], returncode=1, stderr="sacct: error: Unknown arguments\n")
    with pytest.raises(SlurmCommandError, match="sacct failed on cluster alpha: Unknown arguments"):
        slurm.jobs_by_id([job])


def test_squeue_unreachable_is_an_error():
    slurm = FakeSlurm("beta")
    slurm.answer(["squeue"], stderr="squeue: error: Unable to contact slurm controller (connect failure)\n",
                 returncode=1)
    with pytest.raises(SlurmUnavailableError, match="slurmctld on cluster beta does not answer"):
        slurm.jobs_by_id(["1"])


def test_a_command_that_fails_saying_nothing_is_named_with_its_exit_status():
    # scontrol killed by a signal (CI once saw "scontrol show node failed ...: (no message)" and
    # nothing more): the status is the one clue there is.
    slurm = FakeSlurm("scale", nodes=["sn1"])
    slurm.answer(["scontrol", "--oneliner", "--details", "show", "node"], returncode=-11)
    with pytest.raises(SlurmCommandError, match=r"show node failed on cluster scale: \(no message\), exit status -11$"):
        slurm.node_states(["sn1"])


def test_recorded_sacct_without_accounting_reads_as_no_jobs():
    # What sacct really says on beta (AccountingStorageType=none): accounting() is empty, not an error.
    r = recorded("beta", "sacct")
    slurm = FakeSlurm("beta")
    slurm.replay(r)
    ids = r["argv"][-2][len("--jobs="):].split(",")
    assert slurm.accounting(ids) == []


def test_recorded_config_decides_accounting():
    for cluster, expected in (("alpha", True), ("beta", False)):
        slurm = FakeSlurm(cluster)
        slurm.replay(recorded(cluster, "config"))
        assert slurm.has_accounting() is expected
        assert slurm.has_accounting() is expected
        assert slurm.commands.count(tuple(commands.show_config())) == 1


# ------------------------------------------------------------------ nodes

def test_drain_resume_round_trip_keeps_reason_user_and_time():
    slurm = FakeSlurm("alpha", nodes=["an1", "an2", "an3"], user="root")
    job = slurm.submit(SCRIPT)
    slurm.set_state(job, "RUNNING")                        # on an1
    slurm.drain(["an1", "an2"], "slurmkit: gpu count 7 < 8")
    states = {n.name: n for n in slurm.node_states()}
    assert states["an1"].state == "MIXED+DRAIN" and states["an2"].state == "IDLE+DRAIN"
    assert states["an1"].reason == "slurmkit: gpu count 7 < 8" and states["an1"].reason_user == "root"
    assert states["an1"].reason_time == slurm.clock.now().replace(microsecond=0)
    assert states["an3"].usable and not states["an1"].usable
    assert slurm.commands[-2] == ("scontrol", "update", "NodeName=an1,an2", "State=DRAIN",
                                  "Reason=slurmkit: gpu count 7 < 8")
    slurm.resume(["an1", "an2"])
    assert [(n.name, n.state, n.reason) for n in slurm.node_states(["an1", "an2"])] == \
        [("an1", "MIXED", ""), ("an2", "IDLE", "")]


def test_resume_is_done_when_the_nodes_are_in_service():
    # Slurm refuses RESUME of a node in service ("Invalid node state specified")
    # and resumes the others named with it: slurmkit reads the nodes again.
    slurm = FakeSlurm("beta", nodes=["bn1", "bn2", "bn3"])
    slurm.drain(["bn2"], "slurmkit: mount:/scratch")
    before = len(slurm.commands)
    slurm.resume(["bn1", "bn2"])
    assert rpcs(slurm, before) == ["scontrol update", "scontrol show"]
    assert [(n.state, n.reason) for n in slurm.node_states(["bn1", "bn2"])] == [("IDLE", ""), ("IDLE", "")]
    before = len(slurm.commands)
    slurm.resume(["bn2"])                                   # again: nothing left to do, no error
    assert rpcs(slurm, before) == ["scontrol update", "scontrol show"]


def test_resume_refused_for_a_node_still_out_of_service_says_so():
    slurm = FakeSlurm("beta", nodes=["bn1", "bn2"])
    slurm.set_node("bn1", "DRAIN", "admin: fan")
    slurm.answer(["scontrol", "update"], stderr="slurm_update error: Invalid node state specified\n", returncode=1)
    with pytest.raises(SlurmCommandError, match="State=RESUME failed on cluster beta: .*Invalid node state"):
        slurm.resume(["bn1", "bn2"])
    # only bn1 was still out of service: the second try named it alone
    assert slurm.commands[-1] == ("scontrol", "update", "NodeName=bn1", "State=RESUME")
    with pytest.raises(SlurmCommandError, match="Invalid node name"):
        FakeSlurm("beta", nodes=["bn1"]).resume(["nosuchnode"])


def test_down_fails_the_jobs_on_the_node():
    slurm = FakeSlurm("alpha", nodes=["an1", "an2"])
    job = slurm.submit(SCRIPT)
    slurm.set_state(job, "RUNNING")
    slurm.down(["an1"], "health: xid 79")
    assert slurm.jobs_by_id([job])[job].state == "NODE_FAIL"
    assert slurm.node_states(["an1"])[0].state == "DOWN"


def test_node_states_by_name_is_one_call():
    slurm = FakeSlurm(nodes=["n1", "n2", "n3"])
    before = len(slurm.commands)
    assert [n.name for n in slurm.node_states(["n3", "n1"])] == ["n1", "n3"]
    assert len(slurm.commands) == before + 1 and slurm.commands[-1][-1] == "n3,n1"
    assert slurm.node_states([]) == [] and len(slurm.commands) == before + 1


def test_a_drain_needs_a_reason_and_nothing_to_do_runs_nothing():
    slurm = FakeSlurm()
    with pytest.raises(UsageError, match="needs a reason"):
        slurm.drain(["n1"], "  ")
    slurm.drain([], "x")
    slurm.resume([])
    slurm.requeue([])
    assert slurm.commands == []


@pytest.mark.parametrize("cluster", ["alpha", "beta"])
def test_recorded_drain_and_resume_succeed(cluster):
    slurm = FakeSlurm(cluster)
    for what in ("drain", "down", "resume"):
        slurm.replay(recorded(cluster, what))
    drain = recorded(cluster, "drain")["argv"]
    nodes = drain[2][len("NodeName="):].split(",")
    slurm.drain(nodes, drain[4][len("Reason="):])
    down = recorded(cluster, "down")["argv"]
    slurm.down(down[2][len("NodeName="):].split(","), down[4][len("Reason="):])
    slurm.resume(recorded(cluster, "resume")["argv"][2][len("NodeName="):].split(","))


def test_recorded_refusals_keep_slurms_words():
    slurm = FakeSlurm("alpha")
    slurm.replay(recorded("alpha", "drain-unknown"))
    slurm.replay(recorded("alpha", "hold-unknown"))
    with pytest.raises(SlurmCommandError) as caught:
        slurm.drain(["nosuchnode"], "x")
    assert str(caught.value) == ("scontrol update State=DRAIN failed on cluster alpha: "
                                 "slurm_update error: Invalid node name specified")
    with pytest.raises(SlurmCommandError,
                       match=r"scontrol hold failed on cluster alpha: Invalid job id specified for job 999999 \(slurm_suspend error: Invalid job id specified\)"):
        slurm.hold(["999999"])


# ------------------------------------------------------------------ job control

def test_requeue_hold_release():
    slurm = FakeSlurm()
    running, pending = slurm.submit(SCRIPT), slurm.submit(SCRIPT)
    slurm.set_state(running, "RUNNING")
    slurm.hold([pending])
    assert slurm.jobs_by_id([pending])[pending].reason == "JobHeldUser"
    slurm.release([pending])
    assert slurm.jobs_by_id([pending])[pending].reason == "None"
    slurm.requeue([running])
    job = slurm.jobs_by_id([running])[running]
    assert (job.state, job.nodelist) == ("PENDING", "")
    assert slurm.commands[-2] == ("scontrol", "requeue", running)
    slurm.finish(running, "COMPLETED")
    with pytest.raises(SlurmCommandError, match="Job has already finished"):
        slurm.hold([running])


# ------------------------------------------------------------------ array tasks

ARRAY = "#!/bin/sh\n#SBATCH --job-name=sweep\n#SBATCH --array=0-4\n#SBATCH --comment=slurmkit:tok\ntrue\n"


def test_array_tasks_of_many_arrays_are_one_squeue_and_forgotten_ones_one_sacct():
    from slurmkit.testing import FakeArraySlurm

    slurm = FakeArraySlurm("alpha", accounting=True)
    first, second = slurm.submit(ARRAY), slurm.submit(ARRAY)
    slurm.run(first, exit_codes={3: 2})
    before = len(slurm.commands)
    answer = slurm.array_tasks([first, second])
    assert rpcs(slurm, before) == ["squeue"]
    states = {t.key: (t.state, t.exit_code) for t in answer.tasks}
    assert states[(first, 3)] == ("FAILED", 2) and states[(first, 0)] == ("COMPLETED", 0)
    assert states[(second, 4)] == ("PENDING", None) and len(states) == 10 and answer.unstarted == {}
    assert {t.comment for t in slurm.array_tasks(user=slurm.user).tasks} == {"slurmkit:tok"}

    slurm.forget_array(first)
    slurm.forget_array(second)
    assert slurm.array_tasks([first, second]) == ([], {})      # "Invalid job id": every one forgotten
    before = len(slurm.commands)
    old = {t.key: t.state for t in slurm.array_tasks_accounting([first])}
    assert rpcs(slurm, before) == ["sacct"] and old[(first, 3)] == "FAILED" and len(old) == 5


def test_array_task_updates_are_one_scontrol_and_a_refusal_says_which():
    from slurmkit.testing import FakeArraySlurm

    slurm = FakeArraySlurm("alpha")
    array = slurm.submit(ARRAY)
    slurm.update_jobs([array], ArrayTaskThrottle="2")
    assert slurm.arrays[array].throttle == 2
    assert slurm.commands[-1] == ("scontrol", "update", "JobId=" + array, "ArrayTaskThrottle=2")
    with pytest.raises(SlurmCommandError, match="scontrol update StartTime failed on cluster alpha: "
                                                 "Invalid job id specified for job 999_1"):
        slurm.update_jobs(["999_1"], StartTime="now")
    with pytest.raises(ValueError):
        commands.update_jobs([], StartTime="now")


# ------------------------------------------------------------------ the interface itself

def test_the_interface_declares_what_callers_use():
    # No probing: every ability a caller relies on is declared on SlurmBackend.
    for name in ("jobs_by_id", "accounting", "has_accounting", "node_states", "drain", "down", "resume",
                 "requeue", "hold", "release", "config", "nodes", "jobs", "submit", "cancel", "array_tasks",
                 "array_tasks_accounting", "update_jobs"):
        assert name in vars(SlurmBackend), name
        assert name in vars(CommandBackend) or name == "find_by_token", name
    assert SlurmBackend.runner is None and SlurmBackend.submit_once is False
    with pytest.raises(NotImplementedError):
        SlurmBackend().jobs_by_id(["1"])
