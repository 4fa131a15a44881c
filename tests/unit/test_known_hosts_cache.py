"""known_hosts at cluster size: literal names matched without regexes, files parsed once per process.

A health sweep connects to every node and consults the same known_hosts
for each; with one line per node (1,024 on the scale cluster) each
connection cost 21 ms of the sweep's CPU, most of it a regex compiled afresh
per line, so the sweep's own cost per node grew with the number of nodes.
"""

import os
import time

from slurmkit.remote import known_hosts
from slurmkit.remote.known_hosts import KnownHosts, host_matches, read_known_hosts

KEY = "AAAAC3NzaC1lZDI1NTE5AAAAIH6ZbZxuBleBRc9kxLj4eO9RqNjX0hZdObEJLNDK6SNo"


def _addr(i):
    return "127.0.%d.%d" % (65 + (i - 1) // 250, (i - 1) % 250 + 1)


def test_literal_names_match_exactly_and_patterns_still_work():
    assert host_matches("[127.0.65.1]:16422", ["[127.0.65.1]:16422"])
    assert host_matches("login.example.org", ["LOGIN.Example.org"])            # case-insensitive, as ssh
    assert not host_matches("[127.0.65.1]:16422", ["[127.0.65.11]:16422"])
    assert not host_matches("[127.0.65.1]:16422", ["127.0.65.1"])              # brackets are literal
    assert host_matches("node7.example.org", ["*.example.org"])
    assert host_matches("node7", ["node?"]) and not host_matches("node17", ["node?"])
    assert not host_matches("node7.example.org", ["*.example.org", "!node7.example.org"])


def test_a_file_is_parsed_once_and_again_when_it_changes(tmp_path, monkeypatch):
    path = tmp_path / "known_hosts"
    path.write_text("[127.0.65.1]:16422 ssh-ed25519 %s\n" % KEY)
    calls = []
    real = known_hosts.parse_known_hosts
    monkeypatch.setattr(known_hosts, "parse_known_hosts", lambda text, p: calls.append(p) or real(text, p))
    first = read_known_hosts(str(path))
    again = read_known_hosts(str(path))
    assert first == again and len(first) == 1 and calls == [str(path)]
    again.clear()                                   # a caller's list is its own
    assert len(read_known_hosts(str(path))) == 1
    # `slurmkit site trust` appends a line: read afresh.
    with open(path, "a") as f:
        f.write("[127.0.65.2]:16422 ssh-ed25519 %s\n" % KEY)
    assert [e.patterns for e in read_known_hosts(str(path))] == [("[127.0.65.1]:16422",), ("[127.0.65.2]:16422",)]
    assert len(calls) == 2
    # A key replaced by one of the same length, at once (same size, perhaps the same mtime): never missed.
    other = KEY[:-4] + "AAAA"
    path.write_text(path.read_text().replace(KEY, other, 1))
    assert [e.key_b64 for e in read_known_hosts(str(path))] == [other, KEY] and len(calls) == 3
    os.unlink(path)
    assert read_known_hosts(str(path)) == []


def test_a_1024_node_known_hosts_costs_little_per_connection(tmp_path):
    path = tmp_path / "known_hosts"
    path.write_text("".join("[%s]:16422 ssh-ed25519 %s\n" % (_addr(i), KEY) for i in range(1, 1025)))
    start = time.perf_counter()
    for i in range(1, 1025, 16):                    # 64 connections, as a sweep makes them
        known = KnownHosts([str(path)])
        assert [e.lineno for e in known.for_name("[%s]:16422" % _addr(i))] == [i]
        assert known.revoked("ssh-ed25519", KEY) is None
    # Was 21 ms per connection (1.3 s for these 64); now well under 1 ms each.
    assert time.perf_counter() - start < 0.5
