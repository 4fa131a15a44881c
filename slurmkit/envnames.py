"""Which environment variables a job may be given: one rule for ``--env`` and a site's fabric ``env``.

Both end up as ``export NAME=VALUE`` lines of the job script, so the same
names break it whoever writes them: a name that is not a shell variable, one
Slurm sets for the job (``SLURM_JOB_ID=7`` in the script sends every srun step
into job 7, ``SLURM_NTASKS`` changes its shape), or one the script's own bash
reads (``IFS`` breaks its word splitting, ``SHELLOPTS``/``BASHOPTS`` are
read-only, so exporting them kills the script, ``BASH_ENV`` and ``ENV`` run a
file in every bash the script starts).  Pure, and below both the site configs
and the script renderer.
"""

import re
from typing import Optional

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
SLURM_PREFIXES = ("SLURM_", "SLURMD_")
SHELL_VARIABLES = ("IFS", "SHELLOPTS", "BASHOPTS", "BASH_ENV", "ENV", "BASH_XTRACEFD", "PS4", "POSIXLY_CORRECT")


def problem(name: str) -> Optional[str]:
    """Why a job cannot be given the variable ``name`` (one sentence), or None when it can."""
    if not NAME_RE.fullmatch(name):
        return ("%r is not a valid environment variable name (letters, digits and '_', not starting with a "
                "digit)" % name)
    if name.startswith(SLURM_PREFIXES):
        return ("%s is set by Slurm for the job; a value of your own would send its srun steps into another "
                "job or change their shape: use the matching slurmkit option instead" % name)
    if name in SHELL_VARIABLES:
        return "%s is read by the job script's own shell, which it would break; set it inside your program instead" % name
    return None
