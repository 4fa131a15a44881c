"""Small text files: reading one with bounds, replacing one atomically.

Reading a small configuration file with bounds: site files and templates.

``open(path).read()`` on what a user or an admin names trusts far too much:
a FIFO blocks the reader forever, ``/dev/zero`` or a huge file eats all
memory, a directory or a device gives confusing errors.  :func:`read_text`
opens without blocking, accepts only a regular file, reads at most ``limit``
bytes (a file longer than that is refused, never cut), and decodes UTF-8
strictly, so every caller answers at once with one clear reason.
"""

import itertools
import os
import stat

_TMP_NUMBERS = itertools.count()


class FileProblem(Exception):
    """Why a file was not read; the message completes "FILE: ...", ``line`` says where when known."""

    def __init__(self, message, line=None):
        super().__init__(message)
        self.line = line


def read_text(path, limit: int) -> str:
    """The whole text of the regular file ``path``; FileProblem when it is not one, is larger than
    ``limit`` bytes, cannot be read or is not UTF-8."""
    try:
        # O_NONBLOCK: opening a FIFO without a writer returns at once instead of waiting for one.
        fd = os.open(os.fspath(path), os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise FileProblem("no such file") from None
    except OSError as exc:
        raise FileProblem("cannot read: %s" % (exc.strerror or exc)) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise FileProblem("is a directory, not a file")
        if not stat.S_ISREG(info.st_mode):
            kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(info.st_mode) else
                    "a device" if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) else
                    "a socket" if stat.S_ISSOCK(info.st_mode) else "not a regular file")
            raise FileProblem("is %s, not a regular file" % kind)
        if info.st_size > limit:
            raise FileProblem("is %d bytes; files of more than %d bytes are refused" % (info.st_size, limit))
        chunks, size = [], 0
        while True:
            # A regular file never blocks; the bound still holds if it grows while being read.
            chunk = os.read(fd, min(65536, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise FileProblem("is more than %d bytes; larger files are refused" % limit)
    except OSError as exc:
        raise FileProblem("cannot read: %s" % (exc.strerror or exc)) from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise FileProblem("not UTF-8 text (byte 0x%02x)" % data[exc.start], line) from None


def write_atomic(path, text: str, *, mode: int = 0o644, fsync: bool = False, replace: bool = True) -> None:
    """Replace ``path`` with ``text`` (UTF-8) in one rename: a reader sees the old file or the new one,
    never part of either.  The file gets exactly ``mode``; ``fsync`` makes the new text durable before it
    replaces the old.  The temporary file is beside ``path`` (one file system, so the rename is atomic),
    named for this process and call (threads and processes never share one), and removed when anything
    fails; the OSError is the caller's to report or to ignore.  ``replace=False``: never replace an
    existing ``path`` (FileExistsError), published by a hard link, which fails where the name exists."""
    path = os.fspath(path)
    tmp = "%s.tmp%d-%d" % (path, os.getpid(), next(_TMP_NUMBERS))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            os.fchmod(fh.fileno(), mode)         # exactly, whatever the umask
            fh.write(text)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        if replace:
            os.replace(tmp, path)
            return
        os.link(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    os.unlink(tmp)
