"""Pure argv builders for every Slurm command slurmkit runs.

Nothing here executes anything: each function returns an argument list that
a :class:`~slurmkit.slurm.runner.Runner` runs locally or on a login node.
Keeping them pure makes them trivially testable and lets the SSH runner quote
each argument on its own.
"""

from typing import Iterable, List, Optional, Sequence

# squeue's own format letters, joined with a delimiter that never appears in
# the fields we ask for except the comment, which is therefore last.
SQUEUE_FIELDS = ("%i", "%j", "%T", "%P", "%D", "%N", "%S", "%l", "%u", "%r", "%k")
SQUEUE_DELIMITER = "\x1f"  # ASCII unit separator: not typed by users, kept by squeue


# A stopped slurmctld makes sbatch retry for ~18 s and squeue for ~9 s, while
# `scontrol ping` answers at once: ask it first where failing fast matters.
_CTLD_PING = ('scontrol ping >/dev/null 2>&1 || { echo "sbatch: error: Unable to contact slurm controller '
              '(scontrol ping: DOWN)" >&2; exit 1; }\n')


def sbatch(test_only: bool = False) -> List[str]:
    """Submit the script given on standard input.

    The script travels on stdin (not as a file) so the same argv works on a
    remote login node without copying files first.  ``test_only`` asks for a
    start estimate (after a controller ping, so a down cluster fails fast).
    """
    if test_only:
        return ["sh", "-c", _CTLD_PING + "exec sbatch --test-only", "slurmkit-estimate"]
    return ["sbatch", "--parsable"]


# The last line of every script slurmkit submits; the submit-once wrapper
# refuses a script without it (a connection cut mid-transfer truncates stdin,
# and sbatch would happily submit half a script).
SCRIPT_TRAILER = "# end of slurmkit job script"

# Submit at most once per token, on the cluster's own login node: under a
# per-user, per-token lock, an existing job carrying the token is reported
# instead of submitting again.  A retry after a lost answer therefore never
# creates a second job, even while the first sbatch is still running.
# Constant text: the token arrives as "$1", never spliced into the script.
SUBMIT_ONCE_SCRIPT = r"""set -u
scontrol ping >/dev/null 2>&1 || {
  echo "sbatch: error: Unable to contact slurm controller (scontrol ping: DOWN); nothing was submitted" >&2; exit 1; }
tok=$1
f=$(mktemp) || exit 1
trap 'rm -f "$f"' EXIT
cat > "$f"
if [ "$(tail -n 1 "$f")" != "@TRAILER@" ]; then
  echo "sbatch: error: slurmkit: the job script arrived incomplete; nothing was submitted" >&2
  exit 3
fi
exec 9>"${TMPDIR:-/tmp}/slurmkit-submit-$(id -u)-$tok.lock"
if ! flock -w 60 9; then
  echo "sbatch: error: slurmkit: another submission with token $tok is still running" >&2
  exit 4
fi
existing=$(squeue --noheader --states=all --user="$(id -un)" --format='%i %k' |
           awk -v t="slurmkit:$tok" '$2 == t { print $1; exit }')
if [ -n "$existing" ]; then
  echo "slurmkit: job $existing already carries token $tok" >&2
  echo "$existing"
  exit 0
fi
sbatch --parsable "$f"
""".replace("@TRAILER@", SCRIPT_TRAILER)   # one definition: the check is the renderer's own line


def sbatch_once(token: str) -> List[str]:
    """Submit the script on stdin unless a job with ``token`` exists (see SUBMIT_ONCE_SCRIPT)."""
    return ["sh", "-c", SUBMIT_ONCE_SCRIPT, "slurmkit-submit", token]


def squeue_json(job_ids: Optional[Iterable[str]] = None, user: Optional[str] = None) -> List[str]:
    argv = ["squeue", "--json", "--states=all"]
    if job_ids:
        argv.append("--jobs=" + ",".join(job_ids))
    if user:
        argv.append("--user=" + user)
    return argv


def squeue_parsable(job_ids: Optional[Iterable[str]] = None, user: Optional[str] = None) -> List[str]:
    argv = ["squeue", "--noheader", "--states=all", "--format=" + SQUEUE_DELIMITER.join(SQUEUE_FIELDS)]
    if job_ids:
        argv.append("--jobs=" + ",".join(job_ids))
    if user:
        argv.append("--user=" + user)
    return argv


# Jobs by id or by user: squeue's --Format fields (width 0: the whole value;
# each followed by the delimiter), Comment last as free text.  squeue then
# filters before it prints: with --json, 22.05 prints every job of the
# cluster whatever --jobs and --user say (37 MB with 10,000 jobs queued), and
# with one id it asks slurmctld for that job alone (REQUEST_JOB_INFO_SINGLE)
# instead of every job.
SQUEUE_FORMAT_FIELDS = ("JobID", "Name", "State", "Partition", "NumNodes", "NodeList", "StartTime", "EndTime",
                        "TimeLimit", "UserName", "Reason", "exit_code", "STDOUT", "WorkDir", "Cluster", "Comment")


def squeue_format(job_ids: Optional[Iterable[str]] = None, user: Optional[str] = None) -> List[str]:
    """The jobs ``job_ids`` and/or of ``user``, every field :class:`~slurmkit.slurm.types.JobInfo` has.

    ``--local``: no federation look-up first (one RPC fewer); the ids are this cluster's.
    """
    spec = ",".join("%s:0%s" % (f, SQUEUE_DELIMITER) for f in SQUEUE_FORMAT_FIELDS[:-1])
    argv = ["squeue", "--noheader", "--states=all", "--local"]
    if job_ids:
        argv.append("--jobs=" + ",".join(job_ids))
    if user:
        argv.append("--user=" + user)
    return argv + ["--Format=%s,%s:0" % (spec, SQUEUE_FORMAT_FIELDS[-1])]


# Comment stays last: it is free text and may hold the "|" delimiter.
SACCT_FIELDS = ("JobIDRaw", "JobName", "State", "Partition", "NNodes", "NodeList", "Start", "Timelimit",
                "User", "Reason", "ExitCode", "Comment")


def sacct(job_ids: Iterable[str]) -> List[str]:
    """The jobs and their steps: a job cancelled while running reads 0:0 in its
    own row for a while, where its ``.batch`` step already has the 0:15 the
    controller reports (see parsers.parse_sacct)."""
    return ["sacct", "--noheader", "--parsable2", "--jobs=" + ",".join(job_ids),
            "--format=" + ",".join(SACCT_FIELDS)]


def sacct_since(seconds_ago: int, user: Optional[str] = None) -> List[str]:
    """Every job (of ``user``) that ran or ended in the last ``seconds_ago`` seconds, one row each.

    ``now-N`` is read on the cluster's own clock: no time zone or clock skew
    between the caller and the cluster shifts the window.  ``--allocations``:
    the jobs' own rows only (their comments: a token lookup needs no steps).
    """
    argv = ["sacct", "--noheader", "--parsable2", "--allocations", "--starttime=now-%d" % max(0, int(seconds_ago))]
    if user:
        argv.append("--user=" + user)
    return argv + ["--format=" + ",".join(SACCT_FIELDS)]


# What ``logs`` and ``why`` read of a job the controller has forgotten (sacct -X: the job, not its steps).
# StdOut and StdErr exist from 23.02 on; 22.05 refuses them ("Invalid field requested").  Reason and
# Comment stay last: free text, which may hold the "|" delimiter (Comment whole, as the last field).
SACCT_RECORD_FIELDS = ("JobID", "JobIDRaw", "JobName", "User", "State", "ExitCode", "NodeList", "WorkDir",
                       "Start", "End", "Elapsed", "Timelimit", "Restarts", "FailedNode", "StdOut", "StdErr",
                       "Comment")
SACCT_RECORD_FIELDS_2205 = ("JobID", "JobIDRaw", "JobName", "User", "State", "ExitCode", "NodeList", "WorkDir",
                            "Start", "End", "Elapsed", "Timelimit", "Comment")


def sacct_records(job_id: str, fields: Sequence[str] = SACCT_RECORD_FIELDS) -> List[str]:
    """One job (or array: every task) from accounting, its own rows only.  StdOut and StdErr as given
    (without ``--expand-patterns``, which fills %t and %N for the batch step only)."""
    return ["sacct", "--noheader", "--parsable2", "--allocations", "--jobs=" + str(job_id),
            "--format=" + ",".join(fields)]


def squeue_output_patterns(job_id: str) -> List[str]:
    """The job's --output and --error patterns as given (``STDOUT``, ``STDERR``): 26.05's scontrol prints
    them expanded for the batch step only (%t as 0, %N as its first node), which hides the per-rank files."""
    return ["squeue", "--noheader", "--local", "--states=all", "--jobs=" + str(job_id),
            "--Format=STDOUT:0%s,STDERR:0" % SQUEUE_DELIMITER]


# What ``eff`` reads: each attempt's job row and its steps (``--duplicates``: the runs of a job Slurm
# requeued, each its own row under the same id).  TRES fields carry gres/gpu where the cluster's
# AccountingStorageTRES counts it, and gres/gpuutil, gres/gpumem where it collects them (23.02+).
SACCT_USAGE_FIELDS = ("JobID", "JobIDRaw", "State", "ElapsedRaw", "TimelimitRaw", "NCPUS", "NNodes", "AllocTRES",
                      "TotalCPU", "MaxRSS", "TRESUsageInAve", "TRESUsageInMax", "ConsumedEnergyRaw", "Start", "End",
                      "Partition", "NodeList")


def sacct_usage(job_ids: Iterable[str]) -> List[str]:
    """What jobs used, their steps included (one query for all of them)."""
    return ["sacct", "--noheader", "--parsable2", "--duplicates", "--jobs=" + ",".join(str(j) for j in job_ids),
            "--format=" + ",".join(SACCT_USAGE_FIELDS)]


def squeue_pending_priorities(partition: str) -> List[str]:
    """The partition's pending jobs with their priority, ``ID|PRIORITY`` per line (one RPC)."""
    return ["squeue", "--noheader", "--local", "--states=PENDING", "--partition=" + partition, "--format=%i|%Q"]


def sprio(job_id: str) -> List[str]:
    """A pending job's priority and its factors (age, fair-share, job size, partition, QOS)."""
    return ["sprio", "--noheader", "--jobs=" + str(job_id), "--format=%Y|%A|%F|%J|%P|%Q"]


def show_limits(qos: Optional[str] = None, user: Optional[str] = None, account: Optional[str] = None) -> List[str]:
    """The controller's QOS (``qos``) or association (``user`` in ``account``) limits, each with what is in use
    now beside it (``MaxJobsPU=1(1)``): the values slurmctld holds jobs against."""
    if qos is not None:
        return ["scontrol", "show", "assoc_mgr", "flags=qos", "qos=" + qos]
    argv = ["scontrol", "show", "assoc_mgr", "flags=assoc"]
    if user:
        argv.append("users=" + user)
    if account:
        argv.append("accounts=" + account)
    return argv


def scancel(job_ids: Iterable[str]) -> List[str]:
    return ["scancel", *job_ids]


def show_topology() -> List[str]:
    return ["scontrol", "show", "topology"]


def show_job(job_id: str) -> List[str]:
    """One job, one line (``ExitCode=E:S`` whole, where pyslurm 24.11's Job API cuts 128 off)."""
    return ["scontrol", "--oneliner", "show", "job", str(job_id)]


def show_partition(name: Optional[str] = None) -> List[str]:
    return ["scontrol", "--oneliner", "show", "partition"] + ([name] if name else [])


def show_nodes(names: Optional[Iterable[str]] = None) -> List[str]:
    """Every node (or only ``names``, joined as one hostlist: still one RPC), one line each."""
    argv = ["scontrol", "--oneliner", "--details", "show", "node"]
    names = list(names or ())
    if names:
        argv.append(",".join(names))
    return argv


def _joined(what: str, items: Iterable[str]) -> str:
    items = [str(i) for i in items]
    if not items:
        # "scontrol update NodeName= ..." or "scontrol hold" without ids would
        # fail with a confusing message, or worse, apply to a default set.
        raise ValueError("no %s given" % what)
    return ",".join(items)


def update_nodes(names: Iterable[str], state: str, reason: Optional[str] = None) -> List[str]:
    """Set nodes' state (``DRAIN``, ``DOWN``, ``RESUME``) in one ``scontrol update``.

    ``Reason=`` is one argument, so a reason with spaces needs no quoting;
    Slurm requires one for DRAIN and DOWN.
    """
    argv = ["scontrol", "update", "NodeName=" + _joined("node names", names), "State=" + state]
    if reason is not None:
        argv.append("Reason=" + reason)
    return argv


def requeue(job_ids: Iterable[str]) -> List[str]:
    """Put jobs back in the queue (scontrol takes a comma list: one process for all)."""
    return ["scontrol", "requeue", _joined("job ids", job_ids)]


def hold(job_ids: Iterable[str]) -> List[str]:
    return ["scontrol", "hold", _joined("job ids", job_ids)]


def release(job_ids: Iterable[str]) -> List[str]:
    return ["scontrol", "release", _joined("job ids", job_ids)]


def update_jobs(job_ids: Iterable[str], **fields) -> List[str]:
    """``scontrol update JobId=ID[,ID...] Key=Value ...`` (one RPC per id, one process for all): after a
    requeue ``StartTime=now`` (Slurm would hold the job back two minutes), or ``ArrayTaskThrottle=N``."""
    return (["scontrol", "update", "JobId=" + _joined("job ids", job_ids)]
            + ["%s=%s" % kv for kv in sorted(fields.items())])


# squeue --array --Format fields of array tasks, each followed by the delimiter (``name:SUFFIX``: no
# padding, no truncation).  StartTime/EndTime: when a task started and ended (the requeue policy's
# crash-loop rule needs how long it ran); Comment stays last.
ARRAY_TASK_FIELDS = ("ArrayJobID", "ArrayTaskID", "JobID", "State", "Reason", "exit_code", "NodeList",
                     "RestartCnt", "StartTime", "EndTime", "Comment")


def squeue_array_tasks(array_ids: Iterable[str] = (), user: Optional[str] = None) -> List[str]:
    """Every task of these arrays (or of ``user``'s jobs), one line each, pending and finished ones too
    (until MinJobAge): one RPC for any number of arrays (see parsers.parse_array_tasks)."""
    argv = ["squeue", "--array", "--noheader", "--states=all"]
    ids = list(array_ids)
    if ids:
        argv.append("--jobs=" + ",".join(ids))
    if user:
        argv.append("--user=" + user)
    if not ids and not user:
        raise ValueError("squeue_array_tasks needs array ids or a user")
    return argv + ["--Format=" + ",".join("%s:%s" % (f, SQUEUE_DELIMITER) for f in ARRAY_TASK_FIELDS)]


SACCT_ARRAY_FIELDS = ("JobID", "JobIDRaw", "State", "ExitCode", "NodeList")


def sacct_array_tasks(array_ids: Iterable[str]) -> List[str]:
    """The tasks of these arrays from accounting, with their ``.batch`` steps
    (see parsers.parse_sacct_array_tasks)."""
    return ["sacct", "--noheader", "--parsable2", "--jobs=" + _joined("array ids", array_ids),
            "--format=" + ",".join(SACCT_ARRAY_FIELDS)]


def show_config() -> List[str]:
    """The controller's running configuration (one RPC), ``Key = Value`` lines."""
    return ["scontrol", "show", "config"]


def ping() -> List[str]:
    """Is slurmctld up?  Answers at once either way (exit 1 when down)."""
    return ["scontrol", "ping"]


def version() -> List[str]:
    return ["scontrol", "--version"]


def squeue_pending_count() -> List[str]:
    return ["squeue", "--noheader", "--states=PENDING", "--format=%i"]


def srun_probe(partition: str, command: Sequence[str], exclude: Iterable[str] = (), wait_s: int = 30,
               job_name: str = "slurmkit-probe") -> List[str]:
    """One short task on one node of ``partition`` (not one of ``exclude``), its output on srun's stdout.

    ``--immediate``: srun gives up when no node is free within ``wait_s`` seconds instead of queueing, so a
    probe of a busy or drained partition ends; one CPU, a little memory and a minute, so it fits beside
    running jobs."""
    argv = ["srun", "--partition=" + partition, "--nodes=1", "--ntasks=1", "--cpus-per-task=1", "--mem=64",
            "--time=1", "--immediate=%d" % max(1, int(wait_s)), "--job-name=" + job_name, "--quiet"]
    excluded = [str(n) for n in exclude]
    if excluded:
        argv.append("--exclude=" + ",".join(excluded))
    return argv + ["--"] + list(command)
