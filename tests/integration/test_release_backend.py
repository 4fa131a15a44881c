"""Which backend slurmkit uses on the Slurm release at hand, with the pyslurm `make pyslurm` installed.

`make pyslurm` (scripts/pyslurm-wheel.sh) builds pyslurm from
../shared/vendor/pyslurm only for a release that has a source there (22.05,
24.11); on any other (26.05) it installs nothing, and slurmkit must then use
the Slurm commands.  This runs on every release `make test-releases` covers:
each one checks its own side of that rule.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import slurm

from slurmkit.session import make_backend
from slurmkit.site.loader import load_site
from slurmkit.slurm import pyslurm_backend, pyslurm_installed
from slurmkit.slurm.backend import CommandBackend

REPO = Path(__file__).resolve().parents[2]
VENDOR = Path(os.environ.get("PYSLURM_VENDOR") or (REPO.parent / "shared" / "vendor" / "pyslurm"))


def release(cluster="alpha"):
    version = slurm(cluster, "sinfo", "--version").stdout.split()[1]
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def matching_sources():
    major, minor = release()
    return sorted(VENDOR.glob("pyslurm-%d.%d.*.tar.gz" % (major, minor)))


def test_the_backend_follows_whether_a_pyslurm_source_matches_the_release(devcluster):
    site = load_site(str(REPO / "site_configs" / "local.yaml"))
    cluster = site.clusters["alpha"]
    backend = make_backend(cluster)
    try:
        if matching_sources():
            # make pyslurm built and installed it: the backend is pyslurm's
            assert pyslurm_installed(), "a pyslurm source matches Slurm %d.%d but none is installed" % release()
            assert isinstance(backend, pyslurm_backend.PyslurmBackend), backend
            assert backend.version().startswith("%d.%02d." % release())
        else:
            # nothing was installed, so the commands answer, and say why
            assert not pyslurm_installed()
            assert type(backend) is CommandBackend
            from slurmkit.slurm.runner import LocalRunner

            runner = LocalRunner({"SLURM_CONF": cluster.slurm_conf})
            assert pyslurm_backend.unusable_reason(runner, cluster) == "pyslurm is not installed"
            assert backend.version().startswith("%d.%02d." % release())
    finally:
        backend.close()


def test_make_pyslurm_says_what_it_did_for_this_release(devcluster):
    # The script itself, as `make pyslurm` runs it: with the wheel installed it
    # only compares a stamp; without a source it names the release it had none for.
    proc = subprocess.run(["bash", str(REPO / "scripts" / "pyslurm-wheel.sh"), sys.executable, str(VENDOR)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=120)
    assert proc.returncode == 0, proc.stdout
    major, minor = release()
    if matching_sources():
        assert re.search(r"pyslurm-%d\.%d\.\S+\.whl (already )?installed" % (major, minor), proc.stdout), proc.stdout
    else:
        assert "no pyslurm source for Slurm %d.%02d" % (major, minor) in proc.stdout, proc.stdout
        assert "nothing installed (slurmkit uses the Slurm commands)" in proc.stdout
