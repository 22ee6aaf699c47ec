"""What no client may exhaust: descriptors, connections, streams, the log.

Owns the space's own bounds against a flood (issue 25): the soft open-file limit
raised to the hard one at start (`raise_file_limit`), a reserve of descriptors
that connections never take (`connection_room`), concurrent requests and event
streams capped per token (`per_token`, 429 with `Retry-After`), and a repeated log
line written once a minute with its count (`OncePerMinute`). Slow headers and
connection refusals happen in the protocol (`space.serving`). Must not know routes.
"""

from __future__ import annotations

import logging
import resource
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web

from core.clock import SystemClock
from space.auth import PRINCIPAL, Role
from space.errors import error_response
from space.http import Handler

RESERVE_FDS = 128  # descriptors kept for the database, logs and the server's own work
RETRY_AFTER_S = 1
REPEAT_WINDOW_S = 60.0


@dataclass(frozen=True)
class TokenCaps:
    """At most this many requests in flight (event streams included), and streams, per token."""

    requests: int
    streams: int


CAPS = {Role.RUN: TokenCaps(32, 8), Role.DEVICE: TokenCaps(4096, 2048)}  # admin: none
COUNTS = web.AppKey("token_counts", dict)


def raise_file_limit() -> int:
    """The soft open-file limit raised to the hard one (where it is finite); the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    return soft


def connection_room() -> int:
    """How many connections may be open at once: the soft limit less the reserve."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = 1 << 20 if soft == resource.RLIM_INFINITY else soft
    return max(16, limit - RESERVE_FDS)


def _is_stream(request: web.Request) -> bool:
    return "text/event-stream" in request.headers.get("Accept", "") or request.path.endswith(
        "/stream"
    )


@web.middleware
async def per_token(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse (429, `Retry-After`) a token's request beyond its caps while the others run."""
    who = request.get(PRINCIPAL)
    caps = CAPS.get(who.role) if who is not None else None
    if who is None or caps is None:
        return await handler(request)
    counts: dict[tuple[str, bool], int] = request.app[COUNTS]
    stream = _is_stream(request)
    keys = [(who.id, False)] + ([(who.id, True)] if stream else [])
    for key, cap in zip(keys, (caps.requests, caps.streams), strict=False):
        if counts.get(key, 0) >= cap:
            what = "event streams" if key[1] else "requests in flight"
            detail = (
                f"this {who.role} token has {cap} {what} already; retry after {RETRY_AFTER_S} s"
            )
            refused = error_response(429, "too_many_requests", detail)
            refused.headers["Retry-After"] = str(RETRY_AFTER_S)
            return refused
    for key in keys:
        counts[key] = counts.get(key, 0) + 1
    try:
        return await handler(request)
    finally:
        for key in keys:
            counts[key] -= 1
            if not counts[key]:
                del counts[key]


@dataclass
class OncePerMinute(logging.Filter):
    """Lets a log line through once per `window` seconds per logger and message template;
    the next one through says how many were held back since."""

    window: float = REPEAT_WINDOW_S
    clock: Callable[[], float] = SystemClock().monotonic
    _seen: dict[tuple[str, str], tuple[float, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(record.msg))
        now = self.clock()
        since, held = self._seen.get(key, (float("-inf"), 0))
        if now - since < self.window:
            self._seen[key] = (since, held + 1)
            return False
        self._seen[key] = (now, 0)
        if held:
            record.msg = f"{record.msg} (and {held} more like it in the last minute)"
        return True


REPEATED = ("asyncio", "aiohttp.server", "aiohttp.web", "baton.space")


def quiet_repeats(filter_: OncePerMinute | None = None) -> None:
    """Put one `OncePerMinute` on the loggers a flood writes to (once per process)."""
    once = filter_ or OncePerMinute()
    for name in REPEATED:
        logger = logging.getLogger(name)
        if not any(isinstance(f, OncePerMinute) for f in logger.filters):
            logger.addFilter(once)
