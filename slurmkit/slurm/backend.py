"""The one interface for everything slurmkit asks of Slurm.

:class:`SlurmBackend` is what the rest of the library talks to.
:class:`CommandBackend` implements it with the Slurm commands through a
:class:`~slurmkit.slurm.runner.Runner`, so the very same code serves a local
cluster and a remote one reached over SSH.  ``slurmkit.slurm.pyslurm_backend``
implements it with pyslurm when that is installed and matches the cluster.

Every method costs a constant number of Slurm RPCs, whatever the number of
jobs asked about: status of many jobs is one ``squeue`` call.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Sequence

from slurmkit.errors import SlurmCommandError, SlurmUnavailableError
from slurmkit.slurm import commands, parsers
from slurmkit.slurm.runner import CommandResult, Runner

if TYPE_CHECKING:  # only annotations need them; submitting must not pay for defining them
    from slurmkit.slurm.types import JobInfo, NodeInfo, StartEstimate, Topology

_UNREACHABLE_RE = re.compile(r"Unable to contact slurm controller|Socket timed out|Connection refused|"
                             r"Zero Bytes were transmitted|Communication connection failure", re.I)


class SlurmBackend:
    """Interface. Job ids are the cluster-local numeric ids, as strings."""

    name = "abstract"

    def submit(self, script: str, token: Optional[str] = None) -> str:
        """Submit a batch script; return the job id.

        ``token`` is the job's idempotency token (also in its ``--comment``);
        backends that can make submission atomic per token use it.
        """
        raise NotImplementedError

    def estimate_start(self, script: str) -> StartEstimate:
        """When would this script start (``sbatch --test-only``); submits nothing."""
        raise NotImplementedError

    def jobs(self, job_ids: Optional[Iterable[str]] = None, user: Optional[str] = None) -> List[JobInfo]:
        """Many jobs in one call; unknown ids are simply absent from the result."""
        raise NotImplementedError

    def find_by_token(self, token: str, user: Optional[str] = None) -> List[JobInfo]:
        """Jobs whose comment contains ``token`` (idempotent submission checks)."""
        return [j for j in self.jobs(user=user) if token in j.comment]

    def cancel(self, job_ids: Sequence[str]) -> None:
        raise NotImplementedError

    def topology(self) -> Topology:
        raise NotImplementedError

    def partitions(self) -> dict:
        """{partition name: {scontrol key: value}}."""
        raise NotImplementedError

    def nodes(self) -> List[NodeInfo]:
        raise NotImplementedError

    def version(self) -> str:
        raise NotImplementedError

    def config(self) -> Dict[str, str]:
        """The controller's configuration (``scontrol show config``) as {key: value}."""
        raise NotImplementedError

    def describe(self) -> str:
        return self.name

    def close(self):
        pass


class CommandBackend(SlurmBackend):
    """Slurm commands run by a :class:`Runner` (locally or over SSH)."""

    name = "commands"

    def __init__(self, runner: Runner, cluster_name: str = "", submit_once: bool = False):
        self.runner = runner
        self.cluster_name = cluster_name
        # Over SSH an answer can be lost after sbatch ran: submit through the
        # once-per-token wrapper so that retrying is always safe.
        self.submit_once = submit_once
        self._json = None  # unknown until the first squeue call tells us

    def describe(self):
        return "slurm commands, %s" % self.runner.describe()

    def close(self):
        self.runner.close()

    def _run(self, argv, stdin=None, timeout=None) -> CommandResult:
        return self.runner.run(argv, stdin=stdin, timeout=timeout)

    def _check(self, result: CommandResult, what: str) -> CommandResult:
        if result.ok:
            return result
        message = parsers.first_error_line(result.stderr or result.stdout)
        where = (" on cluster %s" % self.cluster_name) if self.cluster_name else ""
        if _UNREACHABLE_RE.search(result.stderr or ""):
            raise SlurmUnavailableError("slurmctld%s does not answer (%s): %s" % (where, what, message))
        raise SlurmCommandError("%s failed%s: %s" % (what, where, message), argv=result.argv,
                                returncode=result.returncode, stderr=result.stderr)

    def submit(self, script, token=None):
        argv = commands.sbatch_once(token) if (self.submit_once and token) else commands.sbatch()
        result = self._check(self._run(argv, stdin=script), "sbatch")
        return parsers.parse_sbatch_parsable(result.stdout)

    def estimate_start(self, script):
        result = self._check(self._run(commands.sbatch(test_only=True), stdin=script), "sbatch --test-only")
        return parsers.parse_test_only(result.stderr)

    def jobs(self, job_ids=None, user=None):
        job_ids = list(job_ids) if job_ids is not None else None
        if job_ids == []:
            return []
        if self._json is not False:
            result = self._run(commands.squeue_json(job_ids, user))
            if result.ok:
                self._json = True
                return self._filter(parsers.parse_squeue_json(result.stdout), job_ids, user)
            if not re.search(r"unrecognized option|invalid option|json", result.stderr, re.I) \
                    or _UNREACHABLE_RE.search(result.stderr) or self._json:
                return self._jobs_not_found(result, job_ids)
            self._json = False  # an old Slurm without --json: use the format string from now on
        result = self._run(commands.squeue_parsable(job_ids, user))
        if not result.ok:
            return self._jobs_not_found(result, job_ids)
        return self._filter(parsers.parse_squeue_parsable(result.stdout), job_ids, user)

    def _jobs_not_found(self, result, job_ids):
        # squeue exits 1 with "Invalid job id specified" when *every* id is unknown.
        if job_ids and "Invalid job id" in result.stderr:
            return []
        self._check(result, "squeue")
        return []

    @staticmethod
    def _filter(jobs, job_ids, user):
        # 22.05's squeue --json ignores --jobs/--user: filter here so callers see one behaviour.
        if job_ids is not None:
            wanted = set(job_ids)
            jobs = [j for j in jobs if j.job_id in wanted]
        if user:
            jobs = [j for j in jobs if j.user == user]
        return jobs

    def accounting(self, job_ids: Sequence[str]) -> List[JobInfo]:
        """Finished jobs squeue no longer knows, from sacct (empty where accounting is off)."""
        result = self._run(commands.sacct(job_ids))
        return parsers.parse_sacct(result.stdout) if result.ok else []

    def cancel(self, job_ids):
        self._check(self._run(commands.scancel(job_ids)), "scancel")

    def topology(self):
        return parsers.parse_topology(self._check(self._run(commands.show_topology()), "scontrol show topology").stdout)

    def partitions(self):
        return parsers.parse_partitions(self._check(self._run(commands.show_partition()), "scontrol show partition").stdout)

    def nodes(self):
        return parsers.parse_nodes(self._check(self._run(commands.show_nodes()), "scontrol show node").stdout)

    def version(self):
        return parsers.parse_version(self._check(self._run(commands.version()), "scontrol --version").stdout)

    def config(self):
        return parsers.parse_config(self._check(self._run(commands.show_config()), "scontrol show config").stdout)
