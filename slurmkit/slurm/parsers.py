"""Pure parsers of Slurm command output.

Each function takes the text a command printed and returns plain data
(:mod:`slurmkit.slurm.types`).  They never run anything, so they are tested
against recorded output of real Slurm versions.  The JSON parsers accept both
the 22.05 shapes (plain numbers, string states) and the newer ones (numbers
wrapped as ``{"set": .., "number": ..}``, state lists).
"""

import json
import re
from datetime import datetime
from typing import TYPE_CHECKING, Dict, List, NamedTuple, Optional, Sequence, Tuple

from slurmkit.errors import SlurmCommandError, SlurmkitError
from slurmkit.slurm import commands

# The result types are imported inside the parsers that build them: a plain
# submission (parse_sbatch_parsable only) then never pays for defining them.
if TYPE_CHECKING:
    from slurmkit.slurm.types import JobInfo, NodeInfo, StartEstimate, TaskInfo, Topology

_JOBID_RE = re.compile(r"^(\d+)(?:;(\S+))?$")


def parse_sbatch_parsable(stdout: str) -> str:
    """``sbatch --parsable`` prints ``JOBID`` or ``JOBID;CLUSTER``."""
    for line in stdout.splitlines():
        m = _JOBID_RE.match(line.strip())
        if m:
            return m.group(1)
    raise SlurmCommandError("sbatch printed no job id: %r" % stdout.strip()[:200])


# Slurm 26.05 prints a word between the time and "using" ("... to start at
# 2026-11-30T16:09:12 a using 2 processors ...", tests/unit/data/releases/26.05);
# 22.05 and 24.11 print none.  Words there are skipped, whatever they are.
_TEST_ONLY_RE = re.compile(
    r"Job (?P<job>\d+) to start at (?P<start>\S+)(?: \S+)*? using (?P<cpus>\d+) processors on nodes (?P<nodes>\S+)"
    r"(?: in partition (?P<partition>\S+))?")


def parse_test_only(stderr: str) -> "StartEstimate":
    """``sbatch --test-only`` prints its estimate on stderr."""
    from slurmkit.slurm.types import StartEstimate

    m = _TEST_ONLY_RE.search(stderr)
    if not m:
        raise SlurmCommandError("sbatch --test-only gave no start estimate: %s" % first_error_line(stderr))
    return StartEstimate(start=datetime.strptime(m.group("start"), "%Y-%m-%dT%H:%M:%S"),
                         nodes=m.group("nodes"), partition=m.group("partition"), cpus=int(m.group("cpus")))


# "sbatch: error: ", "bash: ": a program's name (lower case, unlike "ValueError: ") and the level.
_PROGRAM_PREFIX_RE = re.compile(r"^(?:[a-z][\w.-]*: )?(?:(?:error|fatal): )?")
_ERROR_WORD_RE = re.compile(r"\b(?:error|fatal)\b", re.I)
_NOISE_RE = re.compile(r"^(?:[a-z][\w.-]*: )?(?:warning|info|debug[0-9]*|verbose): ", re.I)
_MESSAGE_LIMIT = 400


def first_error_line(stderr: str) -> str:
    """The most useful line of a Slurm error, without the 'sbatch: error:' noise; always one line.

    Slurm names the cause first and sums up last: a broken SLURM_CONF gives
    ``s_p_parse_file: file "/x/slurm.conf" is empty`` (no "error" in it),
    then ``error: ClusterName needs to be specified``, then ``fatal: Unable
    to process configuration file``.  So the first line up to the first
    error line (warnings skipped) is kept, with the last error line after it
    in parentheses when that says something else.  Without any error line,
    the last line (a traceback's exception, a shell's message).
    """
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    if not lines:
        return "(no message)"
    errors = [i for i, ln in enumerate(lines) if _ERROR_WORD_RE.search(ln)]
    if not errors:
        text = _PROGRAM_PREFIX_RE.sub("", lines[-1]) or lines[-1]
    else:
        lead = [ln for ln in lines[:errors[0] + 1] if not _NOISE_RE.match(ln)] or [lines[errors[0]]]
        first = _PROGRAM_PREFIX_RE.sub("", lead[0]) or lead[0]
        last = _PROGRAM_PREFIX_RE.sub("", lines[errors[-1]]) or lines[errors[-1]]
        text = first if last == first else "%s (%s)" % (first, last)
    return text if len(text) <= _MESSAGE_LIMIT else text[:_MESSAGE_LIMIT - 3] + "..."


def _number(value):
    """22.05 gives plain ints; 23.02+ gives {"set": bool, "infinite": bool, "number": int}."""
    if isinstance(value, dict):
        if value.get("infinite"):
            return None
        return value.get("number") if value.get("set", True) else None
    return value


def _state(value) -> str:
    """squeue --json's job_state: a string (22.05), or [base state, flags...] (23.02+).

    A job whose processes are still ending is COMPLETING whatever its base
    state (["CANCELLED", "COMPLETING"], ["PENDING", "COMPLETING"] after a
    requeue), as 22.05's JSON, squeue's %T and pyslurm's Job.state all say:
    the base state alone would call it ended while its epilog still runs,
    and the two backends would disagree about it.
    """
    if isinstance(value, list):
        if "COMPLETING" in value[1:]:
            return "COMPLETING"
        return value[0] if value else "UNKNOWN"
    return value or "UNKNOWN"


def time_limit_text(minutes) -> str:
    minutes = _number(minutes)
    if minutes is None or minutes in (0xFFFFFFFF, 0xFFFFFFFE):
        return "UNLIMITED"
    days, rest = divmod(int(minutes), 1440)
    text = "%02d:%02d:00" % divmod(rest, 60)
    return "%d-%s" % (days, text) if days else text


def epoch_datetime(value) -> Optional[datetime]:
    value = _number(value)
    if not value:
        return None
    return datetime.fromtimestamp(int(value))


# Slurm's "no value" markers for a 32-bit field (slurm.h NO_VAL, INFINITE).
_NO_VALUES = (0xFFFFFFFE, 0xFFFFFFFF)


def decode_exit(value) -> Tuple[Optional[int], Optional[int]]:
    """``(exit_code, signal)`` of an ended batch script, from any form Slurm reports it in.

    The one decoder for every source (see :class:`~slurmkit.slurm.types.JobInfo`):

    - an ``int`` is the raw wait status, as ``squeue --json`` of 22.05 and
      libslurm give it: 768 is exit 3, 36608 is exit 143 (a script whose
      child died of SIGTERM), 15 is killed by SIGTERM, 9 by SIGKILL;
    - a string ``"E:S"`` is scontrol's and sacct's ``ExitCode`` (and
      pyslurm's deprecated API): S > 0 means killed by signal S;
    - a dict is the 23.02+ JSON: ``{"status": ["EXITED"|"SIGNALED"|...],
      "return_code": .., "signal": {"id"|"signal_id": .., "name": ..}}``,
      numbers bare or wrapped as ``{"set", "number"}``.

    Returns ``(status, None)`` for an exit, ``(None, signal)`` for a signal
    and ``(None, None)`` where there is nothing to decode.
    """
    if value is None or value == "":
        return None, None
    if isinstance(value, bool):
        raise TypeError("not an exit status: %r" % (value,))
    if isinstance(value, int):
        if value < 0 or value in _NO_VALUES:
            return None, None
        low = value & 0x7F
        if low == 0:            # WIFEXITED
            return (value >> 8) & 0xFF, None
        if low == 0x7F:         # WIFSTOPPED: not an end at all
            return None, None
        return None, low        # WIFSIGNALED (0x80 is the core-dump flag)
    if isinstance(value, str):
        code, _, sig = value.strip().partition(":")
        if not code.isdigit() or not (sig or "0").isdigit():
            raise ValueError("not an exit status: %r" % value)
        if int(sig or 0):
            return None, int(sig)
        return int(code), None
    if isinstance(value, dict):
        status = value.get("status")
        statuses = set(status if isinstance(status, list) else [status])
        if statuses & {"SIGNALED", "CORE_DUMPED"}:
            signal = value.get("signal") or {}
            number = _number(signal.get("id", signal.get("signal_id")))
            return None, int(number) if number else None
        if statuses & {"PENDING", "INVALID"}:
            return None, None
        code = _number(value.get("return_code"))
        return (int(code), None) if code is not None else (None, None)
    raise TypeError("not an exit status: %r" % (value,))


def ended_exit(state: str, ran: bool, value) -> Tuple[Optional[int], Optional[int]]:
    """:func:`decode_exit`, for a job that has ended after it ran; ``(None, None)`` otherwise.

    Every source says 0 while a job is pending or running, and 0 for a job
    cancelled before it started: none of those is an exit status.  ``ran``
    is whether the job ever had nodes (its node list is not empty).
    """
    from slurmkit.slurm.types import FINISHED_STATES

    if state not in FINISHED_STATES or not ran:
        return None, None
    return decode_exit(value)


# Slurm's filename pattern: "%%", or an optional zero-padding width and one letter (sbatch(1) FILENAME PATTERN).
_PATTERN_RE = re.compile(r"%(%|[0-9]*[A-Za-z])")
# The letters a width zero-pads (numbers); the others are text.
_NUMERIC_LETTERS = frozenset("AabjnrsSt")


def expand_pattern(pattern: str, values: Dict[str, str]) -> str:
    """Slurm's filename ``pattern`` with the letters ``values`` knows ({"j": "42", "x": "train", ...})
    replaced, ``%%`` made ``%``, and every other ``%`` sequence left as it is (for a later, wider
    expansion: the node's and the rank's parts are known only where the file is written).  A
    backslash anywhere turns the patterns off, as in sbatch: the backslashes are removed."""
    if "\\" in pattern:
        return pattern.replace("\\", "")

    def sub(m):
        code = m.group(1)
        if code == "%":
            return "%"
        letter, width = code[-1], code[:-1]
        value = values.get(letter)
        if value is None:
            return m.group(0)
        return value.zfill(int(width)) if width and letter in _NUMERIC_LETTERS else value
    return _PATTERN_RE.sub(sub, pattern)


def expand_output_pattern(pattern: str, job_id: str, name: str, user: str) -> str:
    """Slurm's filename pattern (``%j``, ``%x``, ``%u``, ``%%``) for one job; others stay as they are."""
    return expand_pattern(pattern, {"j": job_id, "A": job_id, "x": name, "u": user})


def _output_file(job_id: str, pattern: str, name: str, user: str, cwd: str) -> str:
    """The job's output file: ``pattern`` expanded, relative to its working directory ``cwd``, sbatch's
    default if unset.  One rule for squeue's JSON and its --Format fields (STDOUT, WorkDir)."""
    path = expand_output_pattern(pattern or "slurm-%j.out", job_id, name, user)
    if cwd and not path.startswith("/"):
        path = cwd.rstrip("/") + "/" + path
    return path


def _job_reason(job: dict) -> str:
    """The reason as squeue's %r and scontrol print it: the description where
    the controller gave one.  24.11+ JSON splits a signalled job's reason into
    ``state_reason`` "RaisedSignal" and ``state_description``
    "RaisedSignal:9(Killed)" (tests/unit/data/exit_codes/24.11/squeue.json),
    which pyslurm and scontrol report whole; 22.05's description is empty."""
    return job.get("state_description") or job.get("state_reason") or ""


def parse_squeue_json(text: str) -> "List[JobInfo]":
    from slurmkit.slurm.types import FINISHED_STATES, JobInfo

    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SlurmCommandError("squeue --json printed invalid JSON: %s" % exc) from None
    jobs = []
    for job in data.get("jobs", []):
        state, nodelist = _state(job.get("job_state")), job.get("nodes") or ""
        exit_code, signal = ended_exit(state, bool(nodelist), job.get("exit_code"))
        jobs.append(JobInfo(
            job_id=str(job["job_id"]), name=job.get("name", ""), state=state,
            partition=job.get("partition", ""), node_count=_number(job.get("node_count")) or 0,
            nodelist=nodelist, start_time=epoch_datetime(job.get("start_time")),
            time_limit=time_limit_text(job.get("time_limit")), user=job.get("user_name", ""),
            reason=_job_reason(job), comment=job.get("comment", "") or "",
            exit_code=exit_code, signal=signal, cluster=job.get("cluster", "") or "",
            stdout=_output_file(str(job["job_id"]), job.get("standard_output") or "", job.get("name", ""),
                                job.get("user_name", ""), job.get("current_working_directory") or ""),
            # A live job's end_time is when its time limit would end it: not an end.
            end_time=epoch_datetime(job.get("end_time")) if state in FINISHED_STATES else None))
    return jobs


def slurm_datetime(text: str) -> Optional[datetime]:
    """Slurm's ``YYYY-MM-DDTHH:MM:SS``; None for what is not such a time ("N/A", "Unknown", "None").

    Read with fromisoformat after checking the shape, not with strptime: strptime's first call imports
    _strptime and compiles its pattern, 2-3 ms of every ``status`` (fromisoformat alone would also take
    other ISO forms, hence the shape)."""
    digits = text[0:4] + text[5:7] + text[8:10] + text[11:13] + text[14:16] + text[17:19]
    if len(text) != 19 or text[4] + text[7] + text[10] + text[13] + text[16] != "--T::" or not (
            digits.isascii() and digits.isdigit()) or text[11:13] == "24":
        # Python 3.13's fromisoformat reads hour 24 as the next midnight; strptime and Slurm never do.
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:  # the shape, but no such day or hour (2026-02-30T25:00:00)
        return None


def parse_squeue_parsable(text: str) -> "List[JobInfo]":
    from slurmkit.slurm.types import JobInfo

    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split(commands.SQUEUE_DELIMITER, len(commands.SQUEUE_FIELDS) - 1)
        if len(fields) != len(commands.SQUEUE_FIELDS):
            continue
        job_id, name, state, partition, count, nodelist, start, limit, user, reason, comment = fields
        jobs.append(JobInfo(job_id=job_id.strip(), name=name, state=state, partition=partition,
                            node_count=int(count) if count.strip().isdigit() else 0, nodelist=nodelist,
                            start_time=slurm_datetime(start), time_limit=limit, user=user,
                            reason=reason, comment="" if comment == "(null)" else comment))
    return jobs


def squeue_exit_value(text: str):
    """squeue's ``exit_code`` field for :func:`decode_exit`: 22.05 prints the raw wait status (768 is
    exit 3), 24.11 and later ``E:S`` (3:0); anything else (``N/A``) says nothing (None)."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    if re.fullmatch(r"[0-9]+:[0-9]+", text):
        return text
    return None


def parse_squeue_format(text: str) -> "List[JobInfo]":
    """``squeue --Format`` rows of :func:`commands.squeue_format`, read as :func:`parse_squeue_json` reads
    the same job: the raw exit status, the end only of an ended job, the output path expanded, the time
    limit in the JSON's spelling."""
    from slurmkit import times
    from slurmkit.slurm.types import FINISHED_STATES, JobInfo

    jobs = []
    for line in text.splitlines():
        fields = line.split(commands.SQUEUE_DELIMITER, len(commands.SQUEUE_FORMAT_FIELDS) - 1)
        if len(fields) != len(commands.SQUEUE_FORMAT_FIELDS):
            continue
        (job_id, name, state, partition, count, nodelist, start, end, limit, user, reason, exit_raw, stdout,
         workdir, cluster, comment) = fields
        state = state.strip() or "UNKNOWN"
        exit_code, signal = ended_exit(state, bool(nodelist), squeue_exit_value(exit_raw))
        try:
            minutes = times.parse_minutes(limit)
        except SlurmkitError:       # INVALID, NOT_SET: no limit to tell
            minutes = None
        jobs.append(JobInfo(
            job_id=job_id.strip(), name=name, state=state, partition=partition,
            node_count=int(count) if count.strip().isdigit() else 0, nodelist=nodelist,
            start_time=slurm_datetime(start), time_limit=time_limit_text(minutes), user=user,
            reason=reason,
            comment="" if comment == "(null)" else comment, exit_code=exit_code, signal=signal,
            cluster="" if cluster in ("N/A", "(null)") else cluster,
            # A #SBATCH --output relative to the job's working directory stays relative in squeue's
            # STDOUT (sbatch resolves only its command line's): joined as the JSON's reader joins it.
            stdout=_output_file(job_id.strip(), "" if stdout == "(null)" else stdout, name, user,
                                "" if workdir == "(null)" else workdir),
            end_time=slurm_datetime(end) if state in FINISHED_STATES else None))
    return jobs


def parse_sacct(text: str) -> "List[JobInfo]":
    from slurmkit.slurm.types import JobInfo

    rows, batch_exit = [], {}
    for line in text.splitlines():
        fields = line.split("|", len(commands.SACCT_FIELDS) - 1)
        if len(fields) != len(commands.SACCT_FIELDS):
            continue
        job_id, step = fields[0].partition(".")[::2]
        if step == "batch":
            # The batch script's own end, which is what the controller reports
            # as the job's: the job's row catches up only later (0:0 for a
            # while after a cancel).  Other steps (extern, srun's) are not the job's.
            batch_exit[job_id] = fields[-2]
        elif not step:
            rows.append(fields)
    jobs = []
    for fields in rows:
        job_id, name, state, partition, count, nodelist, start, limit, user, reason, exit_text, comment = fields
        exit_text = batch_exit.get(job_id, exit_text)
        # Mapped to what squeue says of the same job: "CANCELLED by 0" is
        # CANCELLED, a job that never got nodes has none ("None assigned").
        state = state.split()[0] if state else "UNKNOWN"
        nodelist = "" if nodelist == "None assigned" else nodelist
        exit_code, signal = ended_exit(state, bool(nodelist), exit_text)
        jobs.append(JobInfo(job_id=job_id, name=name, state=state,
                            partition=partition, node_count=int(count) if count.isdigit() else 0,
                            nodelist=nodelist, start_time=slurm_datetime(start), time_limit=limit,
                            user=user, reason=reason, comment=comment, exit_code=exit_code, signal=signal))
    return jobs


_KV_RE = re.compile(r"(?:^|\s)([A-Za-z][\w/:.]*)=(.*?)(?=\s+[A-Za-z][\w/:.]*=|\s*$)")


def parse_key_values(line: str) -> Dict[str, str]:
    """One ``scontrol --oneliner`` record: ``Key=value Key2=value with spaces``."""
    return {m.group(1): m.group(2) for m in _KV_RE.finditer(line.strip())}


def parse_job_records(text: str) -> List[Dict[str, str]]:
    """``scontrol --oneliner show job`` as one {key: value} per job (an array: one per task shown)."""
    return [parse_key_values(line) for line in text.splitlines() if line.startswith("JobId=")]


def parse_sacct_records(text: str, fields: Sequence[str]) -> List[Dict[str, str]]:
    """``sacct --parsable2`` rows as {field: value}; the last field keeps any "|" it holds."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", len(fields) - 1)
        if len(parts) == len(fields):
            rows.append(dict(zip(fields, parts)))
    return rows


def parse_pending_priorities(text: str) -> List[Tuple[str, int]]:
    """``squeue --format=%i|%Q`` lines as (job id, priority)."""
    rows = []
    for line in text.splitlines():
        job, _, priority = line.strip().partition("|")
        if job and priority.isdigit():
            rows.append((job, int(priority)))
    return rows


class Limit(NamedTuple):
    """One limit the controller holds jobs against, and what is in use of it now."""

    holder: str            # "qos test_onejob", "qos test_onejob user 0", "account root", "account root user root"
    field: str             # Slurm's name: MaxJobsPU, GrpTRES, MaxTRESPJ ...
    tres: Optional[str]    # for a TRES list: cpu, mem, node, gres/gpu ...; None for a plain count
    limit: str             # "1"; mem in MB, wall in minutes, as Slurm holds them
    used: str              # "1", "" where Slurm keeps no count beside it


_LIMIT_VALUE = re.compile(r"^([^()]*)\((.*)\)$")


def parse_limits(text: str) -> List[Limit]:
    """``scontrol show assoc_mgr``'s records as the limits that are set (not ``N``), each with its holder:
    a QOS, a QOS's per-user (by uid) or per-account section, or an association."""
    limits: List[Limit] = []
    holder, base, section = "", "", ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("QOS=") and raw[:1] != " ":
            base = holder = "qos " + line[4:].split("(")[0]
            section = ""
            continue
        if line.startswith("ClusterName="):
            kv = dict(tok.partition("=")[::2] for tok in line.split())
            user = kv.get("UserName", "").split("(")[0]
            base = holder = "account %s%s" % (kv.get("Account", "?"), " user " + user if user else "")
            section = ""
            continue
        if line in ("Account Limits", "User Limits"):
            section = "account" if line.startswith("Account") else "user"
            continue
        if section and "=" not in line:
            # A QOS's user by uid: 22.05 prints "0", 24.11 and later "root(0)".
            label = re.sub(r"^.*\((\d+)\)$", r"\1", line) if section == "user" else line
            holder = "%s %s %s" % (base, section, label)
            continue
        for token in line.split():
            field, sep, value = token.partition("=")
            if not sep or not value or not field.startswith(("Grp", "Max", "Min")):
                continue            # UsageRaw, Priority, Lft ... are no limits
            items = [(None, value)] if "," not in value and value.count("=") == 0 else \
                [(k, v) for k, _, v in (item.partition("=") for item in value.split(","))]
            for tres, item in items:
                m = _LIMIT_VALUE.match(item)
                limit, used = (m.group(1), m.group(2)) if m else (item, "")
                if limit and limit != "N" and re.fullmatch(r"[0-9.:-]+", limit):
                    limits.append(Limit(holder, field, tres, limit, used))
    return limits


def parse_sprio(text: str) -> Optional[Dict[str, int]]:
    """``sprio --format=%Y|%A|%F|%J|%P|%Q``'s line as {factor: weighted value}; None when it printed none."""
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 6 and all(p.strip().lstrip("-").isdigit() for p in parts):
            keys = ("priority", "age", "fairshare", "jobsize", "partition", "qos")
            return dict(zip(keys, (int(p) for p in parts)))
    return None


def parse_topology(text: str) -> "Topology":
    from slurmkit.slurm.types import Switch, Topology

    switches = []
    for line in text.splitlines():
        if not line.strip().startswith("SwitchName="):
            continue
        kv = parse_key_values(line)
        switches.append(Switch(name=kv["SwitchName"], level=int(kv.get("Level", 0)),
                               nodes=kv.get("Nodes", "") or "", switches=kv.get("Switches", "") or ""))
    return Topology(tuple(switches))


def parse_partitions(text: str) -> Dict[str, Dict[str, str]]:
    """``scontrol -o show partition`` -> {name: {key: value}}."""
    partitions = {}
    for line in text.splitlines():
        if line.startswith("PartitionName="):
            kv = parse_key_values(line)
            partitions[kv["PartitionName"]] = kv
    return partitions


_GRES_RE = re.compile(r"(?P<name>[\w]+)(?::(?P<type>[\w.-]+))?:(?P<count>\d+)")


def _gres_counts(text: str) -> Dict[str, int]:
    """``gpu:h100:8(S:0),npu:2`` -> {"gpu:h100": 8, "npu": 2}; IDX suffixes ignored."""
    counts = {}
    for part in re.split(r",(?![^()]*\))", text or ""):
        m = _GRES_RE.match(part.strip())
        if m:
            key = m.group("name") + (":" + m.group("type") if m.group("type") else "")
            counts[key] = counts.get(key, 0) + int(m.group("count"))
    return counts


def parse_nodes(text: str) -> "List[NodeInfo]":
    from slurmkit.slurm.types import NodeInfo

    nodes = []
    for line in text.splitlines():
        if not line.startswith("NodeName="):
            continue
        kv = parse_key_values(line)
        state = kv.get("State", "UNKNOWN")
        reason = _node_reason(kv.get("Reason", "") if _state_has_reason(state) else "")
        nodes.append(NodeInfo(
            name=kv["NodeName"], state=state,
            partitions=tuple(p for p in kv.get("Partitions", "").split(",") if p),
            gres=_gres_counts(kv.get("Gres", "")), gres_used=_gres_counts(kv.get("GresUsed", "")),
            cpus=int(kv.get("CPUTot", 0) or 0), cpus_alloc=int(kv.get("CPUAlloc", 0) or 0),
            addr=kv.get("NodeAddr", ""), features=_features(kv.get("AvailableFeatures", "")),
            memory_mb=int(kv["RealMemory"]) if re.fullmatch(r"[0-9]+", kv.get("RealMemory", ""), re.ASCII) else 0,
            **reason))
    return nodes


# The node states a reason explains: down, drained or draining, failing (the
# states `sinfo -R` lists), and those Slurm itself writes a reason for (a
# requested reboot, an invalid registration).
_REASON_STATES = ("DOWN", "DRAIN", "FAIL", "INVAL", "REBOOT")


def _state_has_reason(state: str) -> bool:
    """Whether a node's ``Reason=`` still means something in ``state``.

    A resumed node's reason is stale: Slurm 22.05 and 26.05 clear it on
    RESUME, but 24.11 clears it only through the accounting storage, so on a
    cluster without accounting (beta and gamma here) ``IDLE`` nodes keep
    the reason of their last drain for good, and no scontrol call removes it.
    Read as a drain, it would make the health sweep count clean checks of a
    node in service and resume it again (which Slurm refuses).
    """
    upper = state.upper()
    return any(word in upper for word in _REASON_STATES)


def _features(text: str) -> "Tuple[str, ...]":
    """``AvailableFeatures=spine01,ib`` -> ("spine01", "ib"); scontrol prints (null) for none."""
    return tuple(f for f in text.split(",") if f and f != "(null)")


_NODE_REASON_RE = re.compile(r"^(?P<reason>.*?)\s*\[(?P<user>[^@\[\]]*)@(?P<time>[^\[\]]+)\]$")


def _node_reason(text: str) -> Dict[str, object]:
    """``Reason=bad gpu [root@2026-11-30T15:07:30]`` -> reason, reason_user, reason_time.

    scontrol appends who set the reason and when; the health sweep needs
    both apart (a drain is resumed only by whoever set it).  A reason
    without that suffix is kept whole.
    """
    m = _NODE_REASON_RE.match(text.strip())
    if not m:
        return {"reason": text.strip(), "reason_user": "", "reason_time": None}
    return {"reason": m.group("reason"), "reason_user": m.group("user"),
            "reason_time": slurm_datetime(m.group("time"))}


_CONFIG_LINE_RE = re.compile(r"^(?P<key>[A-Za-z][\w/()-]*)\s+= ?(?P<value>.*)$")


def parse_config(text: str) -> Dict[str, str]:
    """``scontrol show config`` as {key: value}; values kept as Slurm prints them.

    The plugin sections after the first blank line (cgroup, mpi, ...) use the
    same ``Key = Value`` shape; the first occurrence of a key wins, which is
    the controller's own setting.  Headers and status lines are skipped.
    """
    config: Dict[str, str] = {}
    for line in text.splitlines():
        m = _CONFIG_LINE_RE.match(line.rstrip())
        if m and m.group("key") not in config:
            config[m.group("key")] = m.group("value").strip()
    return config


def accounting_enabled(config: Dict[str, str]) -> bool:
    """Whether ``scontrol show config`` names an accounting storage.

    Without one, 22.05 prints ``AccountingStorageType = accounting_storage/none``
    and 24.11 and later print ``(null)`` (tests/unit/data/releases/*/config-gamma.json):
    neither means sacct can answer.
    """
    storage = (config.get("AccountingStorageType") or "").strip()
    return storage not in ("", "(null)", "none", "accounting_storage/none")


def scheduler_parameter(config: Dict[str, str], name: str) -> Optional[str]:
    """One ``SchedulerParameters`` entry (``max_switch_wait=300`` -> "300"); "" for a bare flag, None if absent."""
    for item in (config.get("SchedulerParameters") or "").split(","):
        key, eq, value = item.strip().partition("=")
        if key == name:
            return value if eq else ""
    return None


_VERSION_RE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str) -> str:
    """``slurm 22.05.8`` -> ``22.05.8``."""
    m = _VERSION_RE.search(text)
    if not m:
        raise SlurmCommandError("cannot read the Slurm version from %r" % text.strip()[:100])
    return m.group(0)


def major_minor(version: str):
    """``22.05.8`` -> (22, 5); pyslurm's ``22.5.0`` -> (22, 5) too."""
    m = _VERSION_RE.search(version)
    if not m:
        return None
    return int(m.group(1)), int(m.group(2))


def parse_array_indices(spec: str) -> List[int]:
    """``0-2,5%4`` -> ``[0, 1, 2, 5]`` (the throttle is ignored); also ``[0-2,5]`` as squeue and sacct print it."""
    spec = spec.strip().strip("[]").split("%")[0]
    out: List[int] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        step = 1
        if ":" in part:
            part, step_text = part.split(":", 1)
            step = int(step_text)
        lo, sep, hi = part.partition("-")
        out.extend(range(int(lo), int(hi if sep else lo) + 1, step))
    return out


def _array_task_fields(line: str) -> Optional[List[str]]:
    """A line's fields in ARRAY_TASK_FIELDS' order (the times empty in a line recorded before they were
    asked, nine fields); None: no task line."""
    fields = line.split(commands.SQUEUE_DELIMITER)
    wanted = len(commands.ARRAY_TASK_FIELDS)
    if len(fields) >= wanted:
        return fields[:wanted]
    if len(fields) >= wanted - 2:
        return fields[:wanted - 3] + ["", ""] + [fields[wanted - 3]]
    return None


def _epoch(text: str) -> Optional[float]:
    """squeue's local ``2026-11-30T18:26:54`` as epoch seconds; None for N/A, Unknown, an empty field."""
    when = slurm_datetime(text.strip())
    return when.timestamp() if when is not None else None


def _no_null(text: str) -> str:
    return "" if text in ("None", "(null)") else text


def parse_array_tasks(text: str) -> "List[TaskInfo]":
    """The task lines of :func:`commands.squeue_array_tasks` (lines of jobs that are no array task skipped)."""
    from slurmkit.slurm.types import FINISHED_STATES, TaskInfo

    tasks = []
    for line in text.splitlines():
        fields = _array_task_fields(line)
        if fields is None:
            continue
        array_id, index, job_id, state, reason, status, nodes, restarts, start, end, comment = fields
        if not index.strip().isdigit():
            continue       # not an array task (squeue prints N/A)
        nodes = "" if nodes.strip() in ("", "(null)") else nodes.strip()
        state = state.strip()
        code, signal = ended_exit(state, bool(nodes), squeue_exit_value(status))
        started = _epoch(start) if state != "PENDING" else None
        ended = _epoch(end) if state in FINISHED_STATES else None
        tasks.append(TaskInfo(array_id.strip(), int(index), job_id.strip(), state, _no_null(reason.strip()),
                              code, signal, nodes, int(restarts) if restarts.strip().isdigit() else 0,
                              "" if comment == "(null)" else comment, started, ended))
    return tasks


def parse_unstarted_arrays(text: str) -> "Dict[str, TaskInfo]":
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
    from slurmkit.slurm.types import FINISHED_STATES, TaskInfo

    out = {}
    for line in text.splitlines():
        fields = _array_task_fields(line)
        if fields is None:
            continue
        array_id, index, job_id, state, reason = (f.strip() for f in fields[:5])
        if index.isdigit() or job_id != array_id or state not in FINISHED_STATES:
            continue
        comment = fields[-1]
        out[array_id] = TaskInfo(array_id, -1, job_id, state, _no_null(reason),
                                 comment="" if comment == "(null)" else comment)
    return out


def parse_sacct_array_tasks(text: str) -> "List[TaskInfo]":
    """``A_I`` rows of :func:`commands.sacct_array_tasks` (and ``A_[0-9,20]`` for tasks still pending
    together) as tasks.

    A task cancelled while running reads 0:0 in its own row for a while,
    where its ``.batch`` step already has the 0:15 the controller reported:
    the step's exit wins, as in :func:`parse_sacct`.
    """
    from slurmkit.slurm.types import TaskInfo

    rows, batch_exit = [], {}
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) != len(commands.SACCT_ARRAY_FIELDS):
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
            code, signal = ended_exit(state, bool(nodes), batch_exit.get(job, exit_text))
        except ValueError:
            code, signal = None, None
        indices = parse_array_indices(index) if index.startswith("[") else [int(index)] if index.isdigit() else []
        for i in indices:
            tasks.append(TaskInfo(array_id, i, raw if len(indices) == 1 else array_id, state, "", code, signal, nodes))
    return tasks
