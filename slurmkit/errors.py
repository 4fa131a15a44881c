"""The one exception hierarchy of slurmkit.

Every error the library raises on purpose is a :class:`SlurmkitError`.  The
CLI's single error boundary maps each class to an exit code and prints the
message as one ``Error: ...`` line, so messages must be complete sentences
that tell the user what to do next.
"""


class SlurmkitError(Exception):
    """Base class: an operation failed (exit code 1).

    ``may_have_run`` is True when a command was sent but its answer was lost
    (a dropped connection, a timeout after the start): the command may have
    taken effect, so the caller must check before repeating it.
    """

    exit_code = 1
    may_have_run = False

    def outcome_unknown(self):
        """Mark this error as 'sent, result unknown'; returns self for ``raise``."""
        self.may_have_run = True
        return self


class UsageError(SlurmkitError):
    """The user asked for something impossible or unknown (exit code 2)."""

    exit_code = 2


class ConfigError(UsageError):
    """A site config file is missing, malformed or invalid (exit code 2)."""


class JobDoesNotFitError(UsageError):
    """The job exceeds a limit of the partition; refused before sbatch."""


class SlurmCommandError(SlurmkitError):
    """A Slurm command ran and refused (sbatch's own message is kept)."""

    def __init__(self, message, argv=None, returncode=None, stderr=""):
        super().__init__(message)
        self.argv = list(argv or [])
        self.returncode = returncode
        self.stderr = stderr


class SlurmUnavailableError(SlurmkitError):
    """Slurm cannot be reached at all (commands missing, slurmctld down)."""


class RemoteError(SlurmkitError):
    """Base for failures reaching a cluster's login node over SSH."""


class HostKeyError(RemoteError):
    """The login node's host key is unknown or changed: the connection is refused."""


class ConnectTimeoutError(RemoteError):
    """A connection or a remote command did not answer in time."""


class WaitTimeoutError(SlurmkitError):
    """A wait ran out of time while the job was still alive (exit code 1).

    Deliberately not a :class:`ConnectTimeoutError`: Slurm answered every
    poll, the job simply has not ended, and the requeue daemon must never
    take a long-running job for an unreachable cluster.  ``job`` is its last
    known state (a :class:`~slurmkit.slurm.types.JobInfo`).
    """

    def __init__(self, message, job=None):
        super().__init__(message)
        self.job = job


class UncompletedJobError(SlurmkitError):
    """A job ended without a result (killed, timed out, failed before the call; submitit's name):
    the message has its state and the end of its log."""


class FailedJobError(UncompletedJobError):
    """A job's call raised (the Python API; submitit's name, an UncompletedJobError as in submitit):
    ``exception`` is the exception itself where it could be unpickled here, ``remote_traceback``
    the traceback on the node."""

    def __init__(self, message, exception=None, remote_traceback=""):
        super().__init__(message)
        self.exception = exception
        self.remote_traceback = remote_traceback
