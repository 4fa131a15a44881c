"""textfile: bounded reads of configuration files, atomic replacement of small state files."""

import os
import stat
import threading

import pytest

from slurmkit import textfile


def test_write_atomic_replaces_the_file_with_exactly_the_mode_asked_for(tmp_path):
    path = tmp_path / "state.json"
    path.write_text("old")
    old_umask = os.umask(0o077)
    try:
        textfile.write_atomic(path, "new ünï\n", mode=0o644)
    finally:
        os.umask(old_umask)
    assert path.read_text(encoding="utf-8") == "new ünï\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    textfile.write_atomic(path, "private", mode=0o600, fsync=True)
    assert path.read_text() == "private" and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["state.json"]           # no temporary file left


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary_one(tmp_path):
    path = tmp_path / "state.json"
    path.write_text("old")
    with pytest.raises(TypeError):
        textfile.write_atomic(path, None)                          # fails after the temporary file exists
    (tmp_path / "into-a-directory").mkdir()
    with pytest.raises(OSError):
        textfile.write_atomic(tmp_path / "into-a-directory", "x")  # the rename fails
    assert path.read_text() == "old" and sorted(os.listdir(tmp_path)) == ["into-a-directory", "state.json"]
    with pytest.raises(OSError):
        textfile.write_atomic(tmp_path / "no-such-dir" / "f", "x")


def test_without_replace_a_new_file_is_published_whole_and_an_existing_one_is_kept(tmp_path):
    path = tmp_path / "draft.yaml"
    textfile.write_atomic(path, "first\n", replace=False)
    assert path.read_text() == "first\n" and stat.S_IMODE(path.stat().st_mode) == 0o644
    with pytest.raises(FileExistsError):
        textfile.write_atomic(path, "second\n", replace=False)
    assert path.read_text() == "first\n"
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")            # a dangling link is a name that exists
    with pytest.raises(FileExistsError):
        textfile.write_atomic(tmp_path / "link", "x", replace=False)
    assert not (tmp_path / "elsewhere").exists()
    assert sorted(os.listdir(tmp_path)) == ["draft.yaml", "link"]     # no temporary file left


def test_threads_writing_one_file_at_once_never_leave_part_of_one(tmp_path):
    path = tmp_path / "shared"
    texts = ["%d" % i * 20000 for i in range(8)]
    seen, errors = [], []

    def write(text):
        try:
            for _ in range(20):
                textfile.write_atomic(path, text)
        except Exception as exc:       # noqa: BLE001 (reported below)
            errors.append(exc)

    def read():
        for _ in range(200):
            if path.exists():
                seen.append(path.read_text())

    threads = [threading.Thread(target=write, args=(t,)) for t in texts] + [threading.Thread(target=read)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and seen and all(s in texts for s in seen)
    assert path.read_text() in texts and sorted(os.listdir(tmp_path)) == ["shared"]
