"""Carbon intensity forecasts in the Carbon Aware SDK's shape: parsed, checked, or refused with a reason.

The Carbon Aware SDK (and the tools around it) print a forecast as a list of
points ``{"location", "timestamp", "duration", "value"}``: ``timestamp`` an
ISO 8601 instant, ``duration`` in minutes, ``value`` in gCO2e/kWh.  Its web
API wraps them as ``[{"location": ..., "forecastData": [points...]}]``;
both are read here.  A forecast is data someone else's job writes every so
often, so it can be late, cut short or wrong: :func:`parse_forecast` refuses
one that is not JSON (a file cut off mid-write), holds a value that is not a
finite number, is negative or beyond any real grid, has points out of order,
or is stale (its last point ends before now).  Whoever reads it falls back to
the site's hourly profile, with one warning line (:mod:`slurmkit.energy.model`).

A site may instead name a command that prints the forecast (a Carbon Aware
SDK CLI, a script asking its grid operator): :func:`command_forecast` runs it
(its words, no shell) with a timeout, its output bounded on disk, not in
memory, and refuses a command that fails, is slow or prints too much, as it
refuses a bad file.
"""

import json
import math
import os
import signal
import subprocess
import tempfile
from datetime import datetime, timedelta, timezone
from typing import List, NamedTuple, Optional, Sequence

# The dirtiest grids (lignite) are near 1,200 gCO2e/kWh: a value far above that is a unit slip (lbs/MWh,
# WattTime's raw unit, is about twice g/kWh) or a broken feed, not a forecast to plan by.
MAX_INTENSITY = 2000.0
# A forecast file of a few days at 5-minute points is well under a megabyte.
FORECAST_FILE_LIMIT = 8 * 1024 * 1024


class ForecastProblem(Exception):
    """Why a forecast was refused (the message names what is wrong, for the one warning line)."""


class ForecastPoint(NamedTuple):
    start: datetime                      # aware (UTC)
    end: datetime                        # aware (UTC): start + duration
    value: float                         # gCO2e/kWh


class Forecast(NamedTuple):
    """Points in time order, without overlaps (gaps allowed: there the profile applies)."""

    points: Sequence[ForecastPoint]
    location: Optional[str] = None

    @property
    def end(self) -> datetime:
        return self.points[-1].end

    def at(self, when: datetime) -> Optional[float]:
        """The intensity at the aware instant ``when``; None outside every point."""
        # A binary search would do, but forecasts hold at most a few thousand points and this runs per segment.
        lo, hi = 0, len(self.points)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.points[mid].end <= when:
                lo = mid + 1
            else:
                hi = mid
        if lo < len(self.points) and self.points[lo].start <= when < self.points[lo].end:
            return self.points[lo].value
        return None

    def boundaries(self, start: datetime, end: datetime) -> List[datetime]:
        """Where the intensity may change between ``start`` and ``end`` (aware)."""
        out = []
        for point in self.points:
            for t in (point.start, point.end):
                if start < t < end:
                    out.append(t)
        return out


def parse_instant(text) -> datetime:
    """An ISO 8601 instant (``2026-12-04T22:00:00Z``, with an offset) as an aware UTC datetime.

    A time without an offset is refused: a forecast read as local time on one machine and UTC on another
    would shift every hour.
    """
    if not isinstance(text, str):
        raise ForecastProblem("timestamp %r is not text" % (text,))
    raw = text.strip()
    if raw.endswith(("Z", "z")):
        raw = raw[:-1] + "+00:00"
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        raise ForecastProblem("timestamp %r is not an ISO 8601 time (e.g. 2026-12-04T22:00:00Z)" % text) from None
    if when.tzinfo is None:
        raise ForecastProblem("timestamp %r has no time zone; write it in UTC with Z (2026-12-04T22:00:00Z)" % text)
    return when.astimezone(timezone.utc)


def _points_of(data, location: Optional[str]):
    """The raw point dicts of ``location`` from either shape; ForecastProblem when there are none."""
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not data:
        raise ForecastProblem("expected a JSON list of {location, timestamp, duration, value} points, or of "
                              "{location, forecastData} forecasts")
    if all(isinstance(d, dict) and "forecastData" in d for d in data):
        raw = []
        for entry in data:
            if not isinstance(entry["forecastData"], list):
                raise ForecastProblem("forecastData of %r is not a list" % entry.get("location"))
            raw.extend(dict(p, location=p.get("location", entry.get("location")))
                       for p in entry["forecastData"] if isinstance(p, dict))
    elif all(isinstance(d, dict) for d in data):
        raw = data
    else:
        raise ForecastProblem("expected a list of JSON objects")
    locations = sorted({str(p.get("location")) for p in raw if p.get("location") is not None})
    if location is not None:
        raw = [p for p in raw if p.get("location") == location]
        if not raw:
            raise ForecastProblem("no points for location %r (it has: %s)" % (location, ", ".join(locations) or "none"))
    elif len(locations) > 1:
        raise ForecastProblem("it holds several locations (%s); name one with carbon_forecast_location"
                              % ", ".join(locations))
    if not raw:
        raise ForecastProblem("it holds no points")
    return raw, (location or (locations[0] if locations else None))


def parse_forecast(text: str, now: datetime, location: Optional[str] = None) -> Forecast:
    """The forecast in ``text`` (JSON), checked against the aware instant ``now``; ForecastProblem if refused."""
    try:
        # NaN and Infinity are accepted by json here so that the value check below names them.
        data = json.loads(text)
    except ValueError as exc:
        raise ForecastProblem("not valid JSON (%s): cut off while being written?" % exc) from None
    raw, location = _points_of(data, location)
    points = []
    for index, item in enumerate(raw):
        for key in ("timestamp", "duration", "value"):
            if key not in item:
                raise ForecastProblem("point %d has no %r" % (index, key))
        value, minutes = item["value"], item["duration"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ForecastProblem("point %d: value %r is not a finite number" % (index, value))
        if value < 0:
            raise ForecastProblem("point %d: value %s is negative; intensities are gCO2e/kWh >= 0" % (index, value))
        if value > MAX_INTENSITY:
            raise ForecastProblem("point %d: value %s gCO2e/kWh is beyond any grid (at most %d); lbs/MWh, or a "
                                  "broken feed?" % (index, value, MAX_INTENSITY))
        if isinstance(minutes, bool) or not isinstance(minutes, (int, float)) or not math.isfinite(minutes) \
                or not 0 < minutes <= 24 * 60:
            raise ForecastProblem("point %d: duration %r is not a number of minutes from 1 to 1440" % (index, minutes))
        start = parse_instant(item["timestamp"])
        points.append(ForecastPoint(start, start + timedelta(minutes=minutes), float(value)))
    points.sort(key=lambda p: p.start)
    for before, after in zip(points, points[1:]):
        if after.start < before.end:
            raise ForecastProblem("points overlap at %s" % after.start.isoformat())
    if points[-1].end <= now:
        now_utc = now.astimezone(timezone.utc).replace(microsecond=0)
        raise ForecastProblem("stale: its last point ends %s, before now (%s); is the job that writes it running?"
                              % (points[-1].end.isoformat(), now_utc.isoformat()))
    return Forecast(tuple(points), location)


def read_forecast(path: str, now: datetime, location: Optional[str] = None) -> Forecast:
    """The forecast in the file ``path``, checked (:func:`parse_forecast`); ForecastProblem when refused."""
    from slurmkit import textfile

    try:
        text = textfile.read_text(path, FORECAST_FILE_LIMIT)
    except textfile.FileProblem as exc:
        raise ForecastProblem(str(exc)) from None
    return parse_forecast(text, now, location)


def command_forecast(argv, timeout: float, now: datetime, location: Optional[str] = None) -> Forecast:
    """The forecast ``argv`` prints on its output within ``timeout`` seconds, checked (:func:`parse_forecast`);
    ForecastProblem when it cannot be started, fails, runs too long or prints too much."""
    name = os.path.basename(argv[0])
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            # A session of its own: at the timeout its children (a curl it started) go with it.
            proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    start_new_session=True)
        except OSError as exc:
            raise ForecastProblem("command %s could not start: %s" % (name, exc.strerror or exc)) from None
        try:
            status = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            raise ForecastProblem("command %s printed no forecast within %g s (carbon_forecast_timeout)"
                                  % (name, timeout)) from None
        if status != 0:
            err.seek(0)
            said = [ln.strip() for ln in err.read(4096).decode("utf-8", "replace").splitlines() if ln.strip()]
            raise ForecastProblem("command %s exited with status %d%s" % (
                name, status, ": %s" % said[-1] if said else ""))
        size = out.seek(0, os.SEEK_END)
        if size > FORECAST_FILE_LIMIT:
            raise ForecastProblem("command %s printed %d bytes, more than a forecast's %d"
                                  % (name, size, FORECAST_FILE_LIMIT))
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    return parse_forecast(text, now, location)
