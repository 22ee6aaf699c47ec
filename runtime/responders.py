"""Pluggable chat responders: what chat-watch asks for a reply, and how a spec names one.

Owns the `Responder` protocol — `ready` and `respond(snapshot, pending) -> str | None`
(None: no reply) — and three kinds: `BuiltinResponder` (deterministic, no network, for
the demo), `CommandResponder` (an external command speaking JSON on stdin/stdout, one
process per call) and `CallableResponder` (a Python callable, sync or async), plus
`load_responder(spec)` that parses `builtin`, `openai` (runtime.openai_responder: a
model behind an OpenAI-compatible endpoint), `command:<argv>` and
`python:<module>:<function>`. A responder may also offer `stream(snapshot, pending)`,
an async iterator of the reply's pieces (chat-watch then grows one message as they
come), `probe() -> str` (why it is not ready, '' when it is) and `close()`.

A responder's failure is an exception carrying a clear reason (`ResponderFailed`,
`ResponderTimeout`, and `ResponderUnavailable` when what it needs cannot be reached);
deciding what a failure means for a conversation is chat-watch's.
Must not read the clock (the built-in one is handed `now`), post messages or know about
turns, dedup or readiness policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import json
import os
import signal
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from runtime.openai_responder import LlmConfig

Message = dict[str, Any]
STDOUT_CAP = 1 << 20  # a reply bigger than 1 MiB of JSON is refused
STDERR_TAIL = 2000  # characters of a failed command's stderr kept in the reason
SPEC_FORMS = "builtin, openai, command:<path or JSON argv list>, python:<module>:<function>"


class ResponderFailed(RuntimeError):
    """The responder could not produce a reply; the message says why."""


class ResponderUnavailable(ResponderFailed):
    """What the responder needs (its model's endpoint) cannot be reached: not ready."""


class ResponderTimeout(TimeoutError):
    """The responder did not answer in time."""


class InvalidResponderSpec(ValueError):
    """A responder spec that cannot be parsed or loaded."""


@runtime_checkable
class Responder(Protocol):
    @property
    def ready(self) -> bool: ...

    async def respond(self, snapshot: list[Message], pending: list[Message]) -> str | None:
        """A reply to `pending` (oldest first) seen after `snapshot` (recent history)."""
        ...


def check_reply(reply: object) -> str | None:
    """`reply` if it is a str or None; an empty or blank string means no reply."""
    if reply is None or isinstance(reply, str):
        return reply if reply and reply.strip() else None
    raise ResponderFailed(f"reply: must be a string or null, got {type(reply).__name__}")


# ---------------------------------------------------------------- builtin


HELP = "I answer 'help' and 'time?'; anything else I acknowledge."


class BuiltinResponder:
    """The demo responder: acknowledges each message and answers `help` and `time?`."""

    ready = True
    describe = "builtin"

    def __init__(self, now: Callable[[], datetime]) -> None:
        self._now = now

    async def respond(self, snapshot: list[Message], pending: list[Message]) -> str | None:
        if not pending:
            return None
        count = f"{len(pending)} message" + ("s" if len(pending) > 1 else "")
        lines = [f"Answering {count}:"] + [f"- {self._answer(m)}" for m in pending]
        return "\n".join(lines)

    def _answer(self, message: Message) -> str:
        text = str(message.get("text", "")).strip()
        command = text.lower().rstrip("?!. ")
        if command in ("help", "/help"):
            return HELP
        if command in ("time", "/time", "what time is it"):
            return f"it is {self._now():%Y-%m-%d %H:%M} UTC"
        shown = text if len(text) <= 60 else text[:57] + "..."
        return f"noted: {shown!r}"


# ---------------------------------------------------------------- command


class CommandResponder:
    """Runs `argv` once per call: `{"snapshot", "pending"}` on stdin, `{"reply"}` on stdout."""

    ready = True

    def __init__(self, argv: Sequence[str], timeout: float = 60.0) -> None:
        if not argv or not all(isinstance(a, str) and a for a in argv):
            raise InvalidResponderSpec("argv: must be a non-empty list of non-empty strings")
        if not timeout > 0:
            raise InvalidResponderSpec(f"timeout: must be > 0, got {timeout!r}")
        self.argv, self.timeout = list(argv), timeout
        self.describe = f"command {self.argv[0]}"

    async def respond(self, snapshot: list[Message], pending: list[Message]) -> str | None:
        payload = json.dumps({"snapshot": snapshot, "pending": pending}).encode()
        proc = await self._spawn()
        try:
            async with asyncio.timeout(self.timeout):
                out, err = await _exchange(proc, payload)
        except TimeoutError:
            raise ResponderTimeout(
                f"command {self.argv[0]} timed out after {self.timeout:g} s (killed)"
            ) from None
        finally:
            await _reap(proc)
        return self._reply(proc.returncode, out, err)

    async def _spawn(self) -> asyncio.subprocess.Process:
        try:
            return await asyncio.create_subprocess_exec(
                *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            raise ResponderFailed(f"command {self.argv[0]} cannot start: {exc}") from None

    def _reply(self, code: int | None, out: bytes, err: bytes) -> str | None:
        name = self.argv[0]
        if code != 0:
            tail = err.decode(errors="replace")[-STDERR_TAIL:].strip()
            tail = tail or "(no stderr)"
            raise ResponderFailed(f"command {name} exited with code {code}: {tail}")
        if len(out) > STDOUT_CAP:
            raise ResponderFailed(f"command {name} wrote more than {STDOUT_CAP} bytes")
        try:
            answer = json.loads(out)
        except ValueError as exc:
            raise ResponderFailed(f"command {name} wrote bad JSON on stdout: {exc}") from None
        if not isinstance(answer, dict):
            raise ResponderFailed(f"command {name}: stdout must be a JSON object with 'reply'")
        try:
            return check_reply(answer.get("reply"))
        except ResponderFailed as exc:
            raise ResponderFailed(f"command {name}: {exc}") from None


async def _exchange(proc: asyncio.subprocess.Process, payload: bytes) -> tuple[bytes, bytes]:
    """Feeds stdin and drains both pipes concurrently (so neither can fill and stall)."""
    out, err = await asyncio.gather(
        _feed_then_read(proc, payload), _read_tail(proc.stderr, STDERR_TAIL * 4)
    )
    await proc.wait()
    return out, err


async def _feed_then_read(proc: asyncio.subprocess.Process, payload: bytes) -> bytes:
    assert proc.stdin is not None and proc.stdout is not None
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        proc.stdin.write(payload)
        await proc.stdin.drain()
    proc.stdin.close()
    return await _read_head(proc.stdout, STDOUT_CAP + 1)


async def _read_head(stream: asyncio.StreamReader, keep: int) -> bytes:
    """The first `keep` bytes; the rest is drained and dropped."""
    head = b""
    while chunk := await stream.read(1 << 16):
        head += chunk[: max(0, keep - len(head))]
    return head


async def _read_tail(stream: asyncio.StreamReader | None, keep: int) -> bytes:
    """The last `keep` bytes."""
    tail = b""
    while stream is not None and (chunk := await stream.read(1 << 16)):
        tail = (tail + chunk)[-keep:]
    return tail


async def _reap(proc: asyncio.subprocess.Process) -> None:
    """Kills the command's process group if it is still running, and waits for it."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    await proc.wait()


# ---------------------------------------------------------------- callable


class CallableResponder:
    """A Python callable `fn(snapshot, pending)`; a sync one runs in a thread, off the loop."""

    ready = True

    def __init__(self, fn: Callable[..., Any]) -> None:
        if not callable(fn):
            raise InvalidResponderSpec(f"fn: must be callable, got {type(fn).__name__}")
        self._fn = fn
        module, name = getattr(fn, "__module__", "?"), getattr(fn, "__qualname__", "?")
        self.describe = f"python {module}:{name}"

    async def respond(self, snapshot: list[Message], pending: list[Message]) -> str | None:
        if inspect.iscoroutinefunction(self._fn):
            return check_reply(await self._fn(snapshot, pending))
        result = await asyncio.to_thread(self._fn, snapshot, pending)
        if inspect.isawaitable(result):
            result = await result
        return check_reply(result)


# ---------------------------------------------------------------- spec


def load_responder(
    spec: str,
    *,
    now: Callable[[], datetime],
    command_timeout: float = 60.0,
    llm: LlmConfig | None = None,
) -> Responder:
    """The responder `spec` names (see `SPEC_FORMS`); `InvalidResponderSpec` names the problem.

    `openai` needs `llm` with a URL and a model."""
    kind, _, value = spec.strip().partition(":")
    if kind == "builtin" and not value:
        return BuiltinResponder(now)
    if kind == "openai" and not value:
        return _openai(llm)
    if kind == "command":
        return CommandResponder(_argv(value), command_timeout)
    if kind == "python":
        return CallableResponder(_function(value))
    raise InvalidResponderSpec(f"responder: unknown spec {spec!r}; expected one of {SPEC_FORMS}")


def _openai(llm: LlmConfig | None) -> Responder:
    from runtime.openai_responder import OpenAIResponder

    if llm is None or not llm.url:
        raise InvalidResponderSpec("--llm-url: the openai responder needs the endpoint's base URL")
    if not llm.url.startswith(("http://", "https://")):
        raise InvalidResponderSpec(f"--llm-url: expected http(s)://…, got {llm.url!r}")
    if not llm.model:
        raise InvalidResponderSpec("--llm-model: the openai responder needs a model name")
    return OpenAIResponder(llm)


def _argv(value: str) -> list[str]:
    value = value.strip()
    if not value:
        raise InvalidResponderSpec("responder: command: needs a path or a JSON argv list")
    if not value.startswith("["):
        return [value]  # a plain path, never split by a shell
    try:
        argv = json.loads(value)
    except ValueError as exc:
        raise InvalidResponderSpec(f"responder: command: argv is not valid JSON: {exc}") from None
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) and a for a in argv):
        raise InvalidResponderSpec("responder: command: argv must be a non-empty list of strings")
    return argv


def _function(value: str) -> Callable[..., Any]:
    module_name, _, attr = value.rpartition(":")
    if not module_name or not attr:
        raise InvalidResponderSpec(
            f"responder: python: expected <module>:<function>, got {value!r}"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidResponderSpec(
            f"responder: python: cannot import module {module_name!r}: {exc}"
        ) from None
    fn = getattr(module, attr, None)
    if fn is None:
        raise InvalidResponderSpec(f"responder: python: {module_name!r} has no {attr!r}")
    if not callable(fn):
        raise InvalidResponderSpec(f"responder: python: {module_name}:{attr} is not callable")
    return fn
