"""A cluster's files (slurmkit.clusterfiles): the same operations here and on a login node.

The login-node side is run for real: a command backend whose runner is this
machine's shell stands for the SSH runner (the argv is what would be sent),
so every ``sh -c`` script here runs in a real shell, with names that need
quoting.
"""

import pytest

from slurmkit.clusterfiles import ClusterFiles, parse_tails, tails
from slurmkit.errors import SlurmCommandError
from slurmkit.slurm.backend import CommandBackend
from slurmkit.slurm.runner import LocalRunner


def both():
    backend = CommandBackend(LocalRunner(), "alpha")
    return [ClusterFiles(), ClusterFiles(backend.runner, backend.checked)]


@pytest.mark.parametrize("files", both(), ids=["here", "login node"])
def test_write_read_tail_remove_round_trip(tmp_path, files):
    path = str(tmp_path / "a dir" / "it's $(here)" / "table.txt")
    assert files.read(path) is None
    files.write(path, "x" * 100 + "\nlast line\n")
    assert files.read(path) == "x" * 100 + "\nlast line\n"
    missing = str(tmp_path / "missing.log")
    assert files.tails([path, missing], 20) == {path: "x" * 9 + "\nlast line\n", missing: ""}
    files.write(path, "replaced\n")                         # whole, through a rename
    assert files.read(path) == "replaced\n"
    assert sorted(p.name for p in (tmp_path / "a dir" / "it's $(here)").iterdir()) == ["table.txt"]
    files.remove([path, missing])                           # one absent: no error
    assert files.read(path) is None


@pytest.mark.parametrize("files", both(), ids=["here", "login node"])
def test_directories_for_slurm_are_made_and_a_refusal_raises(tmp_path, files):
    dirs = [str(tmp_path / "s" / "slurm"), str(tmp_path / "s" / "points" / "p1")]
    files.make_dirs(dirs)
    assert all((tmp_path / d).is_dir() for d in dirs)
    blocked = tmp_path / "file"
    blocked.write_text("")
    with pytest.raises(OSError if files.local else SlurmCommandError):
        files.make_dirs([str(blocked / "sub")])


def test_tails_parse_what_the_shell_printed(tmp_path):
    import subprocess

    a = tmp_path / "a b.log"
    a.write_text("first\nsecond\n")
    out = subprocess.run(tails([str(a)], 7), capture_output=True, text=True, check=True).stdout
    assert parse_tails(out) == {str(a): "second\n"}
