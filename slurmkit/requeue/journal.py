"""The requeue journal: every tracked job and every attempt, durably, in SQLite (WAL).

One file per user (``$SLURMKIT_STATE_DIR``, else ``$XDG_STATE_HOME/slurmkit``,
else ``~/.local/state/slurmkit``; ``requeue.db``).  Write-ahead logging lets
``slurmkit daemon jobs`` read while the daemon writes, and every change is one
transaction, so a crash (kill -9 at any moment) leaves the file as it was
before or after a step, never between.

An attempt moves through phases, each written before the next action:

``intent``     written *before* sbatch: the attempt's token, cluster, the
               checkpoint it resumes from.  After a crash, an intent without a
               job id is reconciled by looking for its token in Slurm (each
               job's comment carries it): found -> ``submitted``; not found ->
               submitted now.  So a restart is neither lost nor made twice.
``submitted``  Slurm's job id is known; the daemon polls it.
``finished``   Slurm's final state, exit status, signal, nodes and reason.
``decided``    the policy's decision (restart or stop, cause, reason).

A submitted attempt the daemon ends itself (it stopped making progress) gets
``ended_by`` first, then its ``scancel``: the cancel that follows is then the
daemon's, restarted like a failure, never taken for a person's.

Only one daemon may work on a journal at a time (:meth:`Journal.exclusive`).
"""

import json
import os
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from slurmkit.errors import SlurmkitError
from slurmkit.statedb import check_schema, open_db, transaction

SCHEMA_VERSION = 2
# What each version added to the one before, for journals written by an older slurmkit.
_MIGRATIONS = {2: ("ALTER TABLE attempts ADD COLUMN ended_by TEXT NOT NULL DEFAULT ''",
                    "ALTER TABLE attempts ADD COLUMN progress TEXT NOT NULL DEFAULT ''",
                    "ALTER TABLE attempts ADD COLUMN progress_since REAL")}

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tracked (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    site TEXT NOT NULL,
    cluster TEXT NOT NULL,
    partition TEXT,
    spec TEXT NOT NULL,                 -- JSON: the job as submitted (JobSpec fields)
    checkpoint_dir TEXT NOT NULL,
    shared_clusters TEXT NOT NULL DEFAULT '[]',   -- JSON: clusters that see checkpoint_dir too
    budget TEXT NOT NULL DEFAULT '{}',  -- JSON: policy.Budget overrides
    state TEXT NOT NULL DEFAULT 'active',         -- active | completed | stopped
    reason TEXT NOT NULL DEFAULT '',
    excluded TEXT NOT NULL DEFAULT '[]',          -- JSON: nodes kept off the next attempts, oldest first
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS attempts (
    id INTEGER PRIMARY KEY,
    tracked_id INTEGER NOT NULL REFERENCES tracked(id),
    number INTEGER NOT NULL,
    token TEXT NOT NULL UNIQUE,
    cluster TEXT NOT NULL,
    job_id TEXT,
    phase TEXT NOT NULL,                -- intent | submitted | finished | decided
    state TEXT NOT NULL DEFAULT '',
    exit_code INTEGER,
    signal INTEGER,
    nodes TEXT NOT NULL DEFAULT '',
    reason TEXT NOT NULL DEFAULT '',
    resume_from TEXT,
    resume_step INTEGER,
    started_at REAL,
    ended_at REAL,
    not_before REAL NOT NULL DEFAULT 0, -- backoff: do not submit before this time
    cause TEXT NOT NULL DEFAULT '',
    decision TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    updated REAL NOT NULL,
    ended_by TEXT NOT NULL DEFAULT '',  -- why the daemon cancelled it itself (policy.HUNG_MARK ...)
    progress TEXT NOT NULL DEFAULT '',  -- the running attempt's last progress marker (daemon.progress_marker)
    progress_since REAL,                -- when a daemon first saw that marker (its own clock)
    UNIQUE (tracked_id, number)
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY,
    tracked_id INTEGER NOT NULL REFERENCES tracked(id),
    at REAL NOT NULL,
    message TEXT NOT NULL
);
"""


def default_path() -> str:
    from slurmkit.cache import state_dir

    return os.path.join(state_dir(), "requeue.db")


@dataclass
class Attempt:
    id: int
    tracked_id: int
    number: int
    token: str
    cluster: str
    job_id: Optional[str]
    phase: str
    state: str = ""
    exit_code: Optional[int] = None
    signal: Optional[int] = None
    nodes: str = ""
    reason: str = ""
    resume_from: Optional[str] = None
    resume_step: Optional[int] = None
    started_at: Optional[float] = None
    ended_at: Optional[float] = None
    not_before: float = 0.0
    cause: str = ""
    decision: str = ""
    created: float = 0.0
    updated: float = 0.0
    ended_by: str = ""
    progress: str = ""
    progress_since: Optional[float] = None

    def to_dict(self):
        return dict(self.__dict__)


@dataclass
class Tracked:
    id: int
    name: str
    site: str
    cluster: str
    partition: Optional[str]
    spec: dict
    checkpoint_dir: str
    shared_clusters: List[str]
    budget: dict
    state: str
    reason: str
    excluded: List[str]
    created: float
    updated: float
    attempts: List[Attempt] = field(default_factory=list)
    events: List[dict] = field(default_factory=list)

    @property
    def current(self) -> Optional[Attempt]:
        return self.attempts[-1] if self.attempts else None

    def to_dict(self):
        data = {k: v for k, v in self.__dict__.items() if k not in ("attempts", "events")}
        data["attempts"] = [a.to_dict() for a in self.attempts]
        data["events"] = list(self.events)
        return data


_JSON_COLUMNS = {"spec", "shared_clusters", "budget", "excluded"}


class Journal:
    """The SQLite journal; every public method is one transaction."""

    def __init__(self, path: Optional[str] = None, clock=time):
        self.path = path or default_path()
        self.clock = clock
        self.db = open_db(self.path, SCHEMA, synchronous="FULL")   # a committed step survives power loss too
        self.db.row_factory = sqlite3.Row
        check_schema(self.db, SCHEMA_VERSION, "requeue journal", self.path, _MIGRATIONS)
        self._lock_fd = None

    def close(self):
        self.db.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _tx(self):
        return transaction(self.db)

    # -- one daemon per journal -------------------------------------------------

    def exclusive(self) -> None:
        """Take the daemon lock for this journal for the life of the process, or fail saying who holds it."""
        from slurmkit import filelock

        path = self.path + ".lock"
        fd = filelock.lock_path(path)
        if fd is None:
            raise SlurmkitError("another slurmkit daemon (pid %s) is already working on %s; stop it first or use "
                                "another journal" % (filelock.holder(path), self.path))
        filelock.claim(fd, str(os.getpid()))
        self._lock_fd = fd

    # -- writing ----------------------------------------------------------------

    def track(self, *, name: str, site: str, cluster: str, partition: Optional[str], spec: dict,
              checkpoint_dir: str, shared_clusters=(), budget: Optional[dict] = None) -> int:
        now = self.clock.time()
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO tracked (name, site, cluster, partition, spec, checkpoint_dir, shared_clusters, budget,"
                " created, updated) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (name, site, cluster, partition, json.dumps(spec, sort_keys=True), checkpoint_dir,
                 json.dumps(list(shared_clusters)), json.dumps(budget or {}), now, now))
            return int(cur.lastrowid)

    def begin_attempt(self, tracked_id: int, number: int, token: str, cluster: str,
                      resume_from: Optional[str] = None, resume_step: Optional[int] = None,
                      not_before: float = 0.0) -> int:
        """Write the intent to submit attempt ``number`` (before sbatch runs)."""
        now = self.clock.time()
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO attempts (tracked_id, number, token, cluster, phase, resume_from, resume_step, "
                "not_before, created, updated) VALUES (?,?,?,?, 'intent', ?,?,?,?,?)",
                (tracked_id, number, token, cluster, resume_from, resume_step, not_before, now, now))
            db.execute("UPDATE tracked SET updated=? WHERE id=?", (now, tracked_id))
            return int(cur.lastrowid)

    def submitted(self, attempt_id: int, job_id: str, cluster: Optional[str] = None) -> None:
        with self._tx() as db:
            db.execute("UPDATE attempts SET job_id=?, phase='submitted', cluster=COALESCE(?, cluster), updated=? "
                       "WHERE id=? AND phase='intent'", (str(job_id), cluster, self.clock.time(), attempt_id))

    def observed(self, attempt_id: int, *, state: str, nodes: str = "", started_at=None) -> None:
        """A live attempt's current state (running, its nodes): shown by ``slurmkit daemon jobs``."""
        with self._tx() as db:
            db.execute("UPDATE attempts SET state=?, nodes=CASE WHEN ?='' THEN nodes ELSE ? END, "
                       "started_at=COALESCE(?, started_at), updated=? WHERE id=? AND phase='submitted'",
                       (state, nodes, nodes, started_at, self.clock.time(), attempt_id))

    def progressed(self, changes) -> None:
        """Running attempts whose progress marker changed: (attempt id, marker, seen at), in one transaction."""
        if not changes:
            return
        with self._tx() as db:
            db.executemany("UPDATE attempts SET progress=?, progress_since=? WHERE id=? AND phase='submitted'",
                           [(marker, since, attempt_id) for attempt_id, marker, since in changes])

    def end_as_hung(self, attempt_id: int, why: str) -> None:
        """Mark a live attempt as ended by the daemon (``why``: policy.HUNG_MARK ...), before its scancel."""
        with self._tx() as db:
            db.execute("UPDATE attempts SET ended_by=?, updated=? WHERE id=? AND phase='submitted' AND ended_by=''",
                       (why, self.clock.time(), attempt_id))

    def finished(self, attempt_id: int, *, state: str, exit_code=None, signal=None, nodes: str = "",
                 reason: str = "", started_at=None, ended_at=None) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE attempts SET phase='finished', state=?, exit_code=?, signal=?, "
                "nodes=CASE WHEN ?='' THEN nodes ELSE ? END, reason=?, started_at=COALESCE(?, started_at), "
                "ended_at=?, updated=? WHERE id=? AND phase='submitted'",
                (state, exit_code, signal, nodes, nodes, reason, started_at, ended_at, self.clock.time(), attempt_id))

    def decided(self, attempt_id: int, *, cause: str, decision: str, stop_state: Optional[str] = None,
                exclude=()) -> None:
        """Record the policy's decision; ``stop_state`` ends tracking (completed or stopped)."""
        now = self.clock.time()
        with self._tx() as db:
            row = db.execute("SELECT tracked_id FROM attempts WHERE id=?", (attempt_id,)).fetchone()
            db.execute("UPDATE attempts SET phase='decided', cause=?, decision=?, updated=? WHERE id=?",
                       (cause, decision, now, attempt_id))
            if exclude:
                old = json.loads(db.execute("SELECT excluded FROM tracked WHERE id=?",
                                            (row["tracked_id"],)).fetchone()[0])
                db.execute("UPDATE tracked SET excluded=? WHERE id=?",
                           (json.dumps(old + [n for n in exclude if n not in old]), row["tracked_id"]))
            if stop_state:
                db.execute("UPDATE tracked SET state=?, reason=?, updated=? WHERE id=?",
                           (stop_state, decision, now, row["tracked_id"]))
            else:
                db.execute("UPDATE tracked SET reason=?, updated=? WHERE id=?", (decision, now, row["tracked_id"]))

    def decide_and_plan(self, attempt_id: int, *, cause: str, decision: str, exclude=(), next_number: int,
                        token: str, cluster: str, resume_from: Optional[str], resume_step: Optional[int],
                        not_before: float) -> int:
        """Record a restart decision and the next attempt's intent in one transaction.

        A crash can therefore never leave a decided restart without its intent.
        """
        now = self.clock.time()
        with self._tx() as db:
            row = db.execute("SELECT tracked_id FROM attempts WHERE id=? AND phase='finished'",
                             (attempt_id,)).fetchone()
            if row is None:
                raise SlurmkitError("attempt %d is not waiting for a decision" % attempt_id)
            tracked_id = row["tracked_id"]
            db.execute("UPDATE attempts SET phase='decided', cause=?, decision=?, updated=? WHERE id=?",
                       (cause, decision, now, attempt_id))
            old = json.loads(db.execute("SELECT excluded FROM tracked WHERE id=?", (tracked_id,)).fetchone()[0])
            db.execute("UPDATE tracked SET excluded=?, reason=?, updated=? WHERE id=?",
                       (json.dumps(old + [n for n in exclude if n not in old]), decision, now, tracked_id))
            cur = db.execute(
                "INSERT INTO attempts (tracked_id, number, token, cluster, phase, resume_from, resume_step, "
                "not_before, created, updated) VALUES (?,?,?,?, 'intent', ?,?,?,?,?)",
                (tracked_id, next_number, token, cluster, resume_from, resume_step, not_before, now, now))
            return int(cur.lastrowid)

    def stop(self, tracked_id: int, reason: str, state: str = "stopped") -> None:
        with self._tx() as db:
            db.execute("UPDATE tracked SET state=?, reason=?, updated=? WHERE id=?",
                       (state, reason, self.clock.time(), tracked_id))

    def event(self, tracked_id: int, message: str) -> None:
        with self._tx() as db:
            db.execute("INSERT INTO events (tracked_id, at, message) VALUES (?,?,?)",
                       (tracked_id, self.clock.time(), message))

    def track_submitted(self, jobs: List[dict]) -> List[int]:
        """Register jobs whose first attempt Slurm already has (a sweep's array tasks), in one transaction.

        Each dict holds :meth:`track`'s keyword arguments plus ``token``,
        ``job_id`` (and the attempt's cluster is the job's).  One transaction
        for all: a sweep registers thousands of tasks at once.
        """
        now = self.clock.time()
        ids = []
        with self._tx() as db:
            for job in jobs:
                cur = db.execute(
                    "INSERT INTO tracked (name, site, cluster, partition, spec, checkpoint_dir, shared_clusters, "
                    "budget, created, updated) VALUES (?,?,?,?,?,?,?,?,?,?)",
                    (job["name"], job["site"], job["cluster"], job["partition"], json.dumps(job["spec"], sort_keys=True),
                     job["checkpoint_dir"], json.dumps(list(job.get("shared_clusters", ()))),
                     json.dumps(job.get("budget") or {}), now, now))
                tracked_id = int(cur.lastrowid)
                db.execute("INSERT INTO attempts (tracked_id, number, token, cluster, job_id, phase, created, updated) "
                           "VALUES (?, 1, ?, ?, ?, 'submitted', ?, ?)",
                           (tracked_id, job["token"], job["cluster"], str(job["job_id"]), now, now))
                ids.append(tracked_id)
        return ids

    def stop_many(self, tracked_ids, reason: str) -> None:
        """End tracking of these jobs (those still active), in one transaction."""
        now = self.clock.time()
        with self._tx() as db:
            db.executemany("UPDATE tracked SET state='stopped', reason=?, updated=? WHERE id=? AND state='active'",
                           [(reason, now, int(i)) for i in tracked_ids])

    # -- reading ----------------------------------------------------------------

    @staticmethod
    def _tracked(row) -> Tracked:
        values = {k: (json.loads(row[k]) if k in _JSON_COLUMNS else row[k]) for k in row.keys()}
        return Tracked(**values)

    def jobs(self, state: Optional[str] = None, ids=None) -> List[Tracked]:
        """Tracked jobs with their attempts and events, oldest first (one read transaction)."""
        query, args = "SELECT * FROM tracked", []
        where = []
        if state:
            where.append("state=?")
            args.append(state)
        if ids:
            where.append("id IN (%s)" % ",".join("?" * len(ids)))
            args.extend(int(i) for i in ids)
        if where:
            query += " WHERE " + " AND ".join(where)
        self.db.execute("BEGIN")
        try:
            tracked = {r["id"]: self._tracked(r) for r in self.db.execute(query + " ORDER BY id", args)}
            if tracked:
                marks = ",".join("?" * len(tracked))
                for r in self.db.execute("SELECT * FROM attempts WHERE tracked_id IN (%s) ORDER BY number"
                                         % marks, list(tracked)):
                    tracked[r["tracked_id"]].attempts.append(Attempt(**dict(r)))
                for r in self.db.execute("SELECT * FROM events WHERE tracked_id IN (%s) ORDER BY id"
                                         % marks, list(tracked)):
                    tracked[r["tracked_id"]].events.append({"at": r["at"], "message": r["message"]})
        finally:
            self.db.execute("COMMIT")
        return list(tracked.values())

    def job(self, tracked_id: int) -> Tracked:
        found = self.jobs(ids=[tracked_id])
        if not found:
            raise SlurmkitError("no tracked job %s in %s; `slurmkit daemon jobs` lists them" % (tracked_id, self.path))
        return found[0]

    def counts(self) -> Dict[str, int]:
        return {r[0]: r[1] for r in self.db.execute("SELECT state, COUNT(*) FROM tracked GROUP BY state")}
