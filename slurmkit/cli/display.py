"""Every human-readable view the CLI prints: jobs, clusters, sites, validation, topology, plans.

Pure functions of library data (plus one Slurm read for the topology), so the
CLI stays a thin layer and the text can be tested without click.
"""

from typing import List, Sequence, Tuple

from slurmkit.script import collective


def validate_report(paths: Sequence[str], now=None) -> Tuple[List[str], List[str], List[str]]:
    """(problem lines, lint warnings, files that are fine) for ``site validate``.

    A carbon forecast is data that changes hourly, not configuration: one it
    refuses at ``now`` (default: the current time) is a warning naming what
    is used instead, not a problem of the file.
    """
    from datetime import datetime

    from slurmkit.energy.model import carbon_source
    from slurmkit.site import load_site, validate_files

    problems, warnings, ok = [], [], []
    for path in paths:
        found = validate_files([path])
        if found:
            problems.extend(str(p) for p in found)
            continue
        ok.append(path)
        site = load_site(path)
        for cluster in site.clusters.values():
            for partition in cluster.partitions.values():
                warnings.extend(collective.lint(partition, "%s: clusters.%s.partitions.%s"
                                            % (path, cluster.name, partition.name)))
            warning = carbon_source(cluster, now or datetime.now()).warning
            if warning:
                warnings.append("%s: %s" % (path, warning))
    return problems, warnings, ok


def site_dict(site) -> dict:
    from slurmkit.site.model import as_plain

    data = as_plain(site)
    for cluster in data["clusters"].values():
        for name, partition in cluster["partitions"].items():
            partition["collective_env"] = collective.collective_env(site.clusters[cluster["name"]].partitions[name])
    return data


def site_text(site) -> str:
    lines = ["site %s  (%s)" % (site.name, site.path)]
    if site.description:
        lines.append("  " + site.description)
    d = site.defaults
    lines.append("  defaults: cluster=%s partition=%s time=%s template=%s account=%s qos=%s"
                 % (d.cluster, d.partition, d.time, d.template, d.account or "-", d.qos or "-"))
    lines.append("  max switch wait: %s" % site.max_switch_wait)
    for cluster in site.clusters.values():
        how = "login %s:%d" % (cluster.login.host, cluster.login.port) if cluster.login else "local"
        lines.append("  cluster %s  (%s%s)" % (cluster.name, how,
                                               ", SLURM_CONF=%s" % cluster.slurm_conf if cluster.slurm_conf else ""))
        for p in cluster.partitions.values():
            accel = "%d x %s %s" % (p.gpus_per_node, p.accelerator, p.gpu_model) if p.accelerator != "none" \
                else "no accelerators"
            lines.append("    partition %-8s %s, %d CPUs, max %s nodes, max time %s, fabric %s"
                         % (p.name, accel, p.cpus_per_node, p.max_nodes or "-", p.max_time or "-", p.fabric.type))
            for key, value in collective.collective_env(p).items():
                lines.append("      %s=%s" % (key, value))
            for warning in collective.lint(p):
                lines.append("      warning: %s" % warning)
    return "\n".join(lines)


def topology_report(session, cluster_name=None, partition_name=None, detail=None) -> str:
    from slurmkit.script import topology
    from slurmkit.script.sbatch_header import gres_name

    cluster = session.site.cluster(cluster_name)
    backend = session.backend(cluster.name)
    nodes = backend.nodes()
    # Fresh (the user wants the current picture), and stored for the next render or submit.
    layout = session.layout(cluster, refresh=True, nodes=nodes)
    gres = "gpu"
    if partition_name:
        part = session.site.partition(cluster, partition_name)
        gres = gres_name(part)
        members = set(topology.hostlist.expand(layout.partition_nodes.get(part.name, "")))
        nodes = [n for n in nodes if n.name in members]
    else:
        # Count the cluster's one kind of accelerator; with several kinds, GPUs.
        kinds = {gres_name(p) for p in cluster.partitions.values() if p.accelerator != "none"}
        if len(kinds) == 1:
            gres = kinds.pop()
    header = "cluster %s" % cluster.name + (" partition %s" % partition_name if partition_name else "")
    if detail is None:  # neither --detail nor --summary: by size
        detail = len(nodes) <= topology.SUMMARY_ABOVE_NODES
    if detail:
        return header + "\n" + topology.draw(layout, nodes, gres)
    return (header + " (one line per switch; --detail for every node)\n"
            + topology.draw_summary(layout, nodes, gres))


def status_dict(found, missing, unreachable) -> dict:
    """``status --json``: the jobs found, the ids no cluster knows, the clusters not reached."""
    return {"jobs": [dict(j.to_dict(), id=str(ref), cluster=ref.cluster) for ref, j in found],
            "missing": [str(ref) for ref in missing],
            "unreachable": [{"cluster": c, "reason": r} for c, r in unreachable]}


def status_table(found) -> str:
    rows = [[str(ref), j.name, how_it_ended(j.to_dict()), j.partition, j.node_count,
             j.nodelist if j.nodelist else "(%s)" % j.reason,
             j.start_time.strftime("%Y-%m-%dT%H:%M:%S") if j.start_time else "-"] for ref, j in found]
    return format_table(rows, ["ID", "NAME", "STATE", "PARTITION", "NODES", "NODELIST(REASON)", "START"])


def missing_jobs_message(missing) -> str:
    """One line for every id its cluster does not know."""
    if len(missing) == 1:
        return "job %s is not known to cluster %s" % (missing[0], missing[0].cluster)
    return "jobs not known to their cluster: %s" % ", ".join(str(ref) for ref in missing)


def how_it_ended(job: dict) -> str:
    """``FAILED (exit code 3)``, ``NODE_FAIL (reason NodeDown)``, ``CANCELLED (signal 15)``: the state and why."""
    why = []
    if job.get("exit_code") not in (None, 0):
        why.append("exit code %d" % job["exit_code"])
    if job.get("signal"):
        why.append("signal %d" % job["signal"])
    if job["state"] != "COMPLETED" and job.get("reason") and job["reason"] not in ("None", "NonZeroExitCode"):
        why.append("reason %s" % job["reason"])
    return job["state"] + (" (%s)" % ", ".join(why) if why else "")


def wait_text(summary: dict) -> str:
    """What ``wait`` prints when the job has ended: state and why, nodes, leaf switches, output file.

    A missing output file is marked as such on its line (the warning after it says why): never a
    bare path that sends the user to a file that is not there.
    """
    output = summary["stdout"] or "-"
    if summary.get("output_note") and summary["stdout"]:
        output += " (missing)"
    return "%s %s on %s under leaf switch(es) %s\noutput: %s" % (
        summary["id"], how_it_ended(summary), summary["nodelist"] or "-",
        ", ".join(summary["leaf_switches"]) or "-", output)


def cluster_row(status) -> list:
    """One ``slurmkit clusters`` row; an unreachable cluster says why."""
    if not status.reachable:
        return [status.name, "unreachable", status.version or "-", "-", "-", "-", "-",
                "%.0f" % status.rtt_ms, status.reason]
    # "h100 28/32": the gres type is what users know; an untyped gres keeps its name.
    accelerators = ", ".join("%s %d/%d" % (key.split(":")[-1], v["idle"], v["total"])
                             for key, v in sorted(status.accelerators.items())) or "-"
    return [status.name, "ok", status.version or "-", ",".join(status.partitions) or "-",
            "%d/%d" % (status.nodes_idle, status.nodes_total), accelerators, status.pending_jobs,
            "%.0f" % status.rtt_ms, ""]


def clusters_table(statuses) -> str:
    return format_table([cluster_row(s) for s in statuses],
                        ["CLUSTER", "REACH", "VERSION", "PARTITIONS", "NODES", "ACCELERATORS", "PENDING",
                         "RTT_MS", "REASON"])


def host_key_offer_text(offer) -> str:
    return "cluster %s: login node %s\nhost key: %s %s\nknown_hosts file: %s" % (
        offer.cluster, offer.hostport, offer.keytype, offer.fingerprint, offer.target_file)


def images_table(rows) -> str:
    """``slurmkit images``: one row per image name and the partitions that run it the same way."""
    return format_table([[r.cluster, ",".join(r.partitions), r.runtime, r.image, r.location] for r in rows],
                        ["CLUSTER", "PARTITIONS", "RUNTIME", "IMAGE", "WHERE"])


def templates_table(found, describe) -> str:
    rows = [[name, describe(path), str(path)] for name, path in sorted(found.items())]
    return format_table(rows, ["TEMPLATE", "DESCRIPTION", "FILE"])


def cycle_text(report) -> str:
    """What one daemon cycle did (``slurmkit daemon once``)."""
    lines = ["polled: %s" % (", ".join("%s %d" % kv for kv in sorted(report.polled.items())) or "nothing")]
    lines += ["job %d finished: %s" % pair for pair in report.finished]
    lines += ["job %d restarted as %s" % pair for pair in report.restarted]
    lines += ["job %d stopped: %s" % pair for pair in report.stopped]
    lines += ["error: %s" % e for e in report.errors]
    return "\n".join(lines)


def _when(epoch) -> str:
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch)) if epoch else "-"


def tracked_text(tracked) -> str:
    """``slurmkit daemon jobs``: each tracked job, then its attempts with why each was (not) restarted."""
    if not tracked:
        return "no tracked jobs (submit with --auto-requeue)"
    blocks = []
    for t in tracked:
        head = "%d  %s  %s  on %s  checkpoints %s" % (t.id, t.name, t.state.upper(), t.cluster, t.checkpoint_dir)
        lines = [head]
        if t.excluded:
            lines.append("   excluded nodes: %s" % ",".join(t.excluded))
        rows = []
        for a in t.attempts:
            ended = a.state or ("waiting until %s" % _when(a.not_before) if a.phase == "intent" else a.phase)
            status = []
            if a.exit_code is not None:
                status.append("exit %d" % a.exit_code)
            if a.signal:
                status.append("signal %d" % a.signal)
            rows.append(["#%d" % a.number, "%s:%s" % (a.cluster, a.job_id or "-"), ended, " ".join(status) or "-",
                         a.nodes or "-",
                         "step %d" % a.resume_step if a.resume_step is not None else "start",
                         a.decision or ""])
        table = format_table(rows, ["ATTEMPT", "JOB", "STATE", "EXIT", "NODES", "RESUMED FROM", "DECISION"])
        lines.extend("   " + line for line in table.splitlines())
        lines.extend("   note: %s" % e["message"] for e in t.events[-5:])
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def candidates_table(placement) -> str:
    """The federation's candidates, best first, with why each one was skipped."""
    chosen = placement.submission.ref.cluster if placement.submission else None
    failed = dict(placement.failovers)
    rows = []
    for c in placement.candidates:
        mark = "*" if c.cluster == chosen and c.viable else ""
        note = c.reason or failed.get(c.cluster, "")
        rows.append(["%s%s" % (mark, c.cluster), c.partition or "-",
                     c.estimate.strftime("%Y-%m-%dT%H:%M:%S") if c.estimate else "-",
                     "%.2f" % c.price if c.price is not None else "-", c.skip or ("failed" if note else "ok"), note])
    table = format_table(rows, ["CLUSTER", "PARTITION", "ESTIMATED START", "PRICE/GPU-H", "STATUS", "REASON"])
    if placement.windows:
        table += "\n\n" + windows_table(placement)
    return table


# --explain lists every cluster's estimate window and the best of the later ones; --json lists them all.
WINDOW_ROWS = 20


def windows_table(placement) -> str:
    """The windows considered for --prefer/--deadline, best first: start, end, kWh, cost, gCO2e; '?' unknown."""
    from slurmkit.federation.windows import rank_key

    ranked = sorted(placement.windows, key=lambda w: (not w.meets,) + tuple(rank_key(placement.prefer)(w)))
    shown = [w for i, w in enumerate(ranked) if i < WINDOW_ROWS or not w.later]
    chosen = placement.chosen

    def number(value, form):
        return "?" if value is None else form % value

    rows = []
    for w in shown:
        mark = "*" if chosen is not None and w.cluster == chosen.cluster and w.start == chosen.start \
            and w.candidate.partition == chosen.candidate.partition else ""
        rows.append([mark + w.cluster, w.candidate.partition, w.start.strftime("%Y-%m-%dT%H:%M"),
                     w.end.strftime("%Y-%m-%dT%H:%M"), "--begin" if w.later else "estimate",
                     number(w.use.kwh, "%.2f"), number(w.use.cost, "%.2f"), number(w.use.gco2 / 1000.0
                                                                                   if w.use.gco2 is not None else None,
                                                                                   "%.3f"),
                     w.use.carbon_source or "-", "yes" if w.meets else "no"])
    lines = ["prefer %s: %d windows, best first (* chosen)" % (placement.prefer, len(placement.windows)),
             format_table(rows, ["CLUSTER", "PARTITION", "START", "END", "HOW", "KWH", "COST", "KGCO2E",
                                 "CARBON FROM", "BY DEADLINE"])]
    if len(shown) < len(ranked):
        lines.append("... %d more windows (--json lists them all)" % (len(ranked) - len(shown)))
    unknown = sorted({why for w in shown for why in w.use.why})
    lines.extend("unknown: %s" % why for why in unknown)
    no_pue = sorted({w.cluster for w in shown if w.use.pue is None and w.use.kwh is not None})
    if no_pue:
        lines.append("no PUE set for %s: kWh there are the nodes' alone, without cooling" % ", ".join(no_pue))
    return "\n".join(lines)


def format_table(rows, headers) -> str:
    """Left-aligned columns, two spaces apart, header first."""
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    return "\n".join("  ".join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip() for row in [headers] + rows)
