"""The flock wait with a deadline, and the two locks built on it (submission token, sweep)."""

import os
import time

import pytest

from slurmkit.errors import SlurmkitError
from slurmkit.filelock import flock_until
from slurmkit.jobs import token_lock
from slurmkit.sweep.journal import Journal, SweepBusy


def _open(path):
    return os.open(str(path), os.O_RDWR | os.O_CREAT, 0o600)


def test_a_free_lock_is_taken_at_once_and_a_held_one_times_out_at_its_deadline(tmp_path):
    first, second = _open(tmp_path / "l"), _open(tmp_path / "l")   # two open file descriptions
    try:
        assert flock_until(first, time.monotonic() + 5)
        start = time.monotonic()
        assert not flock_until(second, start + 0.3, poll=0.02)
        assert 0.3 <= time.monotonic() - start < 3
        os.close(first)
        first = None
        assert flock_until(second, time.monotonic() + 1)            # released: taken
    finally:
        for fd in (first, second):
            if fd is not None:
                os.close(fd)


def test_a_second_submission_with_the_same_token_gives_up_with_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("SLURMKIT_CACHE_DIR", raising=False)
    with token_lock("alpha", "tok1", wait=5):
        with pytest.raises(SlurmkitError, match="another submission with token tok1 to cluster alpha is still running"):
            with token_lock("alpha", "tok1", wait=0.2):
                pass
        with token_lock("alpha", "tok2", wait=0.2):                 # another token is not held up
            pass


def test_a_sweep_held_by_another_command_is_busy_after_the_wait(tmp_path):
    journal = Journal(str(tmp_path / "state" / "sweeps.db"))
    other = Journal(journal.path)
    try:
        with journal.locked("sw1"):
            with pytest.raises(SweepBusy, match="still working on sweep sw1 after 0s"):
                with other.locked("sw1", wait=0.2):
                    pass
        with other.locked("sw1", wait=0.2):                          # released: taken
            pass
    finally:
        journal.close()
        other.close()


def test_lock_path_tries_once_waits_or_blocks_and_the_holder_says_who_it_is(tmp_path):
    from slurmkit import filelock

    path = str(tmp_path / "daemon.lock")
    held = filelock.lock_path(path)
    assert held is not None
    try:
        filelock.claim(held, "pid 4242 since then")
        start = time.monotonic()
        assert filelock.lock_path(path) is None and time.monotonic() - start < 1       # one try
        assert filelock.lock_path(path, 0.3) is None and time.monotonic() - start >= 0.3
        assert filelock.holder(path) == "pid 4242 since then"
        filelock.claim(held, "pid 7")                                                  # shorter: no old tail
        assert filelock.holder(path) == "pid 7"
    finally:
        os.close(held)
    again = filelock.lock_path(path, wait=None)                                        # free: taken at once
    assert again is not None
    os.close(again)
    assert filelock.holder(str(tmp_path / "none")) == "another process"


def test_a_second_requeue_daemon_on_one_journal_is_refused_naming_the_first(tmp_path):
    from slurmkit.requeue.journal import Journal as RequeueJournal

    first, second = RequeueJournal(str(tmp_path / "j.db")), RequeueJournal(str(tmp_path / "j.db"))
    try:
        first.exclusive()
        with pytest.raises(SlurmkitError, match=r"another slurmkit daemon \(pid %d\) is already working" % os.getpid()):
            second.exclusive()
    finally:
        first.close()
        second.close()
