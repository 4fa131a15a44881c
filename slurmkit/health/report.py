"""Text views of health reports: one node's checks, and a sweep's table."""

from slurmkit.health.findings import FAIL, OK, WARN


def node_text(report, action=None) -> str:
    lines = ["%s (cluster %s, partition %s): %s, %d checks in %.2fs" % (
        report.node, report.cluster or "?", report.partition or "?",
        "healthy" if report.healthy else "UNHEALTHY (%s)" % ", ".join(report.failing),
        len(report.results), report.duration)]
    width = max([len(r.name) for r in report.results] + [5])
    order = {FAIL: 0, WARN: 1, OK: 2}
    for r in sorted(report.results, key=lambda r: order[r.status]):
        lines.append("  %-4s  %-*s  %s" % (r.status, width, r.name, r.message))
    if action:
        lines.append("slurm: %s" % action)
    return "\n".join(lines)


def _table(rows):
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows)


def sweep_text(result) -> str:
    from slurmkit.health.fleet import HEALTHY, SKIPPED

    header = ("CLUSTER", "NODE", "PARTITION", "SLURM", "HEALTH", "FAILING / WHY", "ACTION")
    rows = [header]
    for r in result.rows:
        if r.report is not None:
            why = ", ".join(r.report.failing) or "-"
        else:
            why = r.error.split("\n")[0] or "-"
            why = why if len(why) <= 90 else why[:87] + "..."
        action = r.action if r.action and r.action != "in service" else "-"
        rows.append((r.cluster, r.node, r.partition or "-", r.slurm_state, r.status, why, action))
    counts = {}
    for r in result.rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    lines = [_table(rows)] if result.rows else ["no nodes to check"]
    details = []
    for r in result.rows:
        if r.report is not None and r.status != HEALTHY:
            for c in r.report.results:
                if c.status == FAIL:
                    details.append("  %s/%s %s: %s" % (r.cluster, r.node, c.name, c.message))
        elif r.status not in (HEALTHY, SKIPPED) and r.error:
            details.append("  %s/%s: %s" % (r.cluster, r.node, r.error))
    if details:
        lines += ["", "failures:"] + details
    for error in result.errors:
        lines.append("error: %s" % error)
    for failed in result.relays_failed:
        lines.append("relay %s; the sweep checked its group itself" % failed)
    through = ", through %d relay%s" % (result.relays, "" if result.relays == 1 else "s") if result.relays else ""
    lines.append("%d node%s in %.1fs%s: %s" % (len(result.rows), "" if len(result.rows) == 1 else "s",
                                               result.seconds, through,
                                               ", ".join("%d %s" % (n, s) for s, n in sorted(counts.items()))
                                               or "none"))
    return "\n".join(lines)
