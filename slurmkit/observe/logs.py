"""A job's output, found the way Slurm names it, and followed while it grows (``slurmkit logs``).

Finding it (:func:`locate`): the job's record says where its output goes, from the best
source there is, asked once:

1. the controller (``scontrol show job``: one REQUEST_JOB_INFO_SINGLE) while it knows the job;
   it has already put ``%A %a %j %x %u`` in;
2. accounting once the controller forgot it: sacct keeps the output's name from 23.02 on
   (``--expand-patterns`` where the release has it); 22.05's keeps none;
3. slurmkit's own record of a job the requeue daemon tracks (the journal keeps the spec).

What depends on where the file was written, the node (``%N``, ``%n``) or the rank (``%t``),
is matched against the files that exist (one listing, on the login node over SSH): a job
whose pattern names per-node or per-rank files shows each, labelled.  ``%s`` and ``%J`` are
the batch step's (``batch``, the job id), ``%r`` the restart count (26.05: one file per
requeue).

Attempts: a job the requeue daemon restarted is a chain of jobs (one id each, the journal
knows them): ``attempt`` picks one, the default is the latest, and :func:`follow` moves to
the next when the daemon queues it.  A job Slurm requeued keeps its id; with ``%r`` its
attempts have files of their own, without it they share one.

Following (:func:`follow`): each read is at most :data:`CHUNK` bytes from an offset, one
short command on the cluster's existing connection for a remote one, so a 10 GB log costs
no memory and an interrupted follow leaves nothing running on the login node.  The job's
state is asked once per :data:`STATE_EVERY_S` (one squeue), whatever the number of files.
"""

from __future__ import annotations

import os
import re
import time
from typing import TYPE_CHECKING, Callable, Dict, List, NamedTuple, Optional, Tuple

from slurmkit.errors import SlurmkitError, UsageError
from slurmkit.jobs import JOB_REF_PATTERN

if TYPE_CHECKING:
    from slurmkit.session import Session

# The largest read of one command: bounded memory here, a bounded command there.
CHUNK = 1 << 20
# How often a follow asks Slurm for the job's state (one squeue), and reads the files.
STATE_EVERY_S = 2.0
READ_EVERY_S = 0.5
# The bytes a -n read starts with from the end, doubled until they hold the lines, up to WINDOW_MAX.
WINDOW_START = 64 << 10
WINDOW_MAX = 16 << 20

_TASK_REF_RE = re.compile(JOB_REF_PATTERN + r"(?:_(?P<task>[0-9]+))?", re.ASCII)
_PENDING = ("PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SUSPENDED", "RESV_DEL_HOLD")
# The letters whose value is known only where the file is written: matched against the files.
_WHERE_LETTERS = {"N": "node", "n": "node", "t": "rank"}


class LogRef(NamedTuple):
    cluster: str
    job_id: str               # the job, or the array's id
    task: Optional[int] = None

    @property
    def slurm_id(self) -> str:
        """What Slurm's commands take: ``72`` or ``72_3``."""
        return self.job_id if self.task is None else "%s_%d" % (self.job_id, self.task)

    def __str__(self):
        return "%s:%s" % (self.cluster, self.slurm_id)

    @classmethod
    def of(cls, cluster: str, slurm_id: str) -> "LogRef":
        """From a cluster's name and a Slurm id (``72`` or ``72_3``) slurmkit itself recorded."""
        job, _, task = str(slurm_id).partition("_")
        return cls(cluster, job, int(task) if task.isdigit() else None)


def parse_log_ref(text: str, session: "Session") -> LogRef:
    """``CLUSTER:JOBID``, ``CLUSTER:JOBID_TASK`` or a bare id (the site's default cluster)."""
    m = _TASK_REF_RE.fullmatch(text.strip(" "))
    if not m:
        raise UsageError("%r is not a job id; use CLUSTER:JOBID or CLUSTER:JOBID_TASK (e.g. alpha:1234, "
                         "alpha:1234_7)" % text)
    cluster = session.site.cluster(m.group("cluster")).name
    return LogRef(cluster, m.group("job"), int(m.group("task")) if m.group("task") is not None else None)


class JobRecord(NamedTuple):
    """What ``logs`` needs of a job, from whichever source knew it."""

    slurm_id: str             # "72" or "72_1"
    job_id: str               # the job's own id (an array task's too)
    array_job_id: str         # "" when not an array task
    array_task: Optional[int]
    name: str
    user: str
    state: str
    reason: str
    nodes: str
    restarts: int
    workdir: str
    stdout: Optional[str]     # the pattern, partly expanded; None where the source does not keep it
    stderr: Optional[str]
    exit_code: Optional[int]
    signal: Optional[int]
    source: str               # "controller", "accounting" or "journal"


class LogFile(NamedTuple):
    path: str
    label: str = ""           # "rank 1", "node an2": one of several files of one job; "" when alone


class Located(NamedTuple):
    ref: LogRef               # the job read (a tracked job's chosen attempt)
    record: JobRecord
    files: List[LogFile]      # the files that exist now, or the one expected
    expected: str             # the file (pattern) as the job names it, for messages
    attempt: Optional[int]    # the attempt shown, for a job with several
    attempts: int             # how many there are (1 for a job never restarted)
    note: str                 # what the user should know about these files, or ""
    tracked_id: Optional[int] = None
    stream: str = "out"


def _int(text, default=0) -> int:
    try:
        return int(text)
    except (TypeError, ValueError):
        return default


def _exit(state: str, ran: bool, text: str):
    from slurmkit.slurm.parsers import ended_exit

    try:
        return ended_exit(state, ran, text)
    except ValueError:
        return None, None


def record_from_controller(kv: Dict[str, str]) -> JobRecord:
    """One ``scontrol show job`` record."""
    task = kv.get("ArrayTaskId")
    array_task = _int(task, None) if task and task.isdigit() else None
    state = kv.get("JobState", "")
    nodes = "" if kv.get("NodeList") in (None, "(null)") else kv["NodeList"]
    exit_code, signal = _exit(state, bool(nodes), kv.get("ExitCode", ""))
    job_id = kv.get("JobId", "")
    return JobRecord(
        slurm_id="%s_%d" % (kv["ArrayJobId"], array_task) if array_task is not None else job_id,
        job_id=job_id, array_job_id=kv.get("ArrayJobId", "") if array_task is not None else "",
        array_task=array_task, name=kv.get("JobName", ""), user=kv.get("UserId", "").split("(")[0],
        state=state, reason="" if kv.get("Reason") in (None, "None") else kv["Reason"], nodes=nodes,
        restarts=_int(kv.get("Restarts")), workdir=kv.get("WorkDir", ""), stdout=kv.get("StdOut") or None,
        stderr=kv.get("StdErr") or None, exit_code=exit_code, signal=signal, source="controller")


def record_from_accounting(row: Dict[str, str]) -> JobRecord:
    """One ``sacct --allocations`` row (:data:`slurmkit.slurm.commands.SACCT_RECORD_FIELDS`)."""
    shown = row.get("JobID", "")
    array_job, _, task = shown.partition("_")
    array_task = _int(task, None) if task.isdigit() else None
    state = row.get("State", "").split()[0] if row.get("State") else ""
    nodes = "" if row.get("NodeList") in (None, "None assigned") else row["NodeList"]
    exit_code, signal = _exit(state, bool(nodes), row.get("ExitCode", ""))
    return JobRecord(
        slurm_id=shown, job_id=row.get("JobIDRaw", shown), array_job_id=array_job if array_task is not None else "",
        array_task=array_task, name=row.get("JobName", ""), user=row.get("User", ""), state=state, reason="",
        nodes=nodes, restarts=_int(row.get("Restarts")), workdir=row.get("WorkDir", ""),
        stdout=row.get("StdOut") or None, stderr=row.get("StdErr") or None, exit_code=exit_code, signal=signal,
        source="accounting")


def job_records(backend, slurm_id: str, patterns: bool = False) -> List[JobRecord]:
    """The job (an array's id: each task) from the controller, else from accounting; [] if neither knows it.

    ``patterns``: a single job's output and error patterns as submitted (one squeue more): 26.05's
    scontrol prints them filled in for the batch step alone (``%t`` as 0, ``%N`` as its first node),
    which would hide the files of the job's other ranks and nodes."""
    found = [record_from_controller(kv) for kv in backend.job_records(slurm_id)]
    if found and patterns and len(found) == 1:
        raw = backend.output_patterns(found[0].slurm_id)
        if raw is not None:
            found[0] = found[0]._replace(stdout=raw[0] or found[0].stdout, stderr=raw[1])
    if found:
        return found
    rows = backend.accounting_records(slurm_id) or []
    return [record_from_accounting(r) for r in rows]


def unknown_job(backend, ref: LogRef) -> SlurmkitError:
    """The error for a job neither the controller nor accounting knows, saying why that can be."""
    return SlurmkitError("job %s is not known to cluster %s%s" % (
        ref, ref.cluster, "" if backend.has_accounting() else
        " (it keeps no accounting: a job is forgotten MinJobAge after it ends)"))


# --- patterns -------------------------------------------------------------------------------------

def file_pattern(record: JobRecord, stream: str = "out", attempt_restarts: Optional[int] = None) -> Optional[str]:
    """The job's output (``stream`` "out") or error file with everything known put in; what depends on the
    node or rank stays as ``%N``/``%n``/``%t``.  None where the record does not say (22.05's accounting)."""
    from slurmkit.slurm.parsers import expand_pattern

    pattern = record.stdout if stream == "out" else (record.stderr or record.stdout)
    if pattern is None:
        return None
    values = {"j": record.job_id, "x": record.name, "u": record.user,
              "r": str(record.restarts if attempt_restarts is None else attempt_restarts)}
    if not _WHERE_RE.search(pattern):
        # One file: the batch step's (%s "batch", %J the job id).  With a node or rank in it, the job's
        # steps (srun -o with the same pattern) write theirs too: %s and %J are matched like %t.
        values.update(s="batch", J=record.job_id)
    if record.array_task is not None:
        values.update(A=record.array_job_id, a=str(record.array_task), b=str(record.array_task % 10))
    else:
        values.update(A=record.job_id)
    path = expand_pattern(pattern, values)
    if record.workdir and not path.startswith("/"):
        path = os.path.join(record.workdir, path)
    return path


_WHERE_RE = re.compile(r"%([0-9]*)([Nnt])")
_MATCHED_RE = re.compile(r"%([0-9]*)([NntsJ])")
_GROUPS = {"N": ("node", r"[^/]+?"), "n": ("nodeindex", r"[0-9]+"), "t": ("rank", r"[0-9]+"),
           "s": ("step", r"[0-9]+|batch|extern|interactive"), "J": ("jobstep", r"[0-9]+(?:\.[0-9]+)?")}


def where_parts(path: str) -> bool:
    """Whether the path still depends on the node or the rank."""
    return bool(_WHERE_RE.search(path))


def _glob_literal(text: str) -> str:
    """``text`` matched literally by a shell glob: Python's fnmatch and find(1)'s -name both take ``[*]``."""
    return re.sub(r"([*?\[])", r"[\1]", text)


def _glob_and_regex(name: str) -> Tuple[str, "re.Pattern"]:
    """A file-name pattern with ``%N %n %t %s %J`` as a shell glob (literal glob characters escaped) and
    as a regex whose groups give each file's node, rank and step."""
    glob, regex, pos, seen = [], [], 0, set()
    for m in _MATCHED_RE.finditer(name):
        literal = name[pos:m.start()]
        glob.append(_glob_literal(literal) + "*")
        group, body = _GROUPS[m.group(2)]
        # A letter twice (%t-%t) would name one group twice: the first names it, the others match alike.
        regex.append(re.escape(literal) + ("(?:%s)" % body if group in seen else "(?P<%s>%s)" % (group, body)))
        seen.add(group)
        pos = m.end()
    glob.append(_glob_literal(name[pos:]))
    regex.append(re.escape(name[pos:]))
    return "".join(glob), re.compile("".join(regex))


def _label(m: "re.Match") -> str:
    parts = m.groupdict()
    step = parts.get("step") or (parts.get("jobstep") and ("batch" if "." not in parts["jobstep"] else "step"))
    if step == "batch":
        return "batch"
    if parts.get("rank") is not None:
        return "rank %s" % int(parts["rank"])
    if parts.get("nodeindex") is not None:
        return "node %s" % int(parts["nodeindex"])
    if parts.get("node") is not None:
        return "node %s" % parts["node"]
    return step or ""


def existing_files(files, path: str) -> List[LogFile]:
    """The files a path with ``%N %n %t`` stands for, found in its directory (one listing), labelled and
    in rank or node order; a path without them as it is (whether it exists or not)."""
    if not where_parts(path):
        return [LogFile(path)]
    directory, name = os.path.split(path)
    if where_parts(directory):
        raise UsageError("the output pattern %s puts the node or rank in a directory's name; slurmkit logs "
                         "finds per-node and per-rank files only by their file names: give the path" % path)
    glob, regex = _glob_and_regex(name)
    found = []
    for candidate in files.glob(directory or ".", glob):
        m = regex.fullmatch(os.path.basename(candidate))
        if m:
            found.append((m, LogFile(candidate, _label(m))))

    def order(item):   # the batch step first, then by step, rank, node
        parts, label = item[0].groupdict(), item[1].label
        return (label != "batch", _int(parts.get("step"), -1), _int(parts.get("rank"), -1),
                _int(parts.get("nodeindex"), -1), parts.get("node") or "", item[1].path)
    return [f for _, f in sorted(found, key=order)]


# --- locating ---------------------------------------------------------------------------------------

def tracked_job(ref: LogRef, journal_path: Optional[str]):
    """The requeue daemon's chain the job belongs to (its Tracked record), or None."""
    from slurmkit.requeue.journal import Journal, default_path

    path = journal_path or default_path()
    if not os.path.exists(path):
        return None
    journal = Journal(path)
    try:
        for tracked in journal.jobs():
            if any(a.cluster == ref.cluster and a.job_id == ref.slurm_id for a in tracked.attempts):
                return tracked
    finally:
        journal.close()
    return None


def locate(session: "Session", ref: LogRef, *, stream: str = "out", attempt: Optional[int] = None,
           rank: Optional[int] = None, journal_path: Optional[str] = None) -> Located:
    """Where ``ref``'s output is (see the module's docstring).  Raises SlurmkitError when nothing
    knows the job, or when the job's record keeps no file name and slurmkit has none either."""
    tracked = tracked_job(ref, journal_path)
    attempts, chosen = 1, None
    if tracked is not None:
        submitted = [a for a in tracked.attempts if a.job_id]
        attempts = len(submitted)
        if attempt is not None:
            pick = next((a for a in submitted if a.number == attempt), None)
            if pick is None:
                raise UsageError("job %s has attempts %s; --attempt %d is not one of them"
                                 % (ref, ", ".join(str(a.number) for a in submitted), attempt))
        else:
            pick = submitted[-1]
        ref = LogRef.of(pick.cluster, pick.job_id)
        chosen = pick.number
    backend = session.backend(ref.cluster)
    records = job_records(backend, ref.slurm_id, patterns=True)
    if not records:
        raise unknown_job(backend, ref)
    if ref.task is None and len(records) > 1:
        raise ArrayNeedsTask(ref, records)
    record = records[0]
    restarts = None
    if tracked is None and attempt is not None:
        if attempt < 1 or attempt > record.restarts + 1:
            raise UsageError("job %s ran %d time(s); --attempt takes 1 to %d"
                             % (ref, record.restarts + 1, record.restarts + 1))
        restarts = attempt - 1
    if tracked is None:
        attempts, chosen = record.restarts + 1, (attempt or record.restarts + 1)
    expected = file_pattern(record, stream, restarts)
    if expected is None and tracked is not None:
        expected = _tracked_pattern(tracked, record, stream)
    if expected is None:
        raise SlurmkitError("cluster %s no longer holds job %s, and its accounting (Slurm 22.05) does not keep the "
                            "output file's name (23.02 and later do): give the file's path (its default is "
                            "slurm-%s.out in the job's working directory, %s)"
                            % (ref.cluster, ref, ref.slurm_id, record.workdir or "unknown"))
    files = existing_files(session.files(ref.cluster), expected)
    note = ""
    if where_parts(expected):
        if rank is not None:
            files = [f for f in files if f.label in ("rank %d" % rank, "node %d" % rank)]
            if not files:
                note = "no file of rank %d yet (%s)" % (rank, expected)
        elif not files:
            note = "no file matching %s yet" % expected
    elif rank is not None:
        raise UsageError("job %s writes one output file (%s), not one per rank: --rank does not apply"
                         % (ref, expected))
    if tracked is None and attempts > 1 and "%r" not in (record.stdout or "") and attempt is not None:
        note = ("Slurm requeued job %s %d time(s) and its output pattern has no %%r: every attempt wrote into "
                "the same file" % (ref, record.restarts))
    return Located(ref, record, files, expected, chosen, attempts, note,
                   tracked.id if tracked is not None else None, stream)


def locate_file(session: "Session", ref: LogRef, path: str, stream: str = "out") -> Located:
    """A job whose output slurmkit itself put in a known file (a sweep point's ``output.log``)."""
    backend = session.backend(ref.cluster)
    records = job_records(backend, ref.slurm_id)
    if not records:
        raise unknown_job(backend, ref)
    record = records[0]._replace(stdout=path, stderr=path)
    return Located(ref, record, [LogFile(path)], path, None, 1, "", None, stream)


def _tracked_pattern(tracked, record: JobRecord, stream: str) -> Optional[str]:
    """The output pattern of a tracked job from its spec (22.05's accounting keeps none)."""
    from slurmkit.script.sbatch_header import output_file_name

    spec = tracked.spec or {}
    pattern = spec.get("output") or output_file_name(spec.get("name") or record.name)
    if stream != "out" and spec.get("error"):
        pattern = spec["error"]
    return file_pattern(record._replace(stdout=pattern, stderr=None), "out")


class ArrayNeedsTask(SlurmkitError):
    """An array's id without a task: ``logs`` shows the tasks (``-f`` needs one)."""

    exit_code = 2

    def __init__(self, ref: LogRef, records: List[JobRecord]):
        self.ref = ref
        self.records = sorted(records, key=lambda r: (r.array_task is None, r.array_task or 0))
        super().__init__("job %s is an array of %d task(s): name one, e.g. %s:%s"
                         % (ref, len(records), ref.cluster, self.records[0].slurm_id))

    def table(self) -> List[Tuple[str, str, str]]:
        """(CLUSTER:ID_TASK, state, output file) per task."""
        rows = []
        for r in self.records:
            rows.append(("%s:%s" % (self.ref.cluster, r.slurm_id), r.state, file_pattern(r) or "?"))
        return rows


# --- reading ----------------------------------------------------------------------------------------

def last_lines(files, path: str, lines: int) -> Optional[Tuple[int, str]]:
    """``(size, the last `lines` lines)`` of a file, reading from its end in growing windows (at most
    :data:`WINDOW_MAX` bytes); None when it does not exist."""
    size = WINDOW_START
    while True:
        got = files.window(path, size)
        if got is None:
            return None
        end, text = got
        parts = text.split("\n")
        trailing = text.endswith("\n")
        have = len(parts) - (1 if trailing else 0)
        whole = len(text.encode("utf-8", "replace")) >= end
        if have > lines or whole or size >= WINDOW_MAX:
            if lines == 0:
                return end, ""
            return end, "\n".join(parts[-(lines + (1 if trailing else 0)):])
        size *= 4


class LineWriter:
    """Writes text to ``out`` line by line with a label in front of each (several files of one job)."""

    def __init__(self, out: Callable[[str], None], label: str = ""):
        self.out = out
        self.prefix = "[%s] " % label if label else ""
        self.partial = ""

    def write(self, text: str, final: bool = False) -> None:
        if not self.prefix:
            if text:
                self.out(text)
            return
        text = self.partial + text
        lines = text.split("\n")
        self.partial = lines.pop()
        for line in lines:
            self.out(self.prefix + line + "\n")
        if final and self.partial:
            self.out(self.prefix + self.partial + "\n")
            self.partial = ""


class Tail:
    """One file being read from an offset in bounded chunks."""

    def __init__(self, files, log: LogFile, out: Callable[[str], None], labelled: bool):
        self.files = files
        self.log = log
        self.offset = 0
        self.writer = LineWriter(out, log.label if labelled else "")

    def start(self, lines: Optional[int]) -> bool:
        """Print the last ``lines`` lines (None: everything so far); False when the file does not exist."""
        if lines is None:
            return self.read_all()
        got = last_lines(self.files, self.log.path, lines)
        if got is None:
            return False
        self.offset, text = got
        self.writer.write(text)
        return True

    def read_all(self) -> bool:
        """Everything from the offset to the end, in chunks; False when the file does not exist."""
        while True:
            got = self.files.read_range(self.log.path, self.offset, CHUNK)
            if got is None:
                return False
            count, text = got
            if count == 0:
                return True
            self.offset += count
            self.writer.write(text)
            if count < CHUNK:
                return True

    def finish(self) -> None:
        self.writer.write("", final=True)


def exit_status(record: JobRecord) -> int:
    """The job's exit status as a shell sees it: its own, 128+N for signal N, 1 for an end without one."""
    if record.exit_code is not None:
        return record.exit_code
    if record.signal is not None:
        return 128 + record.signal
    return 0 if record.state == "COMPLETED" else 1


def show(session: "Session", located: Located, out: Callable[[str], None], lines: Optional[int] = None) -> bool:
    """Print the files' content (the last ``lines`` lines of each); False when none exists yet."""
    files = session.files(located.ref.cluster)
    labelled = len(located.files) > 1
    shown = False
    for log in located.files:
        tail = Tail(files, log, out, labelled)
        if tail.start(lines):
            shown = True
        tail.finish()
    return shown


def follow(session: "Session", located: Located, out: Callable[[str], None], say: Callable[[str], None],
           lines: Optional[int] = None, clock=time, journal_path: Optional[str] = None,
           stream: str = "out", rank: Optional[int] = None) -> int:
    """Print the output as it grows until the job ends (and, for a job the requeue daemon restarts, its
    next attempts); return the job's exit status.  ``say`` gets one line per change of state."""
    while True:
        status, record = _follow_one(session, located, out, say, lines, clock)
        nxt = _next_attempt(session, located, say, clock, journal_path)
        if nxt is None:
            return status
        located = locate(session, nxt, stream=stream, rank=rank, journal_path=journal_path)
        say("%s: attempt %s of %s, after %s" % (located.ref, located.attempt, located.ref.cluster, record.state))
        lines = None   # a new attempt's file is read from its start


def _follow_one(session, located: Located, out, say, lines, clock) -> Tuple[int, JobRecord]:
    """Follow one job (one attempt) to its end."""
    from slurmkit.slurm.types import FINISHED_STATES

    ref, record = located.ref, located.record
    files = session.files(ref.cluster)
    backend = session.backend(ref.cluster)
    tails: Dict[str, Tail] = {}
    labelled = where_parts(located.expected)
    started: Dict[str, bool] = {}
    last_said, next_state = None, 0.0
    pattern_restarts = record.restarts

    def scan(listing: bool):
        if listing and labelled:     # new per-rank files: looked for once per state poll, not per read
            for log in existing_files(files, located.expected):
                tails.setdefault(log.path, Tail(files, log, out, True))
        elif not labelled:
            for log in located.files:
                tails.setdefault(log.path, Tail(files, log, out, False))
        for path, tail in tails.items():
            if not started.get(path):
                started[path] = tail.start(lines)
            else:
                tail.read_all()

    while True:
        now = clock.monotonic()
        polled = now >= next_state
        if polled:
            next_state = now + STATE_EVERY_S
            found = job_records(backend, ref.slurm_id)
            if not found:
                # Forgotten without accounting to ask (MinJobAge passed between two polls): it ended.
                say("%s is no longer known to cluster %s: it ended, how is not known" % (ref, ref.cluster))
                scan(True)
                for tail in tails.values():
                    tail.finish()
                return 1, record
            # The patterns as submitted, from locate (a poll's are 26.05's filled-in ones).
            record = found[0]._replace(stdout=located.record.stdout, stderr=located.record.stderr)
            said = (record.state, record.reason)
            if said != last_said:
                last_said = said
                if record.state in _PENDING:
                    say("%s is %s%s: waiting for it to start; its output goes to %s"
                        % (ref, record.state, " (%s)" % record.reason if record.reason else "", located.expected))
                elif record.state != "RUNNING":
                    say("%s is %s" % (ref, record.state))
            if "%r" in (record.stdout or "") and record.restarts != pattern_restarts:
                # Slurm requeued it and this release names each attempt's file: follow the new one.
                pattern_restarts = record.restarts
                expected = file_pattern(record, located.stream)
                located = located._replace(expected=expected, files=existing_files(files, expected))
                tails.clear()
                started.clear()
                lines = None
            for tail in tails.values():
                # Slurm's requeue starts the file again (open mode truncate): read the new attempt from 0.
                size = (tail.files.window(tail.log.path, 0) or (tail.offset, ""))[0]
                if size < tail.offset:
                    say("%s was truncated (the job was requeued): reading it from its start" % tail.log.path)
                    tail.offset = 0
        scan(polled)
        if record.state in FINISHED_STATES:
            scan(True)   # what was written between the last read and the end
            for tail in tails.values():
                tail.finish()
            if not tails:
                say("%s ended (%s) without writing %s" % (ref, record.state, located.expected))
            return exit_status(record), record
        clock.sleep(READ_EVERY_S)


def _next_attempt(session, located: Located, say, clock, journal_path) -> Optional[LogRef]:
    """For a job the requeue daemon tracks: the attempt after this one once the daemon queued it, None
    when it will not restart it (the chain ended)."""
    if located.tracked_id is None:
        return None
    from slurmkit.requeue.journal import Journal, default_path

    journal = Journal(journal_path or default_path())
    try:
        announced = False
        while True:
            tracked = journal.job(located.tracked_id)
            later = [a for a in tracked.attempts if a.job_id and (located.attempt is None
                                                                    or a.number > located.attempt)]
            if later:
                return LogRef.of(later[0].cluster, later[0].job_id)
            if tracked.state != "active":
                if tracked.reason:
                    say("%s: the requeue daemon will not restart it: %s" % (located.ref, tracked.reason))
                return None
            if not announced:
                say("%s ended; waiting for the requeue daemon to restart it" % (located.ref,))
                announced = True
            clock.sleep(STATE_EVERY_S)
    finally:
        journal.close()
