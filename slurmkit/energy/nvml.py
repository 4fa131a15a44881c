"""What a job's GPUs drew by NVML's own energy counters, from the samples its script wrote.

Where a cluster's site entry sets ``energy.nvml_samples``, a job on NVIDIA
GPUs reads each node's counters (``nvmlDeviceGetTotalEnergyConsumption``,
millijoules since the driver loaded) at the start of its work and at its end,
one task per node, into ``DIR/JOB/ATTEMPT/NODE.PHASE.json``
(``templates/_energy.sh.j2``: JOB is Slurm's job id, ``ARRAY_TASK`` for an
array's task; ATTEMPT is Slurm's restart count, 0 for the first run).  This
module reads them back (pure: the caller fetches the files' texts): the
joules of the job's own GPUs on every node of the attempt, or why they are
not known.  NVML counts the GPU boards alone; :func:`slurmkit.energy.model.used`
adds the rest of each node from the partition's power model.

A sample is trusted only as far as it can be: every node of the attempt has
both phases, each GPU Slurm gave the job is in both (matched by the device's
minor number, /dev/nvidiaN as gres.conf names it, else NVML's index), no
counter went backwards (a driver reloaded in between), and the samples were
taken while the attempt ran (job ids repeat after a controller's state is
reset: an older job's samples are not this one's).
"""

import json
import os
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

PHASES = ("start", "end")
# Seconds a sample may lie outside the attempt's start and end as accounting records them: the
# clocks of the nodes and of slurmdbd, and accounting's whole-second times.
SLACK_S = 120.0


class GpuEnergy(NamedTuple):
    kwh: Optional[float]            # the job's GPUs on every node of the attempt; None: unknown
    why: Optional[str] = None       # why unknown


def sample_paths(directory: str, job_id: str, attempt: int, nodes: Sequence[str]) -> List[str]:
    """The files an attempt's script writes: each node's start and end."""
    base = os.path.join(directory, job_id, str(attempt))
    return [os.path.join(base, "%s.%s.json" % (node, phase)) for node in nodes for phase in PHASES]


def parse_gpu_list(text: Optional[str]) -> Optional[List[int]]:
    """Slurm's ``SLURM_STEP_GPUS``/``SLURM_JOB_GPUS`` (``0,1`` or ``0-3,6``) as numbers; None when absent
    or not that shape (every GPU NVML sees is then the job's)."""
    if not text:
        return None
    out: List[int] = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            return None
        out.extend(range(int(low), int(high or low) + 1))
    return out


def _gpu_counters(sample: dict) -> Dict[int, Optional[int]]:
    """{Slurm's number of a GPU: its counter (mJ) or None} for the GPUs NVML listed."""
    out: Dict[int, Optional[int]] = {}
    for gpu in sample.get("gpus") or []:
        number = gpu.get("minor") if isinstance(gpu.get("minor"), int) else gpu.get("index")
        if isinstance(number, int):
            value = gpu.get("energy_mj")
            out[number] = value if isinstance(value, int) and not isinstance(value, bool) else None
    return out


def node_joules(node: str, start: dict, end: dict) -> Tuple[Optional[float], Optional[str]]:
    """(joules, None): one node's GPUs between its two samples; (None, why) when not known."""
    for sample in (start, end):
        if sample.get("error"):
            return None, "NVML on %s: %s" % (node, sample["error"])
    wanted = parse_gpu_list(start.get("job_gpus"))
    before, after = _gpu_counters(start), _gpu_counters(end)
    numbers = wanted if wanted is not None else sorted(before)
    if not numbers:
        return None, "NVML on %s listed none of the job's GPUs" % node
    joules = 0.0
    for number in numbers:
        a, b = before.get(number), after.get(number)
        if a is None or b is None:
            return None, "NVML on %s did not give GPU %d's energy at the job's %s" % (
                node, number, "start" if a is None else "end")
        if b < a:
            return None, "GPU %d's energy counter on %s went back during the job (its driver reloaded?)" % (
                number, node)
        joules += (b - a) / 1000.0
    return joules, None


def attempt_energy(texts: Dict[str, str], directory: str, job_id: str, attempt: int, nodes: Sequence[str],
                   started: Optional[float], elapsed_s: float) -> GpuEnergy:
    """The kWh an attempt's GPUs drew on all its ``nodes``, from the sample files' ``texts`` ({path: text},
    an absent or empty one not written); ``started`` (epoch seconds) and ``elapsed_s`` place the attempt."""
    if not nodes:
        return GpuEnergy(None, "accounting names no nodes for it")
    joules = 0.0
    for node in nodes:
        start_path, end_path = sample_paths(directory, job_id, attempt, [node])
        samples = []
        for path, phase in ((start_path, "start"), (end_path, "end")):
            try:
                sample = json.loads(texts.get(path) or "null")
            except ValueError:
                sample = None
            if not isinstance(sample, dict):
                return GpuEnergy(None, "no NVML sample of its %s on %s (%s)" % (
                    phase, node, "the job did not start its work" if phase == "start" else
                    "it ended before its script did: a node failure, or killed past its time limit"))
            when = sample.get("time")
            if started is not None and isinstance(when, (int, float)) and not (
                    started - SLACK_S <= when <= started + max(0.0, elapsed_s) + SLACK_S):
                return GpuEnergy(None, "the NVML samples in %s were taken outside this attempt (an earlier "
                                       "job with the same id?)" % os.path.dirname(path))
            samples.append(sample)
        node_use, why = node_joules(node, *samples)
        if node_use is None:
            return GpuEnergy(None, why)
        joules += node_use
    return GpuEnergy(joules / 3.6e6)
