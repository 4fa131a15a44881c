"""Whether a finished attempt is restarted: a pure function of what Slurm said, the checkpoints and the history.

Slurm's own requeue cannot tell a dead node from a bug in the user's code;
this policy can, because it sees the normalized exit status and signal, the
Slurm state and reason, the nodes, and whether the checkpoints moved:

- ``NODE_FAIL``, ``BOOT_FAIL``, ``PREEMPTED`` and a failed launch are the
  cluster's fault: restarted (within their budgets);
- ``TIMEOUT`` is restarted only when a newer checkpoint exists than the one
  the attempt started from (otherwise the next attempt would time out at the
  same step);
- a failure whose exit code the site lists as transient (NCCL errors, Xid) is
  restarted;
- a job the daemon ended because it stopped making progress (its heartbeat
  and checkpoints did not move for the job's hang timeout: a hung rank, a
  stuck collective) is restarted, under its own budget;
- ``COMPLETED``, a cancel (a person said stop) and every other failure are not.

Budgets keep a broken job from running forever: a total, one per cause, a
crash loop (attempts that keep failing with a transient exit code soon after
they start) and attempts
that make no checkpoint progress end the job with a reason.  Restarts of the
same cause back off exponentially after the first, which is immediate (a
node failure should cost one poll interval, not minutes).  Nodes that were
down or drained when the attempt failed are excluded from the next attempts
(after a node failure whose node is up again, all of the attempt's nodes).

Nothing here reads a clock, a file or Slurm: the daemon passes everything in.
"""

from dataclasses import dataclass, field
from typing import Dict, Iterable, Optional, Sequence, Tuple

# Causes: why an attempt ended, as the policy sees it.
COMPLETED = "completed"
CANCELLED = "cancelled"
NODE_FAIL = "node_fail"
BOOT_FAIL = "boot_fail"
PREEMPTED = "preempted"
LAUNCH_FAILED = "launch_failed"
TIMEOUT = "timeout"
TRANSIENT_EXIT = "transient_exit"
FAILED = "failed"
OUT_OF_MEMORY = "out_of_memory"
HUNG = "hung"

# What the daemon writes on an attempt it cancels for making no progress (journal: ended_by).
HUNG_MARK = "hung"

# The cluster's fault, not the program's: never counted as a crash of the program.
INFRASTRUCTURE = frozenset({NODE_FAIL, BOOT_FAIL, PREEMPTED, LAUNCH_FAILED})
RESTARTABLE = INFRASTRUCTURE | {TIMEOUT, TRANSIENT_EXIT, HUNG}

# Slurm reasons that mean the batch script never started properly on its nodes.
_LAUNCH_REASONS = ("launch failed", "joblaunchfailure", "prolog", "nodeboot")


@dataclass(frozen=True)
class Budget:
    """Limits for one tracked job; every count is of restarts (attempts after the first)."""

    max_restarts: int = 10
    per_cause: Dict[str, int] = field(default_factory=lambda: {
        NODE_FAIL: 5, BOOT_FAIL: 3, LAUNCH_FAILED: 3, PREEMPTED: 20, TIMEOUT: 20, TRANSIENT_EXIT: 3, HUNG: 3})
    backoff_s: float = 30.0          # the second restart in a row of one cause waits this long, doubling after
    backoff_max_s: float = 900.0
    quick_failure_s: float = 120.0   # an attempt that fails within this long after starting "failed soon"
    max_quick_failures: int = 3      # that many in a row is a crash loop
    max_no_progress: int = 3         # restarts in a row without a newer checkpoint

    def allowed(self, cause: str) -> int:
        return self.per_cause.get(cause, 0)


@dataclass(frozen=True)
class AttemptView:
    """One attempt as the policy needs it (times in seconds since the epoch)."""

    number: int                         # 1 for the first submission
    state: str                          # Slurm's final state, e.g. NODE_FAIL
    exit_code: Optional[int] = None     # normalized exit status
    signal: Optional[int] = None        # the signal that ended it, if any
    reason: str = ""                    # Slurm's reason
    nodes: Tuple[str, ...] = ()
    started_at: Optional[float] = None
    ended_at: Optional[float] = None
    resume_step: Optional[int] = None   # the checkpoint step it started from (None: from scratch)
    cause: Optional[str] = None         # filled in once decided
    ended_by: str = ""                  # why the daemon ended it ("hung: ..."), if it did

    @property
    def runtime(self) -> Optional[float]:
        if self.started_at is None or self.ended_at is None:
            return None
        return max(0.0, self.ended_at - self.started_at)


@dataclass(frozen=True)
class Decision:
    restart: bool
    cause: str
    reason: str
    delay_s: float = 0.0
    exclude: Tuple[str, ...] = ()       # nodes to keep the next attempts off

    def to_dict(self):
        return {"restart": self.restart, "cause": self.cause, "reason": self.reason, "delay_s": self.delay_s,
                "exclude": list(self.exclude)}


def classify(state: str, exit_code: Optional[int], signal: Optional[int], reason: str,
             transient_codes: Iterable[int] = (), ended_by: str = "") -> str:
    """The cause of an attempt's end, from Slurm's state, exit status, signal and reason, and
    ``ended_by``: the daemon's own mark on an attempt it cancelled (a cancel that is not a person's)."""
    state = (state or "").upper().split()[0] if state else ""
    if state == "COMPLETED":
        return COMPLETED
    if state == "CANCELLED" and (ended_by or "").startswith(HUNG_MARK):
        return HUNG
    if state in ("NODE_FAIL", "BOOT_FAIL", "PREEMPTED", "TIMEOUT", "CANCELLED", "OUT_OF_MEMORY"):
        return {"NODE_FAIL": NODE_FAIL, "BOOT_FAIL": BOOT_FAIL, "PREEMPTED": PREEMPTED, "TIMEOUT": TIMEOUT,
                "CANCELLED": CANCELLED, "OUT_OF_MEMORY": OUT_OF_MEMORY}[state]
    if state in ("LAUNCH_FAILED",) or any(r in (reason or "").lower() for r in _LAUNCH_REASONS):
        return LAUNCH_FAILED
    if exit_code is not None and exit_code != 0 and exit_code in set(transient_codes):
        return TRANSIENT_EXIT
    return FAILED


def _describe_exit(attempt: AttemptView) -> str:
    parts = []
    if attempt.exit_code is not None:
        parts.append("exit code %d" % attempt.exit_code)
    if attempt.signal:
        parts.append("signal %d" % attempt.signal)
    return ", ".join(parts) or "no exit status"


def _previous(history: Sequence[AttemptView], attempt: AttemptView):
    return [a for a in history if a.number < attempt.number]


# Endings that are the scheduler's decision, not a fault that may repeat at once: a preempted job
# goes back into the queue anyway, and a time limit is restarted only from a newer checkpoint.
NO_BACKOFF = (PREEMPTED, TIMEOUT)


def backoff(cause: str, chain: Sequence[AttemptView], budget: Budget) -> float:
    """How long the restart after the last attempt of ``chain`` waits: nothing after the first of a
    run of failures of one cause, then ``backoff_s``, doubling with each more in a row, up to
    ``backoff_max_s``.  Only failures in a row count: a node failure on day 10 of a run is not
    the second of a loop because another node failed on day 3 and the job ran on between them.
    A preemption or a time limit never waits."""
    if cause in NO_BACKOFF:
        return 0.0
    in_a_row = 0
    for a in reversed(chain):
        if a is not chain[-1] and a.cause != cause:
            break
        in_a_row += 1
    return 0.0 if in_a_row == 1 else min(budget.backoff_s * 2 ** (in_a_row - 2), budget.backoff_max_s)


def decide(attempt: AttemptView, history: Sequence[AttemptView], latest_step: Optional[int],
           budget: Budget = Budget(), transient_codes: Iterable[int] = (),
           unusable_nodes: Iterable[str] = ()) -> Decision:
    """Restart ``attempt`` or stop, and why.

    ``history`` holds the earlier attempts of the same job with their causes;
    ``latest_step`` is the step of the newest complete checkpoint now (None:
    none); ``unusable_nodes`` are nodes that are down or drained now.
    """
    cause = classify(attempt.state, attempt.exit_code, attempt.signal, attempt.reason, transient_codes,
                     attempt.ended_by)
    earlier = _previous(history, attempt)
    if cause == COMPLETED:
        return Decision(False, cause, "the job completed")
    if cause == CANCELLED:
        return Decision(False, cause, "cancelled (%s); a cancel is never undone" % (attempt.reason or "scancel"))
    if cause == TIMEOUT:
        started = attempt.resume_step
        if latest_step is None or (started is not None and latest_step <= started):
            return Decision(False, cause, "hit its time limit without a newer checkpoint than %s; a restart would "
                                          "time out at the same point" % (
                                              "step %d" % started if started is not None else "the start"))
    if cause not in RESTARTABLE:
        what = "ran out of memory" if cause == OUT_OF_MEMORY else "failed"
        return Decision(False, cause, "%s (%s), which is not a transient failure: a restart would fail the same "
                                      "way" % (what, _describe_exit(attempt)))

    restarts = attempt.number - 1            # restarts made so far
    if restarts >= budget.max_restarts:
        return Decision(False, cause, "%s, but the restart budget (%d) is used up" % (cause, budget.max_restarts))
    same = [a for a in earlier if a.cause == cause] + [attempt]     # attempts that ended this way
    if len(same) > budget.allowed(cause):
        return Decision(False, cause, "%s %d times; the budget for %s is %d" % (
            cause, len(same), cause, budget.allowed(cause)))

    chain = list(earlier) + [attempt]
    if cause == TRANSIENT_EXIT:
        # A crash loop is the program failing soon after it starts, again and again.  A time
        # limit met with a saved checkpoint and a hang the daemon ended are no crash, however
        # soon they come (a compressed failure mix ran every attempt under two minutes): they
        # end the run of quick failures, as an infrastructure failure does.
        quick = 0
        for a in reversed(chain):
            if a is not attempt and a.cause != TRANSIENT_EXIT:
                break
            if a.runtime is not None and a.runtime < budget.quick_failure_s:
                quick += 1
            else:
                break
        if quick >= budget.max_quick_failures:
            return Decision(False, cause, "crash loop: failed within %ds of starting %d times in a row (last: %s)"
                            % (budget.quick_failure_s, quick, _describe_exit(attempt)))
    if cause != PREEMPTED:
        # Restarts in a row that resumed from the same checkpoint and produced no newer one.
        stuck = 0
        for a in reversed(chain):
            if a.number == 1 or a.cause == PREEMPTED:
                break
            if a.resume_step == attempt.resume_step and (latest_step is None or latest_step == a.resume_step):
                stuck += 1
            else:
                break
        if stuck >= budget.max_no_progress:
            return Decision(False, cause, "no checkpoint progress in %d attempts in a row (still at %s)" % (
                stuck, "step %d" % latest_step if latest_step is not None else "no checkpoint"))

    delay = backoff(cause, chain, budget)
    unusable = set(unusable_nodes)
    exclude = tuple(sorted(n for n in attempt.nodes if n in unusable))
    if not exclude and cause in (NODE_FAIL, BOOT_FAIL, LAUNCH_FAILED):
        # Slurm does not say which node failed, and with ReturnToService a node that
        # died and came back is up again by now: keep off all of the attempt's nodes.
        exclude = tuple(sorted(attempt.nodes))
    why = {NODE_FAIL: "a node failed", BOOT_FAIL: "a node failed to boot", PREEMPTED: "preempted",
           LAUNCH_FAILED: "the launch failed (%s)" % (attempt.reason or "launch"),
           TIMEOUT: "hit its time limit with a newer checkpoint (step %s)" % latest_step,
           TRANSIENT_EXIT: "a transient failure (%s)" % _describe_exit(attempt),
           HUNG: "ended by the daemon: %s" % attempt.ended_by[len(HUNG_MARK):].lstrip(": ")}[cause]
    return Decision(True, cause, "%s; restart %d of at most %d" % (why, attempt.number, budget.max_restarts),
                    delay_s=delay, exclude=exclude)

