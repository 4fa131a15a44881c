"""How a job ended, decoded once for every source: squeue, scontrol, sacct and pyslurm.

The data are the same eight jobs as each source reported them on the dev
cluster alpha (Slurm 22.05.8, pyslurm 22.5.3), recorded by
``tests/unit/data/exit_codes/record.py`` (its docstring has the command);
``jobs.json`` says what each job's script did and so what the normalized
(exit_code, signal) must be.
"""

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from slurmkit.slurm import commands, parsers
from slurmkit.slurm import pyslurm_rules as rules

DATA = Path(__file__).parent / "data" / "exit_codes" / "22.05"
RECORDED = json.loads((DATA / "jobs.json").read_text())
JOBS = RECORDED["jobs"]
PYSLURM = json.loads((DATA / "pyslurm.json").read_text())


def expected(name):
    return JOBS[name]["exit_code"], JOBS[name]["signal"]


def by_name(infos):
    ids = {job["id"]: name for name, job in JOBS.items()}
    return {ids[i.job_id]: i for i in infos if i.job_id in ids}


def test_the_recording_covers_every_way_a_job_ends():
    assert RECORDED["slurm"].startswith("22.05")
    outcomes = {expected(n) for n in JOBS}
    assert (0, None) in outcomes and (3, None) in outcomes and (None, None) in outcomes
    assert any(code and code >= 128 for code, _ in outcomes)       # an exit status above 128
    assert {15, 9} <= {sig for _, sig in outcomes}                 # SIGTERM and SIGKILL


@pytest.mark.parametrize("name", sorted(JOBS))
def test_squeue_json_raw_wait_status(name):
    jobs = by_name(parsers.parse_squeue_json((DATA / "squeue.json").read_text()))
    assert (jobs[name].exit_code, jobs[name].signal) == expected(name)


def test_squeue_json_of_22_05_gives_the_raw_wait_status():
    raw = {str(j["job_id"]): j["exit_code"] for j in json.loads((DATA / "squeue.json").read_text())["jobs"]}
    assert raw[JOBS["exit3"]["id"]] == 768 and raw[JOBS["child_term"]["id"]] == 36608
    assert raw[JOBS["self_term"]["id"]] == 15 and raw[JOBS["self_kill"]["id"]] == 9


@pytest.mark.parametrize("name", sorted(JOBS))
def test_scontrol_exit_code_text(name):
    line = next(ln for ln in (DATA / "scontrol.txt").read_text().splitlines()
                if ln.startswith("JobId=%s " % JOBS[name]["id"]))
    kv = parsers.parse_key_values(line)
    ran = kv["NodeList"] not in ("", "(null)")
    assert parsers.ended_exit(kv["JobState"], ran, kv["ExitCode"]) == expected(name)


def test_sacct_recording_is_what_commands_sacct_asks_for():
    argv = json.loads((DATA / "sacct.txt").read_text().splitlines()[0])
    assert argv == commands.sacct([JOBS[n]["id"] for n in JOBS])


@pytest.mark.parametrize("name", sorted(JOBS))
def test_sacct_exit_code(name):
    text = (DATA / "sacct.txt").read_text().split("\n", 1)[1]
    job = by_name(parsers.parse_sacct(text))[name]
    code, signal = expected(name)
    if code is not None and code >= 128:
        # sacct prints an exit status of 128 or more 128 short (src/sacct/print.c):
        # the loss JobInfo documents, asserted so that a change is seen.
        code -= 128
    assert (job.exit_code, job.signal) == (code, signal)


def test_sacct_takes_the_batch_step_over_the_jobs_own_row():
    # Cancelled while running: the job's row still said 0:0, its batch step 0:15.
    text = (DATA / "sacct.txt").read_text()
    job_id = JOBS["scancel_running"]["id"]
    assert re.search(r"^%s\|.*\|0:0\|$" % job_id, text, re.M)
    assert re.search(r"^%s\.batch\|.*\|0:15\|$" % job_id, text, re.M)
    assert parsers.parse_sacct(text.split("\n", 1)[1]) and \
        by_name(parsers.parse_sacct(text.split("\n", 1)[1]))["scancel_running"].signal == 15


def core_job(name, **values):
    """A pyslurm Job with the recorded exit attributes (names as in core/job/job.pyx)."""
    job = PYSLURM["job"][JOBS[name]["id"]]
    ran = name != "scancel_pending"
    attrs = dict(id=int(JOBS[name]["id"]), name="ec-" + name, state=job["state"], state_reason="None",
                 partition="cpu", num_nodes=1, allocated_nodes="an1" if ran else None, start_time=None,
                 time_limit=2, user_name="root", comment="", cluster="alpha", standard_output="/dev/null",
                 exit_code=job["exit_code"], exit_code_signal=job["exit_code_signal"])
    attrs.update(values)
    return SimpleNamespace(**attrs)


@pytest.mark.parametrize("name", sorted(JOBS))
def test_pyslurm_job_api_is_exact_unless_it_may_have_cut_128(name):
    info = rules.job_to_info(core_job(name))
    code, signal = expected(name)
    assert rules.exit_is_ambiguous(info) == (code is not None and code != 0)
    if code is not None and code >= 128:
        assert (info.exit_code, info.signal) == (code - 128, None)   # pyslurm's _get_exit_code
    else:
        assert (info.exit_code, info.signal) == (code, signal)


@pytest.mark.parametrize("name", sorted(JOBS))
def test_pyslurm_deprecated_job_api_gives_the_whole_status(name):
    # What PyslurmBackend._exact_exit reads for an ambiguous job: "E:S" with E whole.
    text = PYSLURM["deprecated_job"][JOBS[name]["id"]]
    info = rules.job_to_info(core_job(name), exit_text=text)
    assert (info.exit_code, info.signal) == expected(name)


@pytest.mark.parametrize("name", sorted(JOBS))
def test_pyslurm_db_raw_status_of_the_batch_step(name):
    db = PYSLURM["deprecated_db"][JOBS[name]["id"]]
    raw = db["batch"] if db["batch"] is not None else db["exitcode"]
    # db.Job (db/job.pyx): nodelist, no allocated_nodes; "None assigned" for a job that never ran
    values = dict(vars(core_job(name)), nodelist="an1" if name != "scancel_pending" else "None assigned",
                  **PYSLURM["db"][JOBS[name]["id"]])
    del values["allocated_nodes"]
    record = SimpleNamespace(**values)
    info = rules.job_to_info(record, exit_text=raw)
    assert (info.exit_code, info.signal) == expected(name)
    assert info.nodelist == ("" if name == "scancel_pending" else "an1")


# ----------------------------------------------------------------- the decoder itself

@pytest.mark.parametrize("value,result", [
    (0, (0, None)), (768, (3, None)), (35072, (137, None)), (36608, (143, None)),
    (15, (None, 15)), (9, (None, 9)),
    (0x80 | 11, (None, 11)),                      # SIGSEGV with a core dump
    (0xFFFFFFFE, (None, None)), (0xFFFFFFFF, (None, None)), (-1, (None, None)),  # NO_VAL, INFINITE
    (0x137F, (None, None)),                       # stopped, not ended
    ("3:0", (3, None)), ("0:15", (None, 15)), ("137:0", (137, None)), ("0:0", (0, None)), ("4", (4, None)),
    (None, (None, None)), ("", (None, None)),
])
def test_decode_exit(value, result):
    assert parsers.decode_exit(value) == result


@pytest.mark.parametrize("value,result", [
    # 23.02+ JSON (squeue, sacct): numbers wrapped, status a list; 24.11 names the signal "id".
    ({"status": ["EXITED"], "return_code": {"set": True, "infinite": False, "number": 3},
      "signal": {"id": {"set": False, "infinite": False, "number": 0}, "name": ""}}, (3, None)),
    ({"status": ["SUCCESS"], "return_code": {"set": True, "infinite": False, "number": 0}}, (0, None)),
    ({"status": ["SIGNALED"], "return_code": {"set": False, "infinite": False, "number": 0},
      "signal": {"id": {"set": True, "infinite": False, "number": 15}, "name": "TERM"}}, (None, 15)),
    ({"status": ["CORE_DUMPED"], "signal": {"id": 11, "name": "SEGV"}}, (None, 11)),
    ({"status": ["PENDING"], "return_code": {"set": True, "number": 0}}, (None, None)),
    # the shape 22.05's sacct --json prints for a signalled job
    ({"status": "SIGNALED", "return_code": None, "signal": {"signal_id": 9, "name": "Killed"}}, (None, 9)),
])
def test_decode_exit_of_the_json_shapes(value, result):
    assert parsers.decode_exit(value) == result


@pytest.mark.parametrize("value", ["abc", "3:x", True, 1.5])
def test_decode_exit_refuses_what_is_no_exit_status(value):
    with pytest.raises((ValueError, TypeError)):
        parsers.decode_exit(value)


def test_ended_exit_is_none_while_running_or_when_the_job_never_ran():
    assert parsers.ended_exit("RUNNING", True, 0) == (None, None)
    assert parsers.ended_exit("PENDING", False, 0) == (None, None)
    assert parsers.ended_exit("CANCELLED", False, "0:0") == (None, None)
    assert parsers.ended_exit("CANCELLED", True, "0:15") == (None, 15)
    assert parsers.ended_exit("FAILED", True, 768) == (3, None)
