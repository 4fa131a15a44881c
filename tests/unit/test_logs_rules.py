"""The rules of ``slurmkit logs`` (slurmkit.observe.logs): patterns, the files they stand for, reading
from the end, and following a job through pending, requeue and end, on a FakeClock."""

import pytest

from slurmkit.clusterfiles import ClusterFiles
from slurmkit.errors import UsageError
from slurmkit.observe import logs
from slurmkit.testing.clock import FakeClock


def controller(**kv):
    base = {"JobId": "74", "JobName": "train", "UserId": "bob(1000)", "JobState": "RUNNING", "Reason": "None",
            "Restarts": "0", "NodeList": "an[1-2]", "WorkDir": "/w", "StdOut": "/w/out-74.log",
            "StdErr": "/w/out-74.log", "ExitCode": "0:0"}
    base.update(kv)
    return base


def test_a_controller_record_is_read_with_the_user_and_the_array_task():
    r = logs.record_from_controller(controller(JobId="73", ArrayJobId="72", ArrayTaskId="1"))
    assert (r.slurm_id, r.job_id, r.array_job_id, r.array_task, r.user) == ("72_1", "73", "72", 1, "bob")
    ended = logs.record_from_controller(controller(JobState="FAILED", ExitCode="7:0"))
    assert (ended.exit_code, ended.signal, logs.exit_status(ended)) == (7, None, 7)
    killed = logs.record_from_controller(controller(JobState="CANCELLED", ExitCode="0:15"))
    assert logs.exit_status(killed) == 128 + 15


def test_an_accounting_row_without_the_output_name_says_so():
    row = {"JobID": "72_3", "JobIDRaw": "80", "JobName": "t", "User": "bob", "State": "CANCELLED by 0",
           "ExitCode": "0:0", "NodeList": "an1", "WorkDir": "/w"}
    r = logs.record_from_accounting(row)
    assert (r.slurm_id, r.job_id, r.array_task, r.state, r.stdout) == ("72_3", "80", 3, "CANCELLED", None)
    assert logs.file_pattern(r) is None


def test_the_pattern_gets_what_is_known_and_keeps_the_nodes_and_ranks():
    r = logs.record_from_controller(controller(StdOut="o-%x-%4j-%u-%r.log", Restarts="2"))
    assert logs.file_pattern(r) == "/w/o-train-0074-bob-2.log"
    assert logs.file_pattern(r, attempt_restarts=0) == "/w/o-train-0074-bob-0.log"
    per_rank = logs.record_from_controller(controller(StdOut="/o/%j-%s-%N-%t.log"))
    assert logs.file_pattern(per_rank) == "/o/74-%s-%N-%t.log"       # the steps' files too
    single = logs.record_from_controller(controller(StdOut="/o/%J-%s.log"))
    assert logs.file_pattern(single) == "/o/74-batch.log"
    task = logs.record_from_controller(controller(JobId="90", ArrayJobId="88", ArrayTaskId="13",
                                                  StdOut="/o/%A-%a-%b-%3a.log", StdErr="/o/%A-%a.err"))
    assert logs.file_pattern(task) == "/o/88-13-3-013.log"
    assert logs.file_pattern(task, "err") == "/o/88-13.err"
    assert logs.file_pattern(logs.record_from_controller(controller(StdOut="/o/a\\%j"))) == "/o/a%j"


def test_per_rank_files_are_found_labelled_in_order_and_literal_glob_characters_stay_literal(tmp_path):
    for name in ("74-batch-0.log", "74-0-1.log", "74-0-0.log", "74-0-10.log", "75-0-0.log", "74-0-x.log"):
        (tmp_path / name).write_text(name)
    found = logs.existing_files(ClusterFiles(), str(tmp_path / "74-%s-%t.log"))
    assert [(f.label, f.path.rsplit("/", 1)[1]) for f in found] == [
        ("batch", "74-batch-0.log"), ("rank 0", "74-0-0.log"), ("rank 1", "74-0-1.log"), ("rank 10", "74-0-10.log")]
    (tmp_path / "a*b-0.log").write_text("x")
    (tmp_path / "aXb-0.log").write_text("x")
    odd = logs.existing_files(ClusterFiles(), str(tmp_path / "a*b-%t.log"))
    assert [f.path.rsplit("/", 1)[1] for f in odd] == ["a*b-0.log"]
    with pytest.raises(UsageError, match="directory's name"):
        logs.existing_files(ClusterFiles(), str(tmp_path / "%N" / "out.log"))


def test_the_last_lines_come_from_a_window_that_grows_until_it_holds_them(tmp_path, monkeypatch):
    path = tmp_path / "big.log"
    path.write_text("".join("line %05d\n" % i for i in range(20000)))
    monkeypatch.setattr(logs, "WINDOW_START", 64)
    asked = []
    files = ClusterFiles()
    real = files.window
    files.window = lambda p, size: asked.append(size) or real(p, size)
    size, text = logs.last_lines(files, str(path), 30)
    assert size == path.stat().st_size
    assert text.splitlines() == ["line %05d" % i for i in range(19970, 20000)]
    assert asked == [64, 256, 1024]          # three reads from the end, none of the whole file
    assert logs.last_lines(files, str(tmp_path / "none"), 3) is None
    assert logs.last_lines(files, str(path), 0) == (size, "")


def test_labelled_lines_are_whole_even_when_a_read_ends_mid_line():
    out = []
    writer = logs.LineWriter(out.append, "rank 1")
    writer.write("a\nb")
    writer.write("c\nd")
    writer.write("", final=True)
    assert "".join(out) == "[rank 1] a\n[rank 1] bc\n[rank 1] d\n"


class Backend:
    """Answers ``job_records`` from a script of states; counts the questions."""

    def __init__(self, states):
        self.states, self.asked = list(states), 0

    def job_records(self, job_id):
        self.asked += 1
        kv = self.states[0] if len(self.states) == 1 else self.states.pop(0)
        return [kv] if kv else []

    def accounting_records(self, job_id):
        return None

    def output_patterns(self, job_id):
        return None

    def has_accounting(self):
        return False


class Session:
    def __init__(self, backend):
        self._backend = backend

    def backend(self, cluster):
        return self._backend

    def files(self, cluster):
        return ClusterFiles()


def located_for(backend, out_path):
    record = logs.record_from_controller(backend.states[0])
    return logs.Located(logs.LogRef("alpha", "74"), record, [logs.LogFile(str(out_path))], str(out_path), 1, 1, "")


def test_a_follow_waits_while_pending_reads_as_the_file_grows_and_ends_with_the_jobs_status(tmp_path):
    out_path = tmp_path / "out-74.log"
    states = [controller(JobState="PENDING", Reason="Priority", StdOut=str(out_path))] * 3 + \
             [controller(JobState="RUNNING", StdOut=str(out_path))] * 4 + \
             [controller(JobState="FAILED", ExitCode="3:0", StdOut=str(out_path))]
    backend, clock, printed, said = Backend(states), FakeClock(), [], []
    clock.call_after(6.5, lambda: out_path.write_text("one\n"))
    clock.call_after(9.0, lambda: out_path.write_text("one\ntwo\n"))
    code = logs.follow(Session(backend), located_for(backend, out_path), printed.append, said.append, clock=clock)
    assert code == 3
    assert "".join(printed) == "one\ntwo\n"
    assert said[0] == "alpha:74 is PENDING (Priority): waiting for it to start; its output goes to %s" % out_path
    assert said[-1] == "alpha:74 is FAILED"
    # The state is asked every STATE_EVERY_S, not every read.
    assert backend.asked == 8 and clock.monotonic() - 1000.0 >= 7 * logs.STATE_EVERY_S


def test_a_file_a_requeue_truncated_is_read_again_from_its_start(tmp_path):
    out_path = tmp_path / "out-74.log"
    out_path.write_text("first attempt, long line\n")
    states = [controller(StdOut=str(out_path))] * 3 + [controller(JobState="PENDING", Reason="BeginTime",
                                                                  StdOut=str(out_path))] + \
             [controller(StdOut=str(out_path), Restarts="1")] * 2 + \
             [controller(JobState="COMPLETED", StdOut=str(out_path), Restarts="1")]
    backend, clock, printed, said = Backend(states), FakeClock(), [], []
    clock.call_after(5.0, lambda: out_path.write_text("second\n"))
    code = logs.follow(Session(backend), located_for(backend, out_path), printed.append, said.append, clock=clock)
    assert code == 0
    assert "".join(printed) == "first attempt, long line\nsecond\n"
    assert any("was truncated (the job was requeued)" in line for line in said)


def test_a_job_forgotten_between_two_polls_ends_the_follow(tmp_path):
    out_path = tmp_path / "out-74.log"
    out_path.write_text("all\n")
    backend, clock, printed, said = Backend([controller(StdOut=str(out_path)), {}]), FakeClock(), [], []
    assert logs.follow(Session(backend), located_for(backend, out_path), printed.append, said.append,
                       clock=clock) == 1
    assert "".join(printed) == "all\n" and "no longer known" in said[-1]


# --- why ---------------------------------------------------------------------------------------------

def test_pending_reasons_are_plain_words_with_what_to_do():
    from slurmkit.observe import why

    meaning, todo = why.explain_pending_reason({"Reason": "BeginTime", "EligibleTime": "2026-12-04T23:00:00"}, "91")
    assert meaning == "its --begin holds it until 2026-12-04T23:00:00"
    assert todo == "scontrol update jobid=91 StartTime=now starts it earlier"
    meaning, _ = why.explain_pending_reason({"Reason": "ReqNodeNotAvail, UnavailableNodes:an[1-2]"}, "9")
    assert meaning == "nodes it needs are down, drained or reserved (an[1-2])"
    meaning, todo = why.explain_pending_reason({"Reason": "QOSMaxJobsPerUserLimit", "QOS": "short"}, "9")
    assert meaning == "its QOS's limit of at most jobs per user holds it (QOSMaxJobsPerUserLimit)"
    assert "sacctmgr show qos short" in todo
    meaning, _ = why.explain_pending_reason({"Reason": "AssocGrpGRES"}, "9")
    assert meaning == "its association's group limit on GRES holds it (AssocGrpGRES)"
    meaning, _ = why.explain_pending_reason({"Reason": "QOSGrpCPUMinutesLimit"}, "9")
    assert meaning == "its QOS's group limit on CPU minutes holds it (QOSGrpCPUMinutesLimit)"
    meaning, _ = why.explain_pending_reason({"Reason": "SomethingNew"}, "9")
    assert meaning == "Slurm's reason is SomethingNew"


def test_the_switch_wait_left_is_counted_from_when_the_job_became_eligible():
    from datetime import datetime

    from slurmkit.observe import why

    kv = {"Switches": "1@00:05:00", "EligibleTime": "2026-12-04T22:00:00"}
    assert why.switch_wait(kv, datetime(2026, 12, 4, 22, 2, 0)) == (
        "it asked for 1 leaf switch(es) and waits for them at most 5 min; 3 min of that wait is left, then it "
        "takes any nodes")
    assert "once it is eligible" in why.switch_wait(kv, datetime(2026, 12, 4, 21, 0, 0))
    assert why.switch_wait({"Switches": "(null)"}, datetime(2026, 12, 4)) is None


def test_the_job_asked_of_other_clusters_has_its_nodes_gpus_and_time():
    from slurmkit.observe import why

    spec = why.spec_of({"NumNodes": "2", "TRES": "cpu=16,mem=2G,node=2,billing=16,gres/gpu=8",
                        "TimeLimit": "02:00:00", "JobName": "train"})
    assert (spec.nodes, spec.gpus_per_node, spec.time, spec.name) == (2, 4, "02:00:00", "train")
    assert why.spec_of({"NumNodes": "1", "TimeLimit": "UNLIMITED"}).time is None


# --- eff ---------------------------------------------------------------------------------------------

def _rows(*lines):
    from slurmkit.slurm import commands, parsers

    return parsers.parse_sacct_records("\n".join(lines), commands.SACCT_USAGE_FIELDS)


def test_eff_sums_every_run_of_a_requeued_job_and_keeps_what_is_not_recorded_unknown():
    from slurmkit.observe import eff

    rows = _rows(
        "131|131|NODE_FAIL|600|120|8|2|billing=8,cpu=8,gres/gpu=16,mem=64G,node=2|40:00.000||||0|x|y|gpu|an[1-2]",
        "131.batch|131.batch|CANCELLED|600||4|1|cpu=4,mem=32G,node=1|00:10.000|1024K|||0|x|y||an1",
        "131|131|COMPLETED|3000|120|8|2|billing=8,cpu=8,gres/gpu=16,mem=64G,node=2|1-00:00:00||||0|x|y|gpu|an[1-2]",
        "131.0|131.0|COMPLETED|3000||8|2|cpu=8,mem=64G,node=2|23:59:59.500|2G|gres/gpuutil=35|gres/gpumem=10G|0|x|y||an1")
    attempts = eff.attempts_from_rows("alpha", rows)
    assert [a.state for a in attempts] == ["NODE_FAIL", "COMPLETED"]
    assert attempts[1].peak_rss_bytes == 2 << 30 and attempts[1].gpu_util == 35.0
    result = eff.report("alpha:131", attempts)
    d = result.data
    assert d["elapsed_s"] == 3600 and d["gpu_hours"] == 16.0
    assert d["energy_j"] is None                 # 0 from a cluster without an energy plugin: unknown
    assert round(d["cpu_efficiency_pct"]) == 100  # 40 min + 24 h of CPU over (600 + 3000) s x 8 CPUs, capped
    assert "asked for 16 GPUs, used about 6: ask for fewer" in result.verdicts
    assert "asked for 32.0 GiB per node, used at most 2.0 GiB: ask for about 3.0 GiB (--mem)" in result.verdicts
    assert "after 2 attempt(s) (sums over all of them)" in result.lines[0]


def test_eff_reads_slurms_sizes_and_cpu_times():
    from slurmkit.observe import eff

    assert eff.size_bytes("320572K") == 320572 * 1024 and eff.size_bytes("2G") == 2 << 30
    assert eff.size_bytes("") is None and eff.size_bytes("1000Mn") == 1000 << 20
    assert eff.cpu_seconds("01:00.035") == 60.035 and eff.cpu_seconds("1-02:03:04") == 93784
    assert eff.cpu_seconds("") is None
    assert eff.tres("cpu=2,gres/gpu:h100=4") == {"cpu": "2", "gres/gpu:h100": "4"}


def test_a_follow_moves_to_the_requeue_daemons_next_attempt_and_stops_with_the_chain(tmp_path):
    """Attempt 1 (alpha:74) fails; the daemon queues attempt 2 (alpha:80) a few seconds later: the follow
    prints both attempts' files in turn and ends with attempt 2's status once the daemon stops the chain."""
    from slurmkit.requeue.journal import Journal

    journal_path = str(tmp_path / "requeue.db")
    journal = Journal(journal_path)
    tracked = journal.track(name="train", site="local", cluster="alpha", partition=None, spec={},
                            checkpoint_dir=str(tmp_path / "ckpt"))
    journal.submitted(journal.begin_attempt(tracked, 1, "t1", "alpha"), "74")
    first, second = tmp_path / "out-74.log", tmp_path / "out-80.log"
    first.write_text("attempt one\n")
    second.write_text("attempt two\n")

    class TwoJobs(Backend):
        def job_records(self, job_id):
            self.asked += 1
            if job_id == "74":
                return [controller(JobState="NODE_FAIL", StdOut=str(first))]
            return [controller(JobId="80", JobState="COMPLETED", StdOut=str(second))]

    clock, printed, said = FakeClock(), [], []

    def daemon_restarts():
        journal.submitted(journal.begin_attempt(tracked, 2, "t2", "alpha"), "80")
        journal.stop(tracked, "completed", state="completed")
    clock.call_after(5.0, daemon_restarts)
    session = Session(TwoJobs([{}]))
    located = logs.locate(session, logs.LogRef("alpha", "74"), journal_path=journal_path)
    assert (located.attempt, located.attempts, located.tracked_id) == (1, 1, tracked)
    code = logs.follow(session, located, printed.append, said.append, clock=clock, journal_path=journal_path)
    assert code == 0
    assert "".join(printed) == "attempt one\nattempt two\n"
    assert "alpha:74 ended; waiting for the requeue daemon to restart it" in said
    assert any(line.startswith("alpha:80: attempt 2 of alpha") for line in said), said
    # --attempt picks one of the chain; a number not in it is refused with the ones there are
    assert logs.locate(session, logs.LogRef("alpha", "80"), attempt=1, journal_path=journal_path).ref.job_id == "74"
    with pytest.raises(UsageError, match="has attempts 1, 2; --attempt 3"):
        logs.locate(session, logs.LogRef("alpha", "80"), attempt=3, journal_path=journal_path)
    journal.close()


# As slurmctld 22.05 shows a QOS whose MaxJobsPerUser=1 one job of uid 0 uses (unset limits elided).
QOS_ONEJOB = """Current Association Manager state

QOS Records

QOS=test_onejob(7)
    UsageRaw=0.000000
    GrpJobs=N(1) GrpJobsAccrue=N(1) GrpSubmitJobs=N(2) GrpWall=N(0.00)
    GrpTRES=cpu=N(1),mem=N(1000),node=N(1),gres/gpu=N(0)
    MaxWallPJ=
    MaxTRESPJ=
    Priority=0
    Account Limits
      root
        MaxJobsPA=N(1) MaxJobsAccruePA=N(1) MaxSubmitJobsPA=N(2)
    User Limits
      0
        MaxJobsPU=1(1) MaxJobsAccruePU=N(1) MaxSubmitJobsPU=N(2)
        MaxTRESPU=cpu=N(1),mem=4000(1000),gres/gpu=N(0)
"""

ASSOC = """Current Association Manager state

Association Records

ClusterName=alpha Account=lab UserName= Partition= Priority=0 ID=3
    GrpJobs=N(2) GrpJobsAccrue=N(0)
    GrpTRES=cpu=8(8),mem=N(8000),gres/gpu=N(0)
    MaxJobs= MaxJobsAccrue= MaxSubmitJobs= MaxWallPJ=
ClusterName=alpha Account=lab UserName=ada(1001) Partition= Priority=0 ID=4
    GrpJobs=N(2) GrpJobsAccrue=N(0)
    GrpTRES=cpu=N(8),mem=N(8000),gres/gpu=N(0)
    MaxJobs=2(2) MaxJobsAccrue= MaxSubmitJobs= MaxWallPJ=60
"""


def test_the_controllers_limits_are_read_with_their_holder_and_what_is_in_use():
    from slurmkit.slurm.parsers import Limit, parse_limits

    assert parse_limits(QOS_ONEJOB) == [Limit("qos test_onejob user 0", "MaxJobsPU", None, "1", "1"),
                                        Limit("qos test_onejob user 0", "MaxTRESPU", "mem", "4000", "1000")]
    # 24.11 and later name the user with the uid: the same holder.
    later = QOS_ONEJOB.replace("\n      0\n", "\n      root(0)\n")
    assert later != QOS_ONEJOB and parse_limits(later) == parse_limits(QOS_ONEJOB)
    assert parse_limits(ASSOC) == [Limit("account lab", "GrpTRES", "cpu", "8", "8"),
                                   Limit("account lab user ada", "MaxJobs", None, "2", "2"),
                                   Limit("account lab user ada", "MaxWallPJ", None, "60", "")]


def test_a_limit_reason_names_the_field_slurm_holds_the_job_against():
    from slurmkit.observe.why import LimitReason, limit_reason

    assert limit_reason("QOSMaxJobsPerUserLimit") == LimitReason(True, "MaxJobsPU", None)
    assert limit_reason("QOSGrpCpuLimit") == LimitReason(True, "GrpTRES", "cpu")
    assert limit_reason("AssocGrpCpuLimit") == LimitReason(False, "GrpTRES", "cpu")
    assert limit_reason("AssocMaxJobsLimit") == LimitReason(False, "MaxJobs", None)
    assert limit_reason("QOSGrpCPURunMinutesLimit") == LimitReason(True, "GrpTRESRunMins", "cpu")
    assert limit_reason("QOSMaxGRESPerUser") == LimitReason(True, "MaxTRESPU", "gres")
    assert limit_reason("QOSMaxMemoryPerJob") == LimitReason(True, "MaxTRESPJ", "mem")
    assert limit_reason("QOSMaxWallDurationPerJobLimit") == LimitReason(True, "MaxWallPJ", None)
    assert limit_reason("QOSMaxSubmitJobPerUserLimit") == LimitReason(True, "MaxSubmitJobsPU", None)
    assert limit_reason("Priority") is None and limit_reason("QOSNotAllowed") is None


def test_a_limit_is_said_with_its_value_and_what_is_in_use():
    from slurmkit.observe.why import describe_limit
    from slurmkit.slurm.parsers import parse_limits

    held, per_job = parse_limits(QOS_ONEJOB)
    assert describe_limit("QOS test_onejob", held) == (
        "QOS test_onejob allows at most 1 running job(s) per user (MaxJobsPU=1); in use now: 1")
    assert describe_limit("QOS test_onejob", per_job) == (
        "QOS test_onejob allows at most 4000 MB of memory in use per user (MaxTRESPU[mem]=4000); in use now: 1000")
    wall = parse_limits(ASSOC)[2]
    assert describe_limit("your association (account lab)", wall) == (
        "your association (account lab) allows at most 60 minutes of wall time per job (MaxWallPJ=60)")


def test_a_job_over_its_memory_is_told_what_to_ask_for():
    from slurmkit.observe import eff

    rows = _rows(
        "781|781|FAILED|1|2|1|1|billing=1,cpu=1,mem=200M,node=1|00:00.500||||0|x|y|gpu|an[1-2]",
        "781.batch|781.batch|CANCELLED by 0|1||1|1|cpu=1,mem=200M,node=1|00:00.500|629332K|||0|x|y||an1")
    attempt = eff.attempts_from_rows("alpha", rows)[0]
    assert eff.over_memory(attempt) and eff.mem_per_node(attempt) == 200 << 20
    result = eff.report("alpha:781", [attempt])
    assert "memory: peak 614.6 MiB (the largest task) of 200.0 MiB per node (307 %)" in result.lines
    assert result.verdicts[0] == ("it used more memory than it asked for (peak 614.6 MiB of 200.0 MiB per node) "
                                  "and Slurm kills a job for that: ask for --mem=832M")
    assert eff.memory_option(800 << 20) == "--mem=1G" and eff.memory_option(1) == "--mem=64M"
