"""The requeue journal: phases in order, durable across kill -9, one daemon per journal."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from slurmkit.errors import SlurmkitError
from slurmkit.requeue import journal as journal_module
from slurmkit.requeue.journal import Journal
from slurmkit.testing import FakeClock


@pytest.fixture
def journal(tmp_path):
    j = Journal(str(tmp_path / "requeue.db"), clock=FakeClock(epoch=1000.0))
    yield j
    j.close()


def track(journal, **kw):
    values = dict(name="train", site="local", cluster="alpha", partition="gpu",
                  spec={"command": ["python", "train.py"], "nodes": 2}, checkpoint_dir="/ckpt")
    values.update(kw)
    return journal.track(**values)


def test_an_attempt_goes_through_its_phases(journal):
    tid = track(journal)
    aid = journal.begin_attempt(tid, 1, "tok1", "alpha")
    assert journal.job(tid).current.phase == "intent" and journal.job(tid).current.job_id is None
    journal.submitted(aid, "17")
    journal.observed(aid, state="RUNNING", nodes="an[1-2]", started_at=1010.0)
    journal.finished(aid, state="NODE_FAIL", nodes="an[1-2]", reason="NodeDown", ended_at=1100.0)
    journal.decided(aid, cause="node_fail", decision="a node failed; restart", exclude=["an2"])
    job = journal.job(tid)
    a = job.current
    assert (a.phase, a.job_id, a.state, a.nodes, a.started_at, a.ended_at, a.cause) == \
        ("decided", "17", "NODE_FAIL", "an[1-2]", 1010.0, 1100.0, "node_fail")
    assert job.excluded == ["an2"] and job.state == "active" and job.spec["nodes"] == 2


def test_phases_only_move_forward(journal):
    tid = track(journal)
    aid = journal.begin_attempt(tid, 1, "tok1", "alpha")
    journal.finished(aid, state="COMPLETED")             # not submitted yet: ignored
    assert journal.job(tid).current.phase == "intent"
    journal.submitted(aid, "5")
    journal.submitted(aid, "6")                           # a second id never overwrites the first
    assert journal.job(tid).current.job_id == "5"


def test_tokens_and_attempt_numbers_are_unique(journal):
    tid = track(journal)
    journal.begin_attempt(tid, 1, "tok1", "alpha")
    with pytest.raises(Exception):
        journal.begin_attempt(tid, 2, "tok1", "alpha")
    with pytest.raises(Exception):
        journal.begin_attempt(tid, 1, "tok2", "alpha")
    assert len(journal.job(tid).attempts) == 1


def test_stop_and_events(journal):
    tid = track(journal)
    journal.event(tid, "skipped step-000040: marker missing")
    journal.stop(tid, "stopped by the user")
    job = journal.jobs(state="stopped")[0]
    assert job.reason == "stopped by the user" and job.events[0]["message"].startswith("skipped step-000040")
    assert journal.jobs(state="active") == []


def test_a_crash_inside_a_step_leaves_the_journal_as_before(tmp_path):
    path = str(tmp_path / "requeue.db")
    j = Journal(path)
    tid = track(j)
    j.close()
    # Another process starts writing an intent and dies (SIGKILL) before committing.
    code = textwrap.dedent("""
        import os, signal, sys
        from slurmkit.requeue.journal import Journal
        j = Journal(sys.argv[1])
        j.db.execute("BEGIN IMMEDIATE")
        j.db.execute("INSERT INTO attempts (tracked_id, number, token, cluster, phase, created, updated) "
                     "VALUES (?, 1, 'half', 'alpha', 'intent', 0, 0)", (int(sys.argv[2]),))
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", code, path, str(tid)])
    assert proc.returncode == -signal.SIGKILL
    j = Journal(path)
    assert j.job(tid).attempts == []
    # ...and a committed intent survives the same death.
    code = textwrap.dedent("""
        import os, signal, sys
        from slurmkit.requeue.journal import Journal
        Journal(sys.argv[1]).begin_attempt(int(sys.argv[2]), 1, "whole", "alpha")
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", code, path, str(tid)])
    assert proc.returncode == -signal.SIGKILL
    assert [a.token for a in Journal(path).job(tid).attempts] == ["whole"]


def test_one_daemon_per_journal(tmp_path):
    path = str(tmp_path / "requeue.db")
    first = Journal(path)
    first.exclusive()
    code = ("import sys\nfrom slurmkit.requeue.journal import Journal\nfrom slurmkit.errors import SlurmkitError\n"
            "try:\n    Journal(sys.argv[1]).exclusive()\nexcept SlurmkitError as e:\n    print(e); sys.exit(3)\n")
    proc = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True)
    assert proc.returncode == 3 and "pid %d" % os.getpid() in proc.stdout
    first.close()                                       # the lock goes with the process's descriptor
    assert subprocess.run([sys.executable, "-c", code, path]).returncode == 0


def test_readers_see_committed_steps_while_a_writer_holds_the_journal(tmp_path):
    path = str(tmp_path / "requeue.db")
    writer, reader = Journal(path), Journal(path)
    tid = track(writer)
    writer.db.execute("BEGIN IMMEDIATE")
    writer.db.execute("UPDATE tracked SET reason='uncommitted' WHERE id=?", (tid,))
    assert reader.job(tid).reason == ""                 # WAL: no blocking, no dirty read
    writer.db.execute("COMMIT")
    assert reader.job(tid).reason == "uncommitted"


def test_unknown_job_is_an_error(journal):
    with pytest.raises(SlurmkitError, match="no tracked job 42"):
        journal.job(42)


def test_a_journal_of_the_first_schema_is_brought_up_to_date_and_keeps_its_jobs(tmp_path):
    import sqlite3

    path = str(tmp_path / "old.db")
    old = sqlite3.connect(path)
    schema = journal_module.SCHEMA
    for column in ("ended_by TEXT NOT NULL DEFAULT '',", "progress TEXT NOT NULL DEFAULT '',",
                   "progress_since REAL,"):
        start = schema.index(column)
        schema = schema[:start] + schema[schema.index("\n", start) + 1:]
    assert "ended_by" not in schema
    old.executescript(schema)
    old.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    old.execute("INSERT INTO tracked (name, site, cluster, spec, checkpoint_dir, created, updated) "
                "VALUES ('train', 's', 'alpha', '{}', '/c', 1, 1)")
    old.execute("INSERT INTO attempts (tracked_id, number, token, cluster, job_id, phase, created, updated) "
                "VALUES (1, 1, 'tok', 'alpha', '7', 'submitted', 1, 1)")
    old.commit()
    old.close()
    journal = Journal(path)
    try:
        attempt = journal.job(1).attempts[0]
        assert attempt.job_id == "7" and attempt.ended_by == "" and attempt.progress_since is None
        journal.end_as_hung(attempt.id, "hung: test")
        assert journal.job(1).attempts[0].ended_by == "hung: test"
        version = journal.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0]
        assert version == str(journal_module.SCHEMA_VERSION) == "2"
    finally:
        journal.close()
    Journal(path).close()                    # opened again: nothing left to migrate, no error


@pytest.mark.parametrize("kind", ["requeue", "sweep"])
def test_a_journal_a_newer_slurmkit_wrote_is_refused_and_left_as_it_was(tmp_path, kind):
    from slurmkit.errors import SlurmkitError
    from slurmkit.sweep.journal import Journal as SweepJournal

    opener = Journal if kind == "requeue" else SweepJournal
    path = str(tmp_path / "j.db")
    opener(path).close()
    import sqlite3

    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    db.commit()
    db.close()
    with pytest.raises(SlurmkitError, match=r"the %s journal .*j\.db was written by a newer slurmkit \(schema 99\); "
                                            r"upgrade slurmkit" % kind):
        opener(path)
    db = sqlite3.connect(path)
    assert db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == "99"
    db.close()
