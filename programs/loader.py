"""Program loading: a published program fetched, checked and compiled once per version.

Owns `ProgramCache`: it fetches a program's source by `ProgramRef` through a function it
is given (the daemon passes a space-client call), checks and compiles it once per content
hash (`programs.source`), and keeps a bounded number of entries. Versions are immutable,
so a cached `name@vN` is never refetched.

It must not run program code, talk to the space itself, or read the clock.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import CodeType
from typing import Any

from programs.refs import InvalidRef, ProgramRef, parse_ref
from programs.source import ProgramMeta, inspect_compiled

CACHE_ENTRIES = 128

Fetch = Callable[[ProgramRef], Awaitable[str | None]] | Callable[[ProgramRef], str | None]


class UntrustedProgram(Exception):
    """A published program this device does not run (published by another device)."""


class UnknownProgram(LookupError):
    """No program is published under this ref."""


@dataclass(frozen=True, slots=True)
class LoadedProgram:
    """A program ready for a worker: its source, what inspection found, its code object."""

    ref: ProgramRef
    source: str
    meta: ProgramMeta
    code: CodeType


class ProgramCache:
    """Programs by ref, fetched once, inspected and compiled once per content hash."""

    def __init__(self, fetch: Fetch, *, max_entries: int = CACHE_ENTRIES) -> None:
        self._fetch = fetch
        self._max = max_entries
        self._by_ref: OrderedDict[ProgramRef, str] = OrderedDict()
        self._by_hash: OrderedDict[str, LoadedProgram] = OrderedDict()
        self._inflight: dict[ProgramRef, asyncio.Future[LoadedProgram]] = {}
        self.fetches = 0
        self.compiles = 0

    def __len__(self) -> int:
        return len(self._by_ref)

    async def get(self, ref: ProgramRef | str) -> LoadedProgram:
        """The program for `ref`; `UnknownProgram` if none is published under it."""
        ref = _as_ref(ref)
        cached = self.cached(ref)
        if cached is not None:
            return cached
        pending = self._inflight.get(ref)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[LoadedProgram] = asyncio.get_running_loop().create_future()
        self._inflight[ref] = future
        try:
            loaded = self.put(ref, await self._fetch_source(ref))
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when nobody waits
            raise
        finally:
            del self._inflight[ref]
        future.set_result(loaded)
        return loaded

    def cached(self, ref: ProgramRef) -> LoadedProgram | None:
        sha = self._by_ref.get(ref)
        if sha is None or sha not in self._by_hash:
            return None
        self._by_ref.move_to_end(ref)
        self._by_hash.move_to_end(sha)
        return _with_ref(self._by_hash[sha], ref)

    def put(self, ref: ProgramRef | str, source: str) -> LoadedProgram:
        """Inspect and cache `source` as `ref` (compiles only if its hash is new)."""
        ref = _as_ref(ref)
        sha = hashlib.sha256(source.encode("utf-8", errors="surrogatepass")).hexdigest()
        loaded = self._by_hash.get(sha)
        if loaded is None:
            meta, code = inspect_compiled(source, str(ref))
            self.compiles += 1
            loaded = LoadedProgram(ref=ref, source=source, meta=meta, code=code)
        self._remember(self._by_ref, ref, sha)
        self._remember(self._by_hash, sha, loaded)
        return _with_ref(loaded, ref)

    def _remember(self, table: OrderedDict[Any, Any], key: object, value: object) -> None:
        table[key] = value
        table.move_to_end(key)
        while len(table) > self._max:
            table.popitem(last=False)

    async def _fetch_source(self, ref: ProgramRef) -> str:
        self.fetches += 1
        try:
            result = self._fetch(ref)
            source = await result if inspect.isawaitable(result) else result
        except LookupError as exc:
            raise UnknownProgram(f"program {ref} is not published: {exc}") from exc
        if source is None:
            raise UnknownProgram(f"program {ref} is not published")
        return source


def _as_ref(ref: ProgramRef | str) -> ProgramRef:
    parsed = parse_ref(ref) if isinstance(ref, str) else ref
    if parsed.internal:
        raise InvalidRef(f"{parsed} is run by the runtime itself, never loaded as a program")
    return parsed


def _with_ref(loaded: LoadedProgram, ref: ProgramRef) -> LoadedProgram:
    if loaded.ref == ref:
        return loaded
    return LoadedProgram(ref=ref, source=loaded.source, meta=loaded.meta, code=loaded.code)
