"""Fixtures for tests against the throwaway local Slurm clusters.

Start them first with ``make cluster-up`` (devcluster/devcluster.py up); they
are described by ``.devcluster/clusters.json``.  Every test in this directory
is marked ``integration`` automatically (deselect with ``-m "not integration"``).

Fixtures:
  devcluster          (session) a :class:`DevCluster`: ``.clusters[name]`` is a
                      :class:`ClusterInfo` (slurm_conf, env, login host/port,
                      identity, known_hosts, nodes ...); ``.slurm()``,
                      ``.wait_job_state()``, ``.ssh_argv()`` helpers.
  devcluster_control  (function) stop/start a login sshd or a slurmctld,
                      rekey/restore a login host key through devcluster.py;
                      whatever a test changed is undone at teardown, even when
                      the test fails.

The same helpers exist as module functions (``slurm``, ``wait_job_state``,
``sbatch``, ``ssh_argv``) for use outside fixtures.
"""

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List

import pytest

from slurmkit.slurm.types import FINISHED_STATES as TERMINAL_STATES  # one definition of "finished"

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
STATE = Path(os.environ.get("DEVCLUSTER_STATE") or (REPO / ".devcluster"))
CLUSTERS_JSON = STATE / "clusters.json"
DEVCLUSTER = REPO / "devcluster" / "devcluster.py"
HINT = "run `make cluster-up` (or: python3 devcluster/devcluster.py up)"


# --------------------------------------------------------------------------
# pytest hooks
# --------------------------------------------------------------------------

def pytest_configure(config):
    config.addinivalue_line(
        "markers", "integration: needs the local dev clusters (make cluster-up)")


# What the clusters' logs held when each module's first test started (failure_logs.py).
_LOGS_AT_MODULE_START = {}


def pytest_runtest_setup(item):
    import failure_logs

    key = item.nodeid.split("::", 1)[0]
    if key not in _LOGS_AT_MODULE_START:
        _LOGS_AT_MODULE_START[key] = (failure_logs.offsets(STATE), time.time())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing test's report carries what the clusters logged meanwhile and its jobs printed."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    import failure_logs

    before, since = _LOGS_AT_MODULE_START.get(item.nodeid.split("::", 1)[0], ({}, time.time()))
    try:
        names = list(json.loads(CLUSTERS_JSON.read_text())["clusters"])
    except (OSError, ValueError, KeyError):
        names = []
    factory = getattr(item.config, "_tmp_path_factory", None)
    roots = [factory.getbasetemp()] if factory is not None else []
    text = failure_logs.section(before, STATE, report.longreprtext, since, clusters=names,
                                output_roots=roots, output_dirs=[REPO])
    if text:
        report.sections.append(("cluster logs (since %s started)" % item.nodeid.split("::", 1)[0], text))


def pytest_collection_modifyitems(config, items):
    # This hook sees every collected item of the session: mark only ours.
    for item in items:
        path = Path(str(getattr(item, "path", None) or item.fspath)).resolve()
        if HERE == path.parent or HERE in path.parents:
            item.add_marker(pytest.mark.integration)


# --------------------------------------------------------------------------
# Cluster description
# --------------------------------------------------------------------------

@dataclass
class ClusterInfo:
    name: str
    slurm_conf: str
    env: Dict[str, str]
    nodes: List[str]
    nodelist: str
    login_host: str
    login_port: int
    login_user: str
    identity: str
    known_hosts: str
    sshd_log: str
    raw: dict = field(repr=False)

    @property
    def login(self):
        return "%s@%s" % (self.login_user, self.login_host)


@contextlib.contextmanager
def node_lock(devcluster):
    """The lock every test that changes node states takes (drain, down, resume): several sessions
    may run this suite against the same clusters at once, and two drains of one node would mix."""
    import fcntl

    with open(str(Path(devcluster.state_dir) / "slurmkit-test-nodes.lock"), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def torch_missing(python):
    """None where ``python`` imports torch.distributed, else why not (for a skip reason)."""
    try:
        proc = subprocess.run([python, "-c", "import torch.distributed"], capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if proc.returncode == 0 else proc.stderr.decode(errors="replace").strip().splitlines()[-1:]


def _cluster_env(slurm_conf):
    env = dict(os.environ)
    env["SLURM_CONF"] = slurm_conf
    for var in list(env):
        # Do not let a surrounding job/allocation leak into commands.
        if var.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_")) and var != "SLURM_CONF":
            del env[var]
    return env


def load_clusters(path=CLUSTERS_JSON) -> Dict[str, ClusterInfo]:
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise RuntimeError("%s does not exist: the dev clusters are not set up; %s" % (path, HINT))
    ssh = data["ssh"]
    out = {}
    for name, c in data["clusters"].items():
        out[name] = ClusterInfo(
            name=name, slurm_conf=c["slurm_conf"], env=_cluster_env(c["slurm_conf"]),
            nodes=list(c["node_names"]), nodelist=c["nodelist"],
            login_host=c["login"]["host"], login_port=int(c["login"]["port"]),
            login_user=c["login"].get("user", "root"),
            identity=ssh["identity"], known_hosts=ssh["known_hosts"],
            sshd_log=c["login"]["sshd_log"], raw=c)
    return out


_CACHE = {}


def _clusters() -> Dict[str, ClusterInfo]:
    if "clusters" not in _CACHE:
        _CACHE["clusters"] = load_clusters()
    return _CACHE["clusters"]


def _info(cluster) -> ClusterInfo:
    if isinstance(cluster, ClusterInfo):
        return cluster
    return _clusters()[cluster]


# --------------------------------------------------------------------------
# Helpers (module functions; DevCluster exposes the same as methods)
# --------------------------------------------------------------------------

def slurm(cluster, *argv, check=True, timeout=60, input=None, cwd=None):
    """Run a Slurm command (``sinfo``, ``sbatch`` ...) against ``cluster``.

    Returns the CompletedProcess (text); raises AssertionError with the
    output when ``check`` and the command fails."""
    info = _info(cluster)
    argv = [str(a) for a in argv]
    proc = subprocess.run(argv, env=info.env, input=input, cwd=cwd, timeout=timeout,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True)
    if check and proc.returncode != 0:
        raise AssertionError("[%s] %s -> exit %d\nstdout: %s\nstderr: %s" % (
            info.name, " ".join(argv), proc.returncode, proc.stdout, proc.stderr))
    return proc


def slurm_version(cluster="alpha") -> str:
    """The Slurm release of the cluster's commands, as sinfo --version prints it (22.05.8, 24.11.5 ...)."""
    return slurm(cluster, "sinfo", "--version").stdout.split()[1]


def sbatch(cluster, *argv, cwd=None):
    """sbatch --parsable ARGV...; returns the job id (str)."""
    out = slurm(cluster, "sbatch", "--parsable", *argv, cwd=cwd).stdout.strip()
    return out.split(";")[0]


def job_info(cluster, jobid, details=False) -> Dict[str, str]:
    """``scontrol [-d] show job -o JOBID`` as a dict (empty if unknown)."""
    argv = ["scontrol"] + (["-d"] if details else []) + ["show", "job", "-o", str(jobid)]
    proc = slurm(cluster, *argv, check=False)
    if proc.returncode != 0:
        return {}
    fields = {}
    for token in proc.stdout.split():
        key, sep, value = token.partition("=")
        if sep and key not in fields:
            fields[key] = value
    fields["_raw"] = proc.stdout
    return fields


def wait_job_state(cluster, jobid, states, timeout=60.0, interval=1.0):
    """Poll ``scontrol show job`` (every ``interval`` s) until the job's state
    is one of ``states``; returns the job_info dict.  Fails early when the job
    reaches a terminal state that is not wanted."""
    if isinstance(states, str):
        states = {states}
    states = {s.upper() for s in states}
    deadline = time.monotonic() + timeout
    info = {}
    while True:
        info = job_info(cluster, jobid)
        state = info.get("JobState")
        if state in states:
            return info
        if state in TERMINAL_STATES:
            raise AssertionError("job %s on %s ended %s, wanted %s:\n%s" % (
                jobid, _info(cluster).name, state, sorted(states), info.get("_raw", "")))
        if time.monotonic() > deadline:
            raise AssertionError("job %s on %s still %s after %ss, wanted %s:\n%s" % (
                jobid, _info(cluster).name, state, timeout, sorted(states), info.get("_raw", "")))
        time.sleep(interval)


def local_site_data() -> dict:
    """site_configs/local.yaml as data, its relative paths made absolute (and its x- anchors left out), so that a
    test's changed copy can live anywhere."""
    import yaml

    local = Path(__file__).resolve().parents[2] / "site_configs" / "local.yaml"

    def absolute(value):
        if isinstance(value, dict):
            return {k: absolute(v) for k, v in value.items()}
        if isinstance(value, list):
            return [absolute(v) for v in value]
        if isinstance(value, str) and value.startswith("../"):
            return str((local.parent / value).resolve())
        return value
    return {k: v for k, v in absolute(yaml.safe_load(local.read_text())).items() if not k.startswith("x-")}


def cancel_later(request, cluster, job_id):
    """Cancel the job when the test ends, whatever happened."""
    request.addfinalizer(lambda: slurm(cluster, "scancel", job_id, check=False))


def fill(request, cluster, *argv):
    """A running 10-minute job taking what ``argv`` asks for (cancelled at the test's end): a cluster made busy."""
    job = slurm(cluster, "sbatch", "--parsable", "-t", "10", "-o", "/dev/null", *argv, "--wrap", "sleep 600"
                ).stdout.strip().split(";")[0]
    cancel_later(request, cluster, job)
    wait_job_state(cluster, job, {"RUNNING"}, timeout=60)
    return job


def ssh_argv(cluster, *remote, known_hosts=None, identity=None, options=()) -> List[str]:
    """The OpenSSH client command line for the login node of ``cluster``,
    with strict host key checking against our known_hosts (or ``known_hosts``)."""
    info = _info(cluster)
    argv = ["ssh", "-F", "/dev/null",
            "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=yes",
            "-o", "UserKnownHostsFile=%s" % (known_hosts or info.known_hosts),
            "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", "IdentitiesOnly=yes",
            "-o", "ConnectTimeout=10",
            "-i", str(identity or info.identity),
            "-p", str(info.login_port)]
    for opt in options:
        argv += ["-o", opt]
    argv.append(info.login)
    argv += [str(a) for a in remote]
    return argv


def ssh(cluster, *remote, known_hosts=None, timeout=30, check=False):
    argv = ssh_argv(cluster, *remote, known_hosts=known_hosts)
    proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError("%s -> exit %d: %s" % (" ".join(argv), proc.returncode, proc.stderr))
    return proc


def port_open(host, port, timeout=2.0) -> bool:
    """Whether something accepts TCP connections on host:port (loopback only here)."""
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return True
    except OSError:
        return False


def devcluster_cmd(*argv, timeout=120):
    """Run devcluster.py ARGV...; raises AssertionError with its output on failure."""
    proc = subprocess.run([sys.executable, str(DEVCLUSTER)] + [str(a) for a in argv],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError("devcluster.py %s failed (%d):\n%s"
                             % (" ".join(map(str, argv)), proc.returncode, proc.stdout))
    return proc.stdout


def ctld_answers(cluster) -> bool:
    try:
        proc = slurm(cluster, "scontrol", "ping", check=False, timeout=15)
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0 and "is UP" in proc.stdout


def rpc_count(sdiag_text, message):
    """How many RPCs of type ``message`` (REQUEST_JOB_INFO...) sdiag's text counts since its last reset."""
    import re

    m = re.search(r"^\s*%s\s+\(\s*\d+\)\s+count:(\d+)" % message, sdiag_text, re.M)
    return int(m.group(1)) if m else 0


# --------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------

class DevCluster:
    """What the ``devcluster`` fixture returns."""

    def __init__(self, clusters: Dict[str, ClusterInfo], raw: dict):
        self.clusters = clusters
        self.raw = raw
        self.identity = raw["ssh"]["identity"]
        self.known_hosts = raw["ssh"]["known_hosts"]
        self.state_dir = raw["state_dir"]

    def __getitem__(self, name) -> ClusterInfo:
        return self.clusters[name]

    def names(self) -> Iterable[str]:
        return list(self.clusters)

    slurm = staticmethod(slurm)
    sbatch = staticmethod(sbatch)
    job_info = staticmethod(job_info)
    wait_job_state = staticmethod(wait_job_state)
    ssh_argv = staticmethod(ssh_argv)
    ssh = staticmethod(ssh)


@pytest.fixture(scope="session")
def devcluster() -> DevCluster:
    if not CLUSTERS_JSON.exists():
        pytest.fail("%s not found: the local dev clusters are not up; %s" % (CLUSTERS_JSON, HINT),
                    pytrace=False)
    raw = json.loads(CLUSTERS_JSON.read_text())
    clusters = load_clusters()
    _CACHE["clusters"] = clusters
    # Tolerate a slurmctld being restarted by a concurrent test for a few seconds.
    deadline = time.monotonic() + 10
    down = [c for c in clusters.values() if not ctld_answers(c)]
    while down and time.monotonic() < deadline:
        time.sleep(1)
        down = [c for c in down if not ctld_answers(c)]
    if down:
        pytest.fail("slurmctld of %s not answering (SLURM_CONF=%s); %s" % (
            ", ".join(c.name for c in down), down[0].slurm_conf, HINT), pytrace=False)
    return DevCluster(clusters, raw)


class Control:
    """Disruptive operations on the dev clusters, each undone at teardown."""

    def __init__(self, dc: DevCluster):
        self.dc = dc
        self._undo = []  # (description, callable), undone in reverse order

    def _do(self, action, cluster, undo_action):
        out = devcluster_cmd(action, cluster)
        self._undo.append(("%s %s" % (undo_action, cluster), lambda: devcluster_cmd(undo_action, cluster)))
        return out

    def stop_sshd(self, cluster):
        return self._do("down-sshd", cluster, "up-sshd")

    def start_sshd(self, cluster):
        return devcluster_cmd("up-sshd", cluster)

    def stop_ctld(self, cluster):
        return self._do("down-ctld", cluster, "up-ctld")

    def start_ctld(self, cluster):
        return devcluster_cmd("up-ctld", cluster)

    def rekey(self, cluster):
        return self._do("rekey-sshd", cluster, "restore-sshd-key")

    def restore(self, cluster):
        return devcluster_cmd("restore-sshd-key", cluster)

    @contextlib.contextmanager
    def sshd_stopped(self, cluster):
        self.stop_sshd(cluster)
        try:
            yield
        finally:
            self.start_sshd(cluster)

    @contextlib.contextmanager
    def ctld_stopped(self, cluster):
        self.stop_ctld(cluster)
        try:
            yield
        finally:
            self.start_ctld(cluster)

    @contextlib.contextmanager
    def rekeyed(self, cluster):
        self.rekey(cluster)
        try:
            yield
        finally:
            self.restore(cluster)

    def undo_all(self):
        errors = []
        while self._undo:
            what, fn = self._undo.pop()
            try:
                fn()  # the up-*/restore commands are idempotent
            except Exception as e:  # keep undoing the rest
                errors.append("%s: %s" % (what, e))
        if errors:
            raise AssertionError("devcluster restore failed:\n" + "\n".join(errors))


# The container image of site_configs/local.yaml (`make image`: an OCI bundle whose rootfs is a Debian 12
# root with PyTorch; its Python lives at a path this machine lacks, so a program that runs with it ran in
# the image): beta runs the bundle with Slurm's --container, alpha and gamma its rootfs with ch-run.
IMAGE = "debian-12"
IMAGE_PYTHON = "/opt/slurmkit-image/venv/bin/python"
HAS_CH_RUN = shutil.which("ch-run") is not None
needs_ch_run = pytest.mark.skipif(not HAS_CH_RUN, reason="Charliecloud's ch-run is not installed here "
                                                       "(make install-system)")
# In a release's root (make test-releases) the root's private network cannot make the image: the
# suite takes the host's, handed in by scripts/releases/test-releases.sh where the root's clusters keep
# their images, and skips the container jobs where none was.
IN_RELEASE_ROOT = os.environ.get("SLURMKIT_TEST_RELEASE_ROOT")
IMAGE_COPY = REPO / ".devcluster" / "images" / IMAGE     # where site_configs/local.yaml names it
HANDED_IN = not IN_RELEASE_ROOT or (IMAGE_COPY / ".bundle-done").is_file()
CAN_RUN_IMAGES = HAS_CH_RUN and HANDED_IN
needs_image = pytest.mark.skipif(
    not CAN_RUN_IMAGES,
    reason="the container jobs need %s" % (
        "Charliecloud's ch-run (make install-system)" if not HAS_CH_RUN else
        "the host's image, which test-releases hands into the root of Slurm %s (make image there first)"
        % IN_RELEASE_ROOT))

# The runtimes Debian 12 lacks or a root may lack: their tests say where they run.
needs_apptainer = pytest.mark.skipif(shutil.which("apptainer") is None, reason="Apptainer is not in this Debian "
                                     "release (the root of Slurm 26.05, Debian sid, has it: make test-releases runs "
                                     "this there)")
needs_runc = pytest.mark.skipif(shutil.which("runc") is None, reason="runc is not installed here (make "
                                "install-system installs it)")


@pytest.fixture(scope="session")
def container_image(devcluster):
    """The test image's bundle (made once for the machine), copied where local.yaml says the clusters keep
    it: as hard links (a second of work, no space), since runc refuses a rootfs reached through a symbolic
    link; the bundle's root is mounted read-only, so no job changes the machine's copy."""
    assert not os.path.exists(IMAGE_PYTHON), "this machine must not have the image's Python for the proof to hold"
    copy = IMAGE_COPY
    if IN_RELEASE_ROOT:               # handed in as it is (test-releases made it afresh)
        return _with_mount_point(copy)
    made = subprocess.run(["make", "--no-print-directory", "-s", "image"], cwd=REPO, check=True,
                          capture_output=True, text=True, timeout=900).stdout.strip().splitlines()[-1]
    stamp = " ".join([made] + [(Path(made) / done).read_text().strip() for done in (".bundle-done", ".sqfs-done")
                               if (Path(made) / done).is_file()])
    if not (copy / ".copied-from").is_file() or (copy / ".copied-from").read_text() != stamp:
        if copy.is_symlink():
            copy.unlink()
        shutil.rmtree(copy, ignore_errors=True)
        copy.parent.mkdir(parents=True, exist_ok=True)
        if subprocess.run(["cp", "-al", made, str(copy)], capture_output=True).returncode != 0:
            shutil.rmtree(copy, ignore_errors=True)       # another file system: a real copy
            subprocess.run(["cp", "-a", made, str(copy)], check=True)
        (copy / ".copied-from").write_text(stamp)
    return _with_mount_point(copy)


def alpha_with_runtime(tmp_path, runtime, bundle=False, options=()):
    """local.yaml with alpha's runtime replaced (and its image the bundle rather than its rootfs, the
    runtime given the site's ``options``), as a file."""
    text = (REPO / "site_configs" / "local.yaml").read_text().replace("../.devcluster", str(REPO / ".devcluster"))
    marker = "    containers:\n      runtime: charliecloud\n"
    assert marker in text
    text = text.replace(marker, "    containers:\n      runtime: %s\n      options: %s\n"
                        % (runtime, json.dumps(list(options))), 1)
    if bundle:
        text = text.replace("debian-12: %s/rootfs" % (REPO / ".devcluster" / "images" / IMAGE),
                            "debian-12: %s" % (REPO / ".devcluster" / "images" / IMAGE), 1)
    site = tmp_path / ("alpha-%s.yaml" % runtime)
    site.write_text(text)
    return str(site)


@pytest.fixture(scope="session")
def oci_site_with_repo(container_image, tmp_path_factory):
    """A site file whose beta (Slurm's OCI runtime) runs a bundle that also has the clone, read-only, at its
    own path: an OCI job takes its mounts from the bundle's config.json alone (slurmkit refuses --mount
    there), and the training program and slurmkit's checkpoint helper are in the clone.  The bundle is
    the clusters' copy linked again (cp -al) beside it with one mount added to its config.json."""
    bundle = Path(container_image).parent / (IMAGE + "-with-repo")
    shutil.rmtree(bundle, ignore_errors=True)
    bundle.mkdir()
    if subprocess.run(["cp", "-al", str(Path(container_image) / "rootfs"), str(bundle / "rootfs")],
                      capture_output=True).returncode != 0:
        subprocess.run(["cp", "-a", str(Path(container_image) / "rootfs"), str(bundle / "rootfs")], check=True)
    config = json.loads((Path(container_image) / "config.json").read_text())
    config["mounts"].append({"destination": str(REPO), "type": "bind", "source": str(REPO),
                             "options": ["rbind", "ro"]})
    (bundle / "config.json").write_text(json.dumps(config, indent=1))
    text = (REPO / "site_configs" / "local.yaml").read_text().replace("../.devcluster", str(REPO / ".devcluster"))
    named = "debian-12: %s\n" % container_image
    assert named in text, "site_configs/local.yaml no longer names beta's bundle as %s" % container_image
    site = tmp_path_factory.mktemp("oci-site") / "local-oci-with-repo.yaml"
    site.write_text(text.replace(named, "debian-12: %s\n" % bundle, 1))
    return str(site)


def _with_mount_point(copy: Path) -> str:
    """The clusters' copy with a mount point at the clone's path, as a site's image has its file systems'
    (/home, /scratch): ch-run binds only onto a directory the image has, and the tests mount the clone
    (the training program and slurmkit's checkpoint helper) at its own path.  A new directory of the
    copy (cp -al links files, not directories): the machine's image stays as made, whatever the path
    of the clone that made it."""
    (copy / "rootfs" / str(REPO).lstrip("/")).mkdir(parents=True, exist_ok=True)
    return str(copy)


@pytest.fixture
def devcluster_control(devcluster):
    ctl = Control(devcluster)
    try:
        yield ctl
    finally:
        ctl.undo_all()
