"""The bounds every JSON value the space stores is held to: depth and integer width.

Owns the one rule (SPEC "Bad input"): JSON nested at most `MAX_DEPTH` deep, integers
within 64 bits. The space refuses a body past them (`space.http.check_tree`); the
device checks a program's result against the same rule before it records the run, so
a result the space cannot take becomes an error naming why, never a lost record.
Pure: must not raise for what it checks, only say what is wrong.
"""

from __future__ import annotations

from typing import Any

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_DEPTH = 64
"""JSON deeper than this is refused: nothing of ours nests more than a few levels."""


def beyond(obj: Any, root: str = "$", depth: int = 0) -> str | None:
    """What of `obj` the space cannot store, with its path (`integer beyond 64 bits - at
    `$.n``); None when all of it is within bounds. Iterative: a hostile depth costs no
    recursion. The paths are only spelled out for a value that is out of bounds. `root`
    and `depth`: where `obj` sits in the document it is part of."""
    return None if _within(obj, depth) else _where(obj, root, depth)


def _within(obj: Any, depth: int) -> bool:
    """Whether all of `obj` is within bounds (no paths: the cheap walk every body takes)."""
    stack: list[tuple[Any, int]] = [(obj, depth)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth >= MAX_DEPTH:
                return False
            values = node.values() if isinstance(node, dict) else node
            stack.extend((value, depth + 1) for value in values if not isinstance(value, str))
        elif type(node) is int and not INT64_MIN <= node <= INT64_MAX:
            return False
    return True


def _where(obj: Any, root: str, depth: int) -> str | None:
    stack: list[tuple[Any, str, int]] = [(obj, root, depth)]
    while stack:
        node, path, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth >= MAX_DEPTH:
                return f"JSON nested deeper than {MAX_DEPTH} levels - at `{path}`"
            items = node.items() if isinstance(node, dict) else enumerate(node)
            for key, value in items:
                sub = f"{path}.{key}" if isinstance(node, dict) else f"{path}[{key}]"
                stack.append((value, sub, depth + 1))
        elif type(node) is int and not INT64_MIN <= node <= INT64_MAX:
            return f"integer beyond 64 bits - at `{path}`"
    return None
