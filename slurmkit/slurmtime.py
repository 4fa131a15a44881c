"""Slurm time strings (``--time``, ``MaxTime``) to minutes and back."""

import re
from typing import Optional

from slurmkit.errors import UsageError

_UNLIMITED = ("UNLIMITED", "INFINITE")
_FORMS = [
    (re.compile(r"^(\d+)-(\d+):(\d+):(\d+)$"), lambda d, h, m, s: d * 1440 + h * 60 + m + s / 60),
    (re.compile(r"^(\d+)-(\d+):(\d+)$"), lambda d, h, m: d * 1440 + h * 60 + m),
    (re.compile(r"^(\d+)-(\d+)$"), lambda d, h: d * 1440 + h * 60),
    (re.compile(r"^(\d+):(\d+):(\d+)$"), lambda h, m, s: h * 60 + m + s / 60),
    (re.compile(r"^(\d+):(\d+)$"), lambda m, s: m + s / 60),
    (re.compile(r"^(\d+)$"), lambda m: m),
]


def parse_minutes(text: str) -> Optional[float]:
    """Minutes in a Slurm time string; None for UNLIMITED.  UsageError when malformed."""
    value = str(text).strip()
    if value.upper() in _UNLIMITED:
        return None
    for pattern, convert in _FORMS:
        m = pattern.match(value)
        if m:
            return convert(*(int(g) for g in m.groups()))
    raise UsageError("%r is not a Slurm time; use MINUTES, HH:MM:SS or D-HH:MM:SS" % text)


def is_valid(text: str) -> bool:
    try:
        parse_minutes(text)
        return True
    except UsageError:
        return False
