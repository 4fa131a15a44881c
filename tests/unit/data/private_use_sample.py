# Sample for tests/unit/test_architecture.py: what the private-name rule must find (never imported).
from slurmkit.slurm.backend import _hidden, CommandBackend  # noqa: F401
from slurmkit.slurm import parsers

parsers._number("1"), CommandBackend.__name__, _hidden
setattr(parsers, "_number", None)
