"""Whether a job's output file is where Slurm says, and why not.

``wait`` and ``status`` print the output path Slurm reports; when that file
does not exist the user should hear it, with the likely reason, instead of
being sent to a path that is not there (a job name with ``/`` in ``%x``
pointed into a missing directory, and Slurm failed the job without writing
anything anywhere).  Pure: the caller says how to test a path (locally, or on
a cluster's login node).
"""

import os
from typing import Callable, Optional


# Slurm's "system failure" signal (slurm.h SIG_FAILURE): ExitCode 0:53, a batch step that could not start.
SIG_FAILURE = 53


def output_note(path: Optional[str], state: str = "", exists: Callable[[str], bool] = os.path.exists,
                reason: str = "", signal: Optional[int] = None,
                refuses: Optional[Callable[[str], Optional[str]]] = None) -> Optional[str]:
    """None when ``path`` exists (or no path is known), else one line saying what is missing and why.

    ``state`` is the job's Slurm state: a job that has not started has no output yet.  ``reason``
    and ``signal`` are Slurm's: JobLaunchFailure (22.05) or RaisedSignal:53, ExitCode 0:53 (24.11),
    with no output file, is what a node that could not create the file leaves (a working directory
    on a read-only or kernel file system, such as /proc).  ``refuses`` says why a directory takes no
    new file, where it can be tried (a cluster used from this machine): 26.05 says nothing at all.
    """
    if not path or exists(path):
        return None
    if state in ("PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "SUSPENDED") or not state:
        return "output file %s does not exist yet: the job has not written to it" % path
    directory = os.path.dirname(path) or "."
    if not exists(directory):
        return ("output file %s does not exist: its directory %s does not exist, so Slurm could not create it "
                "(a job name with '/' in an --output pattern with %%x does this)" % (path, directory))
    if reason == "JobLaunchFailure" or signal == SIG_FAILURE:
        return ("output file %s does not exist: Slurm could not launch the job (JobLaunchFailure), most often "
                "because the node could not create it: %s is read-only there, on a kernel file system "
                "(like /proc), or not writable by the job's user; the slurmd log of the job's node says "
                "which; submit from a directory you can write, or give --output/-o a path in one"
                % (path, directory))
    why = refuses(directory) if refuses is not None else None
    if why:
        return ("output file %s does not exist: its directory %s %s, so Slurm could not create it and the job "
                "failed as it started; submit from a directory you can write, or give --output/-o a path in one"
                % (path, directory, why))
    return "output file %s does not exist (removed, or on a file system this machine does not see)" % path
