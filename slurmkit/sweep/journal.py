"""The sweep journal: every sweep, its points, its arrays and what Slurm last said of each task.

One SQLite file per user (``sweeps.db`` in the state directory of the
requeue journal: ``$SLURMKIT_STATE_DIR``, else ``$XDG_STATE_HOME/slurmkit``,
else ``~/.local/state/slurmkit``), in WAL mode, every change one
transaction.  An array goes through phases, each written before the next
action, as the requeue journal's attempts do:

``intent``     written *before* sbatch: its token (also in the job's
               ``--comment``), cluster, indices and the points table.  After a
               crash an intent is reconciled by looking for its token in Slurm.
``submitted``  Slurm's id is known; its points now point at it.
``refused``    sbatch refused it (or it was never created): its points keep
               their earlier placement.

A point's *placement* is the array and index that last ran (or runs) it.  A
rerun through ``scontrol requeue`` keeps it; a rerun as a sparse array moves
it to the new array at the *same index*, running the same points table
(``table_of``), so a point is never renumbered.
"""

import json
import os
import time
from contextlib import contextmanager
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from slurmkit.errors import SlurmkitError
from slurmkit.statedb import check_schema, open_db, transaction

SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sweeps (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    site TEXT NOT NULL,
    sweep_dir TEXT NOT NULL,
    params TEXT NOT NULL,               -- JSON: parameter names, in order
    command TEXT NOT NULL,              -- JSON: the command, placeholders and all
    spec TEXT NOT NULL,                 -- JSON: the job options of the latest submission
    max_running INTEGER,
    canary INTEGER,
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS arrays (
    id INTEGER PRIMARY KEY,
    sweep_id TEXT NOT NULL REFERENCES sweeps(id),
    cluster TEXT NOT NULL,
    partition TEXT NOT NULL,
    token TEXT NOT NULL UNIQUE,
    job_id TEXT,
    phase TEXT NOT NULL,                -- intent | submitted | refused
    indices TEXT NOT NULL,              -- the --array indices submitted (no throttle)
    throttle INTEGER,
    table_of INTEGER,                   -- NULL: its own points table; else the array whose table it runs
    accounting INTEGER NOT NULL DEFAULT 0,
    canary INTEGER NOT NULL DEFAULT 0,  -- K: started at throttle 1 (see slurmkit.sweep.script)
    note TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS rows (
    table_id INTEGER NOT NULL REFERENCES arrays(id),
    idx INTEGER NOT NULL,
    point_id TEXT NOT NULL,
    PRIMARY KEY (table_id, idx)
);
CREATE TABLE IF NOT EXISTS points (
    sweep_id TEXT NOT NULL REFERENCES sweeps(id),
    point_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    vals TEXT NOT NULL,                 -- JSON: [[name, value], ...]
    array_id INTEGER REFERENCES arrays(id),
    idx INTEGER,
    state TEXT NOT NULL DEFAULT 'UNSUBMITTED',
    exit_code INTEGER,
    signal INTEGER,
    reason TEXT NOT NULL DEFAULT '',
    nodes TEXT NOT NULL DEFAULT '',
    task_job_id TEXT,
    restarts INTEGER NOT NULL DEFAULT 0,
    updated REAL NOT NULL,
    PRIMARY KEY (sweep_id, point_id)
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY,
    sweep_id TEXT NOT NULL,
    at REAL NOT NULL,
    message TEXT NOT NULL
);
"""


class SweepBusy(SlurmkitError):
    """Another command holds the sweep's lock (a submission, rerun or cancel in progress)."""


def default_path() -> str:
    from slurmkit.cache import state_dir

    return os.path.join(state_dir(), "sweeps.db")


class SweepRecord(NamedTuple):
    id: str
    name: str
    site: str
    sweep_dir: str
    params: List[str]
    command: List[str]
    spec: dict
    max_running: Optional[int]
    canary: Optional[int]
    created: float
    updated: float


class ArrayRecord(NamedTuple):
    id: int
    sweep_id: str
    cluster: str
    partition: str
    token: str
    job_id: Optional[str]
    phase: str
    indices: str
    throttle: Optional[int]
    table_of: Optional[int]
    accounting: int
    canary: int
    note: str
    created: float
    updated: float

    @property
    def table_id(self) -> int:
        """The array whose points table this one runs (itself for a first submission)."""
        return self.table_of if self.table_of is not None else self.id


class PointRecord(NamedTuple):
    sweep_id: str
    point_id: str
    position: int
    vals: List[Tuple[str, str]]
    array_id: Optional[int]
    idx: Optional[int]
    state: str
    exit_code: Optional[int]
    signal: Optional[int]
    reason: str
    nodes: str
    task_job_id: Optional[str]
    restarts: int
    updated: float

    @property
    def values(self) -> Dict[str, str]:
        return dict(self.vals)


class StateUpdate(NamedTuple):
    point_id: str
    state: str
    exit_code: Optional[int] = None
    signal: Optional[int] = None
    reason: str = ""
    nodes: str = ""
    task_job_id: Optional[str] = None
    restarts: int = 0


class Journal:
    """The SQLite sweep journal; every public method is one transaction."""

    def __init__(self, path: Optional[str] = None, clock=time):
        self.path = path or default_path()
        self.clock = clock
        self.db = open_db(self.path, SCHEMA, synchronous="NORMAL")   # with WAL: survives a crash of the process
        check_schema(self.db, SCHEMA_VERSION, "sweep journal", self.path)

    def close(self):
        self.db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _tx(self):
        return transaction(self.db)

    @contextmanager
    def locked(self, sweep_id: str, wait: float = 60.0):
        """One submission, rerun or cancel of a sweep at a time (flock, per sweep, this machine):
        two at once could both decide that a point still needs to run."""
        from slurmkit.filelock import lock_path

        fd = lock_path("%s.%s.lock" % (self.path, sweep_id), wait, poll=0.05)
        if fd is None:
            raise SweepBusy("another slurmkit command is still working on sweep %s after %.0fs; "
                            "try again when it is done" % (sweep_id, wait))
        try:
            yield
        finally:
            os.close(fd)

    # -- sweeps ---------------------------------------------------------------------

    def save_sweep(self, *, sweep_id: str, name: str, site: str, sweep_dir: str, params: Sequence[str],
                   command: Sequence[str], spec: dict, max_running: Optional[int], canary: Optional[int]) -> None:
        """Create the sweep, or record the options of a new submission of it (parameters merge)."""
        now = self.clock.time()
        with self._tx() as db:
            row = db.execute("SELECT params FROM sweeps WHERE id=?", (sweep_id,)).fetchone()
            if row is None:
                db.execute("INSERT INTO sweeps (id, name, site, sweep_dir, params, command, spec, max_running, canary,"
                           " created, updated) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                           (sweep_id, name, site, sweep_dir, json.dumps(list(params)), json.dumps(list(command)),
                            json.dumps(spec, sort_keys=True), max_running, canary, now, now))
            else:
                old = json.loads(row[0])
                merged = old + [p for p in params if p not in old]
                db.execute("UPDATE sweeps SET site=?, params=?, spec=?, max_running=?, canary=?, updated=? WHERE id=?",
                           (site, json.dumps(merged), json.dumps(spec, sort_keys=True), max_running, canary, now,
                            sweep_id))

    def sweep(self, sweep_id: str) -> Optional[SweepRecord]:
        row = self.db.execute("SELECT * FROM sweeps WHERE id=?", (sweep_id,)).fetchone()
        return self._sweep(row) if row else None

    def find(self, text: str) -> SweepRecord:
        """A sweep by its id, or by a unique prefix of it; SlurmkitError naming the choices otherwise."""
        found = self.sweep(text)
        if found:
            return found
        rows = self.db.execute("SELECT * FROM sweeps WHERE id LIKE ? ESCAPE '\\' ORDER BY created",
                               (text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%",)).fetchall()
        if len(rows) == 1:
            return self._sweep(rows[0])
        if rows:
            raise SlurmkitError("sweep %r is ambiguous: %s" % (text, ", ".join(r[0] for r in rows[:10])))
        recent = [r[0] for r in self.db.execute("SELECT id FROM sweeps ORDER BY updated DESC LIMIT 5")]
        raise SlurmkitError("no sweep %r in %s%s" % (text, self.path, "; recent: " + ", ".join(recent) if recent
                                                    else "; 'slurmkit sweep list' lists them"))

    def sweeps(self) -> List[SweepRecord]:
        return [self._sweep(r) for r in self.db.execute("SELECT * FROM sweeps ORDER BY created")]

    @staticmethod
    def _sweep(row) -> SweepRecord:
        (sid, name, site, sweep_dir, params, command, spec, max_running, canary, created, updated) = row
        return SweepRecord(sid, name, site, sweep_dir, json.loads(params), json.loads(command), json.loads(spec),
                           max_running, canary, created, updated)

    # -- points ---------------------------------------------------------------------

    def add_points(self, sweep_id: str, points) -> int:
        """Add the points not in the sweep yet (``slurmkit.sweep.points.Point``); returns how many were new."""
        now = self.clock.time()
        with self._tx() as db:
            start = db.execute("SELECT COALESCE(MAX(position), -1) + 1 FROM points WHERE sweep_id=?",
                               (sweep_id,)).fetchone()[0]
            known = {r[0] for r in db.execute("SELECT point_id FROM points WHERE sweep_id=?", (sweep_id,))}
            new = [p for p in points if p.id not in known]
            db.executemany("INSERT INTO points (sweep_id, point_id, position, vals, updated) VALUES (?,?,?,?,?)",
                           [(sweep_id, p.id, start + i, json.dumps([list(kv) for kv in p.values]), now)
                            for i, p in enumerate(new)])
            return len(new)

    def points(self, sweep_id: str) -> List[PointRecord]:
        out = []
        for r in self.db.execute("SELECT * FROM points WHERE sweep_id=? ORDER BY position", (sweep_id,)):
            values = list(r)
            values[3] = [tuple(kv) for kv in json.loads(values[3])]
            out.append(PointRecord(*values))
        return out

    def record_states(self, sweep_id: str, updates: Sequence[StateUpdate]) -> None:
        if not updates:
            return
        now = self.clock.time()
        with self._tx() as db:
            db.executemany(
                "UPDATE points SET state=?, exit_code=?, signal=?, reason=?, nodes=?, "
                "task_job_id=COALESCE(?, task_job_id), restarts=?, updated=? WHERE sweep_id=? AND point_id=?",
                [(u.state, u.exit_code, u.signal, u.reason, u.nodes, u.task_job_id, u.restarts, now, sweep_id,
                  u.point_id) for u in updates])

    # -- arrays ---------------------------------------------------------------------

    def begin_array(self, *, sweep_id: str, cluster: str, partition: str, token: str, indices: str,
                    throttle: Optional[int], accounting: bool, table_of: Optional[int] = None,
                    rows: Sequence[Tuple[int, str]] = (), canary: int = 0) -> int:
        """Write an array's intent (before sbatch); ``rows`` is its own points table (index, point id),
        or ``table_of`` names the array whose table it runs again."""
        if (table_of is None) == (not rows):
            raise ValueError("an array has either its own rows or the table of another array")
        now = self.clock.time()
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO arrays (sweep_id, cluster, partition, token, phase, indices, throttle, table_of, "
                "accounting, canary, created, updated) VALUES (?,?,?,?, 'intent', ?,?,?,?,?,?,?)",
                (sweep_id, cluster, partition, token, indices, throttle, table_of, int(bool(accounting)), int(canary),
                 now, now))
            array_id = int(cur.lastrowid)
            db.executemany("INSERT INTO rows (table_id, idx, point_id) VALUES (?,?,?)",
                           [(array_id, int(i), p) for i, p in rows])
            return array_id

    def submitted(self, array_id: int, job_id: str) -> None:
        """The array exists in Slurm as ``job_id``: its points now run there (pending)."""
        from slurmkit.slurm.parsers import parse_array_indices

        now = self.clock.time()
        with self._tx() as db:
            row = db.execute("SELECT sweep_id, indices, table_of FROM arrays WHERE id=?", (array_id,)).fetchone()
            sweep_id, indices, table_of = row
            db.execute("UPDATE arrays SET job_id=?, phase='submitted', updated=? WHERE id=?",
                       (str(job_id), now, array_id))
            table = table_of if table_of is not None else array_id
            wanted = set(parse_array_indices(indices))
            placed = [(array_id, idx, now, sweep_id, point_id) for idx, point_id
                      in db.execute("SELECT idx, point_id FROM rows WHERE table_id=?", (table,)).fetchall()
                      if idx in wanted]
            db.executemany("UPDATE points SET array_id=?, idx=?, state='PENDING', exit_code=NULL, signal=NULL, "
                           "reason='', nodes='', task_job_id=NULL, restarts=0, updated=? "
                           "WHERE sweep_id=? AND point_id=?", placed)

    def refused(self, array_id: int, note: str) -> None:
        with self._tx() as db:
            db.execute("UPDATE arrays SET phase='refused', note=?, updated=? WHERE id=?", (note, self.clock.time(), array_id))

    def set_throttle(self, array_id: int, throttle: Optional[int]) -> None:
        with self._tx() as db:
            db.execute("UPDATE arrays SET throttle=?, updated=? WHERE id=?", (throttle, self.clock.time(), array_id))

    def arrays(self, sweep_id: str) -> List[ArrayRecord]:
        return [ArrayRecord(*r) for r in self.db.execute("SELECT * FROM arrays WHERE sweep_id=? ORDER BY id",
                                                         (sweep_id,))]

    def rows(self, table_id: int) -> Dict[int, str]:
        """An array's points table: {index: point id}."""
        return {int(i): p for i, p in self.db.execute("SELECT idx, point_id FROM rows WHERE table_id=?", (table_id,))}

    # -- events ---------------------------------------------------------------------

    def event(self, sweep_id: str, message: str) -> None:
        with self._tx() as db:
            db.execute("INSERT INTO events (sweep_id, at, message) VALUES (?,?,?)", (sweep_id, self.clock.time(), message))

    def events(self, sweep_id: str) -> List[Tuple[float, str]]:
        return [(at, m) for at, m in self.db.execute("SELECT at, message FROM events WHERE sweep_id=? ORDER BY id",
                                                     (sweep_id,))]
