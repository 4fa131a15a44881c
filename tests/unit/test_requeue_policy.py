"""The requeue policy: which failures are restarted, budgets, crash loops, progress, backoff, exclusions."""

import dataclasses

import pytest

from slurmkit.requeue import policy
from slurmkit.requeue.policy import AttemptView, Budget, decide


def attempt(number=1, state="NODE_FAIL", exit_code=None, signal=None, reason="", nodes=("an1", "an2"),
            runtime=600.0, resume_step=None, cause=None, ended_by=""):
    return AttemptView(number=number, state=state, exit_code=exit_code, signal=signal, reason=reason, nodes=nodes,
                       started_at=1000.0, ended_at=1000.0 + runtime, resume_step=resume_step, cause=cause,
                       ended_by=ended_by)


@pytest.mark.parametrize("state,exit_code,reason,transient,cause", [
    ("COMPLETED", 0, "", (), policy.COMPLETED),
    ("NODE_FAIL", None, "", (), policy.NODE_FAIL),
    ("BOOT_FAIL", None, "", (), policy.BOOT_FAIL),
    ("PREEMPTED", None, "", (), policy.PREEMPTED),
    ("TIMEOUT", None, "", (), policy.TIMEOUT),
    ("CANCELLED", None, "", (), policy.CANCELLED),
    ("CANCELLED by 0", None, "", (), policy.CANCELLED),
    ("OUT_OF_MEMORY", 0, "", (), policy.OUT_OF_MEMORY),
    ("FAILED", 1, "JobLaunchFailure", (), policy.LAUNCH_FAILED),
    ("FAILED", 1, "launch failed requeued held", (), policy.LAUNCH_FAILED),
    ("FAILED", 75, "NonZeroExitCode", (75, 76), policy.TRANSIENT_EXIT),
    ("FAILED", 1, "NonZeroExitCode", (75, 76), policy.FAILED),
    ("FAILED", 0, "", (0,), policy.FAILED),          # 0 is never "transient"
])
def test_classify(state, exit_code, reason, transient, cause):
    assert policy.classify(state, exit_code, None, reason, transient) == cause


@pytest.mark.parametrize("state", ["NODE_FAIL", "BOOT_FAIL", "PREEMPTED"])
def test_infrastructure_failures_restart_at_once(state):
    d = decide(attempt(state=state), [], latest_step=40)
    assert d.restart and d.delay_s == 0 and d.cause == state.lower()


def test_transient_exit_code_restarts_and_others_do_not():
    d = decide(attempt(state="FAILED", exit_code=75), [], latest_step=10, transient_codes={75})
    assert d.restart and d.cause == policy.TRANSIENT_EXIT and "exit code 75" in d.reason
    d = decide(attempt(state="FAILED", exit_code=3), [], latest_step=10, transient_codes={75})
    assert not d.restart and d.cause == policy.FAILED and "exit code 3" in d.reason


def test_signal_is_named_in_the_reason():
    d = decide(attempt(state="FAILED", exit_code=None, signal=9), [], latest_step=None)
    assert not d.restart and "signal 9" in d.reason


@pytest.mark.parametrize("state", ["COMPLETED", "CANCELLED"])
def test_completed_and_cancelled_are_final(state):
    d = decide(attempt(state=state, exit_code=0), [], latest_step=100)
    assert not d.restart


def test_timeout_restarts_only_with_a_newer_checkpoint():
    assert decide(attempt(state="TIMEOUT", resume_step=20), [], latest_step=30).restart
    stuck = decide(attempt(state="TIMEOUT", resume_step=20), [], latest_step=20)
    assert not stuck.restart and "step 20" in stuck.reason
    assert not decide(attempt(state="TIMEOUT"), [], latest_step=None).restart      # never checkpointed
    assert decide(attempt(state="TIMEOUT"), [], latest_step=5).restart              # first checkpoint exists


def test_total_budget():
    d = decide(attempt(number=4, state="NODE_FAIL"), [], latest_step=10, budget=Budget(max_restarts=3))
    assert not d.restart and "budget (3)" in d.reason


def test_per_cause_budget_and_backoff():
    budget = Budget(per_cause={policy.NODE_FAIL: 3}, backoff_s=30, backoff_max_s=100)
    history = []
    delays = []
    for n in range(1, 5):
        a = attempt(number=n, state="NODE_FAIL", resume_step=n * 10)
        d = decide(a, history, latest_step=n * 10 + 5, budget=budget)
        delays.append(d.delay_s if d.restart else None)
        history.append(AttemptView(**dict(a.__dict__, cause=d.cause)))
    assert delays == [0, 30, 60, None]          # the 4th node failure exceeds the budget of 3


def _delays(endings, budget=Budget(backoff_s=30, backoff_max_s=1000)):
    """The delay before each restart of a job that ended as ``endings`` say, one attempt each."""
    history, delays = [], []
    for n, (state, exit_code) in enumerate(endings, start=1):
        a = attempt(number=n, state=state, exit_code=exit_code, runtime=600, resume_step=n * 10)
        d = decide(a, history, latest_step=n * 10 + 5, budget=budget, transient_codes={75})
        assert d.restart, d.reason
        delays.append(d.delay_s)
        history.append(AttemptView(**dict(a.__dict__, cause=d.cause)))
    return delays


def test_backoff_counts_only_failures_of_one_cause_in_a_row():
    node, transient = ("NODE_FAIL", 0), ("FAILED", 75)
    # A node failure after other endings is the first of its run again: the job ran on between them.
    assert _delays([node, transient, node, transient, node]) == [0, 0, 0, 0, 0]
    assert _delays([node, node, node, transient, node, node]) == [0, 30, 60, 0, 0, 30]


def test_a_preemption_or_a_time_limit_never_waits():
    assert _delays([("PREEMPTED", 0)] * 4) == [0, 0, 0, 0]
    assert _delays([("TIMEOUT", 0)] * 4) == [0, 0, 0, 0]
    assert _delays([("PREEMPTED", 0), ("NODE_FAIL", 0), ("NODE_FAIL", 0)]) == [0, 0, 30]


def test_crash_loop_is_stopped():
    history = []
    budget = Budget(per_cause={policy.TRANSIENT_EXIT: 10}, max_quick_failures=3, quick_failure_s=120)
    results = []
    for n in range(1, 5):
        a = attempt(number=n, state="FAILED", exit_code=75, runtime=20, resume_step=n)
        d = decide(a, history, latest_step=n + 1, budget=budget, transient_codes={75})
        results.append(d.restart)
        history.append(AttemptView(**dict(a.__dict__, cause=d.cause)))
        if not d.restart:
            assert "crash loop" in d.reason
            break
    assert results == [True, True, False]


def test_a_saved_time_limit_and_an_ended_hang_are_no_crash_however_soon():
    # What bench-goodput's compressed mix made: a quick transient exit, a hang the daemon ended
    # a minute in, then a time limit saved a minute in: three short attempts, no crash loop.
    budget = Budget(max_quick_failures=3, quick_failure_s=120, per_cause={policy.TRANSIENT_EXIT: 10,
                                                                        policy.TIMEOUT: 10, policy.HUNG: 3})
    history = [attempt(number=1, state="NODE_FAIL", runtime=60, cause=policy.NODE_FAIL, resume_step=None),
               attempt(number=2, state="FAILED", exit_code=137, runtime=50, cause=policy.TRANSIENT_EXIT,
                       resume_step=10),
               attempt(number=3, state="CANCELLED", ended_by="hung: x", runtime=80, cause=policy.HUNG,
                       resume_step=20)]
    saved = attempt(number=4, state="TIMEOUT", runtime=70, resume_step=30)
    assert decide(saved, history, latest_step=40, budget=budget, transient_codes={137}).restart
    # three quick transient exits in a row still are one
    quick = [attempt(number=n, state="FAILED", exit_code=137, runtime=30, cause=policy.TRANSIENT_EXIT,
                     resume_step=10 * n) for n in (4, 5)]
    loop = decide(attempt(number=6, state="FAILED", exit_code=137, runtime=30, resume_step=60),
                  history + [dataclasses.replace(saved, cause=policy.TIMEOUT)] + quick, latest_step=70,
                  budget=budget, transient_codes={137})
    assert not loop.restart and "crash loop" in loop.reason


def test_slow_failures_are_not_a_crash_loop():
    history = []
    budget = Budget(per_cause={policy.TRANSIENT_EXIT: 10}, max_quick_failures=2)
    for n in range(1, 5):
        a = attempt(number=n, state="FAILED", exit_code=75, runtime=3600, resume_step=n * 10)
        d = decide(a, history, latest_step=n * 10 + 10, budget=budget, transient_codes={75})
        assert d.restart
        history.append(AttemptView(**dict(a.__dict__, cause=d.cause)))


def test_no_checkpoint_progress_is_stopped():
    budget = Budget(max_no_progress=2, per_cause={policy.NODE_FAIL: 10})
    history = [attempt(number=1, state="NODE_FAIL", resume_step=None, cause=policy.NODE_FAIL),
               attempt(number=2, state="NODE_FAIL", resume_step=50, cause=policy.NODE_FAIL)]
    d = decide(attempt(number=3, state="NODE_FAIL", resume_step=50), history, latest_step=50, budget=budget)
    assert not d.restart and "no checkpoint progress in 2 attempts" in d.reason
    # With progress the same history restarts.
    assert decide(attempt(number=3, state="NODE_FAIL", resume_step=50), history, latest_step=60,
                  budget=budget).restart


def test_preemption_never_counts_against_progress():
    budget = Budget(max_no_progress=1, per_cause={policy.PREEMPTED: 10})
    history = [attempt(number=1, state="PREEMPTED", cause=policy.PREEMPTED),
               attempt(number=2, state="PREEMPTED", cause=policy.PREEMPTED)]
    assert decide(attempt(number=3, state="PREEMPTED"), history, latest_step=None, budget=budget).restart


def test_unusable_nodes_of_the_attempt_are_excluded():
    d = decide(attempt(state="NODE_FAIL", nodes=("an1", "an2")), [], latest_step=1,
               unusable_nodes={"an2", "an4"})
    assert d.exclude == ("an2",)


def test_a_node_failure_whose_node_came_back_excludes_all_of_its_nodes():
    # ReturnToService: the failed node is up again when the daemon looks; which one failed is unknown.
    d = decide(attempt(state="NODE_FAIL", nodes=("an1", "an2")), [], latest_step=1, unusable_nodes=set())
    assert d.restart and d.exclude == ("an1", "an2")
    d = decide(attempt(state="PREEMPTED", nodes=("an1",)), [], latest_step=1, unusable_nodes=set())
    assert d.exclude == ()                       # preemption says nothing about the nodes


def test_a_cancel_the_daemon_made_for_a_hang_is_restarted_under_its_own_budget():
    from slurmkit.requeue import policy

    hung = attempt(state="CANCELLED", ended_by="hung: no progress for 900 s (the hang timeout is 900 s)")
    d = decide(hung, [], latest_step=40)
    assert d.restart and d.cause == policy.HUNG and d.exclude == ()
    assert d.reason.startswith("ended by the daemon: no progress for 900 s")
    # a person's cancel, and a job that completed just as the daemon cancelled it, are what they are
    assert policy.classify("CANCELLED", 0, 15, "", ended_by="") == policy.CANCELLED
    assert policy.classify("COMPLETED", 0, None, "", ended_by="hung: x") == policy.COMPLETED
    history = [attempt(number=n, state="CANCELLED", ended_by="hung: x", cause=policy.HUNG, resume_step=10 * n)
               for n in (1, 2, 3)]
    last = decide(attempt(number=4, state="CANCELLED", ended_by="hung: x", resume_step=40), history, latest_step=50)
    assert not last.restart and "hung 4 times; the budget for hung is 3" in last.reason
