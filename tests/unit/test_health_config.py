"""Health settings in the site config: validation, defaults, merging, and the JSON site cache."""

import json
import textwrap

import pytest

from slurmkit.site import load_site, validate_files
from slurmkit.site.model import (DEFAULT_FATAL_XIDS, HealthChecks, HealthMount, as_plain, parse_drain_cap,
                                 site_from_plain)

SITE = """\
site: t
health:
  resume_after: 2
  drain_cap: 1
  fanout: 4
  state_dir: state
  command: [/opt/sk/bin/slurmkit]
  ssh: {port: 2200, user: admin}
clusters:
  a:
    login: {host: login.a, port: 22, user: me, identity_file: /k/id}
    health:
      ssh: {port: 2222}
    partitions:
      gpu:
        accelerator: nvidia
        gpu_model: h100
        gpus_per_node: 8
        cpus_per_node: 4
        memory_mb: 4000
        health:
          skip: [ib, pcie]
          max_load_per_core: 8
          mounts:
            - {path: /scratch/%n, mount: true, writable: true, max_used_percent: 90}
          device_dir: dev
      cpu:
        accelerator: none
        cpus_per_node: 4
"""


def write(tmp_path, text):
    path = tmp_path / "site.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_health_keys_load_with_defaults_and_merges(tmp_path):
    site = load_site(write(tmp_path, SITE))
    assert site.health.resume_after == 2 and site.health.drain_cap == 1 and site.health.fanout == 4
    assert site.health.state_dir == str(tmp_path / "state")           # relative to the file
    cluster = site.clusters["a"]
    assert cluster.health.command == ("/opt/sk/bin/slurmkit",)
    # the cluster's port over the site's; the site's user; the rest left to the login
    assert (cluster.health.ssh.port, cluster.health.ssh.user, cluster.health.ssh.identity_file) == (2222, "admin", None)
    gpu = cluster.partitions["gpu"].health
    assert gpu.skip == ("ib", "pcie") and gpu.max_load_per_core == 8.0
    assert gpu.mounts == (HealthMount("/scratch/%n", mount=True, writable=True, max_used_percent=90),)
    assert gpu.device_dir == str(tmp_path / "dev")
    assert gpu.fatal_xids == DEFAULT_FATAL_XIDS and gpu.daemons == ("munged", "slurmd")
    assert cluster.partitions["cpu"].health == HealthChecks()


def test_a_site_without_health_gets_the_defaults(tmp_path):
    site = load_site(write(tmp_path, SITE.split("health:\n  resume_after")[0] + "clusters:\n"
                           + SITE.split("\nclusters:\n", 1)[1]))
    assert site.health.resume_after == 3 and site.health.drain_cap == "10%"
    assert site.clusters["a"].health.command == ("slurmkit", "health", "check")


def test_the_site_cache_round_trips_health_and_refuses_entries_without_it(tmp_path):
    site = load_site(write(tmp_path, SITE))
    plain = json.loads(json.dumps(as_plain(site)))
    assert site_from_plain(plain) == site
    # A cache entry written before health existed is not silently read with defaults.
    del plain["clusters"]["a"]["partitions"]["gpu"]["health"]
    with pytest.raises(KeyError):
        site_from_plain(plain)


MOUNT = "            - {path: /scratch/%n, mount: true, writable: true, max_used_percent: 90}\n"


@pytest.mark.parametrize("old,new,key,message", [
    ("skip: [ib, pcie]", "skip: [ib, gpu_cuont]", "skip[1]", "unknown check 'gpu_cuont'; did you mean 'gpu_count'?"),
    (MOUNT, "            - {path: scratch}\n", "mounts[0].path", "must be an absolute path"),
    (MOUNT, "            - {writable: true}\n", "mounts[0].path", "required key is missing"),
    ("max_load_per_core: 8", "ib_ports: ['mlx5_0 port 1']", "ib_ports[0]", "is not an HCA port"),
    ("max_load_per_core: 8", "max_swap_used_percent: 120", "max_swap_used_percent", "must be at most 100"),
])
def test_bad_thresholds_are_reported_with_their_key(tmp_path, old, new, key, message):
    assert old in SITE
    problems = validate_files([write(tmp_path, SITE.replace(old, new))])
    assert len(problems) == 1, problems
    assert problems[0].key == "clusters.a.partitions.gpu.health." + key and message in problems[0].message


@pytest.mark.parametrize("value,problem", [('"ten"', "is not a drain cap"), ('"150%"', "is not a share"),
                                           ("-1", "must be at least 0")])
def test_bad_drain_caps(tmp_path, value, problem):
    problems = validate_files([write(tmp_path, SITE.replace("drain_cap: 1", "drain_cap: %s" % value))])
    assert [p.key for p in problems] == ["health.drain_cap"] and problem in problems[0].message


def test_drain_cap_forms():
    assert parse_drain_cap(3) == (3, None) and parse_drain_cap("3") == (3, None)
    assert parse_drain_cap("12.5%") == (None, 12.5)
    with pytest.raises(ValueError):
        parse_drain_cap("-3%")
