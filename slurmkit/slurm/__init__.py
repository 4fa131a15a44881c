"""Talking to Slurm: one interface (:class:`SlurmBackend`), several ways in.

- ``commands``: pure argv builders; ``parsers``: pure output parsers;
  ``runner``: the one place a command is executed (locally; SSH lives in
  ``slurmkit.remote.ssh``); ``backend``: the interface and its command-based
  implementation; ``pyslurm_backend``: the optional pyslurm implementation.

:func:`make_backend` picks the implementation for a cluster of the site.
"""

import os

from slurmkit.slurm.backend import CommandBackend, SlurmBackend  # noqa: F401 (re-exported)


def reach(cluster) -> str:
    """'local' or 'ssh': how this process reaches ``cluster``.

    SLURMKIT_VIA=local|ssh forces it.  Otherwise a cluster whose ``slurm_conf``
    exists on this machine (or that has no login node) is used locally, and
    any other cluster through its login node.
    """
    forced = os.environ.get("SLURMKIT_VIA", "").strip().lower()
    if forced in ("local", "ssh"):
        if forced == "ssh" and cluster.login is None:
            from slurmkit.errors import ConfigError

            raise ConfigError("SLURMKIT_VIA=ssh but cluster %r has no login node in the site config" % cluster.name)
        return forced
    if cluster.login is None or (cluster.slurm_conf and os.path.exists(cluster.slurm_conf)):
        return "local"
    return "ssh"


def make_backend(cluster, prefer_pyslurm: bool = True) -> SlurmBackend:
    """The backend for ``cluster``, reached as :func:`reach` decides.

    Locally, pyslurm is used only when it imports and its MAJOR.MINOR equals
    the cluster's Slurm (``pyslurm_backend.unusable_reason`` checks); otherwise the
    Slurm commands.  SLURMKIT_BACKEND=commands|pyslurm forces a choice.
    """
    forced = os.environ.get("SLURMKIT_BACKEND", "").strip().lower()
    if reach(cluster) == "ssh":
        from slurmkit.remote.ssh import SSHRunner

        return CommandBackend(SSHRunner(cluster.login, cluster.name), cluster.name, submit_once=True)
    from slurmkit.slurm.runner import LocalRunner

    runner = LocalRunner({"SLURM_CONF": cluster.slurm_conf} if cluster.slurm_conf else None)
    if forced != "commands" and prefer_pyslurm and (forced == "pyslurm" or _pyslurm_installed()):
        from slurmkit.slurm import pyslurm_backend

        reason = pyslurm_backend.unusable_reason(runner, cluster)
        if reason is None:
            return pyslurm_backend.PyslurmBackend(cluster)
        if forced == "pyslurm":
            from slurmkit.errors import UsageError

            raise UsageError("SLURMKIT_BACKEND=pyslurm but pyslurm cannot be used: %s" % reason)
    return CommandBackend(runner, cluster.name)


def _pyslurm_installed() -> bool:
    """Cheap pre-check (no import): most machines have no pyslurm at all."""
    import importlib.util

    return importlib.util.find_spec("pyslurm") is not None
