"""What "a drafted site file says what the hand-written one says" means, for every cluster the tests draft.

``slurmkit site init`` is proven by comparison: the local clusters' draft against
``site_configs/local.yaml`` (test_site_init.py) and the scale cluster's against the site file
``devcluster/scale.py`` writes (test_scale.py).  Both hold a draft to the same fields and the same
rendering rule, here, so the two proofs cannot drift apart.
"""

import difflib
import re
from pathlib import Path
from typing import List

from slurmkit import times

# The fields of a partition that jobs are rendered from.
PARTITION_FIELDS = ("accelerator", "gpu_model", "effective_gres_name", "gpus_per_node", "cpus_per_node",
                    "memory_mb", "max_nodes")

# The one thing a rendered job may differ in, and why: the rendezvous port range.  local.yaml spreads jobs
# over 20000-29999 because three clusters share one machine; that is a site's choice Slurm and the nodes do
# not know, so the draft keeps slurmkit's default.  The fabric lines (NCCL_SOCKET_IFNAME=lo ...) are equal:
# the probe job found the interface that carries the nodes' addresses.
EXPLAINED = [re.compile(p) for p in (
    r"site's range \d+-\d+", r"^slurmkit_ports=\d+$", r"MASTER_PORT=\$\(\(\d+ \+")]


def slurm_switch_cap(slurm_conf) -> int:
    """The cap a cluster's Slurm puts on --switches waits (its SchedulerParameters; Slurm's 300 without)."""
    found = re.search(r"max_switch_wait=(\d+)", Path(slurm_conf).read_text())
    return int(found.group(1)) if found else 300


def seconds(text):
    return None if text is None else times.slurm_time_seconds(text)


def assert_same_cluster(hand, draft, name: str, slurm_cap: int) -> None:
    """Cluster ``name`` of the drafted site ``draft`` says what the hand-written ``hand`` says.

    ``slurm_cap``: the cap the cluster's Slurm puts on ``--switches`` waits (SchedulerParameters).
    """
    want, got = hand.clusters[name], draft.clusters[name]
    assert set(got.partitions) == set(want.partitions)
    for part_name, theirs in want.partitions.items():
        ours = got.partitions[part_name]
        for field in PARTITION_FIELDS:
            assert getattr(ours, field) == getattr(theirs, field), (name, part_name, field)
        # A hand-written file may say 24:00:00 where Slurm prints 1-00:00:00: the same limit.
        assert seconds(ours.max_time) == seconds(theirs.max_time), (name, part_name)
        # The probe job: loopback nodes, no RDMA device, so the fabric the file describes by hand.
        assert (ours.fabric.type, ours.fabric.hcas, ours.fabric.socket_ifname) == (
            theirs.fabric.type, theirs.fabric.hcas, theirs.fabric.socket_ifname), (name, part_name)
    assert got.switch_group_features == want.switch_group_features
    assert got.default_partition == want.default_partition
    assert (got.slurm_conf, got.login) == (want.slurm_conf, want.login)
    # What jobs get is the shorter of the site's wait and Slurm's cap, and that must agree (local.yaml asks
    # for a longer wait than Slurm allows on purpose, to exercise the warning); the draft writes the cap.
    assert min(seconds(draft.switch_wait(got)), slurm_cap) == min(seconds(hand.switch_wait(want)), slurm_cap)
    assert seconds(draft.switch_wait(got)) == slurm_cap


def unexplained_differences(hand_script: str, draft_script: str) -> List[str]:
    """The lines in which a job rendered from the draft differs from the same job rendered from the
    hand-written file, less those :data:`EXPLAINED` says why; also every ``#SBATCH`` line that differs."""
    changed = [line[1:] for line in difflib.unified_diff(hand_script.splitlines(), draft_script.splitlines(),
                                                          lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    unexplained = [line for line in changed if not any(p.search(line) for p in EXPLAINED)]
    return unexplained + [line for line in changed if line.startswith("#SBATCH") and line not in unexplained]
