"""``python -m slurmkit`` runs the CLI."""

from slurmkit.cli import run

run()
