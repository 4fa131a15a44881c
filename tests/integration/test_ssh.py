"""SSHRunner against the real login-node sshds of the local dev clusters.

Needs the dev clusters (``make cluster-up``; fixtures in conftest.py): login
sshd on 127.0.k.2:2222, client key and known_hosts under .devcluster/ssh/.
Every connection here is made with
paramiko.RejectPolicy: keys are trusted only through known_hosts files,
exactly as in production.

The tests that stop or rekey a login sshd use gamma, through the
``devcluster_control`` fixture, which restores it even when a test fails.
"""

import os
import re
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("paramiko")

from slurmkit.errors import (ConnectTimeoutError, HostKeyError, RemoteError,  # noqa: E402
                             SlurmUnavailableError)
from conftest import port_open  # noqa: E402
from slurmkit.remote import connect, known_hosts, pool, trust  # noqa: E402
from slurmkit.remote import runner as remote_runner  # noqa: E402
from slurmkit.site import proxy_jump  # noqa: E402
from slurmkit.site.model import LoginNode  # noqa: E402

@pytest.fixture
def dev(devcluster):
    """conftest's DevCluster: ``dev[name]`` is a ClusterInfo."""
    return devcluster


@pytest.fixture(autouse=True)
def hermetic(monkeypatch, tmp_path):
    """Only the files a test names may vouch for host keys or offer keys."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.setattr(known_hosts, "SYSTEM_KNOWN_HOSTS", str(tmp_path / "no-system-known-hosts"))
    pool.close_all()
    yield
    pool.close_all()


def wait_for_sshd(host, port, timeout=20.0):
    # Other suites stop and restart login sshds too (down-sshd/up-sshd);
    # give a restart in progress a moment instead of failing spuriously.
    deadline = time.monotonic() + timeout
    while not port_open(host, port) and time.monotonic() < deadline:
        time.sleep(0.2)


def login_of(dev, name, **over):
    c = dev[name]
    wait_for_sshd(c.login_host, c.login_port)
    if over.get("proxy_jump"):
        jump = proxy_jump.parse_proxy_jump(over["proxy_jump"])
        wait_for_sshd(jump.host, jump.port)
    kw = dict(host=c.login_host, port=c.login_port, user=c.login_user, identity_file=c.identity,
              known_hosts=c.known_hosts, connect_timeout=5.0, command_timeout=30.0)
    kw.update(over)
    return LoginNode(**kw)


def host_key_pub(dev, name):
    return dev[name].raw["login"]["host_key_pub"]


def partitions(dev, name):
    return sorted(p["name"] for p in dev[name].raw["partitions"])


def keygen_fingerprint(pub_path):
    out = subprocess.run(["ssh-keygen", "-lf", str(pub_path)], capture_output=True, text=True, check=True).stdout
    return out.split()[1]


def accepted_ports(log_path):
    """Client ports of every 'Accepted publickey' line in an sshd log."""
    text = Path(log_path).read_text(errors="replace")
    return [int(p) for p in re.findall(r"Accepted publickey for \S+ from \S+ port (\d+)", text)]


def local_port(runner):
    return runner.transport().sock.getsockname()[1]


# ------------------------------------------------------------------ basics

def test_command_returns_stdout_stderr_and_exit_status(dev):
    r = remote_runner.SSHRunner(login_of(dev, "alpha"), "alpha")
    res = r.run(["sinfo", "-h", "-o", "%R"])
    assert res.returncode == 0
    # sshd's SetEnv SLURM_CONF makes sinfo answer for alpha
    assert sorted(res.stdout.split()) == partitions(dev, "alpha")
    res = r.run(["sh", "-c", "echo out; echo err >&2; exit 7"])
    assert (res.returncode, res.stdout, res.stderr) == (7, "out\n", "err\n")
    assert res.argv == ("sh", "-c", "echo out; echo err >&2; exit 7")


def test_each_cluster_answers_for_itself(dev):
    for name in ("alpha", "beta", "gamma"):
        res = remote_runner.SSHRunner(login_of(dev, name), name).run(["scontrol", "show", "config"])
        assert dev[name].slurm_conf in res.stdout


def test_stdin_reaches_the_remote(dev):
    r = remote_runner.SSHRunner(login_of(dev, "alpha"), "alpha")
    script = "#!/bin/bash\n#SBATCH --job-name='x y'\necho \"$HOME\" ✓\n"
    assert r.run(["cat"], stdin=script).stdout == script
    # Bigger than the SSH window both ways at once: no deadlock, nothing lost.
    big = "".join("line %07d %s\n" % (i, "x" * 50) for i in range(60000))     # ~3.8 MB
    res = r.run(["cat"], stdin=big)
    assert res.stdout == big
    assert r.run(["wc", "-c"], stdin=big).stdout.strip() == str(len(big.encode()))


def test_remote_stdin_is_closed_without_input(dev):
    r = remote_runner.SSHRunner(login_of(dev, "alpha"), "alpha")
    res = r.run(["cat"], timeout=5)          # would hang if stdin stayed open
    assert (res.returncode, res.stdout) == (0, "")


def test_arguments_arrive_byte_for_byte_and_nothing_executes(dev):
    marker = "/tmp/slurmkit-ssh-test-%s" % uuid.uuid4().hex
    args = ["with space", "it's", 'say "hi"', "$(touch %s)" % marker, "`touch %s`" % marker,
            "; touch %s" % marker, "a\nb\n\nc", "", "*", "$HOME", "~", "tab\there", "back\\slash", "ünï ✓",
            "--x=$(id)", "'", '"', "\\", "!event", "&& touch %s" % marker]
    r = remote_runner.SSHRunner(login_of(dev, "alpha"), "alpha")
    res = r.run(["printf", "%s\\0"] + args)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\0")[:-1] == args
    assert not os.path.exists(marker)       # the login node is this machine


def test_missing_program_is_slurm_unavailable(dev):
    r = remote_runner.SSHRunner(login_of(dev, "alpha"), "alpha")
    with pytest.raises(SlurmUnavailableError, match="slurmkit-no-such-program not found on the login node of alpha"):
        r.run(["slurmkit-no-such-program", "--version"])


# ------------------------------------------------------------------ connection reuse

def test_twenty_commands_reuse_one_connection(dev):
    log = dev["alpha"].sshd_log
    before = accepted_ports(log)
    opened = pool.connection_count()
    r = remote_runner.SSHRunner(login_of(dev, "alpha"), "alpha")
    ports = set()
    for i in range(20):
        assert r.run(["echo", str(i)]).stdout == "%d\n" % i
        ports.add(local_port(r))
    assert len(ports) == 1 and pool.connection_count() - opened == 1
    deadline = time.monotonic() + 3
    while True:
        new = accepted_ports(log)[len(before):]
        ours = [p for p in new if p in ports]
        if ours or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    # Exactly one authentication for our 20 commands (other processes may
    # use the same sshd concurrently: their lines have other client ports).
    assert ours == list(ports)


def test_runners_and_threads_share_the_connection(dev):
    opened = pool.connection_count()
    a = remote_runner.SSHRunner(login_of(dev, "alpha"), "alpha")
    b = remote_runner.SSHRunner(login_of(dev, "alpha"), "alpha")
    results, errors = {}, []

    def work(i):
        try:
            for j in range(3):
                runner = a if (i + j) % 2 else b
                results[(i, j)] = runner.run(["sh", "-c", "sleep 0.2; echo $0-$1", str(i), str(j)]).stdout
        except Exception as exc:   # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    [t.start() for t in threads]
    [t.join(60) for t in threads]
    assert not errors
    assert results == {(i, j): "%d-%d\n" % (i, j) for i in range(16) for j in range(3)}
    assert pool.connection_count() - opened == 1
    a.close()
    assert b.run(["true"]).ok and pool.connection_count() - opened == 1   # b still holds it
    b.close()


def test_reconnects_after_the_connection_is_killed(dev):
    log = dev["alpha"].sshd_log
    r = remote_runner.SSHRunner(login_of(dev, "alpha"), "alpha")
    assert r.run(["echo", "one"]).stdout == "one\n"
    opened, old_port = pool.connection_count(), local_port(r)
    r.transport().sock.shutdown(socket.SHUT_RDWR)     # kill the TCP connection underneath
    assert r.run(["echo", "two"]).stdout == "two\n"
    assert pool.connection_count() - opened == 1 and local_port(r) != old_port
    deadline = time.monotonic() + 3
    while local_port(r) not in accepted_ports(log) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert local_port(r) in accepted_ports(log)


def test_stale_transport_that_still_looks_alive_is_retried_once(dev):
    # The transport claims to be active but its socket is gone: opening the
    # channel fails, nothing of the command was sent, so one reconnect is safe.
    r = remote_runner.SSHRunner(login_of(dev, "alpha"), "alpha")
    assert r.run(["true"]).ok
    dead = r.transport()
    opened = pool.connection_count()
    dead.sock.shutdown(socket.SHUT_RDWR)
    dead.is_active = lambda: True
    assert r.run(["echo", "again"]).stdout == "again\n"
    assert pool.connection_count() - opened == 1 and r.transport() is not dead


def test_command_timeout(dev):
    r = remote_runner.SSHRunner(login_of(dev, "alpha"), "alpha")
    assert r.run(["true"]).ok
    opened = pool.connection_count()
    started = time.monotonic()
    with pytest.raises(ConnectTimeoutError) as err:
        r.run(["sleep", "30"], timeout=1)
    assert time.monotonic() - started < 5
    msg = str(err.value)
    assert "cluster alpha" in msg and "127.0.1.2:2222" in msg and "1s" in msg
    # only that channel was closed: the connection goes on
    assert r.run(["echo", "still"]).stdout == "still\n" and pool.connection_count() == opened


def test_login_command_timeout_is_the_default(dev):
    r = remote_runner.SSHRunner(login_of(dev, "alpha", command_timeout=1.0), "alpha")
    with pytest.raises(ConnectTimeoutError):
        r.run(["sleep", "10"])


# ------------------------------------------------------------------ host keys

def test_unknown_host_key_is_refused_with_fingerprint(dev, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    node = login_of(dev, "alpha", known_hosts=str(empty))
    fp = keygen_fingerprint(host_key_pub(dev, "alpha"))
    with pytest.raises(HostKeyError) as err:
        remote_runner.SSHRunner(node, "alpha").run(["true"])
    assert str(err.value) == ("host key of 127.0.1.2:2222 (cluster alpha) is unknown: ssh-ed25519 %s; "
                              "if this fingerprint is right, run `slurmkit site trust alpha`" % fp)
    assert empty.read_text() == ""           # nothing was added behind the user's back


def test_trust_flow_makes_an_unknown_host_work(dev, tmp_path):
    kh = tmp_path / "site" / "known_hosts"
    node = login_of(dev, "beta", known_hosts=str(kh))
    assert known_hosts.trust_target_file(node) == str(kh)
    keytype, b64, fp = connect.fetch_host_key(node, "beta")
    assert fp == keygen_fingerprint(host_key_pub(dev, "beta"))
    assert trust.trust_host_key(node, (keytype, b64, fp)) is True
    assert trust.trust_host_key(node, (keytype, b64, fp)) is False
    assert kh.read_text() == "[127.0.2.2]:2222 ssh-ed25519 %s\n" % b64
    assert remote_runner.SSHRunner(node, "beta").run(["echo", "ok"]).stdout == "ok\n"


def test_hashed_known_hosts_entry_is_accepted(dev, tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text(Path(dev.known_hosts).read_text())
    subprocess.run(["ssh-keygen", "-H", "-f", str(kh)], check=True, capture_output=True)
    assert "[127.0.1.2]" not in kh.read_text()
    assert remote_runner.SSHRunner(login_of(dev, "alpha", known_hosts=str(kh)), "alpha").run(["true"]).ok


def test_fetch_host_key_matches_ssh_keygen(dev):
    for name in ("alpha", "beta", "gamma"):
        keytype, b64, fp = connect.fetch_host_key(login_of(dev, name), name)
        assert keytype == "ssh-ed25519"
        assert fp == keygen_fingerprint(host_key_pub(dev, name)) == known_hosts.fingerprint_b64(b64)
        assert Path(host_key_pub(dev, name)).read_text().split()[1] == b64


def test_changed_host_key_is_refused(dev, devcluster_control):
    old_fp = keygen_fingerprint(host_key_pub(dev, "gamma"))
    node = login_of(dev, "gamma")
    with devcluster_control.rekeyed("gamma"):
        new_fp = keygen_fingerprint(host_key_pub(dev, "gamma"))
        assert new_fp != old_fp
        with pytest.raises(HostKeyError) as err:
            remote_runner.SSHRunner(node, "gamma").run(["true"])
        msg = str(err.value)
        assert msg.startswith("HOST KEY OF 127.0.3.2:2222 (cluster gamma) HAS CHANGED")
        assert "expected %s, got %s" % (old_fp, new_fp) in msg
        lines = Path(dev.known_hosts).read_text().splitlines()
        line = [i for i, x in enumerate(lines, 1) if x.startswith("[127.0.3.2]:2222 ")][0]
        assert "remove the old line from %s (line %d) and run `slurmkit site trust gamma`" % (
            dev.known_hosts, line) in msg
        # fetch_host_key reports the new key (what `site trust` would show)
        assert connect.fetch_host_key(node, "gamma")[2] == new_fp
    wait_for_sshd(node.host, node.port)
    assert remote_runner.SSHRunner(node, "gamma").run(["true"]).ok


# ------------------------------------------------------------------ failures

def test_stopped_sshd_fails_fast(dev, devcluster_control):
    node = login_of(dev, "gamma", connect_timeout=10.0)
    jumped = login_of(dev, "gamma", connect_timeout=10.0, proxy_jump="root@127.0.1.2:2222")
    with devcluster_control.sshd_stopped("gamma"):
        started = time.monotonic()
        with pytest.raises(RemoteError) as err:
            remote_runner.SSHRunner(node, "gamma").run(["true"])
        assert time.monotonic() - started < 2
        assert str(err.value) == ("cannot reach login node 127.0.3.2:2222 of cluster gamma: "
                                  "Connection refused (is sshd running?)")
        # through a bastion the refusal comes back from the bastion, just as fast
        started = time.monotonic()
        with pytest.raises(RemoteError) as err:
            remote_runner.SSHRunner(jumped, "gamma").run(["true"])
        assert time.monotonic() - started < 3
        assert "bastion 127.0.1.2:2222 (ProxyJump of cluster gamma) could not reach login node 127.0.3.2:2222" \
            in str(err.value)
    wait_for_sshd(node.host, node.port)
    assert remote_runner.SSHRunner(node, "gamma").run(["true"]).ok


def test_wrong_key_is_an_auth_error(dev, tmp_path):
    key = tmp_path / "id_other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    with pytest.raises(RemoteError) as err:
        remote_runner.SSHRunner(login_of(dev, "alpha", identity_file=str(key)), "alpha").run(["true"])
    assert not isinstance(err.value, HostKeyError)
    assert "refused SSH authentication as user root" in str(err.value) and str(key) in str(err.value)


# ------------------------------------------------------------------ ProxyJump

def test_proxy_jump_through_another_login_node(dev):
    # alpha's login node is the bastion for beta's.
    node = login_of(dev, "beta", proxy_jump="root@127.0.1.2:2222")
    r = remote_runner.SSHRunner(node, "beta")
    res = r.run(["sinfo", "-h", "-o", "%R"])
    assert sorted(res.stdout.split()) == partitions(dev, "beta")
    import paramiko
    assert isinstance(r.transport().sock, paramiko.Channel)     # really tunnelled
    assert r.run(["cat"], stdin="via bastion\n").stdout == "via bastion\n"
    assert r.describe() == "ssh root@127.0.2.2:2222 via root@127.0.1.2:2222"
    # the host key fetched through the tunnel is beta's
    assert connect.fetch_host_key(node, "beta")[2] == keygen_fingerprint(host_key_pub(dev, "beta"))
    # and the bastion's own key when asked for it
    assert connect.fetch_host_key(node, "beta", jump=True)[2] == keygen_fingerprint(
        host_key_pub(dev, "alpha"))


def test_proxy_jump_bastion_is_checked_strictly(dev, tmp_path):
    # known_hosts knows beta (the target) but not alpha (the bastion).
    kh = tmp_path / "known_hosts"
    kh.write_text("".join(line + "\n" for line in Path(dev.known_hosts).read_text().splitlines()
                          if "127.0.1.2" not in line))
    node = login_of(dev, "beta", known_hosts=str(kh), proxy_jump="root@127.0.1.2:2222")
    with pytest.raises(HostKeyError) as err:
        remote_runner.SSHRunner(node, "beta").run(["true"])
    assert "host key of bastion 127.0.1.2:2222 (ProxyJump of cluster beta) is unknown" in str(err.value)
    assert keygen_fingerprint(host_key_pub(dev, "alpha")) in str(err.value)
