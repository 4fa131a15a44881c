"""``python -m slurmkit.compat SCRIPT [ARGS...]`` (or ``-m MODULE [ARGS...]``): run a submitit script
on slurmkit, unchanged.

``submitit`` and its submodules are made to resolve to :mod:`slurmkit.compat`
(:func:`slurmkit.compat.install`), then the script runs as ``__main__`` with ``sys.argv``
set as if it had been started by ``python SCRIPT ARGS...`` (runpy does what the interpreter
does, its directory first on ``sys.path`` included).  The site is ``$SLURMKIT_SITE``.
"""

import os
import runpy
import sys

USAGE = "usage: python -m slurmkit.compat SCRIPT [ARGS...]  |  python -m slurmkit.compat -m MODULE [ARGS...]"


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE + "\nRuns a script written for submitit with `import submitit` resolving to slurmkit "
              "(set SLURMKIT_SITE to the site).", file=sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    from slurmkit.compat import install

    install()
    if argv[0] == "-m":
        if len(argv) < 2:
            print(USAGE, file=sys.stderr)
            return 2
        sys.argv = [argv[1]] + argv[2:]      # runpy puts the module's path in argv[0]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return 0
    script = argv[0]
    if not os.path.exists(script):
        print("slurmkit.compat: error: no script %s (give a path to a Python file, or -m MODULE)" % script,
              file=sys.stderr)
        return 2
    sys.argv = argv
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
