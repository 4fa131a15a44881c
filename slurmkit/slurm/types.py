"""Plain data returned by Slurm backends: jobs, nodes, topology, estimates."""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Dict, List, Optional, Tuple

# States after which a job will never run again.
FINISHED_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                             "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED"})


@dataclass(frozen=True)
class JobInfo:
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
    cluster: str = ""
    stdout: str = ""     # the output file, where Slurm tells it

    @property
    def finished(self):
        return self.state in FINISHED_STATES

    def to_dict(self):
        d = dict(self.__dict__)
        d["start_time"] = self.start_time.isoformat() if self.start_time else None
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
