"""The Slurm calls sweeps add, submitit-style: pure argv builders and pure parsers.

They run through the cluster backend's one runner (locally or on the login
node over SSH), like every other Slurm command of slurmkit:

- :func:`squeue_tasks`: every task of many arrays in one ``squeue --array``
  (one line per task, pending ones too, with its raw exit status);
- :func:`sacct_tasks`: the same from accounting, for tasks the controller
  has forgotten (past ``MinJobAge``);
- :func:`update_jobs`: ``scontrol update JobId=A_1,A_7 StartTime=now`` (after
  a requeue, which would otherwise wait Slurm's two minutes) and
  ``ArrayTaskThrottle=N``;
- files next to a sweep on a cluster reached over SSH (the points table of
  a large array, the directories Slurm writes into, error output tails).
"""

import re
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence

from slurmkit.slurm import parsers
from slurmkit.slurm.commands import SQUEUE_DELIMITER as _DELIMITER   # never in a state, reason or node list
# squeue --Format fields, each followed by the delimiter (``name:SUFFIX``: no padding, no truncation).
# StartTime/EndTime: when a task started and ended (the requeue policy's crash-loop rule needs how long it ran);
# Comment stays last.  Lines without the two times (recorded before they were asked) parse too.
SQUEUE_FIELDS = ("ArrayJobID", "ArrayTaskID", "JobID", "State", "Reason", "exit_code", "NodeList", "RestartCnt",
                 "StartTime", "EndTime", "Comment")
_OLD_FIELDS = 9     # the same without StartTime and EndTime
SACCT_FIELDS = ("JobID", "JobIDRaw", "State", "ExitCode", "NodeList")


class TaskInfo(NamedTuple):
    """One array task as Slurm reports it."""

    array_job_id: str       # the array's id (what sbatch printed)
    index: int              # SLURM_ARRAY_TASK_ID
    job_id: str             # the task's own job id (the array's id while it is pending as part of it)
    state: str
    reason: str = ""
    exit_code: Optional[int] = None     # see slurmkit.slurm.types.JobInfo: at most one of the two is set
    signal: Optional[int] = None
    nodes: str = ""
    restarts: int = 0
    comment: str = ""
    start_time: Optional[float] = None  # epoch; only once it started (a pending task's StartTime is an estimate)
    end_time: Optional[float] = None    # epoch; only once it ended (a running task's EndTime is its time limit)

    @property
    def key(self):
        return (self.array_job_id, self.index)


def squeue_tasks(array_ids: Iterable[str] = (), user: Optional[str] = None) -> List[str]:
    """Every task of these arrays (or of ``user``'s jobs), one line each, finished ones too (until MinJobAge)."""
    argv = ["squeue", "--array", "--noheader", "--states=all"]
    ids = list(array_ids)
    if ids:
        argv.append("--jobs=" + ",".join(ids))
    if user:
        argv.append("--user=" + user)
    if not ids and not user:
        raise ValueError("squeue_tasks needs array ids or a user")
    return argv + ["--Format=" + ",".join("%s:%s" % (f, _DELIMITER) for f in SQUEUE_FIELDS)]


def parse_squeue_tasks(text: str) -> List[TaskInfo]:
    from slurmkit.slurm.types import FINISHED_STATES

    tasks = []
    for line in text.splitlines():
        fields = _fields(line)
        if fields is None:
            continue
        array_id, index, job_id, state, reason, status, nodes, restarts, start, end, comment = fields
        if not index.strip().isdigit():
            continue       # not an array task (squeue prints N/A)
        nodes = "" if nodes.strip() in ("", "(null)") else nodes.strip()
        state = state.strip()
        code, signal = parsers.ended_exit(state, bool(nodes), _exit_value(status))
        started = _epoch(start) if state != "PENDING" else None
        ended = _epoch(end) if state in FINISHED_STATES else None
        tasks.append(TaskInfo(array_id.strip(), int(index), job_id.strip(), state,
                              "" if reason.strip() in ("None", "(null)") else reason.strip(), code, signal, nodes,
                              int(restarts) if restarts.strip().isdigit() else 0,
                              "" if comment == "(null)" else comment, started, ended))
    return tasks


def _fields(line: str) -> Optional[List[str]]:
    """A line's fields in SQUEUE_FIELDS' order (the times empty in a line without them); None: no task line."""
    fields = line.split(_DELIMITER)
    if len(fields) >= len(SQUEUE_FIELDS):
        return fields[:len(SQUEUE_FIELDS)]
    if len(fields) >= _OLD_FIELDS:
        return fields[:_OLD_FIELDS - 1] + ["", ""] + [fields[_OLD_FIELDS - 1]]
    return None


def _epoch(text: str) -> Optional[float]:
    """squeue's local ``2026-11-30T18:26:54`` as epoch seconds; None for N/A, Unknown, an empty field."""
    when = parsers.slurm_datetime(text.strip())
    return when.timestamp() if when is not None else None


def parse_squeue_unstarted(text: str) -> Dict[str, TaskInfo]:
    """{array id: how its never-started tasks ended}, from the array's own record once it has ended.

    Slurm keeps an array's pending tasks in the array's own job record until
    each starts (then the task gets a record of its own).  When that record
    ends with tasks still in it (``scancel`` of the array or of those tasks,
    recorded on 22.05), ``squeue --array`` prints it as one line without a
    task id (``ArrayTaskID`` N/A) instead of one line per task, and only
    accounting lists the indices (``A_[1-5%1]``), once slurmdbd has them.  The
    line stands for every task of the array that never started and has no
    line of its own.  (A job that is no array prints N/A too: its own id is no
    array the caller asks about.)
    """
    from slurmkit.slurm.types import FINISHED_STATES

    out = {}
    for line in text.splitlines():
        fields = _fields(line)
        if fields is None:
            continue
        array_id, index, job_id, state, reason = (f.strip() for f in fields[:5])
        if index.isdigit() or job_id != array_id or state not in FINISHED_STATES:
            continue
        comment = fields[-1]
        out[array_id] = TaskInfo(array_id, -1, job_id, state, "" if reason in ("None", "(null)") else reason,
                                 comment="" if comment == "(null)" else comment)
    return out


def _exit_value(text: str):
    """squeue's exit_code: 22.05 prints the raw wait status (768 is exit 3); an ``E:S`` pair is read as
    scontrol prints it; anything else (``N/A``) says nothing."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    if re.fullmatch(r"[0-9]+:[0-9]+", text):
        return text
    return None


def sacct_tasks(array_ids: Iterable[str]) -> List[str]:
    """The tasks of these arrays from accounting, with their ``.batch`` steps (see parse_sacct_tasks)."""
    return ["sacct", "--noheader", "--parsable2", "--jobs=" + ",".join(array_ids),
            "--format=" + ",".join(SACCT_FIELDS)]


def parse_sacct_tasks(text: str) -> List[TaskInfo]:
    """``A_I`` rows (and ``A_[0-9,20]`` for tasks still pending together) as tasks.

    A task cancelled while running reads 0:0 in its own row for a while,
    where its ``.batch`` step already has the 0:15 the controller reported:
    the step's exit wins, as in :func:`slurmkit.slurm.parsers.parse_sacct`.
    """
    from slurmkit.sweep.arrays import parse_indices

    rows, batch_exit = [], {}
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) != len(SACCT_FIELDS):
            continue
        job, _, step = fields[0].partition(".")
        if step == "batch":
            batch_exit[job] = fields[3]
        elif not step and "_" in job:
            rows.append(fields)
    tasks = []
    for job, raw, state, exit_text, nodes in rows:
        array_id, _, index = job.partition("_")
        state = state.split()[0] if state else "UNKNOWN"
        nodes = "" if nodes == "None assigned" else nodes
        try:
            code, signal = parsers.ended_exit(state, bool(nodes), batch_exit.get(job, exit_text))
        except ValueError:
            code, signal = None, None
        indices = parse_indices(index) if index.startswith("[") else [int(index)] if index.isdigit() else []
        for i in indices:
            tasks.append(TaskInfo(array_id, i, raw if len(indices) == 1 else array_id, state, "", code, signal, nodes))
    return tasks


def task_ids(tasks: Iterable[TaskInfo]) -> List[str]:
    """``A_I`` names of tasks, as scontrol takes them."""
    return ["%s_%d" % (t.array_job_id, t.index) for t in tasks]


def update_jobs(job_ids: Sequence[str], **fields) -> List[str]:
    """``scontrol update JobId=ID[,ID...] Key=Value ...`` (one RPC per id, one process for all)."""
    if not job_ids:
        raise ValueError("no job ids given")
    return ["scontrol", "update", "JobId=" + ",".join(job_ids)] + ["%s=%s" % kv for kv in sorted(fields.items())]


# Writes standard input to "$1" atomically (a temporary file, then a rename), creating its directory.
_PUT_SCRIPT = 'set -e; umask 077; mkdir -p -- "$(dirname -- "$1")"; cat > "$1.tmp.$$"; mv -f -- "$1.tmp.$$" "$1"'


def put_file(path: str) -> List[str]:
    """Write standard input to ``path`` (on the machine the runner runs on)."""
    return ["sh", "-c", _PUT_SCRIPT, "slurmkit-put", path]


def make_dirs(paths: Iterable[str]) -> List[str]:
    return ["mkdir", "-p", "--"] + list(paths)


def read_file(path: str) -> List[str]:
    return ["cat", "--", path]


def remove_files(paths: Iterable[str]) -> List[str]:
    return ["rm", "-f", "--"] + list(paths)


# Each file's last bytes after a record separator (\036) and its name and a unit separator (\037).
_TAILS_SCRIPT = ('n=$1; shift; for f; do printf "\\036%s\\037" "$f"; '
                 'tail -c "$n" -- "$f" 2>/dev/null || true; done')


def tails(paths: Sequence[str], size: int) -> List[str]:
    """The last ``size`` bytes of each file, in one process (see parse_tails)."""
    return ["sh", "-c", _TAILS_SCRIPT, "slurmkit-tails", str(int(size))] + list(paths)


def parse_tails(text: str) -> Dict[str, str]:
    out = {}
    for record in text.split("\x1e")[1:]:
        path, _, body = record.partition("\x1f")
        out[path] = body
    return out
