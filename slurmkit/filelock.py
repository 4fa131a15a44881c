"""Waiting for an exclusive ``flock`` with a deadline: the submission token lock and the sweep lock.

``flock`` itself either blocks forever or fails at once; a command that waits
for another one must give up after a while with a message that says why, so
the lock is tried without blocking until a deadline (``time.monotonic``).
"""

import time


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
