"""Runs one program in the current process: the run process's side of a single run.

Owns compiling the program (unless the worker did: `programs.codes`), its fresh
namespace and its `use`, the size of its memory limit, the program's traceback (headed
by what containment refused it, where it did) and the encoding of its result. Only ever
imported in a worker process: it executes program code, so it runs in the process forked
for the run (`programs.runproc`), never in the daemon nor in the worker that forks.
"""

from __future__ import annotations

import builtins
import errno
import inspect
import linecache
import os
import resource
import sys
import time
import traceback
from collections.abc import Callable
from types import CodeType
from typing import Any

import msgspec

from core.vocab import RunStatus
from programs import channel, tail
from programs.context import RunContext

PROGRAM_NAME = "__baton_program__"
MiB = 1024 * 1024


class NoMain(LookupError):
    """The program defines no callable `main`."""


def address_space() -> int | None:
    """The bytes of address space this process uses now; None where /proc cannot say."""
    try:
        fd = os.open("/proc/self/statm", os.O_RDONLY)
    except OSError:
        return None
    try:
        return int(os.read(fd, 256).split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return None
    finally:
        os.close(fd)


def memory_cap(mb: int) -> int | None:
    """The address-space limit of a run: what the process uses now plus `mb` MiB."""
    used = address_space()
    return None if used is None else used + mb * MiB


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


def _execute(
    code: CodeType, namespace: dict[str, Any], args: dict[str, Any], marks: dict[str, Any]
) -> Any:
    exec(code, namespace)
    main = namespace.get("main")
    if not callable(main):
        raise NoMain("program defines no callable main(args)")
    marks["entered"] = time.monotonic()
    value = main(args)
    if inspect.iscoroutine(value):
        import asyncio  # loaded in the worker once it compiled an `async def main` (codes)

        value = asyncio.run(value)
    return value


def encode_result(value: Any) -> channel.Reply:
    try:
        data = msgspec.json.encode(value)
    except Exception as exc:
        return channel.Reply(
            status=RunStatus.ERROR, error=f"result is not JSON-serialisable: {exc}"
        )
    if len(data) <= tail.LIMIT:
        return channel.Reply(status=RunStatus.OK, result=data)
    preview = msgspec.json.encode(tail.keep_head(data))
    error = f"result too large: {len(data)} bytes of JSON, over the {tail.LIMIT}-byte limit"
    return channel.Reply(status=RunStatus.ERROR, result=preview, error=error)


def failure_reply(exc: BaseException, request: channel.Request) -> channel.Reply:
    if isinstance(exc, SystemExit):
        return channel.Reply(
            status=RunStatus.CRASHED, error=f"program called sys.exit({exc.code!r})"
        )
    text = program_traceback(exc, request.ref)
    what = headline(exc, request.memory_mb)
    return channel.Reply(status=RunStatus.ERROR, error=f"{what}\n{text}" if what else text)


def headline(exc: BaseException, memory_mb: int) -> str:
    """What the program ran into, in words, where containment refused it something."""
    if isinstance(exc, MemoryError):
        return f"memory limit of {memory_mb} MB exceeded"
    if isinstance(exc, PermissionError):
        if exc.filename is not None:
            return f"permission denied: {exc.filename}"
        return str(exc.strerror) if str(exc.strerror).startswith("signal refused") else ""
    if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
        return "file size limit exceeded"
    return ""


def _remember_source(ref: str, source: str) -> None:
    """Lets tracebacks quote the program's lines although it is no file."""
    linecache.cache[ref] = (len(source), None, source.splitlines(True), ref)


def forget_source(ref: str) -> None:
    linecache.cache.pop(ref, None)


def run_request(request: channel.Request, code: CodeType | None = None) -> channel.Reply:
    """Runs the program once in this process (a fresh one, forked for this run); `code`:
    its source compiled already (`programs.codes`), else it is compiled here."""
    _remember_source(request.ref, request.source)
    marks: dict[str, float] = {}
    namespace: dict[str, Any] = {"__name__": PROGRAM_NAME, "__builtins__": builtins}
    use: Any = None
    try:
        if code is None:
            code = compile(request.source, request.ref, "exec", dont_inherit=True)
        namespace["use"] = use = make_use(request.context)
        value = _execute(code, namespace, request.args, marks)
    except BaseException as exc:
        failed: BaseException | None = exc
    else:
        failed = None
    finally:
        _close_use(use)
    reply = failure_reply(failed, request) if failed else encode_result(value)
    return msgspec.structs.replace(reply, entered_at=marks.get("entered"))
