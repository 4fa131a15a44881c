"""Job arrays: the cluster's limits, chunks of points, ``--array`` specs, and shares (pure).

Slurm refuses an array with an index of ``MaxArraySize`` or more, and one of
more tasks than ``max_array_tasks`` (in ``SchedulerParameters``; default
``MaxArraySize``), with "Invalid job array specification".  A sweep is cut
into arrays that keep both, each indexed from 0.  A rerun resubmits some
indices of an existing array (``--array=3,17,42``): those were valid when
the array was made, and are checked again against the cluster's limits now.
"""

import heapq
import re
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from slurmkit.errors import UsageError


class ArrayLimits(NamedTuple):
    """How large an array a cluster takes: indices ``0..max_index``, at most ``max_tasks`` tasks."""

    max_index: int
    max_tasks: int

    @property
    def chunk(self) -> int:
        """Tasks per array for a sweep indexed from 0."""
        return min(self.max_index + 1, self.max_tasks)


def _int(text: str) -> Optional[int]:
    m = re.match(r"\s*([0-9]+)", text or "")
    return int(m.group(1)) if m else None


def limits_from_config(config: Dict[str, str], cluster: str = "") -> ArrayLimits:
    """The limits in ``scontrol show config`` (MaxArraySize, SchedulerParameters' max_array_tasks)."""
    size = _int(config.get("MaxArraySize", ""))
    if size is None:
        size = 1001     # Slurm's default
    if size <= 1:
        # MaxArraySize=0 turns arrays off; 1 allows index 0 only, one task per submission.
        raise UsageError("cluster %s does not run job arrays (MaxArraySize=%d in its slurm.conf); submit the sweep "
                         "to another cluster" % (cluster or "?", size))
    tasks = size
    for item in (config.get("SchedulerParameters") or "").split(","):
        key, _, value = item.strip().partition("=")
        if key == "max_array_tasks" and _int(value):
            tasks = min(tasks, _int(value))
    return ArrayLimits(size - 1, tasks)


def chunks(count: int, limits: ArrayLimits) -> List[int]:
    """Sizes of the arrays ``count`` tasks are cut into: as even as possible, each within the limits.

    Even sizes (1001 points with chunk 1000: 501 + 500, not 1000 + 1) keep
    the last array from trailing alone behind a throttle.
    """
    if count <= 0:
        return []
    per = limits.chunk
    n = -(-count // per)
    base, extra = divmod(count, n)
    return [base + 1] * extra + [base] * (n - extra)


def array_spec(indices: Sequence[int], throttle: Optional[int] = None, limits: Optional[ArrayLimits] = None) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``0-2,5,7-8`` (``%N`` appended for a throttle); checked against ``limits``."""
    ordered = sorted(set(int(i) for i in indices))
    if not ordered:
        raise ValueError("an array needs at least one index")
    if ordered[0] < 0:
        raise ValueError("array indices start at 0, not %d" % ordered[0])
    if limits is not None:
        if ordered[-1] > limits.max_index:
            raise UsageError("array index %d is above the cluster's largest, %d (MaxArraySize %d)"
                             % (ordered[-1], limits.max_index, limits.max_index + 1))
        if len(ordered) > limits.max_tasks:
            raise UsageError("%d tasks in one array; the cluster takes at most %d (max_array_tasks)"
                             % (len(ordered), limits.max_tasks))
    parts = []
    start = prev = ordered[0]
    for i in ordered[1:] + [None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(str(start) if start == prev else "%d-%d" % (start, prev))
        if i is not None:
            start = prev = i
    spec = ",".join(parts)
    if throttle:
        spec += "%%%d" % throttle
    return spec



def split_total(total: int, weights: Sequence[float]) -> List[int]:
    """``total`` split in proportion to ``weights``, each share at least 1 (largest remainders).

    Used for ``--max-running`` across clusters; callers give at most
    ``total`` weights (a share of 0 would mean "no limit" to Slurm).
    """
    if total < len(weights):
        raise ValueError("cannot give %d shares of at least 1 out of %d" % (len(weights), total))
    whole = sum(weights) or 1.0
    raw = [total * w / whole for w in weights]
    shares = [max(1, int(r)) for r in raw]
    while sum(shares) > total:       # the "at least 1" floors took too much: take from the largest
        i = max(range(len(shares)), key=lambda k: (shares[k], -k))
        shares[i] -= 1
    order = sorted(range(len(raw)), key=lambda k: (-(raw[k] - int(raw[k])), k))
    for i in order:
        if sum(shares) >= total:
            break
        shares[i] += 1
    while sum(shares) < total:
        shares[0] += 1
    return shares


class ClusterCapacity(NamedTuple):
    """What the split between clusters knows of one cluster."""

    name: str
    wait_s: float           # from now until its start estimate for one task
    slots: int              # tasks it can run at once in the chosen partition
    price: float = float("inf")   # per GPU-hour at the estimate; unknown ranks last
    order: int = 0          # the site's order: the last tie-break


def split_points(count: int, clusters: Sequence[ClusterCapacity], duration_s: float) -> Dict[str, int]:
    """How many of ``count`` tasks each cluster gets, so that the sweep ends soonest.

    Each task goes where it would end first: a cluster's j-th task (from 0)
    ends at ``wait + (j // slots + 1) * duration``.  A cluster that starts
    later or runs fewer tasks at once gets fewer, in proportion; one whose
    wait is longer than the others need for everything gets none.  Ties go
    to the lower price, then the site's order.
    """
    if not clusters:
        raise ValueError("no cluster to split the sweep between")
    duration = max(float(duration_s), 1.0)
    by_name = {c.name: c for c in clusters}
    given = {c.name: 0 for c in clusters}
    heap: List[Tuple[float, float, int, str]] = [(c.wait_s + duration, c.price, c.order, c.name) for c in clusters]
    heapq.heapify(heap)
    for _ in range(count):
        _, price, order, name = heapq.heappop(heap)
        given[name] += 1
        c = by_name[name]
        heapq.heappush(heap, (c.wait_s + (given[name] // max(1, c.slots) + 1) * duration, price, order, name))
    return given


def slots_for(directives: Sequence[Tuple[str, object]], max_nodes: Optional[int], cpus_per_node: int,
              gpus_per_node: int) -> int:
    """Tasks of this job (its ``#SBATCH`` options) a partition of ``max_nodes`` nodes runs at once."""
    opts = {k: v for k, v in directives if isinstance(v, str)}
    nodes = _int(opts.get("nodes", "1")) or 1
    ntasks = _int(opts.get("ntasks-per-node", "1")) or 1
    cpus = _int(opts.get("cpus-per-task", "1")) or 1
    gpus = 0
    for key in ("gpus-per-node", "gres"):
        if key in opts:
            gpus = _int(opts[key].rsplit(":", 1)[-1]) or 0
    total_nodes = max_nodes or nodes
    if nodes > 1:
        return max(1, total_nodes // nodes)
    per_node = max(1, cpus_per_node // max(1, ntasks * cpus))
    if gpus and gpus_per_node:
        per_node = min(per_node, max(1, gpus_per_node // gpus))
    return max(1, total_nodes * per_node)
