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


def beyond(obj: Any) -> str | None:
    """What of `obj` the space cannot store, with its path (`integer beyond 64 bits - at
    `$.n``); None when all of it is within bounds. Iterative: a hostile depth costs no
    recursion."""
    stack: list[tuple[Any, str, int]] = [(obj, "$", 0)]
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
