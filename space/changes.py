"""The change feed of trigger records: a page by `seq`, and its SSE form.

Owns the feed routes and the per-app fan-out that wakes open streams when a
record write commits (`notify`). A stream re-reads the `changes` table from its
cursor on every wake, so nothing is lost between a replay and live changes.
Must not write records.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from core.wire import ChangePage
from space import record_view, streams
from space.auth import Role, principal
from space.http import Refusal, add_route, answer, int64, int_query
from space.spaces import require_space
from space.store import STORE

FANOUT = web.AppKey("change_fanout", streams.Fanout[str])
PAGE_DEFAULT = 500
PAGE_MAX = 5000


def notify(app: web.Application, space: str) -> None:
    """Wake every change stream of `space` (after a committed write)."""
    app[FANOUT].publish(space, None)


def cursor(request: web.Request) -> int:
    if "since" in request.query:
        return int_query(request, "since", 0)
    resume = streams.last_event_id(request)
    if resume is None or not (resume.isascii() and resume.isdigit()):
        return 0  # no cursor, or not one of ours: from the start
    seq = int64(resume)
    if seq is None:
        detail = f"Last-Event-ID {resume[:40]!r}… is beyond 64 bits"
        raise Refusal(400, "invalid_header", detail)
    return seq


async def _page(request: web.Request, space: str, since: int, limit: int) -> list[dict[str, Any]]:
    """Changes after `since`; to a run token, each record without what it is told."""
    page = await request.app[STORE].changes_since(space, since, limit)
    if principal(request).role is not Role.RUN:
        return page
    for change in page:
        if change["record"] is not None:
            change["record"] = record_view.for_run(change["record"])
    return page


async def get_changes(request: web.Request) -> web.StreamResponse:
    if "text/event-stream" in request.headers.get("Accept", ""):
        return await stream_changes(request)
    space = require_space(request)
    since = int_query(request, "since", 0)
    limit = int_query(request, "limit", PAGE_DEFAULT, low=1, high=PAGE_MAX)
    page = await _page(request, space, since, limit + 1)
    more = len(page) > limit
    page = page[:limit]
    return answer({"changes": page, "next": page[-1]["seq"] if page else since, "more": more})


async def stream_changes(request: web.Request) -> web.StreamResponse:
    """SSE: `event: hello` with the cursor, then `id: <seq>`, `event: change` per change."""
    space = require_space(request)
    since = cursor(request)
    fanout = request.app[FANOUT]
    async with streams.EventStream.open(request) as stream:
        fanout.add(space, stream)
        try:
            await stream.send(json.dumps({"cursor": since}), id=since, event="hello")
            since = await _send_since(request, stream, space, since)
            async for _ in stream:
                since = await _send_since(request, stream, space, since)
        finally:
            fanout.discard(space, stream)
    return stream.response


async def _send_since(
    request: web.Request, stream: streams.EventStream, space: str, since: int
) -> int:
    while not stream.closed:
        page = await _page(request, space, since, PAGE_DEFAULT)
        for change in page:
            await stream.send(json.dumps(change), id=change["seq"], event="change")
            since = change["seq"]
        if len(page) < PAGE_DEFAULT:
            break
    return since


def setup(app: web.Application) -> None:
    streams.install(app)
    app[FANOUT] = streams.Fanout()
    add_route(
        app,
        "changes",
        get_changes,
        "Change feed page: changes with seq > since, oldest first "
        "(SSE with `Accept: text/event-stream`)",
        answer=ChangePage,
    )
    add_route(
        app,
        "changes_stream",
        stream_changes,
        "Change feed as SSE: `hello`, then `id: <seq>` `event: change`",
    )
