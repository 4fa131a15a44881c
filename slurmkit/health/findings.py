"""What a check says about a node: one result per check, and one report per node.

Plain records, JSON both ways: the sweep reads a node's report from the
``--json`` output of ``slurmkit health check`` run on that node.
"""

from typing import List, NamedTuple, Optional, Tuple

OK, WARN, FAIL = "ok", "warn", "fail"
STATUSES = (OK, WARN, FAIL)


class CheckResult(NamedTuple):
    """``name`` is the check (``memory``) or the check and its instance (``mount:/scratch``)."""

    name: str
    status: str                    # OK, WARN or FAIL: a warning never drains
    message: str
    value: Optional[float] = None  # the measured number, where there is one (Prometheus exports it)

    def to_dict(self):
        return self._asdict()


def ok(name, message, value=None):
    return CheckResult(name, OK, message, value)


def warn(name, message, value=None):
    return CheckResult(name, WARN, message, value)


def fail(name, message, value=None):
    return CheckResult(name, FAIL, message, value)


class NodeReport(NamedTuple):
    node: str
    cluster: str
    partition: str
    results: Tuple[CheckResult, ...]
    started: float = 0.0           # unix time the check began
    duration: float = 0.0          # seconds

    @property
    def failing(self) -> List[str]:
        return [r.name for r in self.results if r.status == FAIL]

    @property
    def healthy(self) -> bool:
        return not self.failing

    def to_dict(self):
        return {"node": self.node, "cluster": self.cluster, "partition": self.partition,
                "healthy": self.healthy, "failing": self.failing, "started": self.started,
                "duration": self.duration, "results": [r.to_dict() for r in self.results]}

    @classmethod
    def from_dict(cls, data):
        """The report a remote ``health check --json`` printed; ValueError when it is not one."""
        try:
            results = tuple(CheckResult(str(r["name"]), str(r["status"]), str(r["message"]), r.get("value"))
                            for r in data["results"])
            if any(r.status not in STATUSES for r in results):
                raise ValueError("unknown check status")
            return cls(node=str(data["node"]), cluster=str(data.get("cluster") or ""),
                       partition=str(data.get("partition") or ""), results=results,
                       started=float(data.get("started") or 0.0), duration=float(data.get("duration") or 0.0))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError("not a health report: %s" % exc) from None
