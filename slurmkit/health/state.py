"""What one node's checks remember between runs: a small JSON file per node.

Only facts that need a previous check to mean anything live here: which
processes were in D state and since when, and the InfiniBand error counters
last seen.  The file is per node name (``<state dir>/health/<node>.json``) so
that checks of several nodes from one host (the local clusters) keep apart.
A missing or unreadable file is an empty memory, never an error: the first
check after it simply has nothing to compare with.

Whether slurmkit drained a node, and how many clean checks it has passed
since, is NOT kept here but in the node's Slurm reason (see
``slurmkit.health.ownership``): every checker (slurmd's HealthCheckProgram,
a cron sweep from an admin host) sees the same count there.
"""

import json
import os
import re

from slurmkit import cache


def health_dir(state_dir=None) -> str:
    return os.path.join(state_dir or cache.state_dir(), "health")


def _file(state_dir, node):
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", node) or "_"
    return os.path.join(health_dir(state_dir), safe + ".json")


def load(state_dir, node) -> dict:
    try:
        with open(_file(state_dir, node)) as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def save(state_dir, node, data: dict) -> None:
    """Atomically (temp file, rename); a full or read-only disk only costs the memory."""
    from slurmkit.textfile import write_atomic

    path = _file(state_dir, node)
    try:
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        write_atomic(path, json.dumps(data, sort_keys=True))
    except OSError:
        pass
