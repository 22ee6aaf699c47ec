"""Runs one program in the current process: the worker's side of a single run.

Owns the code cache, the program's fresh namespace and its `use`, the memory limit,
the program's traceback and the encoding of its result. Only ever imported in a
worker process (`programs.worker`): it executes program code, so the daemon must
never call it.
"""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import inspect
import linecache
import resource
import sys
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable
from types import CodeType
from typing import Any

import msgspec

from programs import tail, wire
from programs.context import RunContext
from programs.outcome import RunStatus

PROGRAM_NAME = "__baton_program__"
CACHE_SIZE = 64
MiB = 1024 * 1024


class NoMain(LookupError):
    """The program defines no callable `main`."""


class CodeCache:
    """Compiled programs keyed by the sha256 of (ref, source): a small LRU."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self._size = size
        self._codes: OrderedDict[str, CodeType] = OrderedDict()

    def get(self, ref: str, source: str) -> CodeType:
        key = hashlib.sha256(f"{ref}\0{source}".encode()).hexdigest()
        code = self._codes.get(key)
        if code is None:
            code = self._codes[key] = compile(source, ref, "exec", dont_inherit=True)
            if len(self._codes) > self._size:
                self._codes.popitem(last=False)
        self._codes.move_to_end(key)
        return code


class MemoryLimit:
    """Caps the address space at what the worker uses now plus `mb` MiB, until restored.

    Where the address space cannot be read (no /proc), no cap is set.
    """

    def __init__(self, mb: int) -> None:
        self.mb = mb
        self._soft, self._hard = resource.getrlimit(resource.RLIMIT_AS)
        used = _address_space()
        if used is None:
            return
        cap = used + mb * MiB
        if self._hard != resource.RLIM_INFINITY:
            cap = min(cap, self._hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, self._hard))

    def restore(self) -> str:
        try:
            resource.setrlimit(resource.RLIMIT_AS, (self._soft, self._hard))
        except (ValueError, OSError) as exc:
            return f"memory limit could not be restored: {exc}"
        return ""


def _address_space() -> int | None:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[0]) * resource.getpagesize()
    except OSError:
        return None


def _no_use(reason: str) -> Callable[[str], Any]:
    def use(ref: str) -> Any:
        raise LookupError(f"no capabilities: {reason}; cannot use {ref!r}")

    return use


def make_use(context: RunContext | None) -> Callable[[str], Any]:
    if context is None:
        return _no_use("this run has no context")
    try:
        from programs.use import make_use as real_make_use
    except ImportError as exc:
        return _no_use(f"the capability registry is unavailable ({exc})")
    return real_make_use(context)


def _close_use(use: Any) -> None:
    """Closes what the run's `use` opened; a failure there is reported, not fatal."""
    close = getattr(use, "close", None)
    if not callable(close):
        return
    try:
        close()
    except Exception as exc:
        print(f"baton: closing the run's capabilities failed: {exc!r}", file=sys.stderr)


def program_traceback(exc: BaseException, ref: str) -> str:
    """The traceback from the program's first frame on, capped to its last 16 KiB."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != ref:
        tb = tb.tb_next
    lines = traceback.TracebackException(type(exc), exc, tb or exc.__traceback__).format()
    return tail.keep_tail("".join(lines).rstrip("\n"))


def _execute(code: CodeType, namespace: dict[str, Any], args: dict[str, Any], marks: dict) -> Any:
    exec(code, namespace)
    main = namespace.get("main")
    if not callable(main):
        raise NoMain("program defines no callable main(args)")
    marks["entered"] = time.monotonic()
    value = main(args)
    if inspect.iscoroutine(value):
        value = asyncio.run(value)
    return value


def encode_result(value: Any) -> wire.Reply:
    try:
        data = msgspec.json.encode(value)
    except Exception as exc:
        return wire.Reply(status=RunStatus.error, error=f"result is not JSON-serialisable: {exc}")
    if len(data) <= tail.LIMIT:
        return wire.Reply(status=RunStatus.ok, result=data)
    preview = msgspec.json.encode(tail.keep_head(data))
    error = f"result too large: {len(data)} bytes of JSON, over the {tail.LIMIT}-byte limit"
    return wire.Reply(status=RunStatus.error, result=preview, error=error)


def failure_reply(exc: BaseException, request: wire.Request) -> wire.Reply:
    if isinstance(exc, SystemExit):
        return wire.Reply(status=RunStatus.crashed, error=f"program called sys.exit({exc.code!r})")
    text = program_traceback(exc, request.ref)
    if isinstance(exc, MemoryError):
        limit = f"memory limit of {request.memory_mb} MB exceeded"
        return wire.Reply(status=RunStatus.error, error=f"{limit}\n{text}", retire=limit)
    return wire.Reply(status=RunStatus.error, error=text)


def _remember_source(ref: str, source: str) -> None:
    """Lets tracebacks quote the program's lines although it is no file."""
    linecache.cache[ref] = (len(source), None, source.splitlines(True), ref)


def run_request(request: wire.Request, cache: CodeCache) -> wire.Reply:
    _remember_source(request.ref, request.source)
    marks: dict[str, float] = {}
    namespace: dict[str, Any] = {"__name__": PROGRAM_NAME, "__builtins__": builtins}
    limit: MemoryLimit | None = None
    use: Any = None
    try:
        code = cache.get(request.ref, request.source)
        namespace["use"] = use = make_use(request.context)
        limit = MemoryLimit(request.memory_mb)
        value = _execute(code, namespace, request.args, marks)
    except BaseException as exc:
        failed: BaseException | None = exc
    else:
        failed = None
    finally:
        unrestored = limit.restore() if limit else ""
        _close_use(use)
        namespace.clear()
    reply = failure_reply(failed, request) if failed else encode_result(value)
    failed = value = None
    retire = reply.retire or unrestored
    return msgspec.structs.replace(reply, entered_at=marks.get("entered"), retire=retire)
