"""FakeArraySlurm: a FakeSlurm that runs job arrays, for unit tests of sweeps (slurmkit's and users').

:class:`FakeArraySlurm` extends :class:`slurmkit.testing.FakeSlurm` with what
Slurm 22.05 does with ``sbatch --array`` and the commands sweeps use, in the
shapes recorded on the dev clusters:

- ``#SBATCH --array=SPEC[%N]`` makes one task per index (each its own job id;
  the array's id is the first's), refused with "Invalid job array
  specification" past ``MaxArraySize``/``max_array_tasks`` of its config;
  ``--hold`` and ``--dependency`` leave the tasks pending with that reason;
- ``squeue --array --Format=...`` prints one line per task, ``sacct`` rows
  ``A_I`` with their ``.batch`` steps (accounting only); tasks cancelled
  before they started are, once no task of the array is pending any more,
  one line of the array's own record without a task id (``N/A``), as
  22.05 prints an ended array record that still held them;
- ``scontrol requeue A_I,...``, ``scontrol update JobId=... StartTime=now``
  and ``ArrayTaskThrottle=N``, ``scontrol hold|release A``, ``scancel A``.

The test drives the tasks: ``run(array_id, exit_codes)`` ends every pending
task (in index order, each COMPLETED or FAILED by its exit code),
``finish_task``, ``forget_array`` (past MinJobAge).
"""

import re
from typing import Dict, List, Optional, Sequence, Tuple

from slurmkit.slurm.types import FINISHED_STATES
from slurmkit.slurm.commands import ARRAY_TASK_FIELDS
from slurmkit.slurm.parsers import parse_array_indices
from slurmkit.testing.fakeslurm import FakeJob, FakeSlurm, option_value, slurm_timestamp

_INVALID_ARRAY = "sbatch: error: Batch job submission failed: Invalid job array specification\n"


class FakeTask(FakeJob):
    """One task of a fake array."""

    def __init__(self, *args, array_job_id: str = "", index: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        self.array_job_id, self.index = array_job_id, index
        self.never_started = False    # cancelled while pending: it stays in the array's own record


class FakeArray:
    def __init__(self, job_id: str, script: str, indices: List[int], throttle: int, comment: str):
        self.job_id, self.script, self.indices, self.throttle, self.comment = job_id, script, indices, throttle, comment
        self.tasks: Dict[int, FakeTask] = {}

    def __repr__(self):
        return "FakeArray(%s, %d tasks, throttle %d)" % (self.job_id, len(self.tasks), self.throttle)


class FakeArraySlurm(FakeSlurm):
    """FakeSlurm with job arrays (see the module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.arrays: Dict[str, FakeArray] = {}

    # -- driving ----------------------------------------------------------------

    def task(self, array_id: str, index: int) -> FakeTask:
        return self.arrays[str(array_id)].tasks[int(index)]

    def finish_task(self, array_id: str, index: int, state: str = "COMPLETED", exit_code: int = 0,
                    signal: Optional[int] = None) -> FakeTask:
        task = self.task(array_id, index)
        self.set_state(task.job_id, state, exit_code=exit_code, signal=signal)
        return task

    def run(self, array_id: str, exit_codes: Optional[Dict[int, int]] = None) -> None:
        """End every pending, runnable task of the array: exit code from ``exit_codes`` (default 0)."""
        for index, task in sorted(self.arrays[str(array_id)].tasks.items()):
            if task.state == "PENDING" and task.reason in ("None", "BeginTime", ""):
                code = (exit_codes or {}).get(index, 0)
                self.finish_task(array_id, index, "COMPLETED" if code == 0 else "FAILED", code)

    def forget_array(self, array_id: str) -> None:
        for task in self.arrays[str(array_id)].tasks.values():
            task.forgotten = True

    def array_of_token(self, token: str) -> FakeArray:
        return next(a for a in self.arrays.values() if a.comment == "slurmkit:" + token)

    # -- answering ----------------------------------------------------------------

    def _sbatch(self, script: str):
        match = re.search(r"(?m)^#SBATCH --array=(\S+)$", script)
        if match is None:
            return super()._sbatch(script)
        spec = match.group(1)
        indices = parse_array_indices(spec)
        throttle = int(spec.split("%")[1]) if "%" in spec else 0
        size = int(self.config_values.get("MaxArraySize", "1001"))
        most = size
        found = re.search(r"max_array_tasks=(\d+)", self.config_values.get("SchedulerParameters", ""))
        if found:
            most = min(most, int(found.group(1)))
        if not indices or max(indices) >= size or len(indices) > most:
            return 1, "", _INVALID_ARRAY
        code, out, err = super()._sbatch(script)
        if code:
            return code, out, err
        first = self.table.pop(out.strip())
        array = FakeArray(first.job_id, script, indices, throttle, first.comment)
        reason = "JobHeldUser" if re.search(r"(?m)^#SBATCH --hold$", script) else \
            "Dependency" if re.search(r"(?m)^#SBATCH --dependency=", script) else "None"
        for n, index in enumerate(indices):
            job_id = first.job_id if n == 0 else str(self._next_id)
            if n:
                self._next_id += 1
            task = FakeTask(job_id, first.name, first.user, first.partition, first.node_count, first.time_limit,
                            first.comment, script, first.submit_time, first.stdout, first.cwd,
                            array_job_id=first.job_id, index=index)
            task.reason = reason
            self.table[job_id] = task
            array.tasks[index] = task
        self.arrays[array.job_id] = array
        return 0, array.job_id + "\n", ""

    def _dispatch(self, argv, stdin):
        program, rest = argv[0], argv[1:]
        if program == "squeue" and "--array" in rest:
            return self._squeue_tasks(rest)
        if program == "sacct" and option_value(rest, "--format=").startswith("JobID,"):
            return self._sacct_tasks(option_value(rest, "--jobs=").split(","))
        return super()._dispatch(argv, stdin)

    def _tasks_of(self, ids: Sequence[str]) -> List[FakeTask]:
        out = []
        for job_id in ids:
            array = self.arrays.get(job_id)
            if array is not None:
                out.extend(array.tasks.values())
            elif isinstance(self.table.get(job_id), FakeTask):
                out.append(self.table[job_id])
        return out

    def _squeue_tasks(self, rest):
        ids = [i for i in option_value(rest, "--jobs=").split(",") if i]
        user = option_value(rest, "--user=")
        tasks = self._tasks_of(ids) if ids else [t for t in self.table.values() if isinstance(t, FakeTask)]
        tasks = [t for t in tasks if not t.forgotten and (not user or t.user == user)]
        if ids and not tasks:
            return 1, "", "slurm_load_jobs error: Invalid job id specified\n"
        d = "\x1f"
        lines = []
        still_pending = {t.array_job_id for t in tasks if t.state == "PENDING"}
        in_record = [t for t in tasks if t.never_started and t.state == "CANCELLED"
                     and t.array_job_id not in still_pending]
        for array_id in dict.fromkeys(t.array_job_id for t in in_record):
            values = {"ArrayJobID": array_id, "ArrayTaskID": "N/A", "JobID": array_id, "State": "CANCELLED",
                      "Reason": "None", "exit_code": "0", "NodeList": "", "RestartCnt": "0",
                      "StartTime": "N/A", "EndTime": "N/A",
                      "Comment": next(t.comment for t in in_record if t.array_job_id == array_id)}
            lines.append("".join(values[f] + d for f in ARRAY_TASK_FIELDS))
        tasks = [t for t in tasks if t not in in_record]
        for t in tasks:
            values = {"ArrayJobID": t.array_job_id, "ArrayTaskID": str(t.index), "JobID": t.job_id,
                      "State": t.state, "Reason": t.reason, "exit_code": str(t.exit_status), "NodeList": t.nodes,
                      "RestartCnt": str(t.restarts), "Comment": t.comment,
                      "StartTime": slurm_timestamp(t.start_time) if t.start_time else "N/A",
                      "EndTime": slurm_timestamp(t.end_time) if t.end_time else "N/A"}
            lines.append("".join(values[f] + d for f in ARRAY_TASK_FIELDS))
        return 0, "".join(line + "\n" for line in lines), ""

    def _sacct_tasks(self, ids):
        if not self.accounting_enabled:
            return 1, "", "Slurm accounting storage is disabled\n"
        lines = []
        for t in self._tasks_of([i for i in ids if i]):
            name = "%s_%d" % (t.array_job_id, t.index)
            exit_text = "%d:%d" % (t.exit_status >> 8 & 0xFF, t.exit_status & 0x7F)
            state = "CANCELLED by 0" if t.state == "CANCELLED" else t.state
            lines.append("|".join([name, t.job_id, state, exit_text, t.nodes or "None assigned"]))
            if t.nodes:
                lines.append("|".join([name + ".batch", t.job_id + ".batch", t.state, exit_text, t.nodes]))
        return 0, "".join(line + "\n" for line in lines), ""

    def _scancel(self, ids):
        # An array's id cancels every unfinished task of it; A_I one task.
        expanded = []
        for job_id in ids:
            tasks = self._resolve(job_id) if ("_" in job_id or job_id in self.arrays) else None
            expanded.extend([t.job_id for t in tasks] if tasks else [job_id])
        for job_id in expanded:
            task = self.table.get(job_id)
            if isinstance(task, FakeTask) and task.state == "PENDING" and not task.forgotten:
                task.never_started = True
        return super()._scancel(expanded)

    def _scontrol(self, args: List[str]):
        if args[:1] == ["update"] and any(a.startswith("JobId=") for a in args[1:]):
            return self._update_jobs(args[1:])
        if args[:1] and args[0] in ("requeue", "hold", "release") and len(args) == 2:
            names = args[1].split(",")
            if any("_" in n or n in self.arrays for n in names):
                return self._array_control(args[0], names)
        return super()._scontrol(args)

    def _resolve(self, name: str) -> Optional[List[FakeTask]]:
        array_id, sep, index = name.partition("_")
        array = self.arrays.get(array_id)
        if sep:
            if array is None or not index.isdigit() or int(index) not in array.tasks:
                task = self.table.get(array_id)
                return None if task is None else [task]
            return [array.tasks[int(index)]]
        if array is not None:
            return list(array.tasks.values())
        task = self.table.get(name)
        return None if task is None else [task]

    def _array_control(self, verb: str, names: List[str]):
        errors = []
        for name in names:
            tasks = self._resolve(name)
            if tasks is None or all(t.forgotten for t in tasks):
                errors.append("Invalid job id specified for job %s\n" % name)
                continue
            for t in tasks:
                if verb == "requeue":
                    if t.state == "PENDING":
                        errors.append("Job is pending execution for job %s\n" % name)
                        continue
                    t.restarts += 1
                    t.nodes, t.start_time, t.end_time = "", 0, 0
                    t.state, t.reason, t.exit_status = "PENDING", "BeginTime", 0
                elif t.state == "PENDING":
                    t.reason = "JobHeldUser" if verb == "hold" else "None"
        return (1 if errors else 0), "", "".join(errors)

    def _update_jobs(self, args: Sequence[str]):
        fields = dict(a.split("=", 1) for a in args if "=" in a)
        errors = []
        for name in fields.pop("JobId").split(","):
            tasks = self._resolve(name)
            if tasks is None:
                errors.append("Invalid job id specified for job %s\n" % name)
                continue
            if "ArrayTaskThrottle" in fields:
                array = self.arrays.get(name.split("_")[0])
                if array is None or all(t.state in FINISHED_STATES for t in array.tasks.values()):
                    errors.append("%s: Job has already finished\n" % name)
                    continue
                array.throttle = int(fields["ArrayTaskThrottle"])
            if fields.get("StartTime") == "now":
                for t in tasks:
                    if t.state == "PENDING" and t.reason == "BeginTime":
                        t.reason = "None"
        return (1 if errors else 0), "", "".join(errors)


def tasks_by_index(slurm: FakeArraySlurm, array_id: str) -> List[Tuple[int, str]]:
    """(index, state) of every task of an array, by index: what a test usually asserts on."""
    return [(i, t.state) for i, t in sorted(slurm.arrays[str(array_id)].tasks.items())]
