"""slurmkit.results: one value or error per cluster, and the error that carries them all."""

import threading
import time

import pytest

from slurmkit.errors import ConfigError, ConnectTimeoutError, RemoteError, SlurmkitError, UsageError
from slurmkit.results import GroupError, GroupResult, each


def test_mapping_in_order_with_views():
    down = RemoteError("Connection refused")
    result = GroupResult([("alpha", 1), ("beta", down), ("gamma", 3)])
    assert list(result) == ["alpha", "beta", "gamma"] and len(result) == 3
    assert dict(result.succeeded) == {"alpha": 1, "gamma": 3}
    assert dict(result.failed) == {"beta": down}
    assert list(result.values()) == [1, down, 3]
    assert not result.ok and GroupResult([("a", 1)]).ok and GroupResult().ok
    assert result.value("alpha") == 1
    with pytest.raises(RemoteError):
        result.value("beta")


def test_raise_failed_one_error_is_raised_as_itself():
    error = ConnectTimeoutError("login node of beta did not answer within 10s")
    with pytest.raises(ConnectTimeoutError) as caught:
        GroupResult([("alpha", 1), ("beta", error)]).raise_failed("status")
    assert caught.value is error
    ok = GroupResult([("alpha", 1)])
    assert ok.raise_failed() is ok


def test_group_error_lists_every_cluster():
    result = GroupResult([("alpha", RemoteError("Connection refused")), ("beta", 2),
                          ("gamma", ConnectTimeoutError("no answer within 10s"))])
    with pytest.raises(GroupError) as caught:
        result.raise_failed("no cluster answered")
    error = caught.value
    assert str(error) == "no cluster answered: alpha: Connection refused; gamma: no answer within 10s"
    assert isinstance(error, SlurmkitError) and error.exit_code == 1
    assert error.result is result and set(error.errors) == {"alpha", "gamma"}
    assert str(GroupError(result)).startswith("2 of 3 clusters failed: alpha: ")


def test_group_error_may_have_run_and_exit_code():
    lost = ConnectTimeoutError("answer lost").outcome_unknown()
    assert GroupError(GroupResult([("a", lost), ("b", RemoteError("x"))])).may_have_run
    assert not GroupError(GroupResult([("a", RemoteError("y")), ("b", RemoteError("x"))])).may_have_run
    usage = GroupError(GroupResult([("a", UsageError("bad")), ("b", ConfigError("worse"))]))
    assert usage.exit_code == 2          # every cluster refused the request itself
    assert GroupError(GroupResult([("a", UsageError("bad")), ("b", RemoteError("x"))])).exit_code == 1


def test_each_catches_slurmkit_errors_only():
    def call(name):
        if name == "beta":
            raise RemoteError("beta is down")
        return name.upper()

    result = each(["alpha", "beta", "alpha"], call)
    assert list(result) == ["alpha", "beta"]                    # duplicates asked once
    assert result["alpha"] == "ALPHA" and isinstance(result["beta"], RemoteError)

    def bug(name):
        raise KeyError(name)

    with pytest.raises(KeyError):                               # a bug is not a cluster's failure
        each(["alpha", "beta"], bug)
    assert each([], call) == GroupResult()


def test_each_runs_in_parallel_within_max_workers():
    active, peak, lock = [0], [0], threading.Lock()

    def call(name):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.2)
        with lock:
            active[0] -= 1
        return name

    started = time.monotonic()
    result = each(["a", "b", "c", "d"], call, max_workers=2)
    elapsed = time.monotonic() - started
    assert list(result.values()) == ["a", "b", "c", "d"]        # in key order, not finishing order
    assert peak[0] == 2
    assert elapsed < 0.7, "4 calls of 0.2 s on 2 workers took %.2f s" % elapsed
