"""Shared test set-up: every test runs isolated from the machine's user.

Each test gets its own HOME and slurmkit cache directory, and none of the
variables that would point slurmkit somewhere else (``SLURMKIT_*``,
``SLURM_CONF``, the ssh-agent's socket): no test reads the real ``~/.ssh``,
``~/.config/slurmkit`` or ``~/.cache``, and cached site configs, templates
or topologies never leak from one test into another.
"""

import os

import pytest

_CLEARED = ("SLURM_CONF", "SSH_AUTH_SOCK", "SSH_AGENT_PID", "XDG_CACHE_HOME", "XDG_CONFIG_HOME",
            "XDG_STATE_HOME")


@pytest.fixture(autouse=True)
def _isolated_user(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    for name in list(os.environ):
        if name.startswith("SLURMKIT_") or name in _CLEARED:
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURMKIT_CACHE_DIR", str(home / ".cache" / "slurmkit"))
    yield home
