"""Atomic checkpoints for training programs, and finding the latest complete one.

Standard library only, and nothing heavy at import: a training program imports
this next to torch, and the requeue daemon imports it to pick the checkpoint a
restarted job resumes from.  Nothing here knows about torch; the program writes
its files (``torch.save``, a ``torch.distributed.checkpoint`` directory, anything)
into a directory this module hands it.

Writing
-------
::

    from slurmkit import checkpoint

    with checkpoint.checkpoint_dir(root, step) as tmp:     # root/.step-000120.tmp-<pid>
        torch.save(state, os.path.join(tmp, "state.pt"))
    # now root/step-000120 exists, with a COMPLETE marker

On leaving the block every file is fsynced, a ``COMPLETE`` marker (JSON: the
step and every file's size) is written and fsynced, the directory is renamed
to ``root/step-000120`` in one ``rename(2)`` and the parent is fsynced.  A
reader therefore sees either no ``step-000120`` or a whole one; a crash at any
moment leaves at most a ``.step-000120.tmp-*`` directory, which every reader
skips.  When the block raises, the temporary directory is removed.

In a distributed program where only rank 0 writes (plain DDP: the state is
replicated), rank 0 uses :func:`checkpoint_dir` and every rank calls
``torch.distributed.barrier()`` afterwards, so that no rank exits (or reads the
checkpoint) before it is complete.  When every rank writes its own shard
(``torch.distributed.checkpoint``, FSDP, ZeRO), all ranks use
:func:`distributed_checkpoint_dir` with the same root and step::

    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    with checkpoint.distributed_checkpoint_dir(
            root, step, rank=dist.get_rank(), world_size=dist.get_world_size(),
            barrier=dist.barrier) as tmp:
        dcp.save(state, checkpoint_id=tmp)

Rank 0 creates the temporary directory, then all ranks meet at a barrier and
write; after the block they meet again, each fsyncs its share of the files,
they meet once more, rank 0 alone marks and renames, and a last barrier
returns on every rank only once the checkpoint is complete.  The directory
must be on a filesystem every rank sees (it has to be anyway: a restarted job
runs on other nodes).  If one rank raises inside the block, it raises on that
rank without a barrier (waiting there would hang); the others fail at their
next collective, which ends the job, and rank 0 removes the temporary
directory when the exception reaches it.

Reading
-------
:func:`latest` returns the newest complete checkpoint under a directory, by
any of these conventions (``conventions=`` selects a subset):

``marker``  a directory ``step-N`` (also ``iter_N``, ``checkpoint-N``,
            ``global_stepN``, ``ckpt-N``) holding a ``COMPLETE`` marker whose
            recorded step and file sizes match what is on disk;
``dcp``     such a directory holding a non-empty ``.metadata`` file, which
            ``torch.distributed.checkpoint`` writes only after every rank's
            shard (it renames ``.metadata.tmp`` into place);
``tracker`` Megatron style: ``latest_checkpointed_iteration.txt`` names the
            step, the checkpoint is ``iter_%07d``; directories at or below the
            tracker's step count as complete (Megatron moves the tracker only
            after all ranks saved), newer ones are still being written;
``file``    a single file ``step-N.pt`` (any name as above, any extension)
            that was renamed into place when complete: never a ``*.tmp`` name;
            a zip file (what ``torch.save`` writes) must have its end record.

A newer candidate that fails its checks is skipped for the one before, and
the result says which were skipped and why (``result.skipped``).

What a training program does (with ``slurmkit submit --auto-requeue``)
-------------------------------------------------------------------
The job's script exports ``SLURMKIT_CHECKPOINT_DIR`` (where to write),
``SLURMKIT_ATTEMPT`` (1 for the first run, then 2, 3, ... for restarts) and, on a
restart, ``SLURMKIT_RESUME_FROM`` (the checkpoint the daemon chose).  The
program:

1. calls :func:`resume_path` once (on rank 0, then broadcasts what it loaded, so
   all ranks agree) and, when it returns a path, loads it and continues from
   its step; the data order must depend on the step only, so that a resumed
   run sees the batches the lost one would have;
2. saves with :func:`checkpoint_dir` every few steps into
   :func:`checkpoint_root`;
3. traps ``SIGUSR1`` (Slurm sends it ``--signal`` seconds before the time
   limit): :class:`StopFlag` records it, the program saves at the next step
   boundary (all ranks agree on the flag with an all-reduce first) and exits
   with :data:`EXIT_SAVED` (75, ``EX_TEMPFAIL``), which says "saved, resume me";
4. exits 0 only when training is finished;
5. calls :func:`heartbeat` every step (it writes at most every few seconds):
   a job whose heartbeat and checkpoints stop moving for its hang timeout
   (``--hang-timeout``) is ended by the daemon and restarted, instead of
   holding its nodes, hung, until the time limit.
"""

import contextlib
import errno
import json
import os
import re
import shutil
import signal
import sys
import time

__all__ = [
    "MARKER", "EXIT_SAVED", "CONVENTIONS", "Latest", "StopFlag",
    "checkpoint_dir", "distributed_checkpoint_dir", "save", "step_path",
    "latest", "resume_path", "checkpoint_root", "attempt", "step_of", "heartbeat", "heartbeat_dir", "heartbeat_path",
]

#: Name of the completion marker inside a checkpoint directory.
MARKER = "COMPLETE"
#: Exit status of a program that saved on SIGUSR1 and wants to be resumed
#: (sysexits' EX_TEMPFAIL: "try again later").
EXIT_SAVED = 75
#: Every convention :func:`latest` knows, in the order it prefers them for one step.
CONVENTIONS = ("marker", "dcp", "tracker", "file")

MARKER_FORMAT = "slurmkit-checkpoint/1"
TRACKER = "latest_checkpointed_iteration.txt"
DCP_METADATA = ".metadata"

# The step is in the name: step-000120, iter_0000120, checkpoint-120, global_step120, ckpt_120.
_NAME = re.compile(r"^(?:step|iter|checkpoint|global_step|ckpt)[-_]?([0-9]+)\Z")
_FILE = re.compile(r"^(?:step|iter|checkpoint|global_step|ckpt)[-_]?([0-9]+)(\.[A-Za-z0-9]+)+\Z")
# Names a writer uses before its rename: .step-000120.tmp-<tag>, step-120.pt.tmp,
# .step-000120.old-<pid> (a replaced checkpoint on its way out).
_TEMP = re.compile(r"^\.?(?P<base>.*?)\.(?:tmp|old|partial)(?:[-.].*)?\Z", re.S)
_TAG_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_ZIP_MAGIC = b"PK\x03\x04"


def step_path(root, step):
    """Where :func:`checkpoint_dir` puts the checkpoint of ``step``: ``root/step-000120``."""
    return os.path.join(os.fspath(root), "step-%06d" % int(step))


# --------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------

def fsync_path(path, directory=False):
    """Force ``path`` (a file, or a directory's entries) to stable storage.

    Every durability step of a save goes through here, which is why it is
    public: the tests record its calls to check what is synced and in which
    order."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    except OSError as exc:
        # Some filesystems (and all of them for directories on some kernels)
        # refuse fsync on a directory; the data files were synced regardless.
        if not (directory and exc.errno in (errno.EINVAL, errno.ENOTSUP, errno.EBADF)):
            raise
    finally:
        os.close(fd)


def _walk_files(top):
    """Regular files under ``top`` as (relative path with '/', absolute path), sorted."""
    found = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames.sort()
        for name in filenames:
            full = os.path.join(dirpath, name)
            if os.path.isfile(full) and not os.path.islink(full):
                found.append((os.path.relpath(full, top).replace(os.sep, "/"), full))
    found.sort()
    return found


def _sync_tree(top, share=0, shares=1):
    """fsync every ``shares``-th file from ``share`` on, then (share 0) every directory.

    Ranks split the files so that each file is synced once, not once per rank.
    """
    for i, (_, full) in enumerate(_walk_files(top)):
        if i % shares == share:
            fsync_path(full)
    if share == 0:
        for dirpath, _, _ in os.walk(top, topdown=False):
            fsync_path(dirpath, directory=True)


def write_marker(tmp, step, world_size):
    """Write and sync the ``COMPLETE`` marker of a filled temporary directory (a save's second step)."""
    files = {rel: os.path.getsize(full) for rel, full in _walk_files(tmp) if rel != MARKER}
    record = {
        "format": MARKER_FORMAT,
        "step": int(step),
        "files": files,
        "writers": int(world_size),         # ranks that wrote into it
        "host": os.uname().nodename,
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    path = os.path.join(tmp, MARKER)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    fsync_path(tmp, directory=True)


def publish(tmp, final):
    """The last step of a save: rename ``tmp`` to ``final``; an existing ``final`` (the same step saved again,
    e.g. by a run resumed from an older checkpoint) is moved aside first and removed
    after, so a reader never finds a mixture of the two."""
    parent = os.path.dirname(final)
    try:
        os.rename(tmp, final)
    except OSError as exc:
        if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
            raise
        aside = os.path.join(parent, ".%s.old-%d" % (os.path.basename(final), os.getpid()))
        os.rename(final, aside)
        os.rename(tmp, final)
        fsync_path(parent, directory=True)
        if os.path.isdir(aside) and not os.path.islink(aside):
            shutil.rmtree(aside, ignore_errors=True)
        else:
            os.unlink(aside)
    fsync_path(parent, directory=True)


def _default_tag(world_size):
    """A temporary-name suffix that every rank of one run computes alike."""
    if world_size == 1:
        return str(os.getpid())
    # A stale directory of an earlier try with the same tag is removed by rank 0
    # before anyone writes, so the tag need not change between restarts.
    for var in ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"):
        value = os.environ.get(var)
        if value:
            return value
    raise ValueError("distributed_checkpoint_dir: give tag= (the same on every rank): neither "
                     "TORCHELASTIC_RUN_ID nor SLURM_JOB_ID is set to derive one from")


@contextlib.contextmanager
def distributed_checkpoint_dir(root, step, *, rank, world_size, barrier, tag=None):
    """Every rank writes into one temporary directory; rank 0 publishes it.

    ``barrier`` is a callable every rank calls collectively
    (``torch.distributed.barrier``).  Yields the temporary directory (a str).
    See the module docstring for the sequence and what happens on errors.
    """
    root = os.fspath(root)
    rank, world_size = int(rank), int(world_size)
    tag = _TAG_UNSAFE.sub("_", str(tag if tag is not None else _default_tag(world_size)))
    final = step_path(root, step)
    tmp = os.path.join(root, ".%s.tmp-%s" % (os.path.basename(final), tag))
    if rank == 0:
        os.makedirs(root, exist_ok=True)
        # Left by an earlier try of this same run (same tag) that crashed here.
        shutil.rmtree(tmp, ignore_errors=True)
        os.mkdir(tmp)
    barrier()                     # the directory exists before anyone writes
    try:
        yield tmp
        barrier()                 # every rank's files are written and closed
        _sync_tree(tmp, share=rank, shares=world_size)
        barrier()                 # ... and on disk
        if rank == 0:
            write_marker(tmp, step, world_size)
            publish(tmp, final)
    except BaseException:
        if rank == 0:             # after a successful publish there is nothing left to remove
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    barrier()                     # no rank goes on before the checkpoint exists


@contextlib.contextmanager
def checkpoint_dir(root, step):
    """One process writes a checkpoint: yields ``root/.step-NNNNNN.tmp-<pid>``,
    published as ``root/step-NNNNNN`` when the block ends without an exception."""
    with distributed_checkpoint_dir(root, step, rank=0, world_size=1,
                                    barrier=lambda: None) as tmp:
        yield tmp


def save(root, step, write_fn):
    """``write_fn(tmpdir)`` writes the files; returns the published directory."""
    with checkpoint_dir(root, step) as tmp:
        write_fn(tmp)
    return step_path(root, step)


# --------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------

class Latest:
    """What :func:`latest` found.

    ``path`` and ``step`` of the newest complete checkpoint (both None when
    there is none), the ``convention`` that accepted it, and ``skipped``: a
    list of ``(path, reason)`` for every newer candidate that was rejected.
    True when a checkpoint was found.
    """

    __slots__ = ("path", "step", "convention", "skipped")

    def __init__(self, path=None, step=None, convention=None, skipped=None):
        self.path = path
        self.step = step
        self.convention = convention
        self.skipped = list(skipped or [])

    def __bool__(self):
        return self.path is not None

    def __repr__(self):
        return "Latest(path=%r, step=%r, convention=%r, skipped=%r)" % (
            self.path, self.step, self.convention, self.skipped)


def _check_marker(path, step):
    """None when the COMPLETE marker vouches for ``path``, else why not."""
    try:
        with open(os.path.join(path, MARKER), encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError) as exc:
        return "%s unreadable: %s" % (MARKER, exc)
    if not isinstance(record, dict) or not isinstance(record.get("files"), dict):
        return "%s is not a slurmkit marker (no file list)" % MARKER
    if record.get("step") != step:
        return "%s records step %r, the name says %d" % (MARKER, record.get("step"), step)
    for rel, size in sorted(record["files"].items()):
        try:
            actual = os.path.getsize(os.path.join(path, rel))
        except OSError:
            return "%s lists %s, which is missing" % (MARKER, rel)
        if actual != size:
            return "%s is %d bytes, %s recorded %s" % (rel, actual, MARKER, size)
    return None


def _check_dcp(path):
    try:
        size = os.path.getsize(os.path.join(path, DCP_METADATA))
    except OSError:
        return "no %s" % DCP_METADATA
    return None if size > 0 else "%s is empty" % DCP_METADATA


def _check_file(path):
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as exc:
        return "unreadable: %s" % exc
    if size == 0:
        return "empty file"
    # torch.save writes a zip archive; one cut off lacks its end record.
    # (zipfile is imported here: it pulls in bz2 and lzma, which most callers never need.)
    import zipfile
    if head == _ZIP_MAGIC and not zipfile.is_zipfile(path):
        return "zip archive without its end record (cut off)"
    return None


def _read_tracker(root):
    """(step or None, problem or None) from a Megatron tracker file, (None, None) if absent."""
    path = os.path.join(root, TRACKER)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read().strip()
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, "unreadable: %s" % exc
    if not text.isdigit():
        return None, "names %r, not an iteration number" % text
    return int(text), None


def latest(root, conventions=CONVENTIONS):
    """The newest complete checkpoint under ``root`` (see the module docstring).

    Returns a :class:`Latest`; a missing ``root`` gives an empty one.
    """
    root = os.fspath(root)
    conventions = tuple(conventions)
    unknown = set(conventions) - set(CONVENTIONS)
    if unknown:
        raise ValueError("unknown checkpoint convention(s) %s; known: %s"
                         % (", ".join(sorted(unknown)), ", ".join(CONVENTIONS)))
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return Latest()

    tracker_step, tracker_problem = (None, None)
    if "tracker" in conventions:
        tracker_step, tracker_problem = _read_tracker(root)

    # (step, rank among conventions, path, checker): checker() -> None or a reason.
    candidates = []
    early_skips = []
    if tracker_problem:
        early_skips.append((os.path.join(root, TRACKER), tracker_problem))
    for name in names:
        path = os.path.join(root, name)
        temp = _TEMP.match(name)
        if temp:
            m = _NAME.match(temp.group("base")) or _FILE.match(temp.group("base"))
            if m:
                reason = "temporary name: being written, or left by a crash"
                candidates.append((int(m.group(1)), 9, path, lambda r=reason: r))
            continue
        if name.startswith("."):
            continue
        if os.path.isdir(path):
            m = _NAME.match(name)
            if m:
                step = int(m.group(1))
                candidates.append((step, 0, path, _dir_checker(path, step, conventions, tracker_step)))
        elif "file" in conventions:
            m = _FILE.match(name)
            if m:
                candidates.append((int(m.group(1)), 3, path, lambda p=path: _check_file(p)))

    if tracker_step is not None:
        named = os.path.join(root, "iter_%07d" % tracker_step)
        if not os.path.isdir(named):
            early_skips.append((named, "%s names iteration %d, but %s does not exist"
                                % (TRACKER, tracker_step, os.path.basename(named))))

    skipped = list(early_skips)
    # Newest first; for one step a directory before a file before a temporary.
    for step, _, path, check in sorted(candidates, key=lambda c: (-c[0], c[1], c[2])):
        result = check()
        if isinstance(result, tuple):         # a directory: (convention, None) or (None, reason)
            convention, reason = result
        else:
            convention, reason = ("file", None) if result is None else (None, result)
        if reason is None:
            return Latest(path, step, convention, skipped)
        skipped.append((path, reason))
    return Latest(skipped=skipped)


def _dir_checker(path, step, conventions, tracker_step):
    def check():
        has_marker = os.path.exists(os.path.join(path, MARKER))
        if has_marker and "marker" in conventions:
            # A marker that does not match is a corrupt checkpoint, whatever else is there.
            reason = _check_marker(path, step)
            return ("marker", None) if reason is None else (None, reason)
        if "dcp" in conventions and os.path.exists(os.path.join(path, DCP_METADATA)):
            reason = _check_dcp(path)
            return ("dcp", None) if reason is None else (None, reason)
        if tracker_step is not None and os.path.basename(path).startswith("iter_"):
            if step <= tracker_step:
                return ("tracker", None)
            return (None, "newer than %s (%d): being written, or cut off" % (TRACKER, tracker_step))
        wanted = [c for c in ("marker", "dcp") if c in conventions]
        return (None, "no %s" % " and no ".join(
            {"marker": MARKER + " marker", "dcp": DCP_METADATA}[c] for c in wanted)
            if wanted else "no convention given accepts a directory")
    return check


def step_of(path):
    """The step of a checkpoint path: from its name, else from its COMPLETE marker; None if neither."""
    path = os.fspath(path).rstrip(os.sep)
    m = _NAME.match(os.path.basename(path)) or _FILE.match(os.path.basename(path))
    if m:
        return int(m.group(1))
    try:
        with open(os.path.join(path, MARKER), encoding="utf-8") as f:
            step = json.load(f).get("step")
        return step if isinstance(step, int) else None
    except (OSError, ValueError, AttributeError):
        return None


# --------------------------------------------------------------------------
# The job's environment
# --------------------------------------------------------------------------

def checkpoint_root():
    """``SLURMKIT_CHECKPOINT_DIR``, or None when the job has none."""
    return os.environ.get("SLURMKIT_CHECKPOINT_DIR") or None


def attempt():
    """``SLURMKIT_ATTEMPT`` as an int (1 = the first run), or None outside such a job."""
    value = os.environ.get("SLURMKIT_ATTEMPT")
    return int(value) if value and value.isdigit() else None


def resume_path(root=None, conventions=CONVENTIONS, log=sys.stderr):
    """The checkpoint this run should resume from, or None to start fresh.

    ``SLURMKIT_RESUME_FROM`` when set (the daemon's choice; it must exist:
    starting from scratch instead would silently throw the run away), else the
    latest complete checkpoint under ``root`` (default
    ``SLURMKIT_CHECKPOINT_DIR``).  Skipped candidates are written to ``log``
    (the job's output), one line each.
    """
    chosen = os.environ.get("SLURMKIT_RESUME_FROM")
    if chosen:
        if not os.path.exists(chosen):
            raise FileNotFoundError("SLURMKIT_RESUME_FROM=%s does not exist" % chosen)
        return chosen
    root = root if root is not None else checkpoint_root()
    if not root:
        return None
    found = latest(root, conventions)
    if log is not None:
        for path, reason in found.skipped:
            # one write per line: several ranks may share the job's output file
            log.write("slurmkit.checkpoint: skipped %s: %s\n" % (path, reason))
            log.flush()
    return found.path


def heartbeat_dir(root):
    """Where the heartbeats of the jobs checkpointing under ``root`` are (the daemon watches it)."""
    return os.path.join(root, ".slurmkit", "heartbeat")


def heartbeat_path(root, job_id):
    """The heartbeat file of job ``job_id`` under checkpoint directory ``root`` (the job template
    exports it as ``SLURMKIT_HEARTBEAT``)."""
    return os.path.join(heartbeat_dir(root), str(job_id))


# When this process last wrote its heartbeat (time.monotonic()), read and set by heartbeat();
# public so that a test can start from "never".
last_beat = [None]


def heartbeat(step=None, path=None, every=5.0):
    """Say "still making progress" (the step, if given) for the requeue daemon's hang detection.

    Cheap enough to call every step: it writes ``SLURMKIT_HEARTBEAT`` (or ``path``) at most once
    every ``every`` seconds, with a rename, so the daemon never reads half a line.  Outside such a
    job (no path) it does nothing.  Returns True when it wrote.  One rank calling it is enough:
    a hung rank stops every rank at the next collective.
    """
    path = path or os.environ.get("SLURMKIT_HEARTBEAT")
    if not path:
        return False
    now = time.monotonic()
    if last_beat[0] is not None and now - last_beat[0] < every:
        return False
    last_beat[0] = now
    tmp = "%s.tmp-%d" % (path, os.getpid())
    try:
        with open(tmp, "w") as f:
            f.write("%.3f %s\n" % (time.time(), "" if step is None else int(step)))
        os.replace(tmp, path)
    except OSError:
        return False             # a full or vanished file system must not stop training
    return True


class StopFlag:
    """Records that a stop was asked for (SIGUSR1 before the time limit), for the
    training loop to check at each step boundary::

        stop = checkpoint.StopFlag()          # installs the handler
        for step in ...:
            ...
            if stop:                           # in DDP: all-reduce it first
                save(); sys.exit(checkpoint.EXIT_SAVED)

    The handler only sets a flag: saving inside a signal handler, in the middle
    of a step or a collective, is not safe.
    """

    def __init__(self, signals=(signal.SIGUSR1,)):
        self.signum = None
        for sig in signals:
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        self.signum = signum

    def __bool__(self):
        return self.signum is not None
