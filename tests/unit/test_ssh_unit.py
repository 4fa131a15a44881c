"""Unit tests of slurmkit.remote.ssh: the parts that need no SSH server.

Quoting, ProxyJump parsing, fingerprints, known_hosts parsing and writing,
error texts, and the pool's reconnect-once rule (with fake transports).
Everything against a real sshd is in tests/integration/test_ssh.py.
"""

import base64
import hashlib
import hmac
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading

import pytest

from slurmkit.errors import ConfigError, HostKeyError, RemoteError, SlurmUnavailableError
from slurmkit.remote import connect, known_hosts, pool, trust
from slurmkit.remote import runner as remote_runner
from slurmkit.site import proxy_jump
from slurmkit.site.model import LoginNode

NASTY = [
    "plain",
    "with space",
    "it's",
    'double "quoted"',
    "$(touch /tmp/slurmkit-pwned)",
    "`id`",
    "a;b && c | d > e",
    "line1\nline2\n",
    "",
    "*",
    "~root",
    "--flag=$HOME",
    "\\back\\slash",
    "tab\there",
    "ünïcødé ✓",
    "-",
]

ED25519_B64 = "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
OTHER_B64 = "AAAAC3NzaC1lZDI1NTE5AAAAIDdzm3OyFEQ5Z0sSOrV1xpgEQ+mRlsBqAkd1nwhrfwax"


def login(**kw):
    kw.setdefault("host", "127.0.1.2")
    kw.setdefault("port", 2222)
    return LoginNode(**kw)


# ---------------------------------------------------------------- import cost

def test_import_does_not_load_paramiko():
    code = "import sys, slurmkit.remote, slurmkit.remote.runner, slurmkit.remote.pool, slurmkit.remote.trust, slurmkit.remote.connect; sys.exit('paramiko' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# ---------------------------------------------------------------- quoting

def test_quote_command_round_trips_through_shlex():
    import shlex
    argv = ["printf", "%s\\n"] + NASTY
    assert shlex.split(remote_runner.quote_command(argv)) == argv


@pytest.mark.parametrize("shell", ["sh", "bash", "dash"])
def test_quote_command_arrives_byte_for_byte_in_a_posix_shell(shell, tmp_path):
    # The remote sshd runs `$SHELL -c COMMAND`; do the same locally.
    if shutil.which(shell) is None:
        pytest.skip("%s not installed" % shell)
    marker = tmp_path / "pwned"
    args = NASTY + ["$(touch %s)" % marker, "; touch %s" % marker]
    out = subprocess.run([shell, "-c", remote_runner.quote_command(["printf", "%s\\0"] + args)],
                         capture_output=True, check=True, cwd=str(tmp_path)).stdout
    assert out.split(b"\0")[:-1] == [a.encode("utf-8") for a in args]
    assert not marker.exists()


def test_quote_command_refuses_empty_and_nul():
    # UsageError, not ValueError: the CLI's boundary turns it into one line and exit 2.
    from slurmkit.errors import UsageError
    with pytest.raises(UsageError):
        remote_runner.quote_command([])
    with pytest.raises(UsageError, match="NUL byte"):
        remote_runner.quote_command(["echo", "a\x00b"])


def test_quote_command_stringifies():
    assert remote_runner.quote_command(["scancel", 12345]) == "scancel 12345"


# ---------------------------------------------------------------- ProxyJump

@pytest.mark.parametrize("spec,want", [
    ("bastion", proxy_jump.JumpHost("bastion", 22, None)),
    ("jump@bastion", proxy_jump.JumpHost("bastion", 22, "jump")),
    ("bastion:2200", proxy_jump.JumpHost("bastion", 2200, None)),
    ("jump@127.0.1.2:2222", proxy_jump.JumpHost("127.0.1.2", 2222, "jump")),
    ("ssh://jump@bastion:2200", proxy_jump.JumpHost("bastion", 2200, "jump")),
    ("[::1]:2222", proxy_jump.JumpHost("::1", 2222, None)),
    ("me@[fe80::1]", proxy_jump.JumpHost("fe80::1", 22, "me")),
    ("first.last@corp@bastion", proxy_jump.JumpHost("bastion", 22, "first.last@corp")),
    ("  bastion  ", proxy_jump.JumpHost("bastion", 22, None)),
])
def test_parse_proxy_jump(spec, want):
    assert proxy_jump.parse_proxy_jump(spec) == want


@pytest.mark.parametrize("spec", ["", "@bastion", "bastion:", "bastion:0", "bastion:70000", "bastion:ssh",
                                  "a,b", "::1", "[::1", "[::1]x", "bad host"])
def test_parse_proxy_jump_rejects(spec):
    with pytest.raises(ConfigError):
        proxy_jump.parse_proxy_jump(spec)


# ---------------------------------------------------------------- fingerprints

def test_fingerprint_format():
    blob = base64.b64decode(ED25519_B64)
    want = "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    assert known_hosts.fingerprint(blob) == want == known_hosts.fingerprint_b64(ED25519_B64)
    assert not want.endswith("=") and len(want) == len("SHA256:") + 43


@pytest.mark.parametrize("keytype", ["ed25519", "ecdsa", "rsa"])
def test_fingerprint_matches_ssh_keygen(keytype, tmp_path):
    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen not installed")
    key = tmp_path / "k"
    subprocess.run(["ssh-keygen", "-q", "-t", keytype, "-N", "", "-f", str(key)], check=True)
    b64 = (tmp_path / "k.pub").read_text().split()[1]
    out = subprocess.run(["ssh-keygen", "-lf", str(key) + ".pub"], capture_output=True, text=True,
                         check=True).stdout
    assert known_hosts.fingerprint_b64(b64) == out.split()[1]


def paramiko_key(b64=ED25519_B64):
    paramiko = pytest.importorskip("paramiko")
    return paramiko.hostkeys.HostKeyEntry.from_line("h ssh-ed25519 %s" % b64).key


def test_fingerprint_matches_paramiko():
    key = paramiko_key()
    if not hasattr(key, "fingerprint"):
        pytest.skip("paramiko < 3.2 has no PKey.fingerprint")
    assert known_hosts.fingerprint(key.asbytes()) == key.fingerprint


# ---------------------------------------------------------------- known_hosts

def hashed(name, salt=b"0123456789abcdefghij"):
    mac = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return "|1|%s|%s" % (base64.b64encode(salt).decode(), base64.b64encode(mac).decode())


def test_host_key_name_and_line():
    assert known_hosts.host_key_name("Login.Example.org", 22) == "login.example.org"
    assert known_hosts.host_key_name("127.0.1.2", 2222) == "[127.0.1.2]:2222"
    assert known_hosts.known_hosts_line("h", 22, "ssh-ed25519", ED25519_B64) == "h ssh-ed25519 %s\n" % ED25519_B64
    assert known_hosts.known_hosts_line("127.0.1.2", 2222, "ssh-ed25519", "AAAA") == "[127.0.1.2]:2222 ssh-ed25519 AAAA\n"


def test_parse_known_hosts_forms():
    text = "\n".join([
        "# comment",
        "",
        "[127.0.1.2]:2222 ssh-ed25519 %s" % ED25519_B64,
        "%s ssh-ed25519 %s" % (hashed("[127.0.2.2]:2222"), ED25519_B64),
        "plain.example,10.0.0.1 ssh-ed25519 %s comment here" % ED25519_B64,
        "*.corp.example,!evil.corp.example ssh-ed25519 %s" % ED25519_B64,
        "@revoked * ssh-ed25519 %s" % OTHER_B64,
        "@cert-authority *.corp.example ssh-ed25519 %s" % OTHER_B64,
        "@bogus host ssh-ed25519 %s" % OTHER_B64,
        "broken-line ssh-ed25519",
        "badb64 ssh-ed25519 !!!notbase64!!!",
    ])
    entries = known_hosts.parse_known_hosts(text, "/x/known_hosts")
    assert [e.lineno for e in entries] == [3, 4, 5, 6, 7, 8]
    assert entries[0].matches("[127.0.1.2]:2222")
    assert not entries[0].matches("127.0.1.2")           # port 2222 is stored bracketed
    assert not entries[0].matches("[127.0.1.2]:22")
    assert entries[1].matches("[127.0.2.2]:2222") and not entries[1].matches("[127.0.3.2]:2222")
    assert entries[2].matches("10.0.0.1") and entries[2].matches("PLAIN.example")
    assert entries[3].matches("login.corp.example") and not entries[3].matches("evil.corp.example")
    assert entries[4].marker == "@revoked" and entries[5].marker == "@cert-authority"
    assert entries[0].path == "/x/known_hosts"
    assert entries[0].fingerprint == known_hosts.fingerprint_b64(ED25519_B64)


def test_hashed_entry_written_by_ssh_keygen_matches(tmp_path):
    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen not installed")
    kh = tmp_path / "known_hosts"
    kh.write_text("[127.0.1.2]:2222 ssh-ed25519 %s\n" % ED25519_B64)
    subprocess.run(["ssh-keygen", "-H", "-f", str(kh)], check=True, capture_output=True)
    entries = known_hosts.read_known_hosts(str(kh))
    assert entries[0].patterns[0].startswith("|1|")
    assert entries[0].matches("[127.0.1.2]:2222")
    assert not entries[0].matches("[127.0.1.3]:2222")


def test_read_known_hosts_missing_file(tmp_path):
    assert known_hosts.read_known_hosts(str(tmp_path / "nope")) == []


def test_known_hosts_files_order(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    files = known_hosts.known_hosts_files(login(known_hosts=str(tmp_path / "site_kh")))
    assert files == ["/etc/ssh/ssh_known_hosts", str(tmp_path / ".ssh/known_hosts"), str(tmp_path / "site_kh")]
    # the same file twice is read once
    files = known_hosts.known_hosts_files(login(known_hosts="~/.ssh/known_hosts"))
    assert files == ["/etc/ssh/ssh_known_hosts", str(tmp_path / ".ssh/known_hosts")]


def test_trust_target_file(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert known_hosts.trust_target_file(login()) == str(tmp_path / ".ssh/known_hosts")
    assert known_hosts.trust_target_file(login(known_hosts="~/site/kh")) == str(tmp_path / "site/kh")


def test_trust_host_key_writes_once(tmp_path):
    path = tmp_path / "deep" / "dir" / "known_hosts"
    node = login()
    assert trust.trust_host_key(node, ("ssh-ed25519", ED25519_B64, "SHA256:x"), str(path)) is True
    assert path.read_text() == "[127.0.1.2]:2222 ssh-ed25519 %s\n" % ED25519_B64
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert trust.trust_host_key(node, ("ssh-ed25519", ED25519_B64), str(path)) is False
    assert path.read_text().count("\n") == 1


def test_trust_host_key_port_22_and_default_file(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    node = LoginNode(host="login.example.org")
    assert trust.trust_host_key(node, ("ssh-ed25519", ED25519_B64))
    assert (tmp_path / ".ssh/known_hosts").read_text() == "login.example.org ssh-ed25519 %s\n" % ED25519_B64


def test_trust_host_key_appends_after_a_line_without_newline(tmp_path):
    path = tmp_path / "kh"
    path.write_text("other ssh-ed25519 %s" % OTHER_B64)
    path.chmod(0o644)
    assert trust.trust_host_key(login(), ("ssh-ed25519", ED25519_B64), str(path))
    assert path.read_text().splitlines() == ["other ssh-ed25519 %s" % OTHER_B64,
                                             "[127.0.1.2]:2222 ssh-ed25519 %s" % ED25519_B64]
    assert stat.S_IMODE(path.stat().st_mode) == 0o644   # an existing file keeps its mode


def test_trust_host_key_sees_hashed_duplicate_and_refuses_conflict(tmp_path):
    path = tmp_path / "kh"
    path.write_text("%s ssh-ed25519 %s\n" % (hashed("[127.0.1.2]:2222"), ED25519_B64))
    assert trust.trust_host_key(login(), ("ssh-ed25519", ED25519_B64), str(path)) is False
    with pytest.raises(HostKeyError) as err:
        trust.trust_host_key(login(), ("ssh-ed25519", OTHER_B64), str(path))
    assert "%s (line 1)" % path in str(err.value)
    # another key type for the same host is fine (a host has several keys)
    assert trust.trust_host_key(login(), ("ecdsa-sha2-nistp256", OTHER_B64), str(path))


def test_trust_host_key_for_the_bastion(tmp_path):
    path = tmp_path / "kh"
    node = login(proxy_jump="root@127.0.2.2:2222")
    assert trust.trust_host_key(node, ("ssh-ed25519", ED25519_B64), str(path), jump=True)
    assert path.read_text() == "[127.0.2.2]:2222 ssh-ed25519 %s\n" % ED25519_B64


def test_trust_host_key_accepts_paramiko_key(tmp_path):
    key = paramiko_key()
    assert trust.trust_host_key(login(), key, str(tmp_path / "kh"))
    assert ED25519_B64 in (tmp_path / "kh").read_text()


def test_trust_host_key_rejects_garbage(tmp_path):
    from slurmkit.errors import HostKeyError
    with pytest.raises(HostKeyError, match="not valid base64"):
        trust.trust_host_key(login(), ("ssh-ed25519", "not base64!"), str(tmp_path / "kh"))
    assert not (tmp_path / "kh").exists()


# ---------------------------------------------------------------- messages

EP = connect.Endpoint("127.0.1.2", 2222, "root", "alpha")
BASTION = connect.Endpoint("127.0.2.2", 2222, "jump", "alpha", bastion=True)


def test_unknown_host_key_message():
    assert connect.unknown_host_key_message(EP, "ssh-ed25519", "SHA256:abc") == (
        "host key of 127.0.1.2:2222 (cluster alpha) is unknown: ssh-ed25519 SHA256:abc; "
        "if this fingerprint is right, run `slurmkit site trust alpha`")
    msg = connect.unknown_host_key_message(BASTION, "ssh-ed25519", "SHA256:abc")
    assert "bastion 127.0.2.2:2222 (ProxyJump of cluster alpha)" in msg
    assert "ssh -p 2222 jump@127.0.2.2" in msg


def test_changed_host_key_message():
    where = known_hosts.KnownHostEntry("/k/known_hosts", 3, ("[127.0.1.2]:2222",), "ssh-ed25519", ED25519_B64)
    msg = connect.changed_host_key_message(EP, "ssh-ed25519", "SHA256:old", "SHA256:new", where)
    assert msg.startswith("HOST KEY OF 127.0.1.2:2222 (cluster alpha) HAS CHANGED")
    assert "expected SHA256:old, got SHA256:new" in msg
    assert msg.endswith("if the change is expected, remove the old line from /k/known_hosts (line 3) "
                        "and run `slurmkit site trust alpha`")


def test_refused_and_auth_messages():
    assert connect.refused_message(EP, "Connection refused") == (
        "cannot reach login node 127.0.1.2:2222 of cluster alpha: Connection refused (is sshd running?)")
    msg = connect.auth_failed_message(EP, "root", "/keys/id_ed25519")
    assert "refused SSH authentication as user root" in msg and "/keys/id_ed25519" in msg
    msg = connect.auth_failed_message(EP, "root", None)
    assert "ssh-agent" in msg and "ssh-add -l" in msg
    assert remote_runner.command_not_found_message("sbatch", "alpha", "ssh root@h:22").startswith(
        "sbatch not found on the login node of alpha")


def test_connection_refused_is_fast_remote_error():
    # A loopback port nobody listens on: refused at once, never a hang.
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    runner = remote_runner.SSHRunner(LoginNode(host="127.0.0.1", port=port, connect_timeout=5), "alpha")
    with pytest.raises(RemoteError) as err:
        runner.run(["true"])
    assert str(err.value) == ("cannot reach login node 127.0.0.1:%d of cluster alpha: "
                              "Connection refused (is sshd running?)" % port)
    runner.close()


def test_missing_identity_file_is_config_error(tmp_path):
    runner = remote_runner.SSHRunner(login(identity_file=str(tmp_path / "nope")), "alpha")
    with pytest.raises(ConfigError):
        runner.run(["true"])


def test_describe():
    assert remote_runner.SSHRunner(login(user="u"), "alpha").describe() == "ssh u@127.0.1.2:2222"
    assert remote_runner.SSHRunner(login(user="u", proxy_jump="b:22"), "alpha").describe() == "ssh u@127.0.1.2:2222 via b:22"


# ---------------------------------------------------------------- pool and reconnect (fakes)

class FakeTransport:
    def __init__(self, fail=0, exc=None):
        self.active = True
        self.fail = fail
        self.exc = exc
        self.opened = 0

    def is_active(self):
        return self.active

    def open_session(self, timeout=None):
        if self.fail:
            self.fail -= 1
            raise self.exc
        self.opened += 1
        return object()


class FakeClient:
    def __init__(self, transport):
        self.transport = transport
        self.closed = False

    def get_transport(self):
        return self.transport

    def close(self):
        self.closed = True
        self.transport.active = False


@pytest.fixture
def fake_open(monkeypatch):
    pytest.importorskip("paramiko")
    made = []
    plan = []   # FakeTransports to hand out, in order

    def fake(login, cluster):
        t = plan.pop(0) if plan else FakeTransport()
        made.append(t)
        return FakeClient(t), None

    monkeypatch.setattr(connect, "open_connection", fake)
    yield made, plan
    pool.close_all()


def test_open_session_reconnects_once_after_a_failure(fake_open):
    import paramiko
    made, plan = fake_open
    conn = pool.Connection(login(), "alpha")
    conn.open_session()                      # first connect: fresh, and it works
    assert len(made) == 1
    made[0].fail, made[0].exc = 1, paramiko.SSHException("SSH session not active")
    conn.open_session()                      # stale transport fails once -> one reconnect
    assert len(made) == 2 and made[1].opened == 1 and not made[0].active


def test_open_session_gives_up_after_one_reconnect(fake_open):
    import paramiko
    made, plan = fake_open
    conn = pool.Connection(login(), "alpha")
    conn.open_session()
    made[0].fail, made[0].exc = 1, OSError("broken pipe")
    plan.append(FakeTransport(fail=5, exc=paramiko.SSHException("Timeout opening channel.")))
    with pytest.raises(RemoteError, match="even after reconnecting"):
        conn.open_session()
    assert len(made) == 2


def test_dead_transport_is_replaced_without_retry_storm(fake_open):
    made, plan = fake_open
    conn = pool.Connection(login(), "alpha")
    conn.open_session()
    made[0].active = False                   # died while idle
    plan.append(FakeTransport(fail=5, exc=EOFError()))
    with pytest.raises(RemoteError, match="cannot open a session .*: EOFError"):
        conn.open_session()                  # fresh connection failing is not retried again
    assert len(made) == 2


def test_channel_refusal_does_not_reconnect(fake_open):
    import paramiko
    made, plan = fake_open
    conn = pool.Connection(login(), "alpha")
    plan.append(FakeTransport())
    conn.open_session()
    made[0].fail, made[0].exc = 1, paramiko.ChannelException(1, "Administratively prohibited")
    with pytest.raises(RemoteError, match="Administratively prohibited"):
        conn.open_session()
    assert len(made) == 1


def test_runners_share_one_pooled_connection(fake_open):
    made, _ = fake_open
    before = pool.connection_count()
    a = remote_runner.SSHRunner(login(user="root"), "alpha")
    b = remote_runner.SSHRunner(login(user="root"), "alpha-again")
    c = remote_runner.SSHRunner(login(user="root", port=2223), "other")
    assert a._connection() is b._connection()
    assert a._connection() is not c._connection()
    threads = [threading.Thread(target=a._connection().open_session) for _ in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert pool.connection_count() - before == 1
    a.close()
    assert made[0].active                    # still open: b holds it
    b.close()
    assert not made[0].active                # last runner closed it


def test_close_all_then_run_again_reconnects(fake_open):
    made, _ = fake_open
    a = remote_runner.SSHRunner(login(user="root"), "alpha")
    a._connection().open_session()
    pool.close_all()
    assert not made[0].active
    a._connection().open_session()
    assert len(made) == 2 and made[1].active


# ---------------------------------------------------------------- command exchange (fake channel)

class FakeChannel:
    """Enough of paramiko.Channel for SSHRunner._exchange."""

    def __init__(self, stdout=b"", stderr=b"", status=0, hang=False):
        self.out, self.err, self.status = stdout, stderr, status
        self.hang = hang
        self.sent = b""
        self.write_shut = False
        self.closed = False
        self.status_event = threading.Event()
        self.exit_status = -1
        self.command = None
        self.timeout = None

    def exec_command(self, command):
        self.command = command
        if not self.hang:
            self.exit_status = self.status
            self.status_event.set()

    def settimeout(self, t):
        self.timeout = t

    def shutdown_write(self):
        self.write_shut = True

    def send_ready(self):
        return True

    def send(self, data):
        n = min(len(data), 5)        # a small window: stdin goes in pieces
        self.sent += data[:n]
        return n

    def recv_ready(self):
        return bool(self.out)

    def recv(self, n):
        if self.hang and not self.closed:
            import time
            time.sleep(self.timeout or 0.01)
            raise socket.timeout()
        data, self.out = self.out[:n], self.out[n:]
        return data

    def recv_stderr_ready(self):
        return bool(self.err)

    def recv_stderr(self, n):
        data, self.err = self.err[:n], self.err[n:]
        return data

    def close(self):
        self.closed = True
        self.status_event.set()

    def get_transport(self):
        return FakeTransport()


def run_with(channel, monkeypatch, argv=("squeue", "--me"), stdin=None, timeout=None):
    pytest.importorskip("paramiko")
    runner = remote_runner.SSHRunner(login(user="root"), "alpha")
    monkeypatch.setattr(pool.Connection, "open_session", lambda self: channel)
    try:
        return runner.run(list(argv), stdin=stdin, timeout=timeout)
    finally:
        runner.close()


def test_exchange_returns_result_and_sends_stdin(monkeypatch):
    ch = FakeChannel(stdout="héllo\n".encode(), stderr=b"warn\n", status=3)
    res = run_with(ch, monkeypatch, argv=["sbatch", "--job-name", "a b"], stdin="#!/bin/bash\necho ✓\n")
    assert ch.command == "sbatch --job-name 'a b'"
    assert ch.sent == "#!/bin/bash\necho ✓\n".encode() and ch.write_shut
    assert (res.returncode, res.stdout, res.stderr) == (3, "héllo\n", "warn\n")
    assert res.argv == ("sbatch", "--job-name", "a b") and ch.closed


def test_exchange_without_stdin_closes_remote_stdin(monkeypatch):
    ch = FakeChannel(stdout=b"x")
    run_with(ch, monkeypatch)
    assert ch.write_shut and ch.sent == b""


def test_command_not_found_is_slurm_unavailable(monkeypatch):
    ch = FakeChannel(stderr=b"bash: line 1: sbatch: command not found\n", status=127)
    with pytest.raises(SlurmUnavailableError, match="sbatch not found on the login node of alpha"):
        run_with(ch, monkeypatch, argv=["sbatch"])


def test_command_timeout_closes_channel(monkeypatch):
    from slurmkit.errors import ConnectTimeoutError
    ch = FakeChannel(hang=True)
    with pytest.raises(ConnectTimeoutError) as err:
        run_with(ch, monkeypatch, argv=["sleep", "30"], timeout=0.3)
    assert "cluster alpha" in str(err.value) and "127.0.1.2:2222" in str(err.value) and "0.3s" in str(err.value)
    assert ch.closed


def test_no_accept_all_policy_and_no_top_level_paramiko():
    src = open(connect.__file__, encoding="utf-8").read()
    assert "AutoAddPolicy" not in src and "WarningPolicy" not in src
    assert "\nimport paramiko" not in src and "\nfrom paramiko" not in src


# ---------------------------------------------------------------- timeouts and fork (loopback, no sshd)

def test_server_that_never_sends_a_banner_is_a_connect_timeout():
    pytest.importorskip("paramiko")
    from slurmkit.errors import ConnectTimeoutError
    # The kernel accepts the TCP connection (backlog), but no SSH banner ever comes.
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    try:
        node = LoginNode(host="127.0.0.1", port=server.getsockname()[1], connect_timeout=0.5)
        import time
        started = time.monotonic()
        with pytest.raises(ConnectTimeoutError) as err:
            remote_runner.SSHRunner(node, "alpha").run(["true"])
        assert time.monotonic() - started < 5
        assert "login node 127.0.0.1:%d of cluster alpha" % node.port in str(err.value)
        assert "0.5s" in str(err.value)
        with pytest.raises(ConnectTimeoutError):
            connect.fetch_host_key(node, "alpha")
    finally:
        server.close()
        pool.close_all()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_does_not_reuse_the_parents_connections(fake_open):
    made, _ = fake_open
    a = remote_runner.SSHRunner(login(user="root"), "alpha")
    parent_conn = a._connection()
    parent_conn.open_session()
    pid = os.fork()
    if pid == 0:   # child: report through the exit status only
        ok = (not pool.POOL and parent_conn.retired and a._connection() is not parent_conn)
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert made[0].active and not parent_conn.retired      # the parent's connection is untouched
