"""Pure argv builders for every Slurm command slurmkit runs.

Nothing here executes anything: each function returns an argument list that
a :class:`~slurmkit.slurm.runner.Runner` runs locally or on a login node.
Keeping them pure makes them trivially testable and lets the SSH runner quote
each argument on its own.
"""

from typing import Iterable, List, Optional

# squeue's own format letters, joined with a delimiter that never appears in
# the fields we ask for except the comment, which is therefore last.
SQUEUE_FIELDS = ("%i", "%j", "%T", "%P", "%D", "%N", "%S", "%l", "%u", "%r", "%k")
SQUEUE_DELIMITER = "\x1f"  # ASCII unit separator: not typed by users, kept by squeue


def sbatch(test_only: bool = False) -> List[str]:
    """Submit the script given on standard input.

    The script travels on stdin (not as a file) so the same argv works on a
    remote login node without copying files first.
    """
    if test_only:
        return ["sbatch", "--test-only"]
    return ["sbatch", "--parsable"]


def squeue_json(job_ids: Optional[Iterable[str]] = None, user: Optional[str] = None) -> List[str]:
    argv = ["squeue", "--json", "--states=all"]
    if job_ids:
        argv.append("--jobs=" + ",".join(job_ids))
    if user:
        argv.append("--user=" + user)
    return argv


def squeue_parsable(job_ids: Optional[Iterable[str]] = None, user: Optional[str] = None) -> List[str]:
    argv = ["squeue", "--noheader", "--states=all", "--format=" + SQUEUE_DELIMITER.join(SQUEUE_FIELDS)]
    if job_ids:
        argv.append("--jobs=" + ",".join(job_ids))
    if user:
        argv.append("--user=" + user)
    return argv


SACCT_FIELDS = ("JobIDRaw", "JobName", "State", "Partition", "NNodes", "NodeList", "Start", "Timelimit",
                "User", "Reason", "Comment")


def sacct(job_ids: Iterable[str]) -> List[str]:
    return ["sacct", "--noheader", "--parsable2", "--allocations", "--jobs=" + ",".join(job_ids),
            "--format=" + ",".join(SACCT_FIELDS)]


def scancel(job_ids: Iterable[str]) -> List[str]:
    return ["scancel", *job_ids]


def show_topology() -> List[str]:
    return ["scontrol", "show", "topology"]


def show_partition(name: Optional[str] = None) -> List[str]:
    return ["scontrol", "--oneliner", "show", "partition"] + ([name] if name else [])


def show_nodes() -> List[str]:
    return ["scontrol", "--oneliner", "--details", "show", "node"]


def version() -> List[str]:
    return ["scontrol", "--version"]


def squeue_pending_count() -> List[str]:
    return ["squeue", "--noheader", "--states=PENDING", "--format=%i"]
