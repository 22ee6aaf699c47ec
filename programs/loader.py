"""Program loading: inspect a source text without running it, and cache it by version.

Owns two things:

- `inspect_source`: the publish-time check of a program. It compiles the text,
  requires a top-level `def main(args)` (plain or `async`), reads `__any_tool__`
  from a top-level literal assignment, and returns `ProgramMeta`. It never
  executes the program: everything is read from the syntax tree.
- `ProgramCache`: fetches a program's source by `ProgramRef` through a function it
  is given (the daemon passes a space-client call), inspects and compiles it once
  per content hash, and keeps a bounded number of entries. Versions are immutable,
  so a cached `name@vN` is never refetched.

It must not run program code, talk to the space itself, or read the clock.
"""

from __future__ import annotations

import ast
import asyncio
import hashlib
import inspect
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import CodeType
from typing import Any

import msgspec

from programs.refs import InvalidRef, ProgramRef, parse_ref

MAX_SOURCE_BYTES = 256 * 1024
CACHE_ENTRIES = 128
ANY_TOOL = "__any_tool__"

Fetch = Callable[[ProgramRef], Awaitable[str | None]] | Callable[[ProgramRef], str | None]


class InvalidProgram(ValueError):
    """A source text that cannot be published; the message says where and why."""


class UnknownProgram(LookupError):
    """No program is published under this ref."""


class ProgramMeta(msgspec.Struct, frozen=True, kw_only=True):
    main_is_async: bool
    any_tool: bool
    sha256: str
    size: int  # bytes of UTF-8 source


@dataclass(frozen=True, slots=True)
class LoadedProgram:
    """A program ready for a worker: its source, what inspection found, its code object."""

    ref: ProgramRef
    source: str
    meta: ProgramMeta
    code: CodeType


def inspect_source(source: str, *, filename: str = "<program>") -> ProgramMeta:
    """Check a program without running it; raise `InvalidProgram` naming line and reason."""
    meta, _ = _inspect(source, filename)
    return meta


def _inspect(source: str, filename: str) -> tuple[ProgramMeta, CodeType]:
    if not isinstance(source, str):
        raise InvalidProgram(f"source must be text, got {type(source).__name__}")
    data = source.encode("utf-8", errors="surrogatepass")
    if len(data) > MAX_SOURCE_BYTES:
        raise InvalidProgram(f"source is {len(data)} bytes, the limit is {MAX_SOURCE_BYTES}")
    tree = _parse(source, filename)
    main = _find_main(tree)
    meta = ProgramMeta(
        main_is_async=isinstance(main, ast.AsyncFunctionDef),
        any_tool=_any_tool(tree),
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
    )
    return meta, compile(tree, filename, "exec", dont_inherit=True)


def _parse(source: str, filename: str) -> ast.Module:
    try:
        tree = ast.parse(source, filename)  # compile(..., PyCF_ONLY_AST), typed as a Module
        compile(tree, filename, "exec", dont_inherit=True)  # some errors appear only here
    except SyntaxError as exc:
        raise InvalidProgram(_syntax_message(exc)) from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise InvalidProgram(f"source does not compile: {exc}") from None
    return tree


def _syntax_message(exc: SyntaxError) -> str:
    if not exc.lineno:
        return f"syntax error: {exc.msg}"
    where = f"line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "")
    text = (exc.text or "").strip()
    shown = f": {text!r}" if text else ""
    return f"syntax error at {where}: {exc.msg}{shown}"


def _find_main(tree: ast.Module) -> ast.FunctionDef | ast.AsyncFunctionDef:
    mains = [
        n
        for n in tree.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == "main"
    ]
    if not mains:
        raise InvalidProgram("no top-level `def main(args)` (or `async def main(args)`)")
    main = mains[-1]  # the last definition wins, as when the module runs
    if not _takes_one_arg(main.args):
        raise InvalidProgram(f"line {main.lineno}: `main` must accept exactly one argument, args")
    return main


def _takes_one_arg(a: ast.arguments) -> bool:
    positional = len(a.posonlyargs) + len(a.args)
    required = positional - len(a.defaults)
    kw_required = sum(d is None for d in a.kw_defaults)
    return required <= 1 and (positional >= 1 or a.vararg is not None) and kw_required == 0


def _any_tool(tree: ast.Module) -> bool:
    value = False
    for node in tree.body:
        target, expr = _assignment(node)
        if target != ANY_TOOL:
            continue
        try:
            found = ast.literal_eval(expr) if expr is not None else None
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            found = None
        if not isinstance(found, bool):
            raise InvalidProgram(f"line {node.lineno}: {ANY_TOOL} must be True or False")
        value = found
    return value


def _assignment(node: ast.stmt) -> tuple[str | None, ast.expr | None]:
    """The simple name a top-level statement assigns, and the value it assigns."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target = node.targets[0]
        return (target.id if isinstance(target, ast.Name) else None), node.value
    if isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name):
        return node.target.id, node.value
    return None, None


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
            meta, code = _inspect(source, str(ref))
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
