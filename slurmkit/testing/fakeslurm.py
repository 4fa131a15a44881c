"""FakeSlurm: a cluster in memory behind the real command backend (see :mod:`slurmkit.testing`)."""

import getpass
import json
import threading
import time
from datetime import datetime
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from slurmkit.errors import SlurmkitError
from slurmkit.slurm import commands
from slurmkit.slurm.parsers import time_limit_text
from slurmkit.slurm.backend import CommandBackend
from slurmkit.slurm.runner import CommandResult, Runner
from slurmkit.slurm.types import FINISHED_STATES
from slurmkit.testing.clock import FakeClock


# --------------------------------------------------------------------------
# What Slurm 22.05 prints, copied from the recordings
# --------------------------------------------------------------------------

# One job of `squeue --json` on 22.05.8 (tests/unit/data/slurm/alpha-squeue-json-22.05.json,
# the held job), every key kept: parsers get exactly the record Slurm sends.
SQUEUE_JOB_2205 = json.loads(r"""{"account": "root", "accrue_time": 0, "admin_comment": "", "array_job_id": 0,
"array_task_id": null, "array_max_tasks": 0, "array_task_string": "", "association_id": 2, "batch_features": "",
"batch_flag": true, "batch_host": "", "flags": [], "burst_buffer": "", "burst_buffer_state": "", "cluster": "alpha",
"cluster_features": "", "command": "", "comment": "slurmkit:rec-held", "container": "", "contiguous": false,
"core_spec": null, "thread_spec": null, "cores_per_socket": null, "billable_tres": null, "cpus_per_task": null,
"cpu_frequency_minimum": null, "cpu_frequency_maximum": null, "cpu_frequency_governor": null, "cpus_per_tres": "",
"deadline": 0, "delay_boot": 0, "dependency": "", "derived_exit_code": 0, "eligible_time": 0, "end_time": 0,
"excluded_nodes": "", "exit_code": 0, "features": "", "federation_origin": "", "federation_siblings_active": "",
"federation_siblings_viable": "", "gres_detail": [], "group_id": 0, "group_name": "root", "job_id": 59,
"job_state": "PENDING", "last_sched_evaluation": 1796051269, "licenses": "", "max_cpus": 0, "max_nodes": 0,
"mcs_label": "", "memory_per_tres": "", "name": "rec-held", "nodes": "", "nice": null, "tasks_per_core": null,
"tasks_per_node": 0, "tasks_per_socket": null, "tasks_per_board": 0, "cpus": 1, "node_count": 1, "tasks": 1,
"het_job_id": 0, "het_job_id_set": "", "het_job_offset": 0, "partition": "gpu", "prefer": "",
"memory_per_node": null, "memory_per_cpu": 1000, "minimum_cpus_per_node": 1, "minimum_tmp_disk_per_node": 0,
"preempt_time": 0, "pre_sus_time": 0, "priority": 0, "profile": null, "qos": "normal", "reboot": false,
"required_nodes": "", "requeue": true, "resize_time": 0, "restart_cnt": 0, "resv_name": "", "shared": null,
"show_flags": ["SHOW_ALL", "SHOW_DETAIL", "SHOW_LOCAL"], "sockets_per_board": 0, "sockets_per_node": null,
"start_time": 0, "state_description": "", "state_reason": "JobHeldUser", "standard_error": "",
"standard_input": "/dev/null", "standard_output": "/dev/null", "submit_time": 1796051269, "suspend_time": 0,
"system_comment": "", "time_limit": 5, "time_minimum": 0, "threads_per_core": null, "tres_bind": "",
"tres_freq": "", "tres_per_job": "", "tres_per_node": "", "tres_per_socket": "", "tres_per_task": "",
"tres_req_str": "cpu=1,mem=1000M,node=1,billing=1", "tres_alloc_str": "", "user_id": 0, "user_name": "root",
"wckey": "", "current_working_directory": "/work/main"}""")

_SQUEUE_META = {"plugin": {"type": "openapi/v0.0.38", "name": "Slurm OpenAPI v0.0.38"},
                "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}, "release": "22.05.8"}}

# `scontrol --oneliner --details show node` of one dev-cluster node, with the
# fields the fake changes as {placeholders}; a reason is appended when set.
_NODE_LINE = ("NodeName={name} Arch=x86_64 CoresPerSocket=1  CPUAlloc={alloc} CPUEfctv={cpus} CPUTot={cpus} "
              "CPULoad=0.01 AvailableFeatures=(null) ActiveFeatures=(null) Gres={gres} GresDrain=N/A "
              "GresUsed={gres_used} NodeAddr={name} NodeHostName={name} Version=22.05.8 "
              "OS=Linux 6.1.0 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=4000 AllocMem=0 FreeMem=3500 Sockets={cpus} "
              "Boards=1 State={state} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A "
              "Partitions={partitions}  BootTime=2026-11-30T14:56:17 SlurmdStartTime=2026-11-30T15:06:44 "
              "LastBusyTime=2026-11-30T15:06:44 CfgTRES=cpu={cpus},mem=4000M,billing={cpus} AllocTRES= "
              "CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s")

# What scontrol, sbatch and squeue print when they refuse (recorded on 22.05.8).
_INVALID_JOB = "Invalid job id specified for job %s\n"
_INVALID_JOB_SUSPEND = "Invalid job id specified for job %s\nslurm_suspend error: Invalid job id specified\n"
_FINISHED_JOB_SUSPEND = "Job has already finished for job %s\nslurm_suspend error: Job has already finished\n"
_INVALID_NODE = "slurm_update error: Invalid node name specified\n"
_INVALID_NODE_STATE = "slurm_update error: Invalid node state specified\n"
_NEEDS_REASON = "You must specify a reason when DOWNING or DRAINING a node. Request denied\n"
_NOT_A_SCRIPT = ("sbatch: error: This does not look like a batch script.  The first\n"
                 "sbatch: error: line must start with #! followed by the path to an interpreter.\n"
                 "sbatch: error: For instance: #!/bin/sh\n")
_BAD_PARTITION = "sbatch: error: Batch job submission failed: Invalid partition name specified\n"
_NO_ACCOUNTING = "Slurm accounting storage is disabled\n"


def load_recording(path) -> dict:
    """A recording of tests/unit/data/slurm: {"argv", "returncode", "stdout", "stderr", ...}."""
    with open(str(path)) as f:
        return json.load(f)


# --------------------------------------------------------------------------
# The tables behind the answers
# --------------------------------------------------------------------------

class Call(NamedTuple):
    """One call of a backend method by the code under test (positional arguments as bound)."""
    method: str
    args: tuple


class FakeJob:
    """A job as the fake cluster keeps it.  Times are unix seconds (0: not yet)."""

    def __init__(self, job_id: str, name: str, user: str, partition: str, node_count: int = 1,
                 time_limit: int = 60, comment: str = "", script: str = "", submit_time: int = 0,
                 stdout: str = "slurm-%j.out", cwd: str = "/home/fake"):
        self.job_id, self.name, self.user, self.partition = job_id, name, user, partition
        self.node_count, self.time_limit, self.comment, self.script = node_count, time_limit, comment, script
        self.state, self.reason, self.nodes = "PENDING", "None", ""
        self.submit_time, self.start_time, self.end_time = submit_time, 0, 0
        self.exit_status = 0          # the raw wait status, as 22.05's squeue --json gives it
        self.restarts = 0
        self.stdout, self.cwd = stdout, cwd
        self.forgotten = False        # past MinJobAge: squeue no longer shows it
        self.steps: List[str] = []    # states to move through, one per squeue answer

    def __repr__(self):
        return "FakeJob(%s, %s)" % (self.job_id, self.state)


class FakeNode:
    """A node: ``flag`` is None, "DRAIN" or "DOWN"; the state shown follows Slurm's spelling."""

    def __init__(self, name: str, partitions: Sequence[str], gres: str = "gpu:h100:8", cpus: int = 4):
        self.name, self.partitions, self.gres, self.cpus = name, tuple(partitions), gres, cpus
        self.flag: Optional[str] = None
        self.reason, self.reason_user, self.reason_time = "", "", 0

    def __repr__(self):
        return "FakeNode(%s, %s)" % (self.name, self.flag or "up")


class _Failure(NamedTuple):
    error: BaseException
    ran: bool


class _Answer:
    """What FakeSlurm.answer() set up for commands starting with ``prefix``."""

    def __init__(self, prefix, stdout, stderr, returncode, times, error, delay):
        self.prefix, self.stdout, self.stderr, self.returncode = prefix, stdout, stderr, returncode
        self.times, self.error, self.delay = times, error, delay


class _FakeRunner(Runner):
    def __init__(self, slurm: "FakeSlurm"):
        self._slurm = slurm

    def run(self, argv, stdin=None, timeout=None):
        return self._slurm._command(tuple(str(a) for a in argv), stdin, timeout)

    def describe(self):
        return "fake slurm (%s)" % self._slurm.cluster_name


# --------------------------------------------------------------------------
# FakeSlurm
# --------------------------------------------------------------------------

class FakeSlurm(CommandBackend):
    """A cluster in memory behind the real command backend.  See the module docstring."""

    name = "fake"

    def __init__(self, cluster_name: str = "fake", nodes: Iterable[str] = ("n1", "n2"),
                 partitions: Sequence[str] = ("gpu",), gres: str = "gpu:h100:8", cpus: int = 4,
                 accounting: bool = False, submit_once: bool = False, user: Optional[str] = None,
                 first_job_id: int = 1000, clock: Optional[FakeClock] = None,
                 config: Optional[Dict[str, str]] = None):
        super().__init__(_FakeRunner(self), cluster_name, submit_once=submit_once)
        self.clock = clock or FakeClock()
        self.user = user or getpass.getuser()
        self.partition_names = tuple(partitions)
        self.nodes_table: Dict[str, FakeNode] = {n: FakeNode(n, partitions, gres, cpus) for n in nodes}
        self.table: Dict[str, FakeJob] = {}
        self.accounting_enabled = accounting
        self.calls: List[Call] = []
        self.commands: List[Tuple[str, ...]] = []
        self.timeouts: List[Optional[float]] = []   # the timeout each command was given
        self.config_values = {
            "ClusterName": cluster_name,
            "AccountingStorageType": "accounting_storage/slurmdbd" if accounting else "accounting_storage/none",
            "MinJobAge": "3600 sec", "MaxArraySize": "1001", "SchedulerParameters": "max_switch_wait=300",
            "SLURM_VERSION": "22.05.8"}
        self.config_values.update(config or {})
        self._next_id = first_job_id
        self._failures: Dict[str, List[_Failure]] = {}
        self._answers: List[_Answer] = []
        self._lock = threading.RLock()
        self._depth: Dict[int, int] = {}   # per thread: how deep inside recorded calls

    # -- driving the fake ----------------------------------------------------

    def add_job(self, state: str = "PENDING", name: str = "job", partition: Optional[str] = None,
                node_count: int = 1, comment: str = "", user: Optional[str] = None, time_limit: int = 60) -> str:
        """A job that exists without a submit call (submitted earlier, by someone else ...)."""
        with self._lock:
            job = self._new_job(name, partition or self.partition_names[0], node_count, comment, user, time_limit, "")
            if state != "PENDING":
                self.set_state(job.job_id, state)
            return job.job_id

    def set_state(self, job_id: str, state: str, reason: Optional[str] = None, nodes: Optional[str] = None,
                  exit_code: Optional[int] = None, signal: Optional[int] = None) -> FakeJob:
        """Move a job to ``state``; running gives it nodes and a start time, ending gives it an end."""
        with self._lock:
            job = self.table[str(job_id)]
            now = int(self.clock.time())
            cancelled_pending = state == "CANCELLED" and job.state == "PENDING"
            ran = state in ("RUNNING", "COMPLETING") or (state in FINISHED_STATES and not cancelled_pending)
            if nodes is not None:
                job.nodes = nodes
            elif ran and not job.nodes:
                job.nodes = self._free_nodes(job.node_count)
            if (ran or state in FINISHED_STATES) and not job.start_time:
                job.start_time = now   # Slurm sets a start for a job cancelled while pending, too
            if state in FINISHED_STATES:
                job.end_time = now
            if exit_code is not None or signal is not None:
                job.exit_status = ((exit_code or 0) & 0xFF) << 8 | (signal or 0)
            job.state = state
            job.reason = reason if reason is not None else _default_reason(state, job.exit_status)
            return job

    def finish(self, job_id: str, state: str = "COMPLETED", exit_code: int = 0,
               signal: Optional[int] = None) -> FakeJob:
        """End a job (running it first if it never ran, except for a cancel)."""
        return self.set_state(job_id, state, exit_code=exit_code, signal=signal)

    def steps(self, job_id: str, *states: str) -> None:
        """Each following squeue answer moves the job one state along ``states``."""
        with self._lock:
            self.table[str(job_id)].steps.extend(states)

    def forget(self, job_id: str) -> None:
        """MinJobAge has passed: squeue no longer shows the job; sacct (with accounting) still does."""
        with self._lock:
            self.table[str(job_id)].forgotten = True

    def set_node(self, name: str, flag: Optional[str], reason: str = "", user: str = "root",
                 when: Optional[float] = None) -> FakeNode:
        """Drain/down a node behind slurmkit's back (``flag`` "DRAIN", "DOWN" or None), as an admin would."""
        with self._lock:
            node = self.nodes_table[name]
            node.flag = flag
            node.reason, node.reason_user = (reason, user) if flag else ("", "")
            node.reason_time = int(when if when is not None else self.clock.time()) if flag else 0
            return node

    def fail_next(self, method: str, error: BaseException, ran: Optional[bool] = None) -> None:
        """The next call of ``method`` raises ``error``.

        ``ran`` (default: ``error.may_have_run`` for slurmkit errors) says
        whether the call takes effect before the error: a lost answer.
        Several failures for one method are used in order.
        """
        if ran is None:
            ran = isinstance(error, SlurmkitError) and error.may_have_run
        with self._lock:
            self._failures.setdefault(method, []).append(_Failure(error, bool(ran)))

    def answer(self, argv_prefix: Sequence[str], stdout: str = "", stderr: str = "", returncode: int = 0,
               times: Optional[int] = None, error: Optional[BaseException] = None, delay: float = 0.0) -> None:
        """Commands starting with ``argv_prefix`` print this (``times`` times; None: always).

        The longest matching prefix wins (the latest of equal ones), so
        ``answer(["squeue"], stderr=..., returncode=1)`` makes every squeue
        fail, e.g. with "Unable to contact slurm controller".  ``error`` is
        raised by the runner instead (how an SSH runner reports an unreachable
        login node); ``delay`` really sleeps that many seconds first, for tests
        of concurrency (FakeClock cannot speed up other threads).
        """
        with self._lock:
            self._answers.append(_Answer(tuple(argv_prefix), stdout, stderr, returncode, times, error, delay))

    def replay(self, recording: dict, times: Optional[int] = None, delay: float = 0.0) -> None:
        """Answer a recording's exact argv with what it recorded."""
        self.answer(recording["argv"], recording["stdout"], recording["stderr"], recording["returncode"], times,
                    delay=delay)

    def methods_called(self) -> List[str]:
        return [c.method for c in self.calls]

    # -- recording every call ------------------------------------------------

    def _call(self, method: str, implementation, *args):
        thread = threading.get_ident()
        with self._lock:
            depth = self._depth.get(thread, 0)
            if depth == 0:   # only what the code under test called, not the backend's own inner calls
                self.calls.append(Call(method, args))
            queue = self._failures.get(method)
            failure = queue.pop(0) if queue else None
            self._depth[thread] = depth + 1
        try:
            if failure is not None and not failure.ran:
                raise failure.error
            result = implementation(self, *args)
            if failure is not None:
                raise failure.error
            return result
        finally:
            with self._lock:
                self._depth[thread] = depth

    def submit(self, script, token=None):
        return self._call("submit", CommandBackend.submit, script, token)

    def estimate_start(self, script):
        return self._call("estimate_start", CommandBackend.estimate_start, script)

    def jobs(self, job_ids=None, user=None):
        return self._call("jobs", CommandBackend.jobs, job_ids, user)

    def jobs_by_id(self, job_ids):
        return self._call("jobs_by_id", CommandBackend.jobs_by_id, job_ids)

    def find_by_token(self, token, user=None):
        return self._call("find_by_token", CommandBackend.find_by_token, token, user)

    def accounting(self, job_ids):
        return self._call("accounting", CommandBackend.accounting, job_ids)

    def has_accounting(self):
        return self._call("has_accounting", CommandBackend.has_accounting)

    def accounting_since(self, seconds_ago, user=None):
        return self._call("accounting_since", CommandBackend.accounting_since, seconds_ago, user)

    def array_tasks(self, array_ids=(), user=None):
        return self._call("array_tasks", CommandBackend.array_tasks, array_ids, user)

    def array_tasks_accounting(self, array_ids):
        return self._call("array_tasks_accounting", CommandBackend.array_tasks_accounting, array_ids)

    def update_jobs(self, job_ids, **fields):
        return self._call("update_jobs", lambda backend, ids: CommandBackend.update_jobs(backend, ids, **fields),
                          job_ids)

    def cancel(self, job_ids):
        return self._call("cancel", CommandBackend.cancel, job_ids)

    def requeue(self, job_ids):
        return self._call("requeue", CommandBackend.requeue, job_ids)

    def hold(self, job_ids):
        return self._call("hold", CommandBackend.hold, job_ids)

    def release(self, job_ids):
        return self._call("release", CommandBackend.release, job_ids)

    def topology(self):
        return self._call("topology", CommandBackend.topology)

    def partitions(self):
        return self._call("partitions", CommandBackend.partitions)

    def nodes(self):
        return self._call("nodes", CommandBackend.nodes)

    def node_states(self, names=None):
        return self._call("node_states", CommandBackend.node_states, names)

    def drain(self, nodes, reason):
        return self._call("drain", CommandBackend.drain, nodes, reason)

    def down(self, nodes, reason):
        return self._call("down", CommandBackend.down, nodes, reason)

    def resume(self, nodes):
        return self._call("resume", CommandBackend.resume, nodes)

    def version(self):
        return self._call("version", CommandBackend.version)

    def config(self):
        return self._call("config", CommandBackend.config)

    # -- answering commands --------------------------------------------------

    def _command(self, argv: Tuple[str, ...], stdin: Optional[str], timeout: Optional[float]) -> CommandResult:
        with self._lock:
            self.commands.append(argv)
            self.timeouts.append(timeout)
            override = self._override(argv)
            if override is None:
                code, out, err = self._dispatch(argv, stdin)
                return CommandResult(argv, code, out, err)
        if override.delay:
            time.sleep(override.delay)   # outside the lock: other threads' commands go on meanwhile
        if override.error is not None:
            raise override.error
        return CommandResult(argv, override.returncode, override.stdout, override.stderr)

    def _override(self, argv) -> "Optional[_Answer]":
        best = None
        for entry in self._answers:
            if argv[:len(entry.prefix)] == entry.prefix and (entry.times is None or entry.times > 0):
                if best is None or len(entry.prefix) >= len(best.prefix):   # the latest of equals wins
                    best = entry
        if best is not None and best.times is not None:
            best.times -= 1
        return best

    def _dispatch(self, argv, stdin):
        program, rest = argv[0], argv[1:]
        if program == "sbatch" and rest == ("--parsable",):
            return self._sbatch(stdin or "")
        if program == "sh" and len(argv) > 3 and argv[3] == "slurmkit-submit":
            return self._sbatch_once(stdin or "", argv[4])
        if program == "sh" and len(argv) > 3 and argv[3] == "slurmkit-estimate":
            return self._test_only(stdin or "")
        if program == "squeue" and "--json" in rest:
            return self._squeue_json()
        if program == "squeue" and option_value(rest, "--Format="):
            return self._squeue_format(option_value(rest, "--jobs="), option_value(rest, "--user="))
        if program == "sacct" and option_value(rest, "--jobs="):
            return self._sacct(option_value(rest, "--jobs=").split(","), steps="--allocations" not in rest)
        if program == "sacct":
            # --starttime=now-N: the jobs that ran or ended since then (all of them with
            # accounting: it forgets nothing), of --user if given.
            since = self.clock.time() - int(option_value(rest, "--starttime=now-") or 86400)
            user = option_value(rest, "--user=")
            ids = [j.job_id for j in self.table.values()
                   if (not user or j.user == user) and (j.end_time == 0 or j.end_time >= since)]
            return self._sacct(ids, steps="--allocations" not in rest)
        if program == "scancel":
            return self._scancel(rest)
        if program == "scontrol":
            return self._scontrol([a for a in rest if a not in ("--oneliner", "--details")])
        return 127, "", "fake slurm: no answer for %s; give one with FakeSlurm.answer()\n" % " ".join(argv)

    # jobs

    def _new_job(self, name, partition, node_count, comment, user, time_limit, script) -> FakeJob:
        job = FakeJob(str(self._next_id), name, user or self.user, partition, node_count, time_limit, comment,
                      script, int(self.clock.time()))
        self._next_id += 1
        self.table[job.job_id] = job
        return job

    def _sbatch(self, script: str):
        from slurmkit import times
        from slurmkit.slurm import directives

        if not script.startswith("#!"):
            return 1, "", _NOT_A_SCRIPT
        options = dict((k, v) for k, v in directives.sbatch_directives(script) if isinstance(v, str))
        partition = options.get("partition", self.partition_names[0])
        if partition not in self.partition_names:
            return 1, "", _BAD_PARTITION
        minutes = times.parse_minutes(options["time"]) if "time" in options else 60
        nodes = options.get("nodes", "1").split("-")[0]
        job = self._new_job(options.get("job-name", "sbatch"), partition, int(nodes) if nodes.isdigit() else 1,
                            options.get("comment", ""), None, int(minutes or 0), script)
        job.stdout = options.get("output", "slurm-%j.out")
        return 0, job.job_id + "\n", ""

    def _sbatch_once(self, script: str, token: str):
        # What commands.SUBMIT_ONCE_SCRIPT does on a login node, in memory.
        if script.rstrip("\n").splitlines()[-1:] != [commands.SCRIPT_TRAILER]:
            return 3, "", "sbatch: error: slurmkit: the job script arrived incomplete; nothing was submitted\n"
        for job in self.table.values():
            if job.comment == "slurmkit:" + token and not job.forgotten and job.user == self.user:
                return 0, job.job_id + "\n", "slurmkit: job %s already carries token %s\n" % (job.job_id, token)
        return self._sbatch(script)

    def _test_only(self, script: str):
        from slurmkit.slurm import directives

        options = dict((k, v) for k, v in directives.sbatch_directives(script) if isinstance(v, str))
        partition = options.get("partition", self.partition_names[0])
        if partition not in self.partition_names:
            return 1, "", _BAD_PARTITION
        start = self.clock.now().strftime("%Y-%m-%dT%H:%M:%S")
        return 0, "", ("sbatch: Job %d to start at %s using %d processors on nodes %s in partition %s\n"
                       % (self._next_id, start, 1, next(iter(self.nodes_table), "n1"), partition))

    def _squeue_json(self):
        jobs = []
        for job in self.table.values():
            if job.forgotten:
                continue
            if job.steps:
                self.set_state(job.job_id, job.steps.pop(0))
            jobs.append(self._job_record(job))
        # 22.05 ignores --jobs and --user with --json: the whole queue, as there
        return 0, json.dumps({"meta": _SQUEUE_META, "errors": [], "jobs": jobs}, indent=2), ""

    def _squeue_format(self, job_ids: str, user: str):
        """commands.squeue_format: --Format rows of the jobs asked for, from the same records as the JSON."""
        wanted = set(job_ids.split(",")) if job_ids else None
        lines = []
        for job in self.table.values():
            if job.forgotten or (wanted is not None and job.job_id not in wanted) or (user and job.user != user):
                continue
            if job.steps:
                self.set_state(job.job_id, job.steps.pop(0))
            r = self._job_record(job)
            # as squeue prints it: a relative --output stays relative (WorkDir comes beside it)
            stdout = r["standard_output"] or "slurm-%j.out"
            values = [r["job_id"], r["name"], r["job_state"], r["partition"], r["node_count"], r["nodes"],
                      slurm_timestamp(r["start_time"]) if r["start_time"] else "N/A",
                      slurm_timestamp(r["end_time"]) if r["end_time"] else "N/A", time_limit_text(r["time_limit"]),
                      r["user_name"],
                      r["state_reason"], r["exit_code"], stdout, r["current_working_directory"],
                      r["cluster"], r["comment"] or "(null)"]
            lines.append(commands.SQUEUE_DELIMITER.join(str(v) for v in values) + "\n")
        if wanted and not lines:
            return 1, "", "slurm_load_jobs error: Invalid job id specified\n"
        return 0, "".join(lines), ""

    def _job_record(self, job: FakeJob) -> dict:
        record = dict(SQUEUE_JOB_2205)
        record.update(
            job_id=int(job.job_id), name=job.name, job_state=job.state, state_reason=job.reason,
            partition=job.partition, node_count=job.node_count, nodes=job.nodes, batch_host=job.nodes.split(",")[0],
            start_time=job.start_time, end_time=job.end_time, submit_time=job.submit_time, time_limit=job.time_limit,
            user_name=job.user, account=job.user, group_name=job.user, comment=job.comment,
            exit_code=job.exit_status, cluster=self.cluster_name, standard_output=job.stdout,
            current_working_directory=job.cwd, restart_cnt=job.restarts, command="",
            eligible_time=job.submit_time, last_sched_evaluation=job.submit_time)
        if job.nodes:   # Slurm adds the allocation once a job has nodes (recorded for running and ended jobs)
            names = job.nodes.split(",")
            record["job_resources"] = {
                "nodes": job.nodes, "allocated_cores": len(names), "allocated_hosts": len(names),
                "allocated_nodes": [{"sockets": {"0": {"cores": {"0": "allocated"}}}, "nodename": name,
                                     "cpus_used": 0, "memory_used": 0, "memory_allocated": 1000} for name in names]}
        return record

    def _sacct(self, ids: List[str], steps: bool):
        if not self.accounting_enabled:
            return 1, "", _NO_ACCOUNTING
        lines = []
        for job_id in ids:
            job = self.table.get(job_id)
            if job is None:
                continue
            values = {
                "JobIDRaw": job.job_id, "JobID": job.job_id, "JobName": job.name,
                "State": "CANCELLED by 0" if job.state == "CANCELLED" else job.state,
                "Partition": job.partition, "NNodes": str(job.node_count),
                "NodeList": job.nodes or "None assigned",
                "Start": slurm_timestamp(job.start_time) if job.start_time else "Unknown",
                "End": slurm_timestamp(job.end_time) if job.end_time else "Unknown",
                "Timelimit": time_limit_text(job.time_limit), "User": job.user,
                "Reason": job.reason if job.state == "PENDING" else "None",
                "ExitCode": "%d:%d" % (job.exit_status >> 8 & 0xFF, job.exit_status & 0x7F),
                "DerivedExitCode": "0:0", "Comment": job.comment}
            lines.append("|".join(values.get(f, "") for f in commands.SACCT_FIELDS))
            if steps and job.nodes:
                # the batch step's own row, as sacct prints it without --allocations
                step = dict(values, JobIDRaw=job.job_id + ".batch", JobID=job.job_id + ".batch", JobName="batch",
                            Partition="", NodeList=job.nodes.split(",")[0], NNodes="1", Timelimit="", User="",
                            Reason="", Comment="")
                lines.append("|".join(step.get(f, "") for f in commands.SACCT_FIELDS))
        return 0, "".join(line + "\n" for line in lines), ""

    def _scancel(self, ids):
        for job_id in ids:
            job = self.table.get(job_id)
            # 22.05's scancel says nothing (exit 0) for unknown or finished ids
            if job is not None and not job.forgotten and job.state not in FINISHED_STATES:
                self.set_state(job_id, "CANCELLED")
        return 0, "", ""

    def _answer_job_control(self, verb: str, ids: List[str]):
        errors = []
        for job_id in ids:
            job = self.table.get(job_id)
            if job is None or job.forgotten:
                errors.append((_INVALID_JOB if verb == "requeue" else _INVALID_JOB_SUSPEND) % job_id)
            elif verb == "requeue":
                # Slurm requeues running and finished batch jobs alike (recorded)
                job.restarts += 1
                job.nodes, job.start_time, job.end_time = "", 0, 0
                job.state, job.reason = "PENDING", "BeginTime"
            elif job.state in FINISHED_STATES:
                errors.append(_FINISHED_JOB_SUSPEND % job_id)
            elif verb == "hold":
                job.reason = "JobHeldUser"
            else:
                job.reason = "None"
        return (1 if errors else 0), "", "".join(errors)

    # nodes and configuration

    def _scontrol(self, args: List[str]):
        if args == ["--version"]:
            return 0, "slurm-wlm 22.05.8\n", ""
        if args == ["ping"]:
            return 0, "Slurmctld(primary) at %s is UP\n" % self.cluster_name, ""
        if args[:2] == ["show", "config"]:
            return 0, self._config_text(), ""
        if args[:2] == ["show", "node"]:
            return self._show_nodes(args[2].split(",") if len(args) > 2 else None)
        if args[:2] == ["show", "partition"]:
            return 0, "".join("PartitionName=%s Nodes=%s State=UP\n" % (p, ",".join(self.nodes_table))
                              for p in self.partition_names), ""
        if args[:2] == ["show", "topology"]:
            return 0, "", ""
        if args[:1] == ["update"]:
            fields = dict(a.split("=", 1) for a in args[1:] if "=" in a)
            return self._answer_update_nodes(fields.get("NodeName", "").split(","), fields.get("State", ""),
                                      fields.get("Reason"))
        if args[:1] and args[0] in ("requeue", "hold", "release") and len(args) == 2:
            return self._answer_job_control(args[0], args[1].split(","))
        return 1, "", "scontrol: error: fake slurm does not know: %s\n" % " ".join(args)

    def _config_text(self) -> str:
        lines = ["Configuration data as of %s" % self.clock.now().strftime("%Y-%m-%dT%H:%M:%S")]
        lines += ["%-23s = %s" % (k, v) for k, v in sorted(self.config_values.items())]
        return "\n".join(lines) + "\n\nSlurmctld(primary) at %s is UP\n" % self.cluster_name

    def _busy(self, name: str) -> bool:
        return any(name in job.nodes.split(",") for job in self.table.values()
                   if job.state in ("RUNNING", "COMPLETING") and not job.forgotten)

    def _node_state(self, node: FakeNode) -> str:
        if node.flag == "DOWN":
            return "DOWN"
        base = "MIXED" if self._busy(node.name) else "IDLE"
        return base + "+DRAIN" if node.flag == "DRAIN" else base

    def _free_nodes(self, count: int) -> str:
        free = [n.name for n in self.nodes_table.values() if n.flag is None and not self._busy(n.name)]
        return ",".join(free[:max(count, 1)])

    def _show_nodes(self, names: Optional[List[str]]):
        if names is not None:
            unknown = [n for n in names if n not in self.nodes_table]
            if unknown:
                return 1, "", "Node %s not found\n" % unknown[0]
        lines = []
        for node in self.nodes_table.values():
            if names is not None and node.name not in names:
                continue
            busy = self._busy(node.name)
            kind = node.gres.rsplit(":", 1)[0] if node.gres else ""
            line = _NODE_LINE.format(
                name=node.name, alloc=1 if busy else 0, cpus=node.cpus, gres=node.gres or "(null)",
                gres_used=("%s:0(IDX:N/A)" % kind) if kind else "", state=self._node_state(node),
                partitions=",".join(node.partitions))
            if node.flag:
                line += " Reason=%s [%s@%s]" % (node.reason, node.reason_user, slurm_timestamp(node.reason_time))
            lines.append(line)
        return 0, "".join(line + "\n" for line in lines), ""

    def _answer_update_nodes(self, names: List[str], state: str, reason: Optional[str]):
        if any(n not in self.nodes_table for n in names):
            return 1, "", _INVALID_NODE
        state = state.upper()
        if state in ("DRAIN", "DOWN") and not reason:
            return 1, "", _NEEDS_REASON
        failed = False
        for name in names:
            node = self.nodes_table[name]
            if state == "RESUME":
                if node.flag is None:
                    failed = True
                    continue
                self.set_node(name, None)
            elif state in ("DRAIN", "DOWN"):
                self.set_node(name, state, reason, self.user)
                if state == "DOWN":
                    # Jobs on a node that goes down fail (the fake never requeues by itself).
                    for job in self.table.values():
                        if name in job.nodes.split(",") and job.state in ("RUNNING", "COMPLETING"):
                            self.set_state(job.job_id, "NODE_FAIL")
            else:
                return 1, "", _INVALID_NODE_STATE
        return (1, "", _INVALID_NODE_STATE) if failed else (0, "", "")


def _default_reason(state: str, exit_status: int) -> str:
    if state == "FAILED" and exit_status:
        return "NonZeroExitCode"
    return "None"


def option_value(argv: Sequence[str], prefix: str) -> str:
    return next((a[len(prefix):] for a in argv if a.startswith(prefix)), "")


def slurm_timestamp(epoch: float) -> str:
    return datetime.fromtimestamp(int(epoch)).strftime("%Y-%m-%dT%H:%M:%S")
