"""The SQLite files that keep a user's state (the requeue and sweep journals): one way to open and write them.

Write-ahead logging lets readers (``slurmkit daemon jobs``, ``sweep status``) read
while a writer writes; transactions are opened explicitly with ``BEGIN
IMMEDIATE`` (``isolation_level=None``), so two writers never interleave their
steps and every step is one transaction.  The file is private to the user.
"""

import os
import sqlite3
from contextlib import contextmanager
from typing import Dict, Iterator, Sequence

from slurmkit.errors import SlurmkitError

_VERSION = "SELECT value FROM meta WHERE key='schema_version'"


def open_db(path: str, schema: str, synchronous: str) -> sqlite3.Connection:
    """Open (creating it, 0600, in a 0700 directory) the journal at ``path`` with ``schema`` applied.

    ``synchronous`` is SQLite's: "FULL" makes a committed step survive power loss,
    "NORMAL" (with WAL) a crash of the process.
    """
    os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
    db = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=%s" % {"FULL": "FULL", "NORMAL": "NORMAL"}[synchronous])
    db.execute("PRAGMA foreign_keys=ON")
    db.executescript(schema)     # CREATE ... IF NOT EXISTS: idempotent
    os.chmod(path, 0o600)
    return db


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write step: committed whole, or rolled back whole."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def check_schema(db: sqlite3.Connection, current: int, what: str, path: str,
                 migrations: Dict[int, Sequence[str]] = None) -> None:
    """Record the schema version of a new journal; refuse one a newer slurmkit wrote; bring an older one up
    to ``current`` with ``migrations`` (version -> statements), in one transaction (a crash leaves it old).
    The journal's schema has ``meta(key, value)``."""
    db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(current),))
    version = int(db.execute(_VERSION).fetchone()[0])
    if version > current:
        raise SlurmkitError("the %s %s was written by a newer slurmkit (schema %d); upgrade slurmkit"
                            % (what, path, version))
    if version < current:
        with transaction(db) as tx:
            found = int(tx.execute(_VERSION).fetchone()[0])
            for step in range(found + 1, current + 1):      # another process may have done it meanwhile
                for statement in (migrations or {})[step]:
                    tx.execute(statement)
            tx.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(current),))
