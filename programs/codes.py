"""The worker's compiled programs: each version compiled once, inherited by its run processes.

Owns `Codes`, a bounded table of code objects keyed by the program's ref (`name@vN`, a
version never changes) and checked against the source text sent with the run, so an inline
program whose text changed under one ref is compiled afresh. The worker fills it after a
run's reply, off the fire path, and freezes the heap again (`gc.freeze`), so every run
process forked from then on finds the code object without compiling; a run process only
reads it. Compiling runs none of the program's code. Must not fork, wait or run programs.
"""

from __future__ import annotations

import gc
from inspect import CO_COROUTINE
from types import CodeType

from programs.source import MAX_SOURCE_BYTES

ENTRIES = 64  # program versions kept per worker; the oldest learned goes first
BUDGET = 1 << 20  # characters of source kept in all: each MB of a worker's heap costs every fork


class Codes:
    """Code objects by ref; written only by `learn` in the worker, between runs."""

    def __init__(self, entries: int = ENTRIES, budget: int = BUDGET) -> None:
        self._entries, self._budget = max(1, entries), budget
        self._table: dict[str, tuple[str, CodeType]] = {}
        self._size = 0  # characters of source in the table
        self.compiled = 0

    def __len__(self) -> int:
        return len(self._table)

    def get(self, ref: str, source: str) -> CodeType | None:
        """The code object of `source` under `ref`, if it was learned (no write: a run
        process calls this, and a hit must not copy the table's pages)."""
        found = self._table.get(ref)
        return found[1] if found is not None and found[0] == source else None

    def learn(self, ref: str, source: str) -> bool:
        """Compiles `source` for `ref` unless it is known; True if the table changed. A
        source that does not compile is left to the run process (which reports why)."""
        size = len(source)
        if (
            not ref
            or size > min(MAX_SOURCE_BYTES, self._budget)
            or self.get(ref, source) is not None
        ):
            return False
        try:
            code = compile(source, ref, "exec", dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return False
        self._drop(ref)
        while self._table and (
            len(self._table) >= self._entries or self._size + size > self._budget
        ):
            self._drop(next(iter(self._table)))
        self._table[ref] = (source, code)
        self._size += size
        self.compiled += 1
        if _async_main(code):  # its runs need asyncio: loaded here once, not in each run
            import asyncio  # noqa: F401
        gc.freeze()  # the new code joins what every later run process shares uncollected
        return True

    def _drop(self, ref: str) -> None:
        found = self._table.pop(ref, None)
        self._size -= 0 if found is None else len(found[0])


def _async_main(code: CodeType) -> bool:
    """Whether the module defines an `async def main` (a coroutine function's code)."""
    return any(
        isinstance(const, CodeType) and const.co_name == "main" and const.co_flags & CO_COROUTINE
        for const in code.co_consts
    )
