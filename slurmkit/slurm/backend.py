"""The one interface for everything slurmkit asks of Slurm.

:class:`SlurmBackend` is what the rest of the library talks to.
:class:`CommandBackend` implements it with the Slurm commands through a
:class:`~slurmkit.slurm.runner.Runner`, so the very same code serves a local
cluster and a remote one reached over SSH.  ``slurmkit.slurm.pyslurm_backend``
implements it with pyslurm when that is installed and matches the cluster.

Every method costs a constant number of Slurm RPCs, whatever the number of
jobs or nodes asked about: status of many jobs is one ``squeue`` call (plus
one ``sacct`` for those squeue has forgotten), draining many nodes is one
``scontrol update``.  The requeue daemon and the health sweeps rely on that.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Sequence, Tuple

from slurmkit.errors import SlurmCommandError, SlurmUnavailableError, UsageError
from slurmkit.slurm import commands, parsers
from slurmkit.slurm.runner import CommandResult, Runner

if TYPE_CHECKING:  # only annotations need them; submitting must not pay for defining them
    from slurmkit.slurm.types import ArrayTasks, JobInfo, NodeInfo, StartEstimate, TaskInfo, Topology

UNREACHABLE_RE = re.compile(r"Unable to contact slurm controller|Socket timed out|Connection refused|"
                             r"Zero Bytes were transmitted|Communication connection failure", re.I)
_INVALID_STATE_RE = re.compile(r"Invalid node state", re.I)


class SlurmBackend:
    """Interface. Job ids are the cluster-local numeric ids, as strings.

    Callers use only what is declared here: no ``hasattr`` probing of a
    backend for optional abilities.  An ability a backend lacks raises
    NotImplementedError, which is a bug to fix, not a case to handle.
    """

    name = "abstract"
    # Where this backend's Slurm commands run; None for a backend that runs
    # none (callers then use its methods only).  The cluster survey sends its
    # one-round-trip probe script through it.
    runner: Optional[Runner] = None
    # True when submit() itself never creates a second job for one token (the
    # cluster-side submit-once wrapper): a caller retrying after a lost answer
    # need not look for the token first.
    submit_once = False

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

    def jobs_by_id(self, job_ids: Iterable[str]) -> Dict[str, JobInfo]:
        """Many jobs by id, finished ones included, in at most two RPCs: {id: job}.

        Live jobs and those finished within ``MinJobAge`` come from one
        ``squeue``; ids it no longer knows come from one ``sacct`` where the
        cluster has accounting.  An id absent from the result is unknown to
        Slurm (or forgotten, on a cluster without accounting).  A failure to
        ask raises: "not found" is never confused with "could not look".
        """
        raise NotImplementedError

    def accounting(self, job_ids: Sequence[str]) -> List[JobInfo]:
        """Jobs from the accounting database (sacct); empty where there is none."""
        raise NotImplementedError

    def job_records(self, job_id: str) -> List[Dict[str, str]]:
        """The controller's whole record of a job (an array's id: every task it still holds; ``ID_I``: that
        task), as ``scontrol show job`` prints it: one RPC; empty once the controller forgot the job."""
        raise NotImplementedError

    def usage_records(self, job_ids: Sequence[str]) -> Optional[List[Dict[str, str]]]:
        """What the jobs used, from accounting: their rows and their steps' (fields
        ``commands.SACCT_USAGE_FIELDS``), every run of a requeued one; None where the cluster keeps
        no accounting."""
        raise NotImplementedError

    def output_patterns(self, job_id: str) -> Optional[Tuple[Optional[str], Optional[str]]]:
        """The job's --output and --error patterns as submitted (relative ones to its working
        directory), while the controller knows it: one RPC; None once it forgot the job."""
        raise NotImplementedError

    def accounting_records(self, job_id: str) -> Optional[List[Dict[str, str]]]:
        """The job's (an array's: every task's) rows in accounting, fields ``commands.SACCT_RECORD_FIELDS``
        (22.05: without StdOut, StdErr, Restarts and FailedNode, which it does not keep); None where the
        cluster keeps no accounting."""
        raise NotImplementedError

    def pending_priorities(self, partition: str) -> List[Tuple[str, int]]:
        """The partition's pending jobs and their priorities, in one RPC: [(job id, priority)]."""
        raise NotImplementedError

    def priority_factors(self, job_id: str) -> Optional[Dict[str, int]]:
        """sprio's weighted factors of a pending job; None where the priority plugin keeps none
        (priority/basic) or the job is not pending."""
        raise NotImplementedError

    def limits(self, qos: Optional[str] = None, user: Optional[str] = None,
               account: Optional[str] = None) -> List["parsers.Limit"]:
        """The limits set on a QOS (``qos``) or on the associations of ``user`` in ``account``, each with
        what is in use of it now, as the controller holds jobs against them: one RPC."""
        raise NotImplementedError

    def accounting_since(self, seconds_ago: float, user: Optional[str] = None) -> List[JobInfo]:
        """Every job of ``user`` that accounting saw run or end in the last ``seconds_ago`` seconds, in
        one query (sacct); empty where there is no accounting.  Jobs squeue has forgotten are there,
        with their comments where the cluster stores them (``AccountingStoreFlags=job_comment``)."""
        raise NotImplementedError

    def array_tasks(self, array_ids: Iterable[str] = (), user: Optional[str] = None) -> ArrayTasks:
        """Every task of these arrays (or of ``user``'s jobs), pending and finished ones too (until
        MinJobAge), in one RPC.  Arrays the controller has forgotten are absent (all of them: empty)."""
        raise NotImplementedError

    def array_tasks_accounting(self, array_ids: Sequence[str]) -> List[TaskInfo]:
        """The tasks of these arrays from accounting (sacct), for those the controller has forgotten."""
        raise NotImplementedError

    def update_jobs(self, job_ids: Sequence[str], **fields: str) -> None:
        """``scontrol update`` of many jobs (or array tasks, ``A_I``) at once: ``StartTime="now"``,
        ``ArrayTaskThrottle="4"``."""
        raise NotImplementedError

    def has_accounting(self) -> bool:
        """Whether the cluster keeps accounting (``AccountingStorageType`` is not none)."""
        raise NotImplementedError

    def cancel(self, job_ids: Sequence[str]) -> None:
        raise NotImplementedError

    def requeue(self, job_ids: Sequence[str]) -> None:
        """Put jobs back in the queue (running or finished batch jobs; Slurm refuses others)."""
        raise NotImplementedError

    def hold(self, job_ids: Sequence[str]) -> None:
        """Keep pending jobs from starting until released."""
        raise NotImplementedError

    def release(self, job_ids: Sequence[str]) -> None:
        raise NotImplementedError

    def topology(self) -> Topology:
        raise NotImplementedError

    def partitions(self) -> dict:
        """{partition name: {scontrol key: value}}."""
        raise NotImplementedError

    def nodes(self) -> List[NodeInfo]:
        raise NotImplementedError

    def node_states(self, names: Optional[Iterable[str]] = None) -> List[NodeInfo]:
        """Nodes (all, or ``names``) with state, reason, and who set the reason when."""
        raise NotImplementedError

    def drain(self, nodes: Sequence[str], reason: str) -> None:
        """Let running jobs finish, start no new ones; ``reason`` is required."""
        raise NotImplementedError

    def down(self, nodes: Sequence[str], reason: str) -> None:
        """Take nodes out at once (their jobs fail with NODE_FAIL); ``reason`` is required."""
        raise NotImplementedError

    def resume(self, nodes: Sequence[str]) -> None:
        """Return drained or down nodes to service (clears the reason)."""
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


def _out_of_service(state: str) -> bool:
    """A node RESUME would act on: down, drained or draining, failing."""
    return any(word in state.upper() for word in ("DOWN", "DRAIN", "FAIL"))


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
        # squeue --Format for jobs by id or user (commands.squeue_format); False once this Slurm refused it
        self._format = None
        # The controller's configuration, read once per backend when first needed: what slurmkit reads from
        # it (accounting, limits, plugins) changes only with a slurmctld restart or reconfigure.
        self._config_once: Optional[Dict[str, str]] = None

    def describe(self):
        return "slurm commands, %s" % self.runner.describe()

    def close(self):
        self.runner.close()

    def _run(self, argv, stdin=None, timeout=None) -> CommandResult:
        return self.runner.run(argv, stdin=stdin, timeout=timeout)

    def checked(self, result: CommandResult, what: str) -> CommandResult:
        if result.ok:
            return result
        message = parsers.first_error_line(result.stderr or result.stdout)
        if not (result.stderr or result.stdout).strip():
            # Nothing said: how it ended is all there is (a signal shows as a negative status).
            message = "%s, exit status %s" % (message, result.returncode)
        where = (" on cluster %s" % self.cluster_name) if self.cluster_name else ""
        if UNREACHABLE_RE.search(result.stderr or ""):
            # sacct talks to the accounting daemon, every other command to the controller
            daemon = "slurmdbd" if what == "sacct" else "slurmctld"
            raise SlurmUnavailableError("%s%s does not answer (%s): %s" % (daemon, where, what, message))
        raise SlurmCommandError("%s failed%s: %s" % (what, where, message), argv=result.argv,
                                returncode=result.returncode, stderr=result.stderr)

    def submit(self, script, token=None):
        argv = commands.sbatch_once(token) if (self.submit_once and token) else commands.sbatch()
        result = self.checked(self._run(argv, stdin=script), "sbatch")
        return parsers.parse_sbatch_parsable(result.stdout)

    def estimate_start(self, script):
        result = self.checked(self._run(commands.sbatch(test_only=True), stdin=script), "sbatch --test-only")
        return parsers.parse_test_only(result.stderr)

    def jobs(self, job_ids=None, user=None):
        job_ids = list(job_ids) if job_ids is not None else None
        if job_ids == []:
            return []
        if (job_ids or user) and self._format is not False:
            found = self._formatted(job_ids, user)
            if found is not None:
                return found
        if self._json is not False:
            result = self._run(commands.squeue_json(job_ids, user))
            if result.ok:
                self._json = True
                return self._filter(parsers.parse_squeue_json(result.stdout), job_ids, user)
            if not re.search(r"unrecognized option|invalid option|json", result.stderr, re.I) \
                    or UNREACHABLE_RE.search(result.stderr) or self._json:
                return self._jobs_not_found(result, job_ids)
            self._json = False  # an old Slurm without --json: use the format string from now on
        result = self._run(commands.squeue_parsable(job_ids, user))
        if not result.ok:
            return self._jobs_not_found(result, job_ids)
        return self._filter(parsers.parse_squeue_parsable(result.stdout), job_ids, user)

    def _formatted(self, job_ids, user):
        """The jobs as squeue filters them (one job alone: one cheap RPC): None if this Slurm cannot
        print the fields (then squeue --json, or the format letters, from now on)."""
        result = self._run(commands.squeue_format(job_ids, user))
        if result.ok:
            self._format = True
            return self._filter(parsers.parse_squeue_format(result.stdout), job_ids, user)
        if "Invalid job format" in result.stderr and not self._format:
            self._format = False
            return None
        return self._jobs_not_found(result, job_ids)

    def _jobs_not_found(self, result, job_ids):
        # squeue exits 1 with "Invalid job id specified" when *every* id is unknown.
        if job_ids and "Invalid job id" in result.stderr:
            return []
        self.checked(result, "squeue")
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

    def jobs_by_id(self, job_ids):
        ids = list(dict.fromkeys(str(j) for j in job_ids))   # unique, in the caller's order
        if not ids:
            return {}
        # squeue --states=all: running and pending jobs, and finished ones
        # until MinJobAge has passed (the only source without accounting).
        found = {j.job_id: j for j in self.jobs(ids)}
        forgotten = [i for i in ids if i not in found]
        if forgotten and self.has_accounting():
            wanted = set(forgotten)
            found.update((j.job_id, j) for j in self.accounting(forgotten) if j.job_id in wanted)
        return {i: found[i] for i in ids if i in found}

    def setting(self, key: str) -> str:
        """One value of the controller's configuration ("" for unset or ``(null)``), from one ``scontrol show
        config`` per backend: every poll must stay at its two RPCs."""
        if self._config_once is None:
            self._config_once = self.config()
        value = self._config_once.get(key, "") or ""
        return "" if value == "(null)" else value

    def has_accounting(self):
        return parsers.accounting_enabled({"AccountingStorageType": self.setting("AccountingStorageType")})

    def accounting(self, job_ids: Sequence[str]) -> List[JobInfo]:
        """Jobs from sacct; empty where accounting is off, an error where it is on but does not answer."""
        ids = [str(j) for j in job_ids]
        if not ids:
            return []
        result = self._run(commands.sacct(ids))
        if not result.ok and "accounting storage is disabled" in result.stderr:
            return []
        return parsers.parse_sacct(self.checked(result, "sacct").stdout)

    def job_records(self, job_id):
        result = self._run(commands.show_job(job_id))
        if not result.ok and "Invalid job id" in result.stderr:
            return []
        return parsers.parse_job_records(self.checked(result, "scontrol show job").stdout)

    def usage_records(self, job_ids):
        if not self.has_accounting():
            return None
        result = self.checked(self._run(commands.sacct_usage(job_ids)), "sacct")
        return parsers.parse_sacct_records(result.stdout, commands.SACCT_USAGE_FIELDS)

    def output_patterns(self, job_id):
        result = self._run(commands.squeue_output_patterns(job_id))
        if not result.ok and "Invalid job id" in result.stderr:
            return None
        line = self.checked(result, "squeue").stdout.strip("\n").split("\n")[0]
        if not line:
            return None
        out, _, err = line.partition(commands.SQUEUE_DELIMITER)
        # 24.11 prints "(null)" for an --error the job did not give (22.05: the output's pattern).
        out, err = (None if v.strip() in ("", "(null)") else v.strip() for v in (out, err))
        return out, err

    def accounting_records(self, job_id):
        if not self.has_accounting():
            return None
        fields = commands.SACCT_RECORD_FIELDS
        result = self._run(commands.sacct_records(job_id, fields))
        if not result.ok and re.search(r"Invalid field", result.stderr):
            fields = commands.SACCT_RECORD_FIELDS_2205     # 22.05: no StdOut in accounting
            result = self._run(commands.sacct_records(job_id, fields))
        return parsers.parse_sacct_records(self.checked(result, "sacct").stdout, fields)

    def pending_priorities(self, partition):
        result = self.checked(self._run(commands.squeue_pending_priorities(partition)), "squeue")
        return parsers.parse_pending_priorities(result.stdout)

    def priority_factors(self, job_id):
        result = self._run(commands.sprio(job_id))
        if not result.ok and re.search(r"supported priority plugin|Unable to find jobs|Invalid job id",
                                       result.stderr + result.stdout, re.I):
            return None
        return parsers.parse_sprio(self.checked(result, "sprio").stdout)

    def limits(self, qos=None, user=None, account=None):
        result = self.checked(self._run(commands.show_limits(qos, user, account)), "scontrol show assoc_mgr")
        return parsers.parse_limits(result.stdout)

    def accounting_since(self, seconds_ago, user=None):
        result = self._run(commands.sacct_since(int(seconds_ago) + 1, user))
        if not result.ok and "accounting storage is disabled" in result.stderr:
            return []
        return parsers.parse_sacct(self.checked(result, "sacct").stdout)

    def array_tasks(self, array_ids=(), user=None):
        from slurmkit.slurm.types import ArrayTasks

        result = self._run(commands.squeue_array_tasks(array_ids, user))
        if not result.ok and "Invalid job id" in (result.stderr or ""):
            return ArrayTasks([], {})       # every array asked about is forgotten by the controller
        text = self.checked(result, "squeue").stdout
        return ArrayTasks(parsers.parse_array_tasks(text), parsers.parse_unstarted_arrays(text))

    def array_tasks_accounting(self, array_ids):
        result = self._run(commands.sacct_array_tasks(array_ids))
        return parsers.parse_sacct_array_tasks(self.checked(result, "sacct").stdout)

    def update_jobs(self, job_ids, **fields):
        self.checked(self._run(commands.update_jobs(job_ids, **fields)), "scontrol update " + ",".join(sorted(fields)))

    def cancel(self, job_ids):
        self.checked(self._run(commands.scancel(job_ids)), "scancel")

    def requeue(self, job_ids):
        self._job_control(commands.requeue, job_ids, "scontrol requeue")

    def hold(self, job_ids):
        self._job_control(commands.hold, job_ids, "scontrol hold")

    def release(self, job_ids):
        self._job_control(commands.release, job_ids, "scontrol release")

    def _job_control(self, build, job_ids, what):
        ids = [str(j) for j in job_ids]
        if ids:  # nothing to do must not become "scontrol hold" with no ids
            self.checked(self._run(build(ids)), what)

    def topology(self):
        return parsers.parse_topology(self.checked(self._run(commands.show_topology()), "scontrol show topology").stdout)

    def partitions(self):
        return parsers.parse_partitions(self.checked(self._run(commands.show_partition()), "scontrol show partition").stdout)

    def nodes(self):
        return parsers.parse_nodes(self.checked(self._run(commands.show_nodes()), "scontrol show node").stdout)

    def node_states(self, names=None):
        names = list(names) if names is not None else None
        if names == []:
            return []
        return parsers.parse_nodes(self.checked(self._run(commands.show_nodes(names)), "scontrol show node").stdout)

    def drain(self, nodes, reason):
        self._update_nodes(nodes, "DRAIN", reason)

    def down(self, nodes, reason):
        self._update_nodes(nodes, "DOWN", reason)

    def resume(self, nodes):
        nodes = [str(n) for n in nodes]
        if not nodes:
            return
        result = self._run(commands.update_nodes(nodes, "RESUME"))
        if not result.ok and _INVALID_STATE_RE.search(result.stderr or ""):
            # Slurm refuses RESUME of a node already in service ("Invalid node
            # state specified"), on every release, and resumes the others named
            # with it.  Resuming is idempotent for slurmkit: done when none of
            # the nodes is still out of service; the rest are tried once more.
            left = [n.name for n in self.node_states(nodes) if _out_of_service(n.state)]
            if not left:
                return
            if len(left) < len(nodes):
                result = self._run(commands.update_nodes(left, "RESUME"))
        self.checked(result, "scontrol update State=RESUME")

    def _update_nodes(self, nodes, state, reason):
        nodes = [str(n) for n in nodes]
        if not nodes:
            return
        if reason is not None and not reason.strip():
            # Slurm refuses DRAIN/DOWN without one, and a reason is how an
            # admin (and the health sweep) tells whose drain it is.
            raise UsageError("setting nodes %s needs a reason" % state)
        self.checked(self._run(commands.update_nodes(nodes, state, reason)), "scontrol update State=" + state)

    def version(self):
        return parsers.parse_version(self.checked(self._run(commands.version()), "scontrol --version").stdout)

    def config(self):
        return parsers.parse_config(self.checked(self._run(commands.show_config()), "scontrol show config").stdout)
