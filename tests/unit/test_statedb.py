"""slurmkit.statedb: the one way the requeue and sweep journals open and write their SQLite files."""

import os
import stat

import pytest

from slurmkit import statedb
from slurmkit.requeue.journal import Journal as RequeueJournal
from slurmkit.sweep.journal import Journal as SweepJournal


@pytest.mark.parametrize("journal_class,synchronous", [(RequeueJournal, 2), (SweepJournal, 1)])
def test_each_journal_keeps_its_synchronous_level_in_a_private_wal_file(tmp_path, journal_class, synchronous):
    """The requeue journal FULL (a committed restart survives power loss), the sweep journal NORMAL."""
    path = tmp_path / "state" / "journal.db"
    journal = journal_class(str(path))
    try:
        assert journal.db.execute("PRAGMA synchronous").fetchone()[0] == synchronous
        assert journal.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert journal.db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    finally:
        journal.close()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700


def test_a_transaction_is_committed_whole_or_rolled_back_whole(tmp_path):
    db = statedb.open_db(str(tmp_path / "t.db"), "CREATE TABLE IF NOT EXISTS t (v INTEGER);", synchronous="NORMAL")
    with statedb.transaction(db):
        db.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(RuntimeError):
        with statedb.transaction(db):
            db.execute("INSERT INTO t VALUES (2)")
            raise RuntimeError("interrupted between two writes")
    assert [r[0] for r in db.execute("SELECT v FROM t")] == [1]
    with pytest.raises(KeyError):
        statedb.open_db(str(tmp_path / "u.db"), "", synchronous="OFF")      # only the two levels the journals use
    db.close()
