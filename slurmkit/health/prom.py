"""A node's report as a Prometheus textfile, for node_exporter's textfile collector.

Written atomically: a temporary file in the same directory, flushed and
fsynced, then renamed over the target, so the collector never reads half a
file.  The target should end in ``.prom`` (node_exporter reads only those)
and be in the directory ``--collector.textfile.directory`` names.

Metrics (every one labelled with ``node``, ``cluster`` and ``partition``)::

    slurmkit_health_healthy                  1 if no check failed
    slurmkit_health_check_status{check=...}  0 ok, 1 warn, 2 fail
    slurmkit_health_check_value{check=...}   the measured number, where there is one
    slurmkit_health_last_run_timestamp_seconds
    slurmkit_health_duration_seconds
"""

from slurmkit.health.findings import FAIL, OK, WARN

_STATUS = {OK: 0, WARN: 1, FAIL: 2}


def _escape(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels) -> str:
    return "{%s}" % ",".join('%s="%s"' % (k, _escape(v)) for k, v in labels.items())


def render(report) -> str:
    base = {"node": report.node, "cluster": report.cluster, "partition": report.partition}
    lines = [
        "# HELP slurmkit_health_healthy 1 if no health check failed on the node, else 0.",
        "# TYPE slurmkit_health_healthy gauge",
        "slurmkit_health_healthy%s %d" % (_labels(**base), 1 if report.healthy else 0),
        "# HELP slurmkit_health_check_status Result of one health check: 0 ok, 1 warn, 2 fail.",
        "# TYPE slurmkit_health_check_status gauge",
    ]
    for r in report.results:
        lines.append("slurmkit_health_check_status%s %d" % (_labels(check=r.name, **base), _STATUS[r.status]))
    lines += ["# HELP slurmkit_health_check_value The number a health check measured.",
              "# TYPE slurmkit_health_check_value gauge"]
    for r in report.results:
        if r.value is not None:
            lines.append("slurmkit_health_check_value%s %r" % (_labels(check=r.name, **base), float(r.value)))
    lines += ["# HELP slurmkit_health_last_run_timestamp_seconds When the checks ran (unix time).",
              "# TYPE slurmkit_health_last_run_timestamp_seconds gauge",
              "slurmkit_health_last_run_timestamp_seconds%s %.3f" % (_labels(**base), report.started),
              "# HELP slurmkit_health_duration_seconds How long the checks took.",
              "# TYPE slurmkit_health_duration_seconds gauge",
              "slurmkit_health_duration_seconds%s %.4f" % (_labels(**base), report.duration)]
    return "\n".join(lines) + "\n"


def write(path: str, report) -> None:
    """Replace ``path`` with the report's metrics in one rename (OSError if the directory is not writable)."""
    from slurmkit.textfile import write_atomic

    # 0644: node_exporter often runs as its own user.  The temporary name does not end in .prom,
    # so the textfile collector never reads a half-written file.
    write_atomic(path, render(report), mode=0o644, fsync=True)
