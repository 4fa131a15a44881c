"""Exclusive ``flock`` locks on files: the one way slurmkit takes them.

``flock`` itself either blocks forever or fails at once; a command that waits
for another one must give up after a while with a message that says why, so
the lock is tried without blocking until a deadline (``time.monotonic``):
:func:`flock_until` on an open file, :func:`lock_path` on a path.  A lock
held for a long time (the requeue daemon's, the health sweep's) says who
holds it in the file itself (:func:`claim`, :func:`holder`), so the one that
is refused can name it.
"""

import os
import time
from typing import Optional


def flock_until(fd: int, deadline: float, poll: float = 0.02) -> bool:
    """Take an exclusive flock on ``fd``, trying every ``poll`` seconds until ``deadline``
    (a ``time.monotonic()`` value); False when another holder still has it then."""
    import fcntl

    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll)


def lock_path(path: str, wait: Optional[float] = 0.0, *, poll: float = 0.02, mode: int = 0o600) -> Optional[int]:
    """Open (create) ``path`` and take an exclusive flock on it: the fd, which the caller closes to release
    the lock; None when another holder still has it after ``wait`` seconds (0: one try; None: wait as long
    as it takes, for a lock only ever held for moments)."""
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, mode)
    try:
        if wait is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return fd
        if flock_until(fd, time.monotonic() + wait, poll=poll):
            return fd
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return None


def claim(fd: int, text: str) -> None:
    """Write who holds the lock (``text``, e.g. "pid 123 since ...") into its file."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, text.encode("utf-8", "replace"), 0)


def holder(path: str, default: str = "another process") -> str:
    """What the lock's holder wrote into ``path`` (:func:`claim`), else ``default``."""
    try:
        with open(path, "rb") as fh:
            text = fh.read(200).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    return text or default
