"""Plain data returned by Slurm backends: jobs, nodes, topology, estimates."""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Dict, List, NamedTuple, Optional, Tuple

# States after which a job will never run again.
FINISHED_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                             "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED"})


@dataclass(frozen=True)
class JobInfo:
    """One job as a backend sees it; every backend fills it alike.

    How the job ended is two fields, decoded by
    :func:`slurmkit.slurm.parsers.decode_exit` from whatever the source gives
    (squeue's raw wait status, sacct's and scontrol's ``E:S``, pyslurm's
    pair):

    - ``exit_code``: the exit status of the batch script (0-255) when it
      exited by itself; ``None`` while the job has not ended, when it never
      ran (cancelled while pending) and when a signal ended it.  A script
      whose child was killed by a signal usually exits 128+N (bash: 143 for
      SIGTERM, 137 for SIGKILL): that is an exit status, not a signal.
    - ``signal``: the number of the signal that ended the batch script
      (15 for ``scancel`` or ``kill -TERM``, 9 for ``kill -9``), else ``None``.

    At most one of the two is set.  Through sacct (jobs the controller has
    forgotten) an exit status of 128 or more reads 128 less: sacct prints it
    that way (src/sacct/print.c) and its text keeps nothing else.
    """

    job_id: str
    name: str
    state: str
    partition: str = ""
    node_count: int = 0
    nodelist: str = ""
    start_time: Optional[datetime] = None
    time_limit: str = ""
    user: str = ""
    reason: str = ""
    comment: str = ""
    exit_code: Optional[int] = None
    signal: Optional[int] = None
    cluster: str = ""
    stdout: str = ""     # the output file, where Slurm tells it
    end_time: Optional[datetime] = None   # when an ended job ended, where the source says (None while it runs)

    @property
    def finished(self):
        return self.state in FINISHED_STATES

    def to_dict(self):
        d = dict(self.__dict__)
        d["start_time"] = self.start_time.isoformat() if self.start_time else None
        d["end_time"] = self.end_time.isoformat() if self.end_time else None
        return d


@dataclass(frozen=True)
class StartEstimate:
    start: datetime
    nodes: str
    partition: Optional[str] = None
    cpus: int = 0


@dataclass(frozen=True)
class Switch:
    name: str
    level: int
    nodes: str       # hostlist expression, e.g. "an[1-2]"
    switches: str    # child switch names for level > 0


@dataclass(frozen=True)
class Topology:
    switches: Tuple[Switch, ...]

    @property
    def leaves(self) -> List[Switch]:
        return [s for s in self.switches if s.level == 0]

    def to_dict(self):
        return {"switches": [s.__dict__ for s in self.switches]}

    @classmethod
    def from_dict(cls, data):
        return cls(tuple(Switch(**s) for s in data["switches"]))


@dataclass(frozen=True)
class NodeInfo:
    name: str
    state: str
    partitions: Tuple[str, ...] = ()
    gres: Dict[str, int] = field(default_factory=dict)       # "gpu:h100" -> 8
    gres_used: Dict[str, int] = field(default_factory=dict)
    cpus: int = 0
    cpus_alloc: int = 0
    reason: str = ""                         # why it is drained or down, without the [user@time] suffix
    reason_user: str = ""                    # who set the reason (health: never touch someone else's drain)
    reason_time: Optional[datetime] = None   # when it was set
    addr: str = ""                           # NodeAddr: where slurmctld (and the health sweep's SSH) reaches it
    features: Tuple[str, ...] = ()           # AvailableFeatures (placement: a switch group's feature)
    memory_mb: int = 0                       # RealMemory (site init: a partition's memory_mb); 0: not reported

    def free(self, gres_prefix: str = "gpu") -> int:
        total = sum(v for k, v in self.gres.items() if k.split(":")[0] == gres_prefix)
        used = sum(v for k, v in self.gres_used.items() if k.split(":")[0] == gres_prefix)
        return max(total - used, 0)

    def total(self, gres_prefix: str = "gpu") -> int:
        return sum(v for k, v in self.gres.items() if k.split(":")[0] == gres_prefix)

    @property
    def usable(self):
        """Up and schedulable: not down, drained, draining or failing."""
        bad = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "MAINT", "POWERED_DOWN", "INVAL", "FUTURE")
        return not any(b in self.state.upper() for b in bad)


class TaskInfo(NamedTuple):
    """One array task as Slurm reports it (``squeue --array``, or accounting once the controller forgot it)."""

    array_job_id: str       # the array's id (what sbatch printed)
    index: int              # SLURM_ARRAY_TASK_ID
    job_id: str             # the task's own job id (the array's id while it is pending as part of it)
    state: str
    reason: str = ""
    exit_code: Optional[int] = None     # as in JobInfo: at most one of the two is set
    signal: Optional[int] = None
    nodes: str = ""
    restarts: int = 0
    comment: str = ""
    start_time: Optional[float] = None  # epoch; only once it started (a pending task's StartTime is an estimate)
    end_time: Optional[float] = None    # epoch; only once it ended (a running task's EndTime is its time limit)

    @property
    def key(self):
        return (self.array_job_id, self.index)


class ArrayTasks(NamedTuple):
    """What one ``squeue --array`` said: the tasks it listed, and the arrays whose never-started tasks
    ended inside the array's own record (see parsers.parse_unstarted_arrays)."""

    tasks: List[TaskInfo]
    unstarted: Dict[str, TaskInfo]      # array id -> how its tasks without a line of their own ended
