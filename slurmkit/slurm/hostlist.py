"""Hostlist expressions (``an[1-4,7]``), delegated to ClusterShell's NodeSet.

A thin seam so the rest of slurmkit never imports ClusterShell directly and
pays its import cost only when a hostlist really has to be expanded.
"""

from typing import Iterable, List


def expand(expression: str) -> List[str]:
    if not expression or expression in ("(null)", "None"):
        return []
    from ClusterShell.NodeSet import NodeSet

    return list(NodeSet(expression))


def fold(names: Iterable[str]) -> str:
    from ClusterShell.NodeSet import NodeSet

    return str(NodeSet.fromlist(list(names)))
