"""Why a job has not started, or what ended it (``slurmkit why``).

A pending job: Slurm's one-word reason in plain words with what to do about it (the limit's
value where the reason is a limit), the start estimate, the priority factors (sprio, where
the priority plugin has them), its place among the partition's pending jobs, the wait for
``--switches`` and how long is left of it, and what no tool prints: the same job asked
with ``sbatch --test-only`` of every other cluster of the site that can run it (the
federation's planner, each cluster with its own partition and fabric), and the command
that moves it.

An ended job: what ended it (its time limit, the memory limit, a failed node, preemption,
a cancel, an exit status or a signal), the last lines of its error output, and whether the
requeue daemon restarted it, and why or why not.

Each part is one Slurm query, asked once; a part that cannot be known (no accounting, a
priority plugin without factors, a cluster that does not answer) says so in one line and
the rest is still shown.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Dict, List, NamedTuple, Optional, Tuple

from slurmkit.errors import SlurmkitError

if TYPE_CHECKING:
    from slurmkit.observe.logs import JobRecord, LogRef
    from slurmkit.session import Session

# Slurm's pending reasons (slurm.h job_state_reason, as squeue prints them): what it means, what to do.
# {placeholders} come from the job's record.
PENDING_REASONS: Dict[str, Tuple[str, str]] = {
    "Priority": ("jobs of higher priority are ahead of it in partition {partition}",
                 "wait, or move it where it starts sooner (below)"),
    "Resources": ("it is next in partition {partition}, waiting for {nodes} node(s) to be free",
                  "wait: it starts when they are"),
    "Dependency": ("it waits for its --dependency ({dependency}) to be met", "nothing: it starts when they are"),
    "DependencyNeverSatisfied": ("its --dependency ({dependency}) can never be met: a job it waits for ended "
                                 "the wrong way", "cancel it and submit it without that dependency"),
    "BeginTime": ("its --begin holds it until {begin}", "scontrol update jobid={job} StartTime=now starts it earlier"),
    "JobHeldUser": ("you held it", "scontrol release {job}"),
    "JobHeldAdmin": ("an administrator held it", "ask your site's administrators"),
    "ReqNodeNotAvail": ("nodes it needs are down, drained or reserved{unavailable}",
                        "wait for them, or drop --nodelist/--exclude so that other nodes do"),
    "PartitionDown": ("partition {partition} is down", "wait, or submit to another partition or cluster"),
    "PartitionInactive": ("partition {partition} is inactive", "submit to another partition or cluster"),
    "PartitionTimeLimit": ("its time limit ({time_limit}) is over partition {partition}'s",
                           "ask for less time (--time), or another partition"),
    "PartitionNodeLimit": ("its node count ({nodes}) is outside partition {partition}'s limits",
                           "ask for fewer nodes, or another partition"),
    "NodeDown": ("a node it was given is down", "nothing: Slurm requeues it on other nodes"),
    "BadConstraints": ("no node has the features and resources it asks for together",
                       "check --constraint, --gres and --mem against sinfo -o '%N %f %G %m'"),
    "Reservation": ("it waits for its reservation to start", "wait, or submit without --reservation"),
    "Licenses": ("the licenses it asks for are in use", "wait"),
    "InvalidQOS": ("its QOS ({qos}) is not one you may use", "cancel it and submit with a QOS you have"),
    "InvalidAccount": ("its account ({account}) is not one you may use", "cancel it and submit with your account"),
    "launch failed requeued held": ("it failed to start on its node and Slurm held it",
                                    "scontrol release {job} to try again; the slurmd log says why it failed"),
}


class Why(NamedTuple):
    ref: str
    state: str
    reason: str
    lines: List[str]            # the answer, one statement per line
    data: dict                  # the same for --json


def _limit_words(reason: str) -> Optional[str]:
    """A QOS or association limit in words: "QOSMaxJobsPerUserLimit" -> "its QOS's limit of at most jobs
    per user", "AssocGrpGRES" -> "its association's group limit on GRES"; None for other reasons."""
    import re

    m = re.fullmatch(r"(QOS|Assoc)(Grp|Max|Min)([A-Za-z]+?)(Limit)?", reason)
    if not m:
        return None
    who = "its QOS's" if m.group(1) == "QOS" else "its association's"
    words = re.findall(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+", m.group(3))
    what = " ".join(w if w.isupper() and len(w) > 1 else w.lower() for w in words)
    kind = {"Grp": "group limit on", "Max": "limit of at most", "Min": "minimum of"}[m.group(2)]
    return "%s %s %s" % (who, kind, what)


# A limit reason's resource, as Slurm spells it, and the TRES it limits (None: a count of jobs, or wall time).
_LIMIT_RESOURCES = [("SubmitJobs", "submit"), ("SubmitJob", "submit"), ("Jobs", "jobs"), ("Job", "jobs"),
                    ("WallDuration", "wall"), ("Wall", "wall"), ("Cpu", "cpu"), ("CPU", "cpu"),
                    ("Memory", "mem"), ("Mem", "mem"), ("Node", "node"), ("GRES", "gres"), ("Energy", "energy"),
                    ("Billing", "billing"), ("License", "license")]
_SCOPES = {"PerUser": "PU", "PerAccount": "PA", "PerJob": "PJ", "PerNode": "PN", "": ""}


class LimitReason(NamedTuple):
    """What a QOS.../Assoc... pending reason names: Slurm's field for it in ``scontrol show assoc_mgr``."""

    on_qos: bool           # QOS..., else Assoc...
    field: str             # MaxJobsPU, GrpTRES, GrpTRESMins, MaxTRESPJ, GrpJobs, MaxJobs ...
    tres: Optional[str]    # cpu, mem, node, energy, billing, "gres" (any gres/...); None for jobs and wall


def limit_reason(code: str) -> Optional[LimitReason]:
    """``QOSMaxJobsPerUserLimit`` -> (qos, MaxJobsPU, None); ``AssocGrpCpuLimit`` -> (assoc, GrpTRES, cpu);
    ``QOSGrpCPURunMinutesLimit`` -> (qos, GrpTRESRunMins, cpu); None for a reason that names no limit."""
    import re

    m = re.fullmatch(r"(QOS|Assoc)(Grp|Max|Min)([A-Za-z]+?)(Limit)?", code)
    if not m:
        return None
    rest = m.group(3)
    for word, what in _LIMIT_RESOURCES:
        if rest.startswith(word):
            rest = rest[len(word):]
            break
    else:
        return None
    minutes = ""
    for word, suffix in (("RunMinutes", "RunMins"), ("Minutes", "Mins"), ("Mins", "Mins")):
        if rest.startswith(word):
            minutes, rest = suffix, rest[len(word):]
            break
    scope = _SCOPES.get(rest)
    if scope is None:
        return None
    kind, on_qos = m.group(2), m.group(1) == "QOS"
    if what in ("jobs", "submit"):
        name = "Jobs" if what == "jobs" else "SubmitJobs"
        # An association's own per-user limit is MaxJobs (it is the user's); a QOS's is MaxJobsPU.
        return LimitReason(on_qos, kind + name + (scope if kind == "Max" and scope != "PJ" else ""), None)
    if what == "wall":
        return LimitReason(on_qos, "GrpWall" if kind == "Grp" else "MaxWallPJ", None)
    if kind == "Grp":
        return LimitReason(on_qos, "GrpTRES" + minutes, what)
    if minutes:
        return LimitReason(on_qos, "MaxTRESMins" + (scope or "PJ"), what)
    return LimitReason(on_qos, "%sTRES%s" % (kind, scope or "PJ"), what)


_LIMIT_WORDS = {"GrpJobs": "running job(s) of everyone in it together", "GrpSubmitJobs": "job(s) of everyone in it "
                "pending or running together", "MaxJobsPU": "running job(s) per user", "MaxJobsPA":
                "running job(s) per account", "MaxJobs": "running job(s) of yours", "MaxSubmitJobsPU":
                "job(s) pending or running per user", "MaxSubmitJobsPA": "job(s) pending or running per account",
                "MaxSubmitJobs": "job(s) of yours pending or running", "GrpWall": "minutes of wall time of its jobs "
                "together", "MaxWallPJ": "minutes of wall time per job", "GrpTRES": "{tres} in use by everyone in "
                "it together", "GrpTRESMins": "{tres}-minutes used by everyone in it together", "GrpTRESRunMins":
                "{tres}-minutes of its running jobs' remaining time together", "MaxTRESPU": "{tres} in use per user",
                "MaxTRESPA": "{tres} in use per account", "MaxTRESPJ": "{tres} per job", "MaxTRESPN":
                "{tres} per node", "MaxTRESMinsPJ": "{tres}-minutes per job", "MinTRESPJ": "{tres} per job at least"}
_TRES_UNITS = {"mem": "MB of memory", "cpu": "CPU(s)", "node": "node(s)", "energy": "joules", "billing": "billing units"}


def describe_limit(holder: str, limit) -> str:
    """One limit in words, with what is in use of it: "QOS test_onejob allows at most 1 running job(s) per
    user; in use now: 1"."""
    tres = _TRES_UNITS.get(limit.tres or "", limit.tres or "")
    words = _LIMIT_WORDS.get(limit.field, limit.field + " {tres}").format(tres=tres)
    at = "at least" if limit.field.startswith("Min") else "at most"
    text = "%s allows %s %s %s (%s%s=%s)" % (holder, at, limit.limit, words.replace(" at least", ""), limit.field,
                                              "[%s]" % limit.tres if limit.tres else "", limit.limit)
    return text + ("; in use now: %s" % limit.used if limit.used else "")


def _fields(kv: Dict[str, str], job: str) -> Dict[str, str]:
    unavailable = ""
    reason = kv.get("Reason", "")
    if reason.startswith("ReqNodeNotAvail") and "UnavailableNodes:" in reason:
        unavailable = " (%s)" % reason.split("UnavailableNodes:", 1)[1].strip()
    return {"partition": kv.get("Partition", "?"), "nodes": kv.get("NumNodes", "?"), "job": job,
            "dependency": kv.get("Dependency", ""), "begin": kv.get("EligibleTime", kv.get("StartTime", "?")),
            "time_limit": kv.get("TimeLimit", "?"), "qos": kv.get("QOS", "?"), "account": kv.get("Account", "?"),
            "unavailable": unavailable}


def explain_pending_reason(kv: Dict[str, str], job: str) -> Tuple[str, str]:
    """(what Slurm's reason means for this job, what to do), both one sentence."""
    reason = kv.get("Reason", "")
    code = reason.split(",")[0].split("(")[0].strip()
    if code.startswith("ReqNodeNotAvail"):
        code = "ReqNodeNotAvail"
    fields = _fields(kv, job)
    if code in PENDING_REASONS:
        meaning, todo = PENDING_REASONS[code]
        return meaning.format(**fields), todo.format(**fields)
    limit = _limit_words(code)
    if limit:
        which = limit_reason(code)
        user = kv.get("UserId", "").split("(")[0] or "$USER"
        if which is not None and which.field.endswith("PJ"):
            todo = "ask for less: the limit is on each job (cancel it and submit it smaller, or with another QOS)"
        elif which is None or which.on_qos:
            todo = ("wait: it starts when jobs under QOS {q} end (squeue --qos={q} -t running lists them); or "
                    "cancel it and submit it with another QOS (--qos); `sacctmgr show qos {q}` shows the limits"
                    ).format(q=fields["qos"])
        else:
            todo = ("wait: it starts when jobs of account {a} end (squeue --account={a} -t running lists them); "
                    "or ask your site's administrators to raise it; `sacctmgr show assoc user={u}` shows the "
                    "limits").format(a=fields["account"], u=user)
        return "%s holds it (%s)" % (limit, code), todo
    if not code or code == "None":
        return "Slurm has not looked at it yet (it was just submitted)", "wait a scheduling cycle"
    return ("Slurm's reason is %s" % reason, "see `man squeue` (JOB REASON CODES)")


def switch_wait(kv: Dict[str, str], now: datetime) -> Optional[str]:
    """A job asking for leaf switches (``Switches=N@W``): how long it may still wait for them."""
    from slurmkit.slurm.parsers import slurm_datetime
    from slurmkit.times import slurm_time_seconds

    spec = kv.get("Switches", "")
    count, _, wait = spec.partition("@")
    if not count.isdigit() or not wait:
        return None
    seconds = slurm_time_seconds(wait) or 0
    eligible = slurm_datetime(kv.get("EligibleTime", ""))
    if eligible is None or seconds <= 0:
        return "it asked for %s leaf switch(es) (--switches %s)" % (count, spec)
    if eligible > now:
        return ("it asked for %s leaf switch(es) and will wait for them at most %s once it is eligible (%s); "
                "then it takes any nodes" % (count, _duration(seconds), eligible.strftime("%Y-%m-%d %H:%M")))
    left = max(0, seconds - int((now - eligible).total_seconds()))
    return ("it asked for %s leaf switch(es) and waits for them at most %s; %s of that wait is left, then it "
            "takes any nodes" % (count, _duration(seconds), _duration(left)))


def _duration(seconds: float) -> str:
    seconds = int(round(abs(seconds)))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return "%d d %d h" % (days, hours)
    if hours:
        return "%d h %d min" % (hours, minutes)
    if minutes:
        return "%d min" % minutes
    return "%d s" % secs


def spec_of(kv: Dict[str, str]):
    """The job as a JobSpec the planner can ask other clusters about: its nodes, GPUs per node and time."""
    import re

    from slurmkit.jobs import new_token
    from slurmkit.script.render import JobSpec

    nodes = int(kv.get("NumNodes", "1").split("-")[0] or 1)
    tres = kv.get("TRES", "") or kv.get("ReqTRES", "")
    m = re.search(r"gres/gpu(?::[^=,]+)?=(\d+)", tres)
    gpus = int(m.group(1)) // max(nodes, 1) if m else None
    limit = kv.get("TimeLimit", "")
    return JobSpec(command=("true",), nodes=nodes, gpus_per_node=gpus,
                   time=limit if limit and limit not in ("UNLIMITED", "Partition_Limit") else None,
                   name=kv.get("JobName") or None, token=new_token())


def elsewhere(session: "Session", ref: "LogRef", kv: Dict[str, str], own_start: Optional[datetime]
              ) -> Tuple[List[str], List[dict]]:
    """The same job asked of every other cluster of the site (sbatch --test-only through the planner)."""
    from slurmkit.federation import planner

    others = [name for name in session.site.clusters if name != ref.cluster]
    if not others:
        return [], []
    lines, rows = [], []
    try:
        candidates = planner.plan(session, spec_of(kv), clusters=others)
    except SlurmkitError as exc:
        return ["elsewhere: %s" % exc], []
    best = None
    for c in candidates:
        row = {"cluster": c.cluster, "partition": c.partition,
               "estimate": c.estimate.isoformat() if c.estimate else None, "skip": c.reason}
        rows.append(row)
        if c.viable and (best is None or c.estimate < best.estimate):
            best = c
    for c in candidates:
        if c.viable:
            if own_start is not None:
                delta = (own_start - c.estimate).total_seconds()
                when = ("%s sooner" % _duration(delta) if delta > 60 else
                        "%s later" % _duration(-delta) if delta < -60 else "at about the same time")
                lines.append("on %s (partition %s) it would start %s (%s)" % (c.cluster, c.partition, when,
                                                                              c.estimate.strftime("%Y-%m-%d %H:%M")))
            else:
                lines.append("on %s (partition %s) it would start at %s" % (c.cluster, c.partition,
                                                                            c.estimate.strftime("%Y-%m-%d %H:%M")))
        elif c.reason:
            lines.append("on %s it cannot run: %s" % (c.cluster, c.reason))
    if best is not None and (own_start is None or (own_start - best.estimate).total_seconds() > 60):
        lines.append("to move it: slurmkit cancel %s && slurmkit submit --cluster %s [the job's options] -- "
                     "[its command]" % (ref, best.cluster))
    return lines, rows


def place_in_partition(backend, kv: Dict[str, str]) -> Optional[str]:
    """How many of the partition's pending jobs are ahead of this one by priority."""
    try:
        pending = backend.pending_priorities(kv.get("Partition", ""))
    except SlurmkitError:
        return None
    mine = kv.get("Priority")
    if not mine or not mine.isdigit() or not pending:
        return None
    ahead = sum(1 for job, priority in pending if priority > int(mine) and job != kv.get("JobId"))
    return "%d of the %d pending job(s) in partition %s are ahead of it by priority" % (
        ahead, len(pending), kv.get("Partition", "?"))


def _estimate(kv: Dict[str, str], now: datetime) -> Optional[datetime]:
    from slurmkit.slurm.parsers import slurm_datetime

    start = slurm_datetime(kv.get("StartTime", ""))
    # A pending job's StartTime is the backfill scheduler's estimate once it made one; before that it
    # is the submit or eligible time (in the past), which is no estimate.
    return start if start is not None and start > now else None


def held_by_limit(backend, kv: Dict[str, str]) -> Optional[str]:
    """For a job held by a QOS or association limit: that limit's value and what is in use of it now, from
    the controller (one RPC); None for another reason, or a limit the controller does not show."""
    code = kv.get("Reason", "").split(",")[0].strip()
    which = limit_reason(code)
    if which is None:
        return None
    user, _, uid = kv.get("UserId", "").partition("(")
    uid, account, qos = uid.rstrip(")"), kv.get("Account", ""), kv.get("QOS", "")
    try:
        limits = (backend.limits(qos=qos) if which.on_qos else
                  backend.limits(user=user or None, account=account or None))
    except SlurmkitError as exc:
        return "not known (%s)" % exc
    # A QOS's per-user and per-account limits are kept per uid and per account name; an association's
    # limit may be the user's own or one of its accounts' up the tree (all of them in the answer).
    own = {"PU": "qos %s user %s" % (qos, uid), "PA": "qos %s account %s" % (qos, account)}
    holder = own.get(which.field[-2:], "qos " + qos) if which.on_qos else None
    matching = [lim for lim in limits if lim.field == which.field and (holder is None or lim.holder == holder)
                and (which.tres is None or lim.tres == which.tres
                     or (which.tres == "gres" and (lim.tres or "").startswith("gres/")))]
    if not matching:
        return None
    matching.sort(key=lambda lim: not _reached(lim))      # the one reached (in use at or over it) first
    lim = matching[0]
    if which.on_qos:
        said = "QOS %s" % qos
    elif lim.holder.startswith("account %s user " % account):
        said = "your association (account %s)" % account
    else:
        said = lim.holder
    return describe_limit(said, lim)


def _reached(lim) -> bool:
    try:
        return float(lim.used) >= float(lim.limit)
    except ValueError:
        return False


def why_pending(session: "Session", ref: "LogRef", kv: Dict[str, str], now: datetime,
                ask_elsewhere: bool = True) -> Why:
    backend = session.backend(ref.cluster)
    meaning, todo = explain_pending_reason(kv, ref.slurm_id)
    lines = ["%s is PENDING: %s" % (ref, meaning), "what to do: %s" % todo]
    data = {"id": str(ref), "state": kv.get("JobState"), "reason": kv.get("Reason"), "meaning": meaning,
            "todo": todo}
    held_by = held_by_limit(backend, kv)
    if held_by:
        lines.insert(1, "the limit: %s" % held_by)
        data["limit"] = held_by
    start = _estimate(kv, now)
    data["estimate"] = start.isoformat() if start else None
    lines.append("Slurm's start estimate: %s" % (
        "%s (in %s)" % (start.strftime("%Y-%m-%d %H:%M"), _duration((start - now).total_seconds()))
        if start else "none yet (the backfill scheduler has not placed it)"))
    switches = switch_wait(kv, now)
    if switches:
        lines.append(switches)
        data["switch_wait"] = switches
    place = place_in_partition(backend, kv)
    if place:
        lines.append(place)
        data["place"] = place
    try:
        factors = backend.priority_factors(kv.get("JobId", ref.slurm_id))
    except SlurmkitError as exc:
        factors = None
        data["priority_factors_error"] = str(exc)
    if factors:
        lines.append("its priority %d = age %d + fair-share %d + job size %d + partition %d + QOS %d (sprio)"
                     % tuple(factors[k] for k in ("priority", "age", "fairshare", "jobsize", "partition", "qos")))
        data["priority_factors"] = factors
    # A job waiting on other jobs' ends cannot be moved: their ids mean other jobs on another cluster.
    if ask_elsewhere and not kv.get("Reason", "").startswith("Dependency"):
        more, rows = elsewhere(session, ref, kv, start)
        lines.extend(more)
        data["elsewhere"] = rows
    return Why(str(ref), kv.get("JobState", ""), kv.get("Reason", ""), lines, data)


# What ended a job, by its final state.
ENDED = {
    "COMPLETED": "it completed (exit status 0)",
    "TIMEOUT": "it reached its time limit ({time_limit}) and Slurm ended it",
    "OUT_OF_MEMORY": "it used more memory than it asked for, and Slurm killed it (ask for more: --mem)",
    "NODE_FAIL": "its node(s) {failed} failed under it",
    "PREEMPTED": "a job of higher priority preempted it",
    "BOOT_FAIL": "its node(s) failed to boot",
    "DEADLINE": "it could not end before its --deadline",
    "CANCELLED": "it was cancelled{by}",
}


def memory_kill(backend, job_id: str) -> Optional[dict]:
    """A job SIGKILLed (or ended OUT_OF_MEMORY) whose largest task's peak, as accounting sampled it, went
    over the memory it was given per node: Slurm's memory enforcement killed it.  {what, todo, peak,
    per_node}; None where accounting does not show that (no accounting, or no sample over the limit)."""
    from slurmkit.observe import eff

    try:
        rows = backend.usage_records([job_id])
    except SlurmkitError:
        return None
    # sacct -j also lists the jobs whose steps it matches: the job's own attempts, the latest last.
    attempts = [a for a in eff.attempts_from_rows("", rows or []) if a.job_id == job_id]
    if not attempts or not eff.over_memory(attempts[-1]):
        return None
    last = attempts[-1]
    peak, per_node = last.peak_rss_bytes, eff.mem_per_node(last)
    return {"what": "it was killed for using more memory than it asked for: its largest task reached %s, over "
                    "the %s per node it was given (Slurm's memory enforcement)" % (
                        eff.human_bytes(peak), eff.human_bytes(per_node)),
            "todo": "ask for more memory: %s (its peak and a quarter more)" % eff.memory_option(peak),
            "peak": peak, "per_node": per_node}


def why_ended(session: "Session", ref: "LogRef", record: "JobRecord", kv: Dict[str, str],
              journal_path: Optional[str] = None, tail_lines: int = 10) -> Why:
    from slurmkit.observe import logs

    fields = {"time_limit": kv.get("TimeLimit") or kv.get("Timelimit", "?"),
              "failed": kv.get("FailedNode") or record.nodes or "?", "by": ""}
    state = record.state
    if kv.get("State", "").startswith("CANCELLED by"):
        fields["by"] = " by user id %s" % kv["State"].split("by", 1)[1].strip()
    if state == "FAILED":
        if record.signal is not None:
            what = "it was killed by signal %d" % record.signal
        elif record.exit_code == 137 or record.exit_code == 128 + 9:
            what = "it exited with status 137: a process of it was killed with SIGKILL (memory, or kill -9)"
        else:
            what = "it exited with status %s" % record.exit_code
    else:
        what = ENDED.get(state, "it ended %s" % state).format(**fields)
    memory = None
    if state == "OUT_OF_MEMORY" or record.signal == 9 or record.exit_code == 137:
        memory = memory_kill(session.backend(ref.cluster), ref.slurm_id)
        if memory is not None:
            what = memory["what"]
    lines = ["%s is %s: %s" % (ref, state, what)]
    data = {"id": str(ref), "state": state, "what": what, "exit_code": record.exit_code, "signal": record.signal,
            "nodes": record.nodes}
    if memory is not None:
        lines.append("what to do: %s" % memory["todo"])
        data.update(memory_killed=True, peak_rss_bytes=memory["peak"], mem_per_node_bytes=memory["per_node"],
                    todo=memory["todo"])
    try:
        located = logs.locate(session, ref, stream="err", journal_path=journal_path)
        files = session.files(ref.cluster)
        tails = []
        for f in located.files[-1:]:
            got = logs.last_lines(files, f.path, tail_lines)
            if got and got[1].strip():
                tails = got[1].rstrip("\n").split("\n")
                lines.append("the last lines of %s:" % f.path)
                lines.extend("  " + t for t in tails)
        data["error_tail"] = tails
    except SlurmkitError as exc:
        lines.append("its error output: %s" % exc)
    tracked = logs.tracked_job(ref, journal_path)
    if tracked is None:
        restarted = ("the requeue daemon does not track it: nothing restarts it (submit with --auto-requeue to "
                     "have it restarted from its checkpoint)" if state != "COMPLETED" else "")
    else:
        mine = next((a for a in tracked.attempts if a.job_id == ref.slurm_id and a.cluster == ref.cluster), None)
        later = [a for a in tracked.attempts if mine is not None and a.number > mine.number]
        if later:
            nxt = later[0]
            restarted = "the requeue daemon restarted it as %s:%s (attempt %d%s)" % (
                nxt.cluster, nxt.job_id or "(queued)", nxt.number, ", %s" % mine.cause if mine.cause else "")
        elif tracked.state != "active":
            restarted = "the requeue daemon did not restart it: %s" % (tracked.reason or tracked.state)
        else:
            restarted = "the requeue daemon has not decided yet (it decides on its next poll)"
        data["tracked_id"] = tracked.id
    if restarted:
        lines.append(restarted)
        data["restarted"] = restarted
    return Why(str(ref), state, record.reason, lines, data)


def why(session: "Session", ref: "LogRef", now: Optional[datetime] = None, journal_path: Optional[str] = None,
        ask_elsewhere: bool = True) -> Why:
    """The answer for one job (see the module's docstring)."""
    from slurmkit.observe import logs

    now = now or datetime.now()
    backend = session.backend(ref.cluster)
    records = backend.job_records(ref.slurm_id)
    if len(records) > 1 and ref.task is None:
        raise logs.ArrayNeedsTask(ref, [logs.record_from_controller(kv) for kv in records])
    if records:
        kv = records[0]
        record = logs.record_from_controller(kv)
    else:
        rows = backend.accounting_records(ref.slurm_id) or []
        if not rows:
            raise logs.unknown_job(backend, ref)
        kv = rows[0]
        record = logs.record_from_accounting(kv)
    if record.state in ("PENDING", "REQUEUE_HOLD", "REQUEUED"):
        return why_pending(session, ref, kv, now, ask_elsewhere)
    if record.state in ("RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED"):
        lines = ["%s is %s on %s" % (ref, record.state, record.nodes or "?")]
        return Why(str(ref), record.state, record.reason, lines, {"id": str(ref), "state": record.state,
                                                                   "nodes": record.nodes})
    if record.source == "controller" and backend.has_accounting():
        # FailedNode and who cancelled it are in accounting only (23.02+ for FailedNode).
        rows = backend.accounting_records(ref.slurm_id) or []
        if rows:
            kv = dict(kv, **{k: v for k, v in rows[0].items() if v})
    return why_ended(session, ref, record, kv, journal_path)
