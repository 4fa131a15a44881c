#!/usr/bin/env python3
"""Federation benchmark, over SSH to the local clusters' login nodes (make cluster-up).

1. Probing: ``probe_all`` of the three clusters against probing one, each
   in a fresh Session (new SSH connections), alternating, median of N runs.
   Target: three together within 1.3 times one.
2. Remote submissions: 20 consecutive submissions through slurmkit in one
   process (one pooled SSH connection) against 20 ``ssh login sbatch`` calls,
   each opening a new OpenSSH connection; plus how many connections beta's
   sshd accepted for slurmkit's 20 (target: 1).

Results go to ``.bench/federation.json``.  The jobs are one-second ``true`` jobs.
"""

import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SITE = str(ROOT / "site_configs" / "local.yaml")
N_PROBE = int(os.environ.get("BENCH_PROBE_N", "7"))
N_SUBMIT = int(os.environ.get("BENCH_N", "20"))


def accepted(log):
    try:
        return len(re.findall(r"Accepted publickey", Path(log).read_text(errors="replace")))
    except OSError:
        return 0


def bench_probe(site):
    from slurmkit.federation.survey import probe_all
    from slurmkit.session import Session

    one, three = [], []
    for _ in range(N_PROBE):
        for names, bucket in ((["alpha"], one), (None, three)):
            with Session(site) as session:
                start = time.perf_counter()
                statuses = probe_all(session, names)
                bucket.append(time.perf_counter() - start)
            bad = [s.name for s in statuses if not s.reachable]
            if bad:
                sys.exit("benchmark: cluster(s) %s unreachable; run make cluster-up" % ", ".join(bad))
    return {"runs": N_PROBE, "one_cluster_median_s": statistics.median(one),
            "three_clusters_median_s": statistics.median(three),
            "ratio_three_to_one": statistics.median(three) / statistics.median(one), "target": "<= 1.3"}


def bench_submit(site, info):
    from slurmkit import jobs
    from slurmkit.script.render import JobSpec, render
    from slurmkit.session import Session

    beta = info["clusters"]["beta"]
    log = beta["login"]["sshd_log"]
    spec = JobSpec(command=("true",), template="single", time="1", gpus_per_node=0, name="bench-fed",
                   output="/dev/null")
    # The plain-ssh side sends the very script slurmkit renders (a one-second `true` job).
    cluster = site.cluster("beta")
    script = render(site, cluster, site.partition(cluster, "gpu"), spec._replace(token="plainssh")).script
    ssh = ["ssh", "-F", info["ssh"]["config"], "beta", "sbatch", "--parsable"]
    plain = []
    for _ in range(N_SUBMIT):
        start = time.perf_counter()
        subprocess.run(ssh, input=script, capture_output=True, text=True, check=True)
        plain.append(time.perf_counter() - start)
    before = accepted(log)
    with Session(site) as session:
        start = time.perf_counter()
        for _ in range(N_SUBMIT):
            jobs.submit(session, spec, "beta", "gpu")
        ours = time.perf_counter() - start
    time.sleep(0.5)  # sshd writes its log line asynchronously
    connections = accepted(log) - before
    subprocess.run(["ssh", "-F", info["ssh"]["config"], "beta", "scancel", "--name=bench-fed"], check=False)
    return {"submissions": N_SUBMIT, "slurmkit_total_s": ours, "plain_ssh_total_s": sum(plain),
            "ratio_plain_ssh_to_slurmkit": sum(plain) / ours, "sshd_connections_for_slurmkit": connections,
            "target_connections": 1}


def main():
    os.environ["SLURMKIT_VIA"] = "ssh"
    from slurmkit.site import load_site

    info = json.loads((ROOT / ".devcluster" / "clusters.json").read_text())
    site = load_site(SITE)
    result = {"probe": bench_probe(site), "remote_submit": bench_submit(site, info)}
    out = ROOT / ".bench"
    out.mkdir(exist_ok=True)
    (out / "federation.json").write_text(json.dumps(result, indent=2))
    p, s = result["probe"], result["remote_submit"]
    print("probe: one cluster %.3f s, three clusters %.3f s (median of %d): ratio %.2f (target <= 1.3)"
          % (p["one_cluster_median_s"], p["three_clusters_median_s"], p["runs"], p["ratio_three_to_one"]))
    print("%d remote submissions: slurmkit %.2f s, ssh+sbatch per job %.2f s: slurmkit %.1fx faster; "
          "sshd accepted %d connection(s) for slurmkit's (target 1)"
          % (s["submissions"], s["slurmkit_total_s"], s["plain_ssh_total_s"], s["ratio_plain_ssh_to_slurmkit"],
             s["sshd_connections_for_slurmkit"]))


if __name__ == "__main__":
    main()
