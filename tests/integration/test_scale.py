"""slurmkit on a cluster of realistic shape: devcluster/scale.py's N real slurmds.

256 nodes by default (SCALE_TEST_NODES to change; at least 256, so that
there are two spines), a three-level tree (16 nodes per leaf, 8 leaves per
spine, one core), 8 fake GPUs per node.  Placement is checked on real
allocations: the NodeList slurmctld gave each job (``scontrol show job``)
against the switches slurmctld itself reports (``scontrol show topology``),
not against the rendered script.  The cost of ``status`` is counted in
slurmctld RPCs (``sdiag``) with and without thousands of other jobs queued.

The module starts the cluster (about 5 s at 256 nodes) unless one of at least
that size already runs, and stops what it started.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from site_drafts import assert_same_cluster, slurm_switch_cap, unexplained_differences
from slurmkit.site import load_site
from slurmkit.slurm import hostlist

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO / "devcluster"))
import scale  # noqa: E402  (devcluster/scale.py: paths, sdiag counting)

NODES = int(os.environ.get("SCALE_TEST_NODES", "256"))
SITE = str(scale.SITE_YAML)
# Job output in the cluster's state directory, not pytest's tmp_path: a later
# `slurmkit status` warns about every job whose output directory is gone.
OUT = scale.STATE / "out" / "jobs"
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
            "BOOT_FAIL", "DEADLINE"}


def run(argv, env, timeout=120, check=True):
    p = subprocess.run([str(a) for a in argv], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError("%s exited %d:\n%s%s" % (" ".join(map(str, argv)), p.returncode, p.stdout, p.stderr))
    return p


def scale_env():
    """The environment as it is now, with SLURM_CONF of the scale cluster."""
    env = dict(os.environ)
    env["SLURM_CONF"] = str(scale.STATE / "etc" / "slurm.conf")
    for var in ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_CLUSTERS"):
        env.pop(var, None)
    return env


@pytest.fixture
def cluster(scale_cluster):
    """(env with SLURM_CONF of the scale cluster, its node count).  The env is taken in the test, where
    tests/conftest.py has given it its own HOME and slurmkit cache: a module fixture runs before that
    and would hand every test the machine's cache (a layout cached for another size of this cluster)."""
    return scale_env(), scale_cluster


@pytest.fixture(scope="module")
def scale_cluster():
    """The scale cluster's node count; started here unless one of at least NODES runs."""
    if os.geteuid() != 0:
        pytest.skip("the scale cluster runs as root")
    env = scale_env()
    # Another session's test or bench-scale resizes and stops the same cluster: wait for it.
    lock = scale.use_lock()
    running = scale.recorded_n()
    ours = not (running is not None and running >= NODES
                and run([sys.executable, scale.__file__, "status"], env, check=False).returncode == 0)
    if ours:
        t0 = time.monotonic()
        # Through the Makefile, as the README says to start it (devcluster/cluster.mk: scale.py up N).
        p = run(["make", "-s", "-C", REPO, "cluster-up", "SCALE=%d" % NODES], env, timeout=300, check=False)
        assert p.returncode == 0, "make cluster-up SCALE=%d failed:\n%s%s" % (NODES, p.stdout, p.stderr)
        print("scale cluster of %d nodes up in %.1fs" % (NODES, time.monotonic() - t0))
    n = scale.recorded_n()
    OUT.mkdir(parents=True, exist_ok=True)
    try:
        yield n
    finally:
        run(["scancel", "--quiet", "--partition=gpu"], env, check=False)
        if ours:
            run([sys.executable, scale.__file__, "down"], env, timeout=120, check=False)
        lock.close()


def switches(env):
    """{switch: (level, set of nodes, [child switches])} as slurmctld reports them."""
    out = {}
    for line in run(["scontrol", "show", "topology"], env).stdout.splitlines():
        kv = dict(w.split("=", 1) for w in line.split() if "=" in w)
        if "SwitchName" in kv:
            out[kv["SwitchName"]] = (int(kv["Level"]), set(hostlist.expand(kv.get("Nodes", ""))),
                                     hostlist.expand(kv["Switches"]) if kv.get("Switches") else [])
    return out


def job(env, job_id):
    text = run(["scontrol", "show", "job", "-o", job_id], env).stdout
    return dict(w.split("=", 1) for w in text.split() if "=" in w)


def wait_finished(env, job_id, timeout=120):
    deadline = time.monotonic() + timeout
    while True:
        info = job(env, job_id)
        if info["JobState"] in FINISHED:
            return info
        assert time.monotonic() < deadline, "job %s still %s (%s) after %ds" % (
            job_id, info["JobState"], info.get("Reason"), timeout)
        time.sleep(0.5)


def submit_heavy(env, nodes, extra=(), rendered=None):
    """slurmkit submit --comm heavy of an srun step of `true` on every node: (job id, switches asked);
    ``rendered``, a dict, gets submit's --json output."""
    p = run([sys.executable, "-m", "slurmkit", "submit", "--site", SITE, "-T", "srun", "-N", nodes,
             "--procs-per-node", "1", "--comm", "heavy", "--output", str(OUT / "%j.out"), "--json"]
            + list(extra) + ["--", "true"], env)
    out = json.loads(p.stdout)
    if rendered is not None:
        rendered.update(out)
    return out["job_id"], out["switches"]


def leaves_used(topo, nodes):
    return sorted(name for name, (level, members, _) in topo.items() if level == 0 and members & nodes)


@pytest.mark.slow
def test_heavy_jobs_of_16_and_32_nodes_get_one_and_two_leaves(cluster):
    env, _ = cluster
    topo = switches(env)
    assert sorted({len(m) for lvl, m, _ in topo.values() if lvl == 0}) == [16]
    jobs = {n: submit_heavy(env, n) for n in (16, 32)}
    assert {n: sw for n, (_, sw) in jobs.items()} == {16: 1, 32: 2}
    for n, (job_id, _) in jobs.items():
        info = wait_finished(env, job_id)
        assert info["JobState"] == "COMPLETED", info
        assert info["Switches"].startswith("%d@" % (n // 16)), info["Switches"]
        nodes = set(hostlist.expand(info["NodeList"]))
        assert len(nodes) == n
        # A full leaf per 16 nodes: no node outside the leaves the job asked for.
        assert len(leaves_used(topo, nodes)) == n // 16, (n, info["NodeList"], leaves_used(topo, nodes))


@pytest.mark.slow
def test_heavy_job_of_64_nodes_gets_four_whole_leaves_of_one_spine_around_busy_ones(cluster):
    """With the first spine's first four leaves and half its fifth busy (56 of
    its 128 nodes left), the 64-node job (slurmkit asks --switches=4) must
    start at once on four whole free leaves, none of them busy ones, all under
    one spine: the second, the only one with 64 free nodes.

    --switches alone does not keep it under one spine: on this cluster Slurm
    22.05 gave sn[0081-0144], the first spine's three free leaves and one of
    the second's.  (With one busy node in each of five leaves of the first
    spine instead, Slurm kept the job pending for the whole switch wait,
    2 min, then ran it on five leaves.)  The scale site names the nodes'
    spine features (switch_group_features), so slurmkit adds Slurm's
    matching OR, --constraint=[spine01|spine02], which gives every node the
    same spine; a user's own feature (h100, which every node has) is ANDed
    with it, checked here on the same busy cluster."""
    env, n = cluster
    if n < 256:
        pytest.skip("needs two spines (256 nodes)")
    topo = switches(env)
    spine_ids = sorted(name for name, (lvl, _, _) in topo.items() if lvl == 1)
    group = "[%s]" % "|".join(spine_ids)
    first_leaves = topo[spine_ids[0]][2]
    blockers = sorted(set().union(*(topo[leaf][1] for leaf in first_leaves[:4])))
    blockers += sorted(topo[first_leaves[4]][1])[:8]
    p = run(["sbatch", "--parsable", "--exclusive", "-N", len(blockers), "-w", ",".join(blockers), "-t", "10",
             "-o", "/dev/null", "--wrap", "sleep 600"], env)
    blocker = p.stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 60
        while job(env, blocker)["JobState"] != "RUNNING":
            assert time.monotonic() < deadline, job(env, blocker)
            time.sleep(0.3)
        for extra, constraint in (((), group), (("--constraint", "h100"), "h100&" + group)):
            rendered = {}
            job_id, asked = submit_heavy(env, 64, extra, rendered)
            assert asked == 4 and rendered["constraint"] == constraint, rendered
            # Well within the switch wait (2 min): a job pending for its switches fails here.
            info = wait_finished(env, job_id, timeout=60)
            assert info["JobState"] == "COMPLETED", info
            assert info["Features"] == constraint, info.get("Features")
            nodes = set(hostlist.expand(info["NodeList"]))
            assert len(nodes) == 64 and not nodes & set(blockers)
            leaves = leaves_used(topo, nodes)
            assert len(leaves) == 4, (info["NodeList"], leaves)
            under = [s for s in spine_ids if nodes <= topo[s][1]]
            assert under == [spine_ids[1]], (extra, info["NodeList"], leaves,
                                             [s for s in spine_ids if nodes & topo[s][1]])
    finally:
        run(["scancel", blocker], env, check=False)


@pytest.mark.slow
def test_status_costs_the_same_rpcs_among_thousands_of_other_jobs(cluster):
    env, _ = cluster
    ids = ["scale:%s" % submit_heavy(env, 16)[0] for _ in range(2)]
    for i in ids:
        wait_finished(env, i.split(":")[1])

    def cost(argv):
        before = scale.rpc_counts(env)
        p = run([sys.executable, "-m", "slurmkit"] + argv + ["--site", SITE, "--json"], env)
        after = scale.rpc_counts(env)
        return scale.rpc_split(scale.rpc_diff(before, after))[0], json.loads(p.stdout)

    alone_ids, shown = cost(["status"] + ids)
    assert sorted(j["id"] for j in shown["jobs"]) == sorted(ids)
    alone_mine, _ = cost(["status"])
    # 2,000 queued jobs of the same user that are not slurmkit's: separate held
    # jobs (an array would be one record in slurmctld), about 7 s.
    scale.queue_held_jobs(env, 2000, name="scale-others")
    try:
        assert run(["squeue", "-h", "-n", "scale-others", "-o", "%i"], env).stdout.count("\n") == 2000
        crowd_ids, shown = cost(["status"] + ids)
        assert sorted(j["id"] for j in shown["jobs"]) == sorted(ids)
        crowd_mine, shown = cost(["status"])
        assert all(j["name"] != "scale-others" for j in shown["jobs"])
    finally:
        run(["scancel", "--name=scale-others"], env, check=False)
    assert crowd_ids == alone_ids and crowd_mine == alone_mine, (alone_ids, crowd_ids, alone_mine, crowd_mine)
    # One job list (REQUEST_JOB_INFO: squeue, or pyslurm's slurm_load_jobs)...
    assert crowd_ids.get("REQUEST_JOB_INFO") == 1 and crowd_mine.get("REQUEST_JOB_INFO") == 1
    # ... squeue's own partition look-up (your jobs come from squeue --Format --user with either
    # backend) and, with pyslurm, one slurm_load_job (+ its federation look-up) per job of yours
    # that ended other than COMPLETED, to read its exit status whole (pyslurm_backend._exact_exit):
    # per job of yours, never per job of anyone else (the equality above).
    for cost_of in (crowd_ids, crowd_mine):
        extra = {k: v for k, v in cost_of.items() if k != "REQUEST_JOB_INFO"}
        assert set(extra) <= {"REQUEST_JOB_INFO_SINGLE", "REQUEST_FED_INFO", "REQUEST_PARTITION_INFO"}, cost_of
        assert extra.get("REQUEST_PARTITION_INFO", 0) <= 1, cost_of


def test_topology_is_one_line_per_switch_by_default_and_every_node_on_request(cluster):
    env, n = cluster
    topo = switches(env)
    p = run([sys.executable, "-m", "slurmkit", "topology", "--site", SITE], env)
    lines = p.stdout.splitlines()
    assert len(lines) == 1 + len(topo)  # header + one line per switch
    assert "%d nodes" % n in lines[1] and "/%d" % (8 * n) in lines[1]
    detail = run([sys.executable, "-m", "slurmkit", "topology", "--site", SITE, "--detail"], env).stdout
    assert len(detail.splitlines()) == 1 + len(topo) + n


@pytest.mark.slow
def test_a_health_sweep_through_relays_checks_every_node_as_itself(cluster, tmp_path):
    """health.relays on 64 of the nodes at fan-out 8: the sweep reaches 8 relays over SSH, each of which
    checks its 8 consecutive nodes (itself locally, 7 peers over SSH at their own addresses, with the
    site's strict known_hosts); every node answers for itself."""
    env, _ = cluster
    site = json.loads(Path(SITE).read_text())
    site["health"].update(fanout=8, relays=True, state_dir=str(tmp_path / "health"))
    path = tmp_path / "site.yaml"
    path.write_text(json.dumps(site))
    names = [scale.node_name(i) for i in range(1, 65)]
    argv = [sys.executable, "-m", "slurmkit", "health", "sweep", "--site", path, "--json"]
    for name in names:
        argv += ["--node", name]
    result = json.loads(run(argv, env, timeout=300).stdout)
    rows = {r["node"]: r for r in result["nodes"]}
    assert sorted(rows) == names and result["relays"] == 8 and result["relays_failed"] == []
    for i, name in enumerate(names):
        row = rows[name]
        assert row["status"] == "healthy" and row["report"]["node"] == name, row
        assert row["via"] in names[i // 8 * 8:i // 8 * 8 + 8]        # the relay of its own group of 8
        assert {r["name"]: r["status"] for r in row["report"]["results"]}["daemon:slurmd"] == "ok"
    assert len({r["via"] for r in rows.values()}) == 8


@pytest.mark.slow
def test_the_drain_cap_holds_when_many_nodes_fail_in_the_same_second(cluster):
    """96 nodes find the same failure (a shared mount, a driver, a switch) and each drains itself at
    once, as their HealthCheckPrograms would: the nodes share nothing but slurmctld, whose drain
    stamps order them (ownership.cap_after_drain).  A cap of 4 must leave at most 4 drained, and
    not none.  Threads in this process, each as one node with a Slurm client of its own, let go by
    one barrier: the same second for all, which processes started on two cores would not reach."""
    import threading

    from slurmkit.health import slurmside
    from slurmkit.health.findings import NodeReport, fail
    from slurmkit.session import Session
    from slurmkit.site import find_site

    from slurmkit.slurm.parsers import parse_nodes

    env, _ = cluster
    site = find_site(SITE)                             # its cluster names the scale cluster's slurm.conf
    names = [scale.node_name(i) for i in range(1, 97)]
    check = "mount:/shared-%d" % os.getpid()           # this test's own reason: only its drains are undone
    barrier = threading.Barrier(len(names), timeout=120)
    applied, errors = {}, []

    def node(name):
        try:
            with Session(site) as session:
                backend = session.backend(scale.NAME)
                report = NodeReport(node=name, cluster=scale.NAME, partition="gpu",
                                    results=(fail(check, "gone on every node"),))
                info = slurmside.node_record(backend, name)
                barrier.wait()
                applied[name] = slurmside.decide_and_apply(backend, report, 2, 4, node_info=info)
        except Exception as exc:                       # reported below, with the others
            errors.append("%s: %r" % (name, exc))

    threads = [threading.Thread(target=node, args=(n,)) for n in names]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert errors == [], errors[:5]
        nodes = parse_nodes(run(["scontrol", "--oneliner", "show", "node"], env).stdout)
        ours = [n.name for n in nodes if n.reason == "slurmkit: " + check and "DRAIN" in n.state]
        kept = sorted(n for n, a in applied.items() if a.done)
        assert 1 <= len(ours) <= 4 and sorted(ours) == kept, (ours, kept)
        others = [a.text for n, a in applied.items() if not a.done]
        assert len(others) == 96 - len(kept)
        assert all(t.startswith(("not drained: partition gpu", "drain undone: partition gpu")) for t in others), \
            sorted(set(t.split(":")[0] for t in others))
        print("%d of 96 kept their drain; %d undid theirs" % (len(kept), sum(t.startswith("drain undone")
                                                                             for t in others)))
    finally:
        nodes = parse_nodes(run(["scontrol", "--oneliner", "show", "node"], env).stdout)
        left = [n.name for n in nodes if n.reason == "slurmkit: " + check]
        if left:
            run(["scontrol", "update", "NodeName=" + ",".join(left), "State=RESUME"], env, check=False)


def test_site_init_drafts_what_the_scale_site_says_and_renders_the_same_jobs(cluster, tmp_path):
    """Issue "site init"'s proof on a cluster of a real GPU site's shape: the draft of the scale cluster
    (its 256 nodes probed by one job, being one node type) validates, says what the site file scale.py
    writes says (partition, GPUs, gres, memory, limits, the two spines as switch-group features, the
    switch-wait cap), and a heavy job of 32 and of 256 nodes renders the same from either."""
    env, n = cluster
    draft = tmp_path / "draft.yaml"
    env = dict(env, HOME=str(tmp_path))
    env.pop("SLURMKIT_SITE", None)
    p = run([sys.executable, "-m", "slurmkit", "site", "init", "--site", SITE, "-o", draft], env, timeout=180)
    assert "written (%s)" % scale.NAME in p.stdout and "0 guesses" in p.stdout, p.stdout
    assert run([sys.executable, "-m", "slurmkit", "site", "validate", draft], env).stdout.strip() == "%s: ok" % draft
    hand, drafted = load_site(SITE), load_site(str(draft))
    assert drafted.clusters[scale.NAME].partitions["gpu"].max_nodes == n
    assert_same_cluster(hand, drafted, scale.NAME, slurm_switch_cap(scale.STATE / "etc" / "slurm.conf"))
    for nodes in (32, n):
        rendered = [run([sys.executable, "-m", "slurmkit", "render", "--site", site, "-T", "torchrun", "-N", nodes, "--comm", "heavy",
                         "-t", "00:10:00", "--token", "init-compare", "-J", "compare", "--", "python", "train.py"],
                        env).stdout for site in (SITE, draft)]
        assert "#SBATCH --switches=%d@" % (nodes // 16) in rendered[0]
        assert unexplained_differences(*rendered) == []
