"""Node health: read a node, judge it, and drain or resume it in Slurm by clear ownership rules.

The layers, bottom up:

- ``sources/`` (``host``, ``nvml``, ``ascend``, ``infiniband``, ``kmsg``): the
  only modules that import psutil or pynvml or read sysfs and the kernel log,
  each behind a small function or interface with an injectable root or
  provider (``sources/fakes`` has the NVML fake and the sysfs/kmsg tree
  writers tests use); ``sources/probe`` runs a reading that can block in the
  kernel (a dead NFS mount, a hung GPU driver, an HCA's firmware) in a forked
  child with a deadline, so a check never hangs;
- ``checks``: pure functions from readings and thresholds to
  :class:`~slurmkit.health.findings.CheckResult` values (``findings``: a check's result and a node's
  report, JSON both ways);
- ``plan`` (what one node is checked against), ``node`` (one node's check,
  with its state file across runs), ``ownership`` (the drain reason, who owns
  a drain, when to resume, the drain cap), ``fleet`` (``slurmkit health sweep``:
  every node of some clusters over SSH, bounded fan-out, one lock; ``relay``
  when one coordinator is not enough), ``prom`` (Prometheus
  textfile) and ``report`` (the text views).

Only ``slurmkit.cli.health_commands`` calls into this package from the CLI;
``slurmkit health check`` imports psutil but never jinja2 or paramiko.
"""
