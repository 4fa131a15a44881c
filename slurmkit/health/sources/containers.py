"""The node's container runtime, as the partition's jobs will use it: is its program there, and does it start.

``oci`` (Slurm's own ``--container``) needs the cluster's oci.conf beside slurm.conf and the programs
its RunTime* commands name (runc, crun); the other runtimes their own program (``ch-run``, ``enroot``,
``apptainer``, ``podman-hpc``), which must answer its version command within a few seconds.  A node
that cannot start images takes every image job sent to it and fails it, so the check drains it.
"""

import os
import shutil
import subprocess
from typing import Optional

from slurmkit.containers import runtimes

VERSION_TIMEOUT = 5.0


def default_oci_conf() -> str:
    """oci.conf beside the slurm.conf this node's Slurm reads ($SLURM_CONF, else /etc/slurm)."""
    return os.path.join(os.path.dirname(os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"), "oci.conf")


def _starts(program: str, args) -> dict:
    path = shutil.which(program)
    if path is None:
        return {"program": program, "path": None, "error": "not on PATH (%s)" % os.environ.get("PATH", "")}
    env = dict(os.environ)
    if not env.get("USER"):
        # As in a job script: ch-run refuses to start (even for --version) without $USER, which
        # slurmd's HealthCheckProgram and cron need not set.
        import pwd

        env["USER"] = pwd.getpwuid(os.getuid()).pw_name
    try:
        proc = subprocess.run([path] + list(args), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=VERSION_TIMEOUT, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"program": program, "path": path, "error": "%s %s failed: %s" % (program, " ".join(args), exc)}
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"program": program, "path": path,
                "error": "%s %s exited %d: %s" % (program, " ".join(args), proc.returncode, tail[0])}
    first = (proc.stdout or proc.stderr).strip().splitlines()[:1]
    return {"program": program, "path": path, "version": first[0] if first else "", "error": None}


def read_runtime(runtime: str, oci_conf: Optional[str] = None) -> dict:
    """``{"runtime", "programs": [{program, path, version | error}], "oci_conf", "error"}`` for the node."""
    reading = {"runtime": runtime, "programs": [], "oci_conf": None, "error": None}
    if runtime == "oci":
        path = oci_conf or default_oci_conf()
        reading["oci_conf"] = path
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                text = handle.read(1 << 20)
        except OSError as exc:
            reading["error"] = "%s cannot be read (%s): Slurm would run --container jobs on the host" % (
                path, exc.strerror or exc)
            return reading
        programs = runtimes.oci_conf_programs(text)
        if not programs:
            reading["error"] = "%s names no RunTimeRun or RunTimeCreate command" % path
            return reading
        reading["programs"] = [_starts(program, ("--version",)) for program in programs]
        return reading
    program, args = runtimes.PROGRAMS[runtime]
    reading["programs"] = [_starts(program, (args,))]
    return reading
