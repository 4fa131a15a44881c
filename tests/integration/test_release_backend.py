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

from conftest import slurm, slurm_version

REPO = Path(__file__).resolve().parents[2]
VENDOR = Path(os.environ.get("PYSLURM_VENDOR") or (REPO.parent / "shared" / "vendor" / "pyslurm"))


def release(cluster="alpha"):
    major, minor = slurm_version(cluster).split(".")[:2]
    return int(major), int(minor)


def matching_sources():
    major, minor = release()
    return sorted(VENDOR.glob("pyslurm-%d.%d.*.tar.gz" % (major, minor)))


# In a process of its own: libslurm reads one slurm.conf per process, and an
# earlier test of this session may have initialised it for another cluster,
# which would make pyslurm unusable for alpha here for that reason alone.
CHOOSE = """
import sys
from slurmkit.session import make_backend
from slurmkit.site.loader import load_site
from slurmkit.slurm import pyslurm_backend, pyslurm_installed
from slurmkit.slurm.runner import LocalRunner
cluster = load_site(sys.argv[1]).clusters["alpha"]
backend = make_backend(cluster)
reason = pyslurm_backend.unusable_reason(LocalRunner({"SLURM_CONF": cluster.slurm_conf}), cluster)
print(type(backend).__name__, pyslurm_installed(), backend.version(), reason, sep="|")
"""


def test_the_backend_follows_whether_a_pyslurm_source_matches_the_release(devcluster):
    proc = subprocess.run([sys.executable, "-c", CHOOSE, str(REPO / "site_configs" / "local.yaml")],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if k not in ("SLURMKIT_BACKEND", "SLURMKIT_VIA")})
    assert proc.returncode == 0, proc.stderr
    kind, installed, version, reason = proc.stdout.strip().split("|")
    assert version.startswith("%d.%02d." % release())
    if matching_sources():
        # make pyslurm built and installed it: the backend is pyslurm's
        assert installed == "True", "a pyslurm source matches Slurm %d.%d but none is installed" % release()
        assert (kind, reason) == ("PyslurmBackend", "None")
    else:
        # nothing was installed, so the commands answer, and say why
        assert (kind, installed, reason) == ("CommandBackend", "False", "pyslurm is not installed")


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
