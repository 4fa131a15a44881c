"""Energy, cost and carbon (issue "Green compute").

Built so far: :mod:`slurmkit.energy.forecast` (Carbon Aware SDK forecasts,
checked or refused with a reason) and :mod:`slurmkit.energy.model` (a job's
expected kWh, cost and gCO2e from the site's power model, prices, PUE and
carbon intensity; and what a finished job used, for ``eff``).  The
federation's windows (``--prefer``, ``--deadline``) are
:mod:`slurmkit.federation.windows`.

What goes here: the site's power model per partition, energy prices and
carbon intensity by hour (a fixed value, a profile or a forecast in the
Carbon Aware SDK's ``{location, timestamp, duration, value}`` shape), and
what a job used, from the best source there is (Slurm's ConsumedEnergy,
NVML's energy counters read through ``slurmkit.health.sources``, or the
model, saying which).  Unknown data stays unknown, never zero.

Pure data and arithmetic: the federation's planner ranks candidates by it
(``--prefer cheap|green``, ``--deadline``) and ``observe``'s ``eff`` prints
it, so it sits below both; it may import ``site``, ``times`` and ``slurm``'s
records, and nothing that opens a connection (tests/unit/test_architecture.py).
"""
