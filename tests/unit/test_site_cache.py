"""The on-disk site cache: JSON (never pickle), exact round trip, invalidated by edits."""

import json
import os
import time
from pathlib import Path

import pytest

from slurmkit.site.cache import load_site_cached
from slurmkit.site import load_site
from slurmkit.site.model import as_plain, site_from_plain

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.name for p in (ROOT / "site_configs").glob("*.yaml"))


@pytest.mark.parametrize("name", EXAMPLES)
def test_round_trip_is_exact(name):
    site = load_site(str(ROOT / "site_configs" / name))
    assert site_from_plain(json.loads(json.dumps(as_plain(site)))) == site


def test_cached_site_is_reused_until_the_file_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMKIT_CACHE_DIR", str(tmp_path / "cache"))
    config = tmp_path / "s.yaml"
    config.write_text((ROOT / "site_configs" / "example-roce.yaml").read_text())
    first = load_site_cached(str(config))
    [entry] = list((tmp_path / "cache" / "sites").iterdir())
    assert json.loads(entry.read_text())["site"]["name"] == first.name   # plain JSON on disk
    assert oct(entry.stat().st_mode & 0o777) == "0o600"
    assert load_site_cached(str(config)) == first
    config.write_text(config.read_text().replace("site: example-roce", "site: renamed"))
    future = time.time() + 5
    os.utime(config, (future, future))
    assert load_site_cached(str(config)).name == "renamed"


def test_corrupt_cache_entry_is_ignored(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMKIT_CACHE_DIR", str(tmp_path / "cache"))
    config = str(ROOT / "site_configs" / "example-ascend.yaml")
    site = load_site_cached(config)
    [entry] = list((tmp_path / "cache" / "sites").iterdir())
    entry.write_text("{broken")
    assert load_site_cached(config) == site
