"""Files where a cluster's jobs read and write them: on this machine, or on the cluster's login node.

A sweep writes its points table and the directories Slurm writes into before
its arrays start, and later reads what the tasks recorded (``exit.status``,
the tails of error logs, a canary's marks).  For a cluster reached locally
those are plain file operations here; for one reached over SSH each is one
command on the login node, through the cluster backend's runner (the
connection its Slurm commands already use).  :class:`ClusterFiles` is that
choice, made once per cluster (:meth:`slurmkit.session.Session.files`), so
no caller asks "local or remote?" again.

A failure raises: ``OSError`` here, :class:`~slurmkit.errors.SlurmkitError`
(through the backend's ``checked``) on the login node.  Reads of files that
may not exist yet return None or an empty text instead.
"""

import os
import re
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

# Writes standard input to "$1" atomically (a temporary file, then a rename), creating its directory.
_PUT_SCRIPT = 'set -e; umask 077; mkdir -p -- "$(dirname -- "$1")"; cat > "$1.tmp.$$"; mv -f -- "$1.tmp.$$" "$1"'

# Each file's last bytes after a record separator (\036) and its name and a unit separator (\037).
_TAILS_SCRIPT = ('n=$1; shift; for f; do printf "\\036%s\\037" "$f"; '
                 'tail -c "$n" -- "$f" 2>/dev/null || true; done')


def put_file(path: str) -> List[str]:
    """argv: write standard input to ``path``."""
    return ["sh", "-c", _PUT_SCRIPT, "slurmkit-put", path]


def make_dirs(paths: Iterable[str]) -> List[str]:
    return ["mkdir", "-p", "--"] + list(paths)


def read_file(path: str) -> List[str]:
    return ["cat", "--", path]


def remove_files(paths: Iterable[str]) -> List[str]:
    return ["rm", "-f", "--"] + list(paths)


def tails(paths: Sequence[str], size: int) -> List[str]:
    """argv: the last ``size`` bytes of each file, in one process (see :func:`parse_tails`)."""
    return ["sh", "-c", _TAILS_SCRIPT, "slurmkit-tails", str(int(size))] + list(paths)


# Up to "$3" bytes of "$1" from byte "$2", in one process that ends by itself (dd reports the count on stderr).
def read_range(path: str, offset: int, limit: int) -> List[str]:
    """argv: ``limit`` bytes of ``path`` from byte ``offset`` (fewer at its end); see :func:`parse_dd_count`."""
    return ["dd", "if=" + path, "iflag=skip_bytes,count_bytes", "skip=%d" % int(offset), "count=%d" % int(limit),
            "bs=65536"]


def parse_dd_count(stderr: str) -> Optional[int]:
    """How many bytes dd copied ("1234 bytes (1.2 kB, ...) copied, ..."), None if it did not say."""
    m = re.search(r"^(\d+) bytes", stderr, re.M)
    return int(m.group(1)) if m else None


# The file's size, a newline, then its last "$2" bytes up to that size: one consistent view of a growing file.
_WINDOW_SCRIPT = ('size=$(stat -c %s -- "$1") || exit 3; skip=$(( size > $2 ? size - $2 : 0 )); echo "$size"; '
                  'exec dd if="$1" iflag=skip_bytes,count_bytes skip="$skip" count="$((size - skip))" bs=65536 '
                  'status=none')


def window(path: str, size: int) -> List[str]:
    """argv: ``path``'s size, then its last ``size`` bytes (see :meth:`ClusterFiles.window`)."""
    return ["sh", "-c", _WINDOW_SCRIPT, "slurmkit-window", path, str(int(size))]


def find_names(directory: str, name_glob: str) -> List[str]:
    """argv: the entries of ``directory`` whose name matches the shell pattern ``name_glob``, NUL-ended."""
    return ["find", directory, "-mindepth", "1", "-maxdepth", "1", "-name", name_glob, "-print0"]


def parse_tails(text: str) -> Dict[str, str]:
    """{path: its last bytes} from what :func:`tails` printed (a missing file: empty)."""
    out = {}
    for record in text.split("\x1e")[1:]:
        path, _, body = record.partition("\x1f")
        out[path] = body
    return out


def tail(path: str, size: int) -> str:
    """The last ``size`` bytes of a file here, decoded; empty when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - size))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


class ClusterFiles:
    """The file operations of one cluster: here when no ``runner`` is given, else each one a
    command through ``runner`` (the connection the cluster's Slurm commands use), whose failure
    ``checked`` turns into the backend's error (:meth:`slurmkit.slurm.backend.CommandBackend.checked`)."""

    def __init__(self, runner=None, checked: Optional[Callable] = None):
        self.runner = runner
        self.checked = checked

    @property
    def local(self) -> bool:
        """Whether the files are on this machine (no runner to reach them through)."""
        return self.runner is None

    def _run(self, argv: List[str], what: str, stdin: Optional[str] = None):
        return self.checked(self.runner.run(argv, stdin=stdin), what)

    def make_dirs(self, paths: Sequence[str]) -> None:
        if self.local:
            for path in paths:
                os.makedirs(path, exist_ok=True)
        elif paths:
            self._run(make_dirs(paths), "mkdir")

    def write(self, path: str, text: str) -> None:
        """Replace ``path`` whole (a reader never sees half of it), creating its directory."""
        if self.local:
            from slurmkit.textfile import write_atomic

            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_atomic(path, text)
        else:
            self._run(put_file(path), "writing %s" % path, stdin=text)

    def read(self, path: str) -> Optional[str]:
        """The file's text; None when it does not exist or cannot be read."""
        if self.local:
            try:
                with open(path, encoding="utf-8", errors="replace") as fh:
                    return fh.read()
            except OSError:
                return None
        result = self.runner.run(read_file(path))
        return result.stdout if result.ok else None

    def tails(self, paths: Iterable[str], size: int) -> Dict[str, str]:
        """{path: its last ``size`` bytes} (empty for a file that does not exist), in one command."""
        paths = sorted(paths)
        if self.local:
            return {path: tail(path, size) for path in paths}
        # A tail is a courtesy (the last lines of a failed point's log, shown beside its exit status):
        # a failed command is what was printed so far, never an error of the status it completes.
        return parse_tails(self.runner.run(tails(paths, size)).stdout)

    def read_range(self, path: str, offset: int, limit: int) -> Optional[Tuple[int, str]]:
        """``(bytes read, text)``: at most ``limit`` bytes of ``path`` from byte ``offset`` (fewer at its
        end; none past it); None when the file does not exist (yet).  One bounded command on the login
        node: nothing is left running there whenever the caller stops."""
        if self.local:
            try:
                with open(path, "rb") as fh:
                    fh.seek(offset)
                    data = fh.read(limit)
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise OSError(exc.errno, "cannot read %s: %s" % (path, exc.strerror)) from None
            return len(data), data.decode("utf-8", "replace")
        result = self.runner.run(read_range(path, offset, limit))
        count = parse_dd_count(result.stderr)
        if not result.ok or count is None:
            if "No such file" in result.stderr:
                return None
            self.checked(result, "reading %s" % path)
        return count, result.stdout

    def window(self, path: str, size: int) -> Optional[Tuple[int, str]]:
        """``(the file's size, its last bytes up to `size` of them)``, one consistent view of a growing
        file (a later :meth:`read_range` from that size misses nothing); None when it does not exist."""
        if self.local:
            try:
                with open(path, "rb") as fh:
                    end = os.fstat(fh.fileno()).st_size
                    fh.seek(max(0, end - size))
                    data = fh.read(end - fh.tell())
            except FileNotFoundError:
                return None
            return end, data.decode("utf-8", "replace")
        result = self.runner.run(window(path, size))
        if not result.ok:
            if "No such file" in result.stderr or result.returncode == 3:
                return None
            self.checked(result, "reading %s" % path)
        head, _, body = result.stdout.partition("\n")
        return int(head), body

    def glob(self, directory: str, name_glob: str) -> List[str]:
        """The files in ``directory`` whose names match the shell pattern ``name_glob`` (sorted)."""
        if self.local:
            import fnmatch

            try:
                names = os.listdir(directory)
            except OSError:
                return []
            return sorted(os.path.join(directory, n) for n in names if fnmatch.fnmatchcase(n, name_glob))
        result = self.runner.run(find_names(directory, name_glob))
        return sorted(p for p in result.stdout.split("\0") if p)

    def remove(self, paths: Sequence[str]) -> None:
        """Remove files that may be absent; a failure to remove one is not reported."""
        if self.local:
            for path in paths:
                try:
                    os.unlink(path)
                except OSError:
                    pass
        elif paths:
            self.runner.run(remove_files(paths))
