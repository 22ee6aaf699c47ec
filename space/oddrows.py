"""Rows read one at a time: an odd row (written past the API) is left out and named, never a 500.

Owns `each`: decode every row on its own with the caller's function; a row whose decode
raises is skipped, named under `odd` of the answer, and logged once. Must not know any
table.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

log = logging.getLogger("baton.space")
R = TypeVar("R")
T = TypeVar("T")
_logged: set[tuple[str, str]] = set()


def each(
    rows: Iterable[R], decode: Callable[[R], T], name: Callable[[R], object], table: str
) -> tuple[list[T], list[dict[str, Any]]]:
    """The rows decoded, and `[{"row", "error"}]` of those that would not decode."""
    good: list[T] = []
    odd: list[dict[str, Any]] = []
    for row in rows:
        try:
            good.append(decode(row))
        except Exception as exc:  # an odd row: any exception of its decode is its own
            key = str(name(row))
            odd.append({"row": key, "error": f"{type(exc).__name__}: {exc}"[:300]})
            if (table, key) not in _logged:
                _logged.add((table, key))
                log.warning("odd %s row %s skipped: %r", table, key, exc)
    return good, odd
