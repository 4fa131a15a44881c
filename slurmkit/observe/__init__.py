"""The researcher's day after submit (issue "slurmkit logs -f, slurmkit why, slurmkit eff"): the
room, not yet built.

What goes here, one module each: ``logs`` (find a job's output the way Slurm
names it, follow it across requeues, over the cluster's existing
connection in bounded reads), ``why`` (a pending job's reason in plain
words with what to do, and the same job's start estimate on every other
cluster of the federation; what ended an ended one), ``eff`` (what a job
used against what it asked for, energy included where ``energy`` knows it).

They read through the Slurm backend (argv builders and parsers in
``slurmkit.slurm``), ``clusterfiles`` and the federation's estimates, so
the room sits above ``jobs`` and ``federation`` and below ``cli``; ``sweep``
may call it for ``sweep logs``, never the other way round
(tests/unit/test_architecture.py).
"""
