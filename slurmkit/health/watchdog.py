"""A watchdog for one check: exit 1 after a deadline, whatever is still running.

SIGALRM in this (single-threaded) process.  slurmd kills a HealthCheckProgram
only after 60 s, cron never: a check stuck on a hung slurmctld or a reading
that escaped its own deadline must end by itself, and change nothing in
Slurm on the way out.  The previous handler and alarm are restored on exit,
for callers that run a check in their own process (tests).
"""

import math
import os
import signal


class Watchdog:
    def __init__(self, seconds: float, what: str = "the health check", setting: str = "health.check_timeout"):
        self.seconds = seconds
        self.what, self.setting = what, setting
        self.previous = None

    def _expire(self, signum, frame):
        os.write(2, ("Error: watchdog: %s took longer than %gs (%s); nothing was changed in Slurm\n"
                     % (self.what, self.seconds, self.setting)).encode())
        os._exit(1)

    def __enter__(self):
        self.previous = signal.signal(signal.SIGALRM, self._expire)
        signal.alarm(max(1, int(math.ceil(self.seconds))))
        return self

    def __exit__(self, *exc):
        signal.alarm(0)
        signal.signal(signal.SIGALRM, self.previous)
