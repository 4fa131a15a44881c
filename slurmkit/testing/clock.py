"""FakeClock: virtual time for the code that takes a clock (``time()``, ``monotonic()``, ``sleep()``)."""

import threading
from datetime import datetime
from typing import Callable, List, Tuple


class FakeClock:
    """Virtual time: ``monotonic()`` starts at ``start``, ``time()`` at ``epoch``; ``sleep()`` advances both.

    ``sleeps`` lists every sleep asked for.  ``call_at(t, fn)`` runs ``fn``
    when monotonic time reaches ``t`` (during a sleep or ``advance``), e.g.
    to move a job to RUNNING ten seconds into a wait.
    """

    def __init__(self, start: float = 1000.0, epoch: float = 1796040000.0):
        self._start = start
        self._now = start
        self._epoch = epoch
        self.sleeps: List[float] = []
        self._due: List[Tuple[float, int, Callable[[], None]]] = []
        self._lock = threading.RLock()

    def monotonic(self) -> float:
        return self._now

    def time(self) -> float:
        return self._epoch + (self._now - self._start)

    def now(self) -> datetime:
        """Local wall-clock time, as Slurm's timestamps are."""
        return datetime.fromtimestamp(self.time())

    def sleep(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")
        self.sleeps.append(seconds)
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        with self._lock:
            target = self._now + seconds
            while True:
                due = sorted((d for d in self._due if d[0] <= target), key=lambda d: (d[0], d[1]))
                if not due:
                    break
                when, order, call = due[0]
                self._due.remove(due[0])
                self._now = max(self._now, when)
                call()
            self._now = target

    def call_at(self, when: float, call: Callable[[], None]) -> None:
        """Run ``call`` once monotonic time reaches ``when`` (at once if it has)."""
        with self._lock:
            if when <= self._now:
                call()
                return
            self._due.append((when, len(self._due) + len(self.sleeps), call))

    def call_after(self, delay: float, call: Callable[[], None]) -> None:
        self.call_at(self._now + delay, call)
