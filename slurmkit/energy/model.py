"""What a job of N nodes x G GPUs for a duration starting at a time is expected to use: kWh, cost, gCO2e
(:func:`expected`, for the planner), and what a job that ran used (:func:`used`, for ``eff``: Slurm's
measured energy where there is one, the power model otherwise).

Pure arithmetic over the site's data (:mod:`slurmkit.site.model`):

- **Power**: nodes x (node_busy_watts + G x gpu_busy_watts) from the
  partition's power model; a job is planned as busy the whole time (an
  upper bound a site's sustainability report can stand behind).
- **Energy**: power x hours x PUE (the facility's energy, not just the
  IT's).  A cluster without a PUE counts IT energy alone, and says so
  (``Expected.pue``).
- **Cost**: the GPU-hour price (``price_per_gpu_hour``, as before) plus
  the energy price (``energy.price_per_kwh``), each by the hour it falls in;
  a part the site did not configure is not charged, and with neither the
  cost is unknown.
- **Carbon**: kWh x intensity, segment by segment: the forecast where it
  covers the time, the hourly profile (or fixed value) elsewhere.

Missing data gives None, never zero: a job on a cluster without a power
model has unknown energy, so unknown carbon; ranking puts unknown last
rather than calling it free or clean.  Hourly windows are read in this
machine's local time (as Slurm's own start estimates are); naive datetimes
are local, aware ones are converted.
"""

from datetime import datetime, timedelta, timezone
from typing import List, NamedTuple, Optional, Sequence, Tuple

from slurmkit.energy.forecast import Forecast, ForecastProblem, command_forecast, read_forecast
from slurmkit.site.model import Cluster, HourWindow, Partition

# Segments are cut on this grid (and where a forecast point starts or ends): every time zone's offset is a
# multiple of 15 minutes, so each local hour's window is constant within a segment.
_GRID = timedelta(minutes=15)
_EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)


class Expected(NamedTuple):
    """A job's expected use; None: unknown (with ``why`` naming what is missing)."""

    kwh: Optional[float]
    cost: Optional[float]
    gco2: Optional[float]
    gpu_hours: float
    pue: Optional[float]                 # the PUE applied; None: IT energy only (the site set none)
    carbon_source: Optional[str]         # "forecast", "profile", "forecast+profile", or None when unknown
    why: Tuple[str, ...] = ()            # what made a value unknown, one phrase each

    def to_dict(self):
        return {"kwh": self.kwh, "cost": self.cost, "gco2": self.gco2, "gpu_hours": self.gpu_hours,
                "pue": self.pue, "carbon_source": self.carbon_source, "unknown": list(self.why)}


class CarbonSource(NamedTuple):
    """A cluster's carbon intensity over time: its forecast (if one was read and passed) over its profile."""

    profile: Tuple[HourWindow, ...] = ()
    forecast: Optional[Forecast] = None
    warning: Optional[str] = None        # the one line saying why a configured forecast is not used


def window_value(windows: Sequence[HourWindow], when: datetime, tz: Optional[str] = None) -> Optional[float]:
    """The value of the window holding ``when``'s hour in the time zone ``tz`` (an IANA name; None: this
    machine's); None when no window does (or none is set)."""
    hour = _local(when, tz).hour
    for window in windows:
        start, end = window.start_hour, window.end_hour
        # "08-20" is 08:00-19:59; "20-08" wraps past midnight.
        if (start <= hour < end) if start < end else (hour >= start or hour < end):
            return window.value
    return None


def job_watts(partition: Partition, nodes: int, gpus_per_node: int) -> Tuple[Optional[float], Optional[str]]:
    """(watts the job draws busy, None) or (None, why it is unknown)."""
    power = partition.power
    if power is None:
        return None, "partition %s has no power model" % partition.name
    if power.node_busy_watts is None:
        return None, "partition %s's power model has no node_busy_watts" % partition.name
    if gpus_per_node and power.gpu_busy_watts is None:
        return None, "partition %s's power model has no gpu_busy_watts" % partition.name
    return nodes * (power.node_busy_watts + gpus_per_node * (power.gpu_busy_watts or 0.0)), None


def gpu_price_windows(cluster: Cluster) -> List[HourWindow]:
    """The cluster's GPU-hour prices as hour windows, for :func:`window_value`."""
    return [HourWindow(w.start_hour, w.end_hour, w.price) for w in cluster.price_per_gpu_hour]


def carbon_source(cluster: Cluster, now: datetime, read=None) -> CarbonSource:
    """The cluster's carbon intensity: its forecast (file or command) when it passes the checks, else its profile.

    A refused forecast (unreadable, cut off, NaN, negative, huge, stale; a
    command that fails or is slow) gives one warning line naming the cluster,
    the file or command and the reason, and what is used instead.  ``read``:
    :func:`read_forecast` when None (a test's fake).
    """
    energy = cluster.energy
    profile = energy.carbon_intensity
    if not energy.carbon_forecast and not energy.carbon_forecast_command:
        return CarbonSource(profile)
    try:
        if energy.carbon_forecast:
            source = energy.carbon_forecast
            forecast = (read or read_forecast)(source, _aware(now), energy.carbon_forecast_location)
        else:
            source = "command %s" % " ".join(energy.carbon_forecast_command)
            forecast = command_forecast(energy.carbon_forecast_command, energy.carbon_forecast_timeout, _aware(now),
                                        energy.carbon_forecast_location)
    except ForecastProblem as exc:
        instead = "using the hourly profile" if profile else "carbon is unknown there (no carbon_intensity profile)"
        return CarbonSource(profile, None, "cluster %s: carbon forecast %s refused: %s; %s"
                            % (cluster.name, source, exc, instead))
    return CarbonSource(profile, forecast)


def expected(cluster: Cluster, partition: Partition, nodes: int, gpus_per_node: int, start: datetime,
             seconds: float, carbon: Optional[CarbonSource] = None) -> Expected:
    """kWh, cost and gCO2e of ``nodes`` x ``gpus_per_node`` busy for ``seconds`` from ``start``.

    ``carbon``: the cluster's intensity (:func:`carbon_source`, read once per
    plan); None uses the profile alone, reading no file.
    """
    watts, unknown = job_watts(partition, nodes, gpus_per_node)
    return _over_time(cluster, nodes * gpus_per_node, start, seconds, watts, carbon, [unknown] if unknown else [])


def used(cluster: Cluster, partition: Optional[Partition], nodes: int, gpus: int, start: datetime, seconds: float,
         measured_kwh: Optional[float] = None, carbon: Optional[CarbonSource] = None,
         gpu_kwh: Optional[float] = None) -> Tuple[Expected, Optional[str]]:
    """What a job that ran used: (kWh, cost, gCO2e over the hours it really ran, the energy's source).

    The source is ``"slurm"`` when Slurm measured the energy (ConsumedEnergy,
    the nodes' own: PUE is applied to it), ``"nvml"`` when NVML measured the
    GPUs (``gpu_kwh``, :mod:`slurmkit.energy.nvml`) and the power model gives
    the rest of each node, ``"model"`` when the partition's power model stands
    in alone (busy the whole time: an upper bound), None when none can say.
    ``gpus`` is the job's total.
    """
    hours = max(0.0, seconds) / 3600.0
    if measured_kwh is not None and hours > 0:
        return _over_time(cluster, gpus, start, seconds, measured_kwh * 1000.0 / hours, carbon, []), "slurm"
    if partition is None:
        return _over_time(cluster, gpus, start, seconds, None, carbon, ["the job's partition is not in the site"]), None
    if gpu_kwh is not None and hours > 0:
        # NVML counts the GPU boards: the rest of each node (CPUs, memory, NICs) is the model's.
        rest, unknown = job_watts(partition, nodes, 0)
        watts = None if rest is None else rest + gpu_kwh * 1000.0 / hours
        why = ["NVML measured the GPUs (%.3f kWh), but the rest of the nodes is unknown: %s" % (gpu_kwh, unknown)
               ] if unknown else []
        return _over_time(cluster, gpus, start, seconds, watts, carbon, why), "nvml" if watts is not None else None
    per_node = gpus // nodes if nodes else 0
    watts, unknown = job_watts(partition, nodes, per_node)
    return (_over_time(cluster, gpus, start, seconds, watts, carbon, [unknown] if unknown else []),
            "model" if watts is not None else None)


def _over_time(cluster: Cluster, gpus: int, start: datetime, seconds: float, watts: Optional[float],
               carbon: Optional[CarbonSource], why: List[str]) -> Expected:
    """Energy, cost and carbon of drawing ``watts`` (IT; None: unknown) with ``gpus`` GPUs for ``seconds``."""
    carbon = carbon if carbon is not None else CarbonSource(cluster.energy.carbon_intensity)
    pue = cluster.energy.pue
    kw = None if watts is None else watts * (pue or 1.0) / 1000.0
    begin = _aware(start)
    end = begin + timedelta(seconds=max(0.0, seconds))
    cost_energy = cost_gpu = gco2 = 0.0
    sources = set()
    energy_price_known = gpu_price_known = carbon_known = True
    gpu_prices = gpu_price_windows(cluster)
    for a, b in _segments(begin, end, carbon.forecast):
        hours = (b - a).total_seconds() / 3600.0
        mid = a + (b - a) / 2
        if gpu_prices:
            price = window_value(gpu_prices, mid, cluster.timezone)
            if price is None:
                gpu_price_known = False
            else:
                cost_gpu += gpus * hours * price
        if cluster.energy.price_per_kwh:
            price = window_value(cluster.energy.price_per_kwh, mid, cluster.timezone)
            if price is None or kw is None:
                energy_price_known = False
            else:
                cost_energy += kw * hours * price
        intensity = carbon.forecast.at(mid) if carbon.forecast is not None else None
        if intensity is not None:
            sources.add("forecast")
        else:
            intensity = window_value(carbon.profile, mid, cluster.timezone)
            if intensity is not None:
                sources.add("profile")
        if intensity is None or kw is None:
            carbon_known = False
        else:
            gco2 += kw * hours * intensity
    configured = bool(gpu_prices) or bool(cluster.energy.price_per_kwh)
    if not configured:
        why.append("cluster %s has no price (price_per_gpu_hour, energy.price_per_kwh)" % cluster.name)
    elif cluster.energy.price_per_kwh and kw is None:
        why.append("the energy price needs the energy")
    cost = cost_gpu + cost_energy if configured and energy_price_known and gpu_price_known else None
    if not carbon.profile and carbon.forecast is None:
        why.append("cluster %s has no carbon intensity" % cluster.name)
    elif not carbon_known and kw is not None:
        why.append("cluster %s's carbon intensity does not cover the whole run" % cluster.name)
    known_carbon = carbon_known and kw is not None and bool(sources)
    return Expected(
        kwh=None if kw is None else kw * (end - begin).total_seconds() / 3600.0,
        cost=cost, gco2=gco2 if known_carbon else None, gpu_hours=gpus * (end - begin).total_seconds() / 3600.0,
        pue=pue, carbon_source="+".join(sorted(sources)) if known_carbon else None, why=tuple(why))


def _segments(begin: datetime, end: datetime, forecast: Optional[Forecast]):
    """[a, b) pieces of [begin, end) within which every hourly window and forecast point is constant."""
    if end <= begin:
        return
    cuts = set()
    step = _EPOCH + ((begin - _EPOCH) // _GRID + 1) * _GRID
    while step < end:
        cuts.add(step)
        step += _GRID
    if forecast is not None:
        cuts.update(forecast.boundaries(begin, end))
    points = [begin] + sorted(cuts) + [end]
    for a, b in zip(points, points[1:]):
        yield a, b


def _aware(when: datetime) -> datetime:
    """``when`` as an aware UTC datetime; a naive one is this machine's local time (as Slurm prints)."""
    return (when if when.tzinfo is not None else when.astimezone()).astimezone(timezone.utc)


def _local(when: datetime, tz: Optional[str] = None) -> datetime:
    """``when`` in the time zone ``tz`` (a cluster's), else in this machine's (a naive ``when`` already is)."""
    if tz is not None:
        from zoneinfo import ZoneInfo

        return _aware(when).astimezone(ZoneInfo(tz))
    return when.astimezone() if when.tzinfo is not None else when
