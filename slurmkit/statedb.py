"""The SQLite files that keep a user's state (the requeue and sweep journals): one way to open and write them.

Write-ahead logging lets readers (``slurmkit jobs``, ``sweep status``) read
while a writer writes; transactions are opened explicitly with ``BEGIN
IMMEDIATE`` (``isolation_level=None``), so two writers never interleave their
steps and every step is one transaction.  The file is private to the user.
"""

import os
import sqlite3
from contextlib import contextmanager
from typing import Iterator


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
