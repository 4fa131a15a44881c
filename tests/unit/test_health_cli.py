"""``slurmkit health check`` as a process: exit codes, --json, --prom, --plan, the watchdog, its imports."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness import run_slurmkit
from health_site import one_partition_site, plan

ROOT = Path(__file__).resolve().parents[2]


def run(*args, stdin=None, env=None, tmp_path=None):
    full_env = dict(os.environ, SLURMKIT_CACHE_DIR=str(tmp_path / "cache"), SLURMKIT_STATE_DIR=str(tmp_path / "st"))
    full_env.pop("SLURMD_NODENAME", None)
    full_env.update(env or {})
    return run_slurmkit(["health", "check"] + list(args), env=full_env, cwd=ROOT, input=stdin, timeout=60)


@pytest.fixture
def site(tmp_path):
    return one_partition_site(tmp_path)


def test_healthy_and_unhealthy_exit_codes_with_json(tmp_path, site):
    good = run("--site", site, "--node", "c1", "--partition", "cpu", "--json", tmp_path=tmp_path)
    assert good.returncode == 0, good.stderr
    report = json.loads(good.stdout)
    assert report["healthy"] and report["node"] == "c1" and report["partition"] == "cpu"
    assert {r["name"] for r in report["results"]} == {"memory", "load", "dstate", "mount:%s/scratch/c1" % tmp_path}
    bad = run("--site", site, "--node", "c2", "--partition", "cpu", tmp_path=tmp_path)
    assert bad.returncode == 1 and "UNHEALTHY (mount:%s/scratch/c2)" % tmp_path in bad.stdout
    assert "fail  mount:%s/scratch/c2  %s/scratch/c2 is missing" % (tmp_path, tmp_path) in bad.stdout


def test_prometheus_textfile_written_atomically(tmp_path, site):
    prom = tmp_path / "textfile" / "slurmkit.prom"
    prom.parent.mkdir()
    prom.write_text("old\n")
    proc = run("--site", site, "--node", "c2", "--partition", "cpu", "--prom", str(prom), tmp_path=tmp_path)
    assert proc.returncode == 1
    text = prom.read_text()
    labels = 'node="c2",cluster="c",partition="cpu"'
    assert "slurmkit_health_healthy{%s} 0" % labels in text
    assert 'slurmkit_health_check_status{check="mount:%s/scratch/c2",%s} 2' % (tmp_path, labels) in text
    assert 'slurmkit_health_check_status{check="memory",%s} 0' % labels in text
    assert "# TYPE slurmkit_health_duration_seconds gauge" in text
    assert os.listdir(str(prom.parent)) == ["slurmkit.prom"]          # no temporary file left behind
    assert oct(prom.stat().st_mode & 0o777) == "0o644"


def test_the_sweeps_plan_on_stdin(tmp_path):
    (tmp_path / "scratch" / "c1").mkdir(parents=True)
    proc = run("--plan", "-", "--json", stdin=plan(tmp_path).to_json(), tmp_path=tmp_path)
    assert proc.returncode == 0 and json.loads(proc.stdout)["healthy"]
    newer = json.loads(plan(tmp_path).to_json())
    newer["version"] = 4
    proc = run("--plan", "-", stdin=json.dumps(newer), tmp_path=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("Error: the check plan is version 4")


def test_the_lean_entry_a_sweep_can_run_instead(tmp_path):
    """python -m slurmkit.health: the same check and report, without the command line's start-up."""
    (tmp_path / "scratch" / "c1").mkdir(parents=True)
    env = dict(os.environ, SLURMKIT_STATE_DIR=str(tmp_path / "st"))

    def agent(*args, stdin):
        return subprocess.run([sys.executable, "-m", "slurmkit.health"] + list(args), input=stdin,
                              capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=60)

    good = agent("--plan", "-", "--json", stdin=plan(tmp_path).to_json())
    assert good.returncode == 0 and json.loads(good.stdout)["healthy"] and good.stderr == ""
    bad = agent("--plan", "-", stdin=plan(tmp_path, node="c2").to_json())
    assert bad.returncode == 1 and json.loads(bad.stdout)["failing"] == ["mount:%s/scratch/c2" % tmp_path]
    usage = agent("--node", "c1", stdin="")
    assert usage.returncode == 2 and usage.stderr == ("Error: usage: python -m slurmkit.health --plan FILE|- [--json]  |  "
                                                    "--relay FILE|-\n")
    broken = agent("--plan", "-", stdin="not json")
    assert broken.returncode == 2 and broken.stderr.startswith("Error: not a check plan")


@pytest.mark.parametrize("args,message", [
    (["--dry-run"], "--dry-run goes with --slurm"),
    (["--plan", "-", "--node", "x"], "--plan already names the node"),
    (["--partition", "gpu", "--node", "c1"], "unknown partition 'gpu' on cluster 'c'; choose one of: cpu"),
    (["--cluster", "d"], "unknown cluster 'd' in site 't'; choose one of: c"),
])
def test_usage_errors_are_one_line_and_exit_2(tmp_path, site, args, message):
    proc = run("--site", site, *args, stdin="{}", tmp_path=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and proc.stderr.startswith("Error: ")
    assert message in proc.stderr


def test_without_partition_slurm_is_asked_and_its_absence_is_an_error(tmp_path, site):
    proc = run("--site", site, "--node", "c1", tmp_path=tmp_path, env={"PATH": str(tmp_path / "empty")})
    assert proc.returncode == 1 and proc.stderr.startswith("Error: scontrol is not installed")


def test_the_watchdog_ends_a_check_stuck_on_slurm(tmp_path, site):
    """--slurm with a slurmctld that never answers: the check ends at check_timeout, changing nothing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\nexec sleep 30\n")
    (bin_dir / "scontrol").chmod(0o755)
    proc = run("--site", site, "--slurm", tmp_path=tmp_path,
               env={"PATH": "%s:%s" % (bin_dir, os.environ["PATH"]), "SLURMD_NODENAME": "c1"})
    assert proc.returncode == 1
    assert proc.stderr == ("Error: watchdog: the health check took longer than 1s (health.check_timeout); "
                           "nothing was changed in Slurm\n")


def test_a_check_imports_neither_jinja2_nor_paramiko(tmp_path, site):
    code = textwrap.dedent("""\
        import contextlib, io, json, sys
        from slurmkit.cli import main
        with contextlib.redirect_stdout(io.StringIO()):
            code = main(["health", "check", "--site", %r, "--node", "c1", "--partition", "cpu"])
        print(json.dumps([code, sorted(m for m in ("jinja2", "paramiko", "yaml", "psutil", "pynvml")
                                       if m in sys.modules)]))
        """ % site)
    env = dict(os.environ, SLURMKIT_CACHE_DIR=str(tmp_path / "cache"), SLURMKIT_STATE_DIR=str(tmp_path / "st"))
    runs = [json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                      check=True, cwd=str(ROOT)).stdout) for _ in range(2)]
    assert runs[0] == [0, ["psutil", "yaml"]]         # the first one parses the site file
    assert runs[1] == [0, ["psutil"]]                 # later ones read it from the cache


def test_prometheus_label_values_are_escaped():
    from slurmkit.health import prom
    from slurmkit.health.findings import NodeReport, fail, ok

    report = NodeReport("n1", "c", "gpu", (ok("memory", "fine", 4000.0), fail('mount:/a"b\\c\nd', "gone")),
                        started=1796000000.5, duration=0.25)
    text = prom.render(report)
    assert 'slurmkit_health_check_status{check="mount:/a\\"b\\\\c\\nd",node="n1",cluster="c",partition="gpu"} 2' \
        in text
    assert 'slurmkit_health_check_value{check="memory",node="n1",cluster="c",partition="gpu"} 4000.0' in text
    assert "slurmkit_health_last_run_timestamp_seconds{node=\"n1\",cluster=\"c\",partition=\"gpu\"} 1796000000.500" \
        in text
    assert all(line.startswith(("# HELP ", "# TYPE ", "slurmkit_health_")) for line in text.splitlines())
