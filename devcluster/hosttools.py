"""This machine's tools for devcluster: running a command, writing a file only when it changed,
the programs the clusters need, sshd's options, SSH keys."""

import os
import shutil
import subprocess
from pathlib import Path

from clusterspec import DevClusterError, MARIADBD, SSHD, STATE


def run(argv, env=None, check=True, timeout=60):
    proc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise DevClusterError("%s failed (%d): %s%s" % (" ".join(map(str, argv)), proc.returncode,
                                                       proc.stdout, proc.stderr))
    return proc


def write_if_changed(path, text, mode=0o644):
    path = Path(path)
    try:
        if path.read_text() == text:
            return False
    except OSError:
        pass
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
    return True


ACCOUNTING_PROGRAMS = ("slurmdbd", "sacctmgr", "sacct", "mariadb-install-db", "mariadb")


def need_programs(clusters=()):
    """This machine's own tools (keys, namespaces), then what each cluster
    runs, where it runs it (in its root, for a cluster of another release)."""
    missing = [p for p in ("unshare", "nsenter", "ssh-keygen", "ssh") if shutil.which(p) is None]
    wanted = ["unshare", "slurmctld", "slurmd", "munged", "munge", "unmunge", "mungekey", "scontrol",
              "sinfo", SSHD]
    for c in list(clusters) or [None]:
        progs = wanted + (list(ACCOUNTING_PROGRAMS) + [MARIADBD] if c is not None and c.accounting else [])
        for prog in progs:
            if c is not None and c.root is not None:
                if not c.has_program(prog):
                    missing.append("%s (in %s)" % (prog, c.root))
            elif not (os.path.exists(prog) if "/" in prog else shutil.which(prog)):
                missing.append(prog)
    missing = list(dict.fromkeys(missing))
    if missing:
        raise DevClusterError("missing programs: %s (run: make install-system; for a root: "
                              "scripts/releases/mkroot.sh)" % " ".join(missing))
    if os.geteuid() != 0:
        raise DevClusterError("devcluster must run as root (SlurmUser=root, sshd on loopback)")


def check_path_lengths(cluster):
    # Unix socket paths are limited to 107 bytes (munge socket, slurmstepd sockets).
    longest = len(str(cluster.slurmd_dir / cluster.nodes[0] / (cluster.nodes[0] + "_4294967294.4294967294")))
    if longest > 107 or len(str(cluster.munge_socket)) > 100:
        raise DevClusterError("state dir %s is too deep for unix socket paths; set DEVCLUSTER_STATE "
                              "to a shorter directory" % STATE)


_SSHD_OPTIONS = {}


def sshd_knows_option(option, cluster=None):
    """Whether the sshd (of cluster's root, if it has one) accepts OPTION
    ("Name=value"): sshd refuses to start on an option it does not know
    (PerSourcePenalties is new in OpenSSH 9.8; Debian 12 has 9.2, whose sshd
    has no -G either, which also answers no)."""
    root = cluster.root if cluster is not None else None
    key = (str(root), option)
    if key not in _SSHD_OPTIONS:
        argv = [SSHD, "-G", "-f", "/dev/null", "-o", option]
        try:
            p = run(cluster.wrap(argv) if cluster is not None else argv, check=False, timeout=15)
            _SSHD_OPTIONS[key] = p.returncode == 0
        except OSError:
            _SSHD_OPTIONS[key] = False
    return _SSHD_OPTIONS[key]


def ssh_keygen(path, comment):
    path = Path(path)
    if path.exists() and Path(str(path) + ".pub").exists():
        return False
    for p in (path, Path(str(path) + ".pub")):
        if p.exists():
            p.unlink()
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])
    return True


def pubkey(path):
    return Path(str(path) + ".pub").read_text().split()[:2]
