"""slurmkit.checkpoint: atomic publication, and finding the latest complete checkpoint.

Everything here is real filesystem work in tmp_path; crashes are real (a child
process SIGKILLs itself at a chosen point), concurrency is real (a writer
process against a reader in this one).  No torch: the torch side is in
tests/integration/test_example_local.py.
"""

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import zipfile

import pytest

from slurmkit import checkpoint
from slurmkit.checkpoint import MARKER

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write(path, data=b"x" * 100):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def saved(root, step, files=None):
    """A checkpoint published through the helper; returns its path."""
    files = files if files is not None else {"state.pt": b"s%d" % step * 50}
    with checkpoint.checkpoint_dir(root, step) as tmp:
        for name, data in files.items():
            write(os.path.join(tmp, name), data)
    return checkpoint.step_path(root, step)


def leftovers(root):
    return sorted(n for n in os.listdir(root) if n.startswith("."))


# --------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------

def test_published_checkpoint_has_marker_with_step_and_sizes(tmp_path):
    path = saved(tmp_path, 120, {"state.pt": b"a" * 1000, "shards/rank1.bin": b"b" * 7})
    assert path == str(tmp_path / "step-000120")
    record = json.loads((tmp_path / "step-000120" / MARKER).read_text())
    assert record["step"] == 120
    assert record["files"] == {"state.pt": 1000, "shards/rank1.bin": 7}
    assert record["writers"] == 1
    assert leftovers(tmp_path) == []
    found = checkpoint.latest(tmp_path)
    assert (found.path, found.step, found.convention, found.skipped) == (path, 120, "marker", [])
    assert found


def test_while_writing_only_a_temporary_name_exists(tmp_path):
    saved(tmp_path, 1)
    with checkpoint.checkpoint_dir(tmp_path, 2) as tmp:
        assert os.path.basename(tmp) == ".step-000002.tmp-%d" % os.getpid()
        write(os.path.join(tmp, "state.pt"))
        assert not (tmp_path / "step-000002").exists()
        found = checkpoint.latest(tmp_path)
        assert found.step == 1
        assert found.skipped == [(tmp, "temporary name: being written, or left by a crash")]
    assert checkpoint.latest(tmp_path).step == 2


def test_exception_in_block_removes_temporary_and_publishes_nothing(tmp_path):
    saved(tmp_path, 1)
    with pytest.raises(RuntimeError, match="disk full"):
        with checkpoint.checkpoint_dir(tmp_path, 2) as tmp:
            write(os.path.join(tmp, "state.pt"))
            raise RuntimeError("disk full")
    assert sorted(os.listdir(tmp_path)) == ["step-000001"]
    assert checkpoint.latest(tmp_path).step == 1


def test_save_function_and_files_are_fsynced(tmp_path, monkeypatch):
    synced = []
    real = checkpoint.fsync_path
    monkeypatch.setattr(checkpoint, "fsync_path",
                        lambda p, directory=False: (synced.append(os.path.basename(p)), real(p, directory)))
    path = checkpoint.save(tmp_path, 3, lambda d: write(os.path.join(d, "model.pt")))
    assert path == checkpoint.step_path(tmp_path, 3)
    # the data file, the temporary directory (after its files and after the marker),
    # and the parent after the rename
    assert "model.pt" in synced
    assert synced.count(".step-000003.tmp-%d" % os.getpid()) >= 2
    assert synced[-1] == os.path.basename(str(tmp_path))


def test_saving_a_step_again_replaces_it_whole(tmp_path):
    saved(tmp_path, 5, {"state.pt": b"old" * 10, "extra.bin": b"e"})
    saved(tmp_path, 5, {"state.pt": b"new" * 20})
    assert sorted(os.listdir(tmp_path / "step-000005")) == [MARKER, "state.pt"]
    assert (tmp_path / "step-000005" / "state.pt").read_bytes() == b"new" * 20
    assert leftovers(tmp_path) == []
    assert checkpoint.latest(tmp_path).skipped == []


CRASHER = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {repo!r})
    from slurmkit import checkpoint
    root, point = sys.argv[1], sys.argv[2]
    def die(*a, **k):
        os.kill(os.getpid(), signal.SIGKILL)
    with checkpoint.checkpoint_dir(root, 1) as tmp:
        with open(os.path.join(tmp, "state.pt"), "wb") as f:
            f.write(b"1" * 1000)
    if point == "before-marker":
        checkpoint.write_marker = die
    if point == "before-rename":
        checkpoint.publish = die
    with checkpoint.checkpoint_dir(root, 2) as tmp:
        with open(os.path.join(tmp, "state.pt"), "wb") as f:
            f.write(b"2" * 500)
            f.flush()
            if point == "writing":
                die()
""")


@pytest.mark.parametrize("point", ["writing", "before-marker", "before-rename"])
def test_a_crash_at_any_point_leaves_no_complete_looking_checkpoint(tmp_path, point):
    script = tmp_path / "crash.py"
    script.write_text(CRASHER.format(repo=REPO))
    root = tmp_path / "ckpt"
    proc = subprocess.run([sys.executable, str(script), str(root), point], timeout=60)
    assert proc.returncode == -signal.SIGKILL
    names = sorted(os.listdir(root))
    assert names[1:] == ["step-000001"] and names[0].startswith(".step-000002.tmp-")
    found = checkpoint.latest(root)
    assert found.step == 1
    assert [os.path.basename(p) for p, _ in found.skipped] == [names[0]]


def test_distributed_ranks_write_shards_rank0_publishes_each_file_synced_once(tmp_path, monkeypatch):
    world = 3
    synced = []
    real = checkpoint.fsync_path
    lock = threading.Lock()

    def recording(p, directory=False):
        if not directory:
            with lock:
                synced.append(os.path.basename(p))
        real(p, directory)

    monkeypatch.setattr(checkpoint, "fsync_path", recording)
    barrier = threading.Barrier(world, timeout=30)
    # A stale temporary of an earlier try of the same run is cleared, not mixed in.
    write(str(tmp_path / ".step-000040.tmp-run7" / "stale.bin"))
    seen, errors = {}, []

    def rank(r):
        try:
            with checkpoint.distributed_checkpoint_dir(tmp_path, 40, rank=r, world_size=world,
                                                       barrier=barrier.wait, tag="run7") as tmp:
                seen[r] = tmp
                write(os.path.join(tmp, "shard-%d.distcp" % r), b"%d" % r * (100 + r))
                if r == 0:
                    write(os.path.join(tmp, ".metadata"), b"meta")
            # After the block every rank sees the published checkpoint.
            assert os.path.exists(os.path.join(checkpoint.step_path(tmp_path, 40), MARKER))
        except BaseException as exc:  # report into the main thread
            errors.append(exc)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert len(set(seen.values())) == 1
    record = json.loads((tmp_path / "step-000040" / MARKER).read_text())
    assert record["files"] == {".metadata": 4, "shard-0.distcp": 100, "shard-1.distcp": 101,
                               "shard-2.distcp": 102}
    assert record["writers"] == world
    data_files = sorted(s for s in synced if s != MARKER)
    assert data_files == [".metadata", "shard-0.distcp", "shard-1.distcp", "shard-2.distcp"]
    assert leftovers(tmp_path) == []
    assert checkpoint.latest(tmp_path).convention == "marker"


def test_distributed_tag_comes_from_the_run_or_must_be_given(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with pytest.raises(ValueError, match="tag="):
        with checkpoint.distributed_checkpoint_dir(tmp_path, 1, rank=0, world_size=2,
                                                   barrier=lambda: None):
            pass
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    with checkpoint.distributed_checkpoint_dir(tmp_path, 1, rank=0, world_size=2,
                                               barrier=lambda: None) as tmp:
        assert os.path.basename(tmp) == ".step-000001.tmp-4242"


def test_distributed_exception_on_rank0_removes_temporary_without_a_barrier(tmp_path):
    calls = []
    with pytest.raises(OSError):
        with checkpoint.distributed_checkpoint_dir(tmp_path, 9, rank=0, world_size=2,
                                                   barrier=lambda: calls.append(1), tag="t"):
            raise OSError("quota")
    assert calls == [1]            # only the one before writing: no rank waits on a dead peer
    assert os.listdir(tmp_path) == []


# --------------------------------------------------------------------------
# Reading: the marker convention
# --------------------------------------------------------------------------

def test_partial_and_corrupt_newer_checkpoints_are_skipped_for_the_one_before(tmp_path):
    good = saved(tmp_path, 10)
    # cut off before its marker (written in place by some other tool)
    write(str(tmp_path / "step-000020" / "state.pt"))
    # a file truncated after publication (a copy that did not finish)
    truncated = saved(tmp_path, 30, {"state.pt": b"z" * 500})
    with open(os.path.join(truncated, "state.pt"), "r+b") as f:
        f.truncate(200)
    # a marker naming another step (a directory renamed by hand)
    renamed = saved(tmp_path, 35)
    os.rename(renamed, tmp_path / "step-000040")
    # a marker listing a file that is gone
    gone = saved(tmp_path, 50, {"a.pt": b"a", "b.pt": b"b"})
    os.unlink(os.path.join(gone, "b.pt"))
    # garbage in the marker
    garbled = saved(tmp_path, 60)
    (tmp_path / "step-000060" / MARKER).write_text("{not json")

    found = checkpoint.latest(tmp_path)
    assert (found.path, found.step) == (good, 10)
    reasons = {os.path.basename(p): r for p, r in found.skipped}
    assert [os.path.basename(p) for p, _ in found.skipped] == [
        "step-000060", "step-000050", "step-000040", "step-000030", "step-000020"]
    assert reasons["step-000060"].startswith("COMPLETE unreadable")
    assert reasons["step-000050"] == "COMPLETE lists b.pt, which is missing"
    assert reasons["step-000040"] == "COMPLETE records step 35, the name says 40"
    assert reasons["step-000030"] == "state.pt is 200 bytes, COMPLETE recorded 500"
    assert reasons["step-000020"] == "no COMPLETE marker and no .metadata"
    assert garbled


def test_no_checkpoint_at_all(tmp_path):
    assert not checkpoint.latest(tmp_path / "missing")
    assert checkpoint.latest(tmp_path / "missing").skipped == []
    write(str(tmp_path / "step-000001" / "state.pt"))
    found = checkpoint.latest(tmp_path)
    assert (found.path, found.step, bool(found)) == (None, None, False)
    assert len(found.skipped) == 1


def test_unrelated_entries_are_ignored(tmp_path):
    saved(tmp_path, 3)
    write(str(tmp_path / "logs" / "train.log"))
    write(str(tmp_path / "notes.txt"))
    write(str(tmp_path / ".nfs000123"))
    found = checkpoint.latest(tmp_path)
    assert (found.step, found.skipped) == (3, [])


def test_steps_compare_as_numbers_not_strings(tmp_path):
    saved(tmp_path, 999999)
    saved(tmp_path, 1000000)       # seven digits: sorts before "step-999999" as a string
    assert checkpoint.latest(tmp_path).step == 1000000


# --------------------------------------------------------------------------
# Reading: torch.distributed.checkpoint, Megatron trackers, single files
# --------------------------------------------------------------------------

def test_dcp_directories_complete_only_with_metadata(tmp_path):
    write(str(tmp_path / "checkpoint-100" / "__0_0.distcp"))
    write(str(tmp_path / "checkpoint-100" / ".metadata"))
    write(str(tmp_path / "checkpoint-200" / "__0_0.distcp"))             # .metadata not yet written
    write(str(tmp_path / "checkpoint-200" / ".metadata.tmp"))
    write(str(tmp_path / "checkpoint-300" / ".metadata"), b"")           # empty
    found = checkpoint.latest(tmp_path)
    assert (os.path.basename(found.path), found.step, found.convention) == ("checkpoint-100", 100, "dcp")
    assert [(os.path.basename(p), r) for p, r in found.skipped] == [
        ("checkpoint-300", ".metadata is empty"),
        ("checkpoint-200", "no COMPLETE marker and no .metadata")]
    # only the marker convention: a bare DCP directory does not count
    assert not checkpoint.latest(tmp_path, conventions=("marker",))


def test_megatron_tracker(tmp_path):
    for it in (100, 200, 300):
        write(str(tmp_path / ("iter_%07d" % it) / "mp_rank_00" / "model_optim_rng.pt"))
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("200\n")
    found = checkpoint.latest(tmp_path)
    assert (os.path.basename(found.path), found.step, found.convention) == ("iter_0000200", 200, "tracker")
    assert [(os.path.basename(p), r) for p, r in found.skipped] == [
        ("iter_0000300",
         "newer than latest_checkpointed_iteration.txt (200): being written, or cut off")]


def test_tracker_naming_a_missing_directory_falls_back(tmp_path):
    write(str(tmp_path / "iter_0000100" / "model.pt"))
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("200")
    found = checkpoint.latest(tmp_path)
    assert found.step == 100
    assert found.skipped == [(str(tmp_path / "iter_0000200"),
                              "latest_checkpointed_iteration.txt names iteration 200, "
                              "but iter_0000200 does not exist")]


def test_tracker_without_an_iteration_number(tmp_path):
    write(str(tmp_path / "iter_0000100" / "model.pt"))
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("release")
    found = checkpoint.latest(tmp_path)
    assert not found
    assert found.skipped[0] == (str(tmp_path / "latest_checkpointed_iteration.txt"),
                                "names 'release', not an iteration number")


def zip_bytes():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:       # the container torch.save writes
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00." * 50)
    return buf.getvalue()


def test_single_files_renamed_into_place(tmp_path):
    whole = zip_bytes()
    write(str(tmp_path / "step-10.pt"), whole)
    write(str(tmp_path / "step-20.pt"), whole[: len(whole) // 2])      # cut off
    write(str(tmp_path / "step-25.pt"), b"")                           # empty
    write(str(tmp_path / "step-30.pt.tmp"), whole)                     # not renamed yet
    write(str(tmp_path / "ckpt_5.pth"), b"legacy pickle, not a zip")
    found = checkpoint.latest(tmp_path)
    assert (os.path.basename(found.path), found.step, found.convention) == ("step-10.pt", 10, "file")
    assert [(os.path.basename(p), r) for p, r in found.skipped] == [
        ("step-30.pt.tmp", "temporary name: being written, or left by a crash"),
        ("step-25.pt", "empty file"),
        ("step-20.pt", "zip archive without its end record (cut off)")]
    os.unlink(tmp_path / "step-10.pt")
    assert checkpoint.latest(tmp_path).step == 5
    assert not checkpoint.latest(tmp_path, conventions=("marker", "dcp"))


def test_for_one_step_a_directory_wins_over_a_file(tmp_path):
    write(str(tmp_path / "step-7.pt"), zip_bytes())
    path = saved(tmp_path, 7)
    assert checkpoint.latest(tmp_path).path == path


def test_unknown_convention_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="unknown checkpoint convention.*marker, dcp, tracker, file"):
        checkpoint.latest(tmp_path, conventions=("marker", "orbax"))


def test_step_of():
    assert checkpoint.step_of("/x/step-000120") == 120
    assert checkpoint.step_of("/x/iter_0000300/") == 300
    assert checkpoint.step_of("/x/step-7.pt") == 7
    assert checkpoint.step_of("/x/final") is None


def test_step_of_reads_the_marker_when_the_name_has_no_step(tmp_path):
    path = saved(tmp_path, 8)
    os.rename(path, tmp_path / "final")
    assert checkpoint.step_of(tmp_path / "final") == 8


# --------------------------------------------------------------------------
# Concurrent readers
# --------------------------------------------------------------------------

WRITER = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {repo!r})
    from slurmkit import checkpoint
    root, steps = sys.argv[1], int(sys.argv[2])
    for step in range(1, steps + 1):
        with checkpoint.checkpoint_dir(root, step) as tmp:
            for part in range(3):
                with open(os.path.join(tmp, "part%d.bin" % part), "wb") as f:
                    for _ in range(64):        # 64 writes of 4 KiB: long enough to be caught
                        f.write(bytes([step % 251]) * 4096)
""")


def test_concurrent_readers_never_see_half_a_checkpoint(tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(repo=REPO))
    root = tmp_path / "ckpt"
    steps = 40
    writer = subprocess.Popen([sys.executable, str(script), str(root), str(steps)])
    observed, temps_seen = [], 0
    try:
        while True:
            done = writer.poll() is not None
            found = checkpoint.latest(root)
            temps_seen += sum(r.startswith("temporary") for _, r in found.skipped)
            if found:
                # Everything a reader is handed is whole: every part, every byte.
                for part in range(3):
                    with open(os.path.join(found.path, "part%d.bin" % part), "rb") as f:
                        data = f.read()
                    assert data == bytes([found.step % 251]) * (64 * 4096), (found.path, part)
                assert not [r for _, r in found.skipped if not r.startswith("temporary")]
                observed.append(found.step)
            if done:
                break
    finally:
        if writer.poll() is None:
            writer.kill()
        writer.wait(30)
    assert writer.returncode == 0
    assert observed == sorted(observed)          # the latest never goes backwards
    assert observed[-1] == steps
    # the reader did overlap the writer (else this test proved nothing)
    assert len(set(observed)) > 1 or temps_seen > 0


# --------------------------------------------------------------------------
# The job's environment
# --------------------------------------------------------------------------

@pytest.fixture
def job_env(monkeypatch):
    for var in ("SLURMKIT_CHECKPOINT_DIR", "SLURMKIT_RESUME_FROM", "SLURMKIT_ATTEMPT"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_resume_path_prefers_the_daemons_choice(tmp_path, job_env):
    older = saved(tmp_path, 1)
    saved(tmp_path, 2)
    job_env.setenv("SLURMKIT_CHECKPOINT_DIR", str(tmp_path))
    job_env.setenv("SLURMKIT_RESUME_FROM", older)
    assert checkpoint.resume_path() == older


def test_resume_path_from_a_missing_choice_fails_loudly(tmp_path, job_env):
    job_env.setenv("SLURMKIT_RESUME_FROM", str(tmp_path / "step-000009"))
    with pytest.raises(FileNotFoundError, match="SLURMKIT_RESUME_FROM"):
        checkpoint.resume_path()


def test_resume_path_finds_the_latest_and_logs_skips(tmp_path, job_env):
    path = saved(tmp_path, 4)
    write(str(tmp_path / "step-000005" / "state.pt"))
    job_env.setenv("SLURMKIT_CHECKPOINT_DIR", str(tmp_path))
    log = io.StringIO()
    assert checkpoint.resume_path(log=log) == path
    assert log.getvalue() == "slurmkit.checkpoint: skipped %s: no COMPLETE marker and no .metadata\n" % (
        tmp_path / "step-000005")


def test_resume_path_outside_a_job_or_on_a_first_run(tmp_path, job_env):
    assert checkpoint.resume_path() is None
    assert checkpoint.checkpoint_root() is None
    job_env.setenv("SLURMKIT_CHECKPOINT_DIR", str(tmp_path / "new"))
    assert checkpoint.resume_path() is None
    assert checkpoint.checkpoint_root() == str(tmp_path / "new")


def test_attempt(job_env):
    assert checkpoint.attempt() is None
    job_env.setenv("SLURMKIT_ATTEMPT", "3")
    assert checkpoint.attempt() == 3


def test_stop_flag_records_sigusr1():
    previous = signal.getsignal(signal.SIGUSR1)
    try:
        stop = checkpoint.StopFlag()
        assert not stop
        os.kill(os.getpid(), signal.SIGUSR1)
        deadline = time.monotonic() + 5
        while not stop and time.monotonic() < deadline:
            time.sleep(0.01)               # the handler runs between bytecodes of the main thread
        assert stop and stop.signum == signal.SIGUSR1
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_import_is_stdlib_only_and_light():
    code = ("import sys; before = set(sys.modules); import slurmkit.checkpoint; "
            "new = set(sys.modules) - before; "
            "print(sorted(m for m in new if m.split('.')[0] not in sys.stdlib_module_names))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "['slurmkit', 'slurmkit.checkpoint']"


def test_the_heartbeat_writes_at_most_every_few_seconds_and_only_in_a_tracked_job(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURMKIT_HEARTBEAT", raising=False)
    monkeypatch.setattr(checkpoint, "last_beat", [None])
    assert checkpoint.heartbeat(1) is False                       # outside such a job: nothing
    path = tmp_path / "beat"
    monkeypatch.setenv("SLURMKIT_HEARTBEAT", str(path))
    now = [100.0]
    monkeypatch.setattr(checkpoint.time, "monotonic", lambda: now[0])
    assert checkpoint.heartbeat(1) is True and path.read_text().split()[1] == "1"
    now[0] += 4.9
    assert checkpoint.heartbeat(2) is False and path.read_text().split()[1] == "1"
    now[0] += 0.2
    assert checkpoint.heartbeat(3) is True and path.read_text().split()[1] == "3"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["beat"]   # written by rename: no temporary left
    monkeypatch.setenv("SLURMKIT_HEARTBEAT", str(tmp_path / "gone" / "beat"))
    now[0] += 10
    assert checkpoint.heartbeat(4) is False                       # a vanished directory never raises
