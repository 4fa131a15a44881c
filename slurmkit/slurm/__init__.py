"""Talking to Slurm: one interface (:class:`SlurmBackend`), several ways in.

- ``commands``: pure argv builders; ``parsers``: pure output parsers;
  ``runner``: the one place a command is executed locally (``slurmkit.remote``
  runs the same argv on a login node); ``backend``: the interface and its
  command-based implementation; ``pyslurm_backend``: the optional pyslurm
  implementation; ``directives``: the ``#SBATCH`` parser it needs;
  ``types``: the plain records backends return; ``hostlist``: Slurm's host
  lists.  (Slurm's time strings are :mod:`slurmkit.times`, below this package
  and the site configs alike.)

This package never imports ``slurmkit.remote`` or the CLI: which transport a
cluster gets is decided in :mod:`slurmkit.session`.
"""

import importlib.util
import sys


def pyslurm_installed() -> bool:
    """Whether ``import pyslurm`` could find anything, without importing it.

    Cheap on purpose: most machines have no pyslurm, and every submission asks.
    """
    if "pyslurm" in sys.modules:
        return True
    try:
        return importlib.util.find_spec("pyslurm") is not None
    except (ImportError, ValueError):
        return False
