"""Slurm time strings (``--time``, ``MaxTime``): the one parser of the project.

The forms sbatch accepts for --time: "minutes", "minutes:seconds",
"hours:minutes:seconds", "days-hours", "days-hours:minutes" and
"days-hours:minutes:seconds"; plus the spellings of "no limit".
"""

import re
from typing import Optional

from slurmkit.errors import UsageError

# Matched whole (fullmatch) in ASCII digits: Python's \d and int() also take
# '٣' or '３', which sbatch does not read as numbers.
_TIME_FORMS = (
    (re.compile(r"([0-9]+)", re.ASCII), ("m",)),
    (re.compile(r"([0-9]+):([0-9]+)", re.ASCII), ("m", "s")),
    (re.compile(r"([0-9]+):([0-9]+):([0-9]+)", re.ASCII), ("h", "m", "s")),
    (re.compile(r"([0-9]+)-([0-9]+)", re.ASCII), ("d", "h")),
    (re.compile(r"([0-9]+)-([0-9]+):([0-9]+)", re.ASCII), ("d", "h", "m")),
    (re.compile(r"([0-9]+)-([0-9]+):([0-9]+):([0-9]+)", re.ASCII), ("d", "h", "m", "s")),
)
UNLIMITED_TIMES = ("unlimited", "infinite")
TIME_FORMATS_TEXT = "[D-]HH:MM:SS, MM:SS, MM, D-HH, D-HH:MM or UNLIMITED"


def slurm_time_seconds(text) -> Optional[int]:
    """Seconds in a Slurm time string; None for UNLIMITED/infinite.

    Raises ValueError (with a readable message) for anything else.  Minutes
    and seconds after a colon must be below 60, hours below 24 once days are
    given; a leading field is unbounded ("90" minutes, "48:00:00"), as in
    Slurm.
    """
    text = str(text).strip()
    if text.lower() in UNLIMITED_TIMES:
        return None
    for pattern, fields in _TIME_FORMS:
        match = pattern.fullmatch(text)
        if not match:
            continue
        parts = dict(zip(fields, (int(g) for g in match.groups())))
        leading = fields[0]
        for unit, limit in (("s", 60), ("m", 60), ("h", 24)):
            if unit in parts and unit != leading and parts[unit] >= limit:
                if unit == "h" and "d" not in parts:
                    continue
                raise ValueError("%r is not a valid Slurm time: %s must be below %d"
                                 % (text, {"s": "seconds", "m": "minutes", "h": "hours"}[unit], limit))
        return (parts.get("d", 0) * 86400 + parts.get("h", 0) * 3600
                + parts.get("m", 0) * 60 + parts.get("s", 0))
    raise ValueError("%r is not a valid Slurm time; use %s" % (text, TIME_FORMATS_TEXT))


def is_zero(text) -> bool:
    """Whether a valid Slurm time is zero: sbatch reads ``--time=0`` as *no* time limit, not as none at all."""
    try:
        return slurm_time_seconds(text) == 0
    except ValueError:
        return False


def parse_minutes(text) -> Optional[float]:
    """Minutes in a Slurm time string; None for UNLIMITED.  UsageError when malformed."""
    try:
        seconds = slurm_time_seconds(text)
    except ValueError as exc:
        raise UsageError("%s (e.g. --time 12:00:00)" % exc) from None
    return None if seconds is None else seconds / 60.0


# ---------------------------------------------------------------------------
# Moments (--deadline): when, not how long

_RELATIVE_RE = re.compile(r"(?:now)?\+([0-9]+)\s*(m|min|minutes?|h|hours?|d|days?)", re.ASCII | re.IGNORECASE)
_CLOCK_RE = re.compile(r"([0-9]{1,2}):([0-9]{2})", re.ASCII)
WHEN_FORMATS_TEXT = "YYYY-MM-DD[THH:MM[:SS]], HH:MM (the next one), +8h, +90m, +2d or now+8hours"


def parse_when(text, now):
    """The moment ``text`` names, as a naive local datetime like ``now`` (Slurm's own times are local).

    Accepts an ISO date and time (``2026-12-05T08:00``), a date (``2026-12-05``: its midnight, as Slurm's
    ``--begin`` and ``--deadline`` read it), a clock time (``08:00``: the next one after ``now``) or a time
    from now (``+8h``, ``+90m``, ``+2d``, ``now+8hours``); ValueError otherwise.
    """
    from datetime import datetime, timedelta

    raw = str(text).strip()
    match = _RELATIVE_RE.fullmatch(raw)
    if match:
        unit = match.group(2)[0].lower()
        return now + timedelta(**{{"m": "minutes", "h": "hours", "d": "days"}[unit]: int(match.group(1))})
    match = _CLOCK_RE.fullmatch(raw)
    if match:
        hour, minute = int(match.group(1)), int(match.group(2))
        if hour > 23 or minute > 59:
            raise ValueError("%r is not a time of day; use HH:MM from 00:00 to 23:59" % raw)
        moment = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
        return moment if moment > now else moment + timedelta(days=1)
    try:
        moment = datetime.fromisoformat(raw.replace(" ", "T", 1)) if re.fullmatch(
            r"[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9]{2}:[0-9]{2}(:[0-9]{2})?)?", raw, re.ASCII) else None
    except ValueError:
        moment = None
    if moment is None:
        raise ValueError("%r is not a moment; use %s" % (raw, WHEN_FORMATS_TEXT))
    return moment
