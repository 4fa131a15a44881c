"""Shared test set-up: every test run gets its own slurmkit cache directory.

The cache (parsed site configs, compiled templates, topology) must never leak
between runs or into the user's ~/.cache.
"""

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("SLURMKIT_CACHE_DIR", str(tmp_path_factory.mktemp("slurmkit-cache")))
    yield
    mp.undo()
