"""One shape for "did this on each cluster": a value or an error per cluster.

Federation, the job status of every cluster, the requeue daemon's poll and
the health sweep all do one thing on several clusters, where one cluster
failing must not hide what the others answered.  :class:`GroupResult` is a
mapping ``cluster -> value or error`` (as Fabric's ``GroupResult``), with
``.succeeded`` and ``.failed`` views, and :class:`GroupError` is the one
exception that carries all of it, its message naming each cluster's error.

:func:`each` runs a function for every cluster in parallel threads and
collects the outcomes: a :class:`~slurmkit.errors.SlurmkitError` becomes that
cluster's entry; any other exception is a bug and propagates.
"""

from typing import Callable, Dict, Iterable, Iterator, Mapping, Optional, TypeVar, Union

from slurmkit.errors import SlurmkitError

T = TypeVar("T")


class GroupResult(Mapping):
    """Read-only mapping ``key -> value`` or ``key -> SlurmkitError``, in the order given.

    Keys are usually cluster names (the planner's are ``cluster/partition``).
    ``.succeeded`` and ``.failed`` are GroupResults of the values and of the
    errors; ``.values()`` (the mapping's own) yields both kinds, in order.
    """

    def __init__(self, outcomes: Union[Mapping, Iterable] = ()):
        self._outcomes: Dict[str, object] = dict(outcomes)

    def __getitem__(self, key):
        return self._outcomes[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._outcomes)

    def __len__(self) -> int:
        return len(self._outcomes)

    def __repr__(self):
        return "GroupResult(%r)" % (self._outcomes,)

    @property
    def succeeded(self) -> "GroupResult":
        return GroupResult((k, v) for k, v in self._outcomes.items() if not isinstance(v, BaseException))

    @property
    def failed(self) -> "GroupResult":
        return GroupResult((k, v) for k, v in self._outcomes.items() if isinstance(v, BaseException))

    @property
    def ok(self) -> bool:
        """True when no key failed (an empty group is ok)."""
        return not self.failed

    def value(self, key):
        """The value for ``key``; its error is raised instead when it failed."""
        outcome = self._outcomes[key]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def raise_failed(self, what: Optional[str] = None) -> "GroupResult":
        """Raise when anything failed; else return self.

        One failure is raised as itself: its class and message say the most
        (and a one-cluster command reads exactly as it would without the
        group).  Several raise a :class:`GroupError` listing each of them.
        """
        failed = self.failed
        if len(failed) == 1:
            raise next(iter(failed.values()))
        if failed:
            raise GroupError(self, what)
        return self


class GroupError(SlurmkitError):
    """Several clusters failed: ``.result`` holds every cluster's value or error.

    The message is ``WHAT: a: error; b: error``.  ``may_have_run`` is True
    when any of the errors says so (a retry must check first); the exit code
    is 2 only when every error is a usage or config error.
    """

    def __init__(self, result: GroupResult, what: Optional[str] = None):
        self.result = result
        failed = result.failed
        what = what or "%d of %d clusters failed" % (len(failed), len(result))
        super().__init__("%s: %s" % (what, "; ".join("%s: %s" % (k, e) for k, e in failed.items())))
        errors = list(failed.values())
        ours = [e for e in errors if isinstance(e, SlurmkitError)]
        self.may_have_run = any(e.may_have_run for e in ours)
        if errors and len(ours) == len(errors) and all(e.exit_code == 2 for e in ours):
            self.exit_code = 2

    @property
    def errors(self) -> Dict[str, BaseException]:
        return dict(self.result.failed)


def each(keys: Iterable[str], call: Callable[[str], T], max_workers: int = 8,
         thread_name_prefix: str = "slurmkit") -> GroupResult:
    """``call(key)`` for every key, at most ``max_workers`` at a time; outcomes in key order.

    Duplicate keys are asked once.  The total time is about that of the
    slowest key, not the sum: the clusters are independent.
    """
    keys = list(dict.fromkeys(keys))
    if not keys:
        return GroupResult()

    def outcome(key):
        try:
            return call(key)
        except SlurmkitError as exc:
            return exc

    if len(keys) == 1:   # no thread for the common one-cluster case
        return GroupResult([(keys[0], outcome(keys[0]))])
    from concurrent.futures import ThreadPoolExecutor   # a one-cluster command never pays for it

    workers = max(1, min(int(max_workers), len(keys)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix=thread_name_prefix) as pool:
        return GroupResult(zip(keys, pool.map(outcome, keys)))
