"""The Python API (issue "A Python API a submitit user switches to by changing one import"): the
room, not yet built.

What goes here: ``AutoExecutor``/``SlurmExecutor`` and ``Job`` with
submitit's names and semantics, plus ``cluster=``/``comm=``/``image=``/
``auto_requeue=``; the callable and its result carried with cloudpickle over
the connection a cluster already has (no shared filesystem assumed); and
``compat``, importable as ``submitit`` for scripts that cannot be edited.

The rule: the API and the CLI are two faces of one library.  The API calls
the same functions the commands call (``jobs``, ``federation``, ``sweep``'s
arrays, ``requeue``'s tracking); it never imports click or ``slurmkit.cli``,
and nothing in slurmkit imports it except the package's own top-level
names (tests/unit/test_architecture.py).
"""
