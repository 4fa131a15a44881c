"""Cool-down of clusters that keep failing, shared by every slurmkit process of a user.

A cluster whose login node or slurmctld fails ``threshold`` times in a row is
skipped for a while (doubling from ``base`` to ``cap`` seconds) instead of
costing every later command a connect timeout.  Any success clears it.  The
state is a small JSON file in the private state directory, updated under an
exclusive lock so concurrent submissions don't lose each other's updates.
"""

import json
import os
import time
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Optional

from slurmkit.textfile import write_atomic


class Cooldown:
    def __init__(self, path: Optional[Path] = None, clock=time, threshold: int = 2,
                 base: float = 60.0, cap: float = 900.0):
        if path is None:
            from slurmkit.cache import private_dir

            directory = private_dir("state")
            path = os.path.join(directory, "cooldown.json") if directory else None
        self.path = Path(path) if path else None
        self.clock = clock
        self.threshold, self.base, self.cap = threshold, base, cap

    @contextmanager
    def _locked(self):
        """The state dict, read and written back under an exclusive lock."""
        if self.path is None:  # no safe place to keep state: cooling down is off
            yield {}
            return
        from slurmkit.filelock import lock_path

        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = lock_path(str(self.path) + ".lock", wait=None)     # held for one read and one write
        try:
            try:
                state = json.loads(self.path.read_text())
            except (OSError, ValueError):
                state = {}
            before = json.dumps(state, sort_keys=True)
            yield state
            if json.dumps(state, sort_keys=True) != before:
                write_atomic(self.path, json.dumps(state))
        finally:
            os.close(lock)

    def check(self, cluster: str) -> Optional[str]:
        """Why ``cluster`` is being skipped right now, or None."""
        with self._locked() as state:
            entry = state.get(cluster)
        if not entry or entry.get("until", 0) <= self.clock.time():
            return None
        until = datetime.fromtimestamp(entry["until"]).strftime("%H:%M:%S")
        return "cooling down until %s after %d failures in a row (last: %s)" % (until, entry["failures"],
                                                                               entry["reason"])

    def failure(self, cluster: str, reason: str) -> None:
        with self._locked() as state:
            entry = state.setdefault(cluster, {"failures": 0, "until": 0})
            entry["failures"] += 1
            entry["reason"] = reason
            over = entry["failures"] - self.threshold
            if over >= 0:
                entry["until"] = self.clock.time() + min(self.base * (2 ** over), self.cap)

    def success(self, cluster: str) -> None:
        with self._locked() as state:
            state.pop(cluster, None)
