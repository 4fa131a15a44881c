"""The files the clusters need before their daemons start: directories, keys, fake devices,
known_hosts, clusters.json and the site of a mixed-release layout."""

import json
import os
import secrets
import stat
from pathlib import Path

from clusterspec import (CLIENT_KEY, CLUSTERS_JSON, KNOWN_HOSTS, layout, LAYOUT_JSON, NODE_CPUS, NODE_MEM_MB,
                         REPO, say, SITE_PRICES, SPECS, SSH_CONFIG, SSH_DIR, STATE)
from hosttools import check_path_lengths, pubkey, run, ssh_keygen, write_if_changed
from slurmconf import Cluster, slurm_version


def save_layout():
    STATE.mkdir(parents=True, exist_ok=True)
    write_if_changed(LAYOUT_JSON, json.dumps(layout(), indent=2, sort_keys=True) + "\n")


def prepare_common():
    STATE.mkdir(parents=True, exist_ok=True)
    SSH_DIR.mkdir(mode=0o700, exist_ok=True)
    if ssh_keygen(CLIENT_KEY, "devcluster-client"):
        say("ssh: generated client key %s" % CLIENT_KEY)
    Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)  # privilege separation dir


def prepare_cluster(c):
    """Create directories, keys and config files.

    Returns (slurm configs changed, sshd must be restarted, slurmdbd.conf changed)."""
    check_path_lengths(c)
    for d in (c.etc, c.ctld_dir / "state", c.slurmd_dir, c.dev_dir, c.out_dir):
        d.mkdir(parents=True, exist_ok=True)
    for n in c.nodes:
        (c.slurmd_dir / n).mkdir(exist_ok=True)
    c.munge_dir.mkdir(mode=0o700, exist_ok=True)
    os.chmod(c.munge_dir, 0o700)
    c.sshd_dir.mkdir(mode=0o700, exist_ok=True)
    (c.sshd_dir / "home").mkdir(mode=0o700, exist_ok=True)
    for i in range(c.gres_count):
        make_fake_device(c.dev_dir / ("%s%d" % (c.spec["devname"], i)))
    if not c.munge_key.exists():
        run(c.wrap(["mungekey", "-c", "-k", str(c.munge_key)]))
        os.chmod(c.munge_key, 0o600)
        say("%s: generated munge key" % c.name)
    changed = False
    if c.health_check:
        for n in c.nodes:
            (c.health_scratch / n).mkdir(parents=True, exist_ok=True)
        write_if_changed(c.health_site, c.render_health_site())
        # Written before slurm.conf names it: slurmd checks the program exists.
        write_if_changed(c.health_program, c.render_health_program(), 0o755)
    changed |= write_if_changed(c.slurm_conf, c.render_slurm_conf())
    changed |= write_if_changed(c.gres_conf, c.render_gres_conf())
    changed |= write_if_changed(c.topology_conf, c.render_topology_conf())
    # Where the cluster's Slurm has runc beside it (a Debian root need not): else no oci.conf, and
    # Slurm runs --container jobs on the host, as on a node of a real cluster without one.
    if c.spec.get("oci") and c.has_program("runc"):
        c.oci_state.mkdir(mode=0o700, exist_ok=True)
        changed |= write_if_changed(c.oci_conf, c.render_oci_conf(oci_instance(c)))
    elif c.oci_conf.exists():
        c.oci_conf.unlink()
        changed = True
    # Login node.  A host key left aside by rekey-sshd is put back (and the
    # sshd restarted by the caller), so known_hosts matches again.
    restored = False
    if c.host_key_orig.exists():
        restore_key_files(c)
        restored = True
    if ssh_keygen(c.host_key, "devcluster-%s-login" % c.name):
        say("%s: generated login host key" % c.name)
    write_if_changed(c.authorized_keys, Path(str(CLIENT_KEY) + ".pub").read_text(), 0o600)
    sshd_changed = write_if_changed(c.sshd_config, c.render_sshd_config(), 0o600)
    dbd_changed = prepare_accounting(c) if c.accounting else False
    return changed, sshd_changed or restored, dbd_changed


def prepare_accounting(c):
    """Directories, the database password and slurmdbd.conf; True if that changed."""
    c.dbd_dir.mkdir(exist_ok=True)
    c.mariadb_dir.mkdir(mode=0o700, exist_ok=True)
    os.chmod(c.mariadb_dir, 0o700)
    if not c.storage_pass_file.exists():
        write_if_changed(c.storage_pass_file, secrets.token_hex(16) + "\n", 0o600)
    storage_pass = c.storage_pass_file.read_text().strip()
    changed = write_if_changed(c.slurmdbd_conf, c.render_slurmdbd_conf(storage_pass), 0o600)
    os.chmod(c.slurmdbd_conf, 0o600)  # slurmdbd refuses to start on anything wider
    return changed


def make_fake_device(path):
    """A character device aliasing /dev/null (1:3): slurmd rejects gres.conf
    File= entries that are not char/block devices ("... is not a valid
    character or block device, fix your gres.conf") and then sets no
    CUDA_VISIBLE_DEVICES."""
    try:
        st = os.lstat(str(path))
        if stat.S_ISCHR(st.st_mode):
            return
        os.unlink(str(path))
    except FileNotFoundError:
        pass
    try:
        os.mknod(str(path), stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except OSError as e:
        say("warning: mknod %s failed (%s); using a plain file" % (path, e))
        Path(path).touch()


def restore_key_files(c):
    for suffix in ("", ".pub"):
        os.replace(str(c.host_key_orig) + suffix, str(c.host_key) + suffix)
    say("%s: restored original login host key" % c.name)


def write_known_hosts(clusters):
    lines = []
    for c in clusters:
        if not Path(str(c.host_key) + ".pub").exists() and not c.host_key_orig.exists():
            continue  # never brought up
        kt, key = pubkey(c.host_key_orig if c.host_key_orig.exists() else c.host_key)
        lines.append("[%s]:%d %s %s" % (c.login_host, c.login_port, kt, key))
        # The nodes' addresses reach the same sshd (health sweep): same key.
        lines += ["[%s]:%d %s %s" % (c.node_addr(i), c.login_port, kt, key) for i in c.numbers]
    write_if_changed(KNOWN_HOSTS, "\n".join(lines) + "\n", 0o600)
    cfg = ["# ssh -F %s alpha   (generated by devcluster.py)" % SSH_CONFIG]
    for c in clusters:
        cfg += ["Host %s %s-login" % (c.name, c.name),
                "    HostName %s" % c.login_host,
                "    Port %d" % c.login_port,
                "    User root",
                "    IdentityFile %s" % CLIENT_KEY,
                "    IdentitiesOnly yes",
                "    UserKnownHostsFile %s" % KNOWN_HOSTS,
                "    StrictHostKeyChecking yes",
                "    BatchMode yes", ""]
    write_if_changed(SSH_CONFIG, "\n".join(cfg), 0o600)


def render_site(clusters):
    """The slurmkit site of these clusters, as JSON (which YAML reads as it is)."""
    site = {
        "site": "devcluster-releases",
        "description": "devcluster clusters of several Slurm releases (%s); generated by devcluster.py"
                       % ", ".join("%s %s" % (c.name, slurm_version(c) or "?") for c in clusters),
        "defaults": {"cluster": clusters[0].name, "time": "00:10:00", "template": "single"},
        "topology": {"max_switch_wait": "00:02:00"},
        "clusters": {},
    }
    for c in clusters:
        parts = {}
        for name, _, maxtime, _ in c.spec["partitions"]:
            part = {"cpus_per_node": NODE_CPUS, "memory_mb": NODE_MEM_MB, "max_nodes": len(c.nodes),
                    "max_time": maxtime, "fabric": {"type": "ethernet", "socket_ifname": "lo"}}
            if name == "cpu":
                # alpha's CPU partition, as in site_configs/local.yaml: its jobs ask for no GPU.
                part["accelerator"] = "none"
            else:
                part.update(accelerator="ascend" if c.gres_name == "npu" else "nvidia",
                            gpu_model=c.gres_type, gpus_per_node=c.gres_count)
                if c.gres_name != "gpu":
                    part["gres_name"] = c.gres_name
            parts[name] = part
        entry = {"login": {"host": c.login_host, "port": c.login_port, "user": "root",
                           "identity_file": str(CLIENT_KEY), "known_hosts": str(KNOWN_HOSTS)},
                 "default_partition": [p for p, dflt, _, _ in c.spec["partitions"] if dflt][0],
                 "price_per_gpu_hour": SITE_PRICES.get(c.name, 1.0),
                 "partitions": parts}
        if c.spec["max_switch_wait"] is None:
            entry["max_switch_wait"] = "00:05:00"    # Slurm's own cap, which gamma keeps
        if c.root is None:
            entry["slurm_conf"] = str(c.slurm_conf)
        site["clusters"][c.name] = entry
    return json.dumps(site, indent=2) + "\n"


def write_clusters_json():
    all_clusters = [Cluster(n) for n in SPECS]
    data = {
        "version": 1,
        "repo": str(REPO),
        "state_dir": str(STATE),
        "script": str(Path(__file__).resolve()),
        "ssh": {"identity": str(CLIENT_KEY), "public_key": str(CLIENT_KEY) + ".pub",
                "known_hosts": str(KNOWN_HOSTS), "config": str(SSH_CONFIG), "user": "root"},
        "default_cluster": "alpha",
        "clusters": {c.name: c.describe() for c in all_clusters},
    }
    write_if_changed(CLUSTERS_JSON, json.dumps(data, indent=2, sort_keys=True) + "\n")


def oci_instance(c):
    """This cluster's own word in its containers' names, made once and kept in its state directory.

    runc (cgroupfs, no cgroupsPath in the bundle) names each container's cgroup after the container,
    at the top of the machine's cgroup hierarchies, which every cluster here shares: the release
    suites' clusters run in their own roots and networks but not their own cgroups, start at the
    same job ids and run the same tests at the same time, so ``bn3.root.3016.0.0`` of one was
    ``bn3.root.3016.0.0`` of the other, and the second ``runc run`` failed (or, runc 1.3, found
    "the container's cgroup is not empty").  Random rather than derived from a path: each root sees
    its state directory at the same path."""
    path = c.dir / "oci-instance"
    try:
        word = path.read_text().strip()
    except FileNotFoundError:
        word = ""
    if not word:
        word = "%s-%s" % (c.name, secrets.token_hex(4))
        path.write_text(word + "\n")
    return word
