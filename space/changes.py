"""The change feed of trigger records: a page by `seq`, and its SSE form.

Owns the feed routes, the per-app fan-out that wakes open streams when a record write
commits here (`notify`) or on another server (`wake`, PostgreSQL's hints), and the writer
mark: the stamps a device posts with `Baton-Writer: <tag>` are marked `<peer>/<tag>`, and
its change stream with `?omit=<tag>` sends them as `event: own` with their seqs only (it
takes them from its POST's answer; pages leave nothing out). A stream re-reads the
`changes` table from its cursor on every wake, so nothing is lost between a replay and
live changes. Must not write records.
"""

from __future__ import annotations

import json
import re
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
WRITER_HEADER = "Baton-Writer"
_TAG = re.compile(r"[A-Za-z0-9_-]{1,64}")


def notify(app: web.Application, space: str) -> None:
    """Wake every change stream of `space` (after a committed write here)."""
    app[FANOUT].publish(space, None)


def wake(app: web.Application, space: str | None) -> None:
    """Wake the change streams of `space` (None: of every space) to read from their cursors;
    a stream already woken and not yet reading is not woken twice (`Fanout.nudge`)."""
    fanout = app[FANOUT]
    for key in fanout.keys() if space is None else [space]:
        fanout.nudge(key, None)


def writer(request: web.Request) -> str:
    """The mark of a device's stamps: `<peer>/<tag>` from `Baton-Writer` ('' if none given, or
    not a device's token); 400 for a tag that is not 1-64 of `A-Za-z0-9_-`."""
    return _writer(request, request.headers.get(WRITER_HEADER), f"header {WRITER_HEADER}")


def omitted(request: web.Request) -> str:
    """The writer whose stamps this change stream leaves out (`?omit=<tag>`; '' for none)."""
    return _writer(request, request.query.get("omit"), "query parameter omit")


def _writer(request: web.Request, tag: str | None, where: str) -> str:
    if tag is None:
        return ""
    if not _TAG.fullmatch(tag):
        detail = f"{where}: a writer tag is 1-64 of A-Za-z0-9_-, not {tag[:80]!r}"
        raise Refusal(400, "invalid_writer", detail)
    who = principal(request)
    return f"{who.peer}/{tag}" if who.role is Role.DEVICE else ""


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


async def _page(
    request: web.Request, space: str, since: int, limit: int, omit: str = ""
) -> list[dict[str, Any]]:
    """Changes after `since` (without `omit`'s stamps); to a run token, each record without
    what it is told."""
    page = await request.app[STORE].changes_since(space, since, limit, omit)
    if principal(request).role is not Role.RUN:
        return page
    for change in page:
        if change.get("record") is not None:
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
    since, omit = cursor(request), omitted(request)
    fanout = request.app[FANOUT]
    async with streams.EventStream.open(request) as stream:
        fanout.add(space, stream)
        try:
            await stream.send(json.dumps({"cursor": since}), id=since, event="hello")
            since = await _send_since(request, stream, space, since, omit)
            async for _ in stream:
                since = await _send_since(request, stream, space, since, omit)
        finally:
            fanout.discard(space, stream)
    return stream.response


async def _send_since(
    request: web.Request, stream: streams.EventStream, space: str, since: int, omit: str
) -> int:
    while not stream.closed:
        page = await _page(request, space, since, PAGE_DEFAULT, omit)
        own: list[int] = []  # omitted seqs, sent as one `own` event before the next change
        for change in page:
            if "omitted" in change:
                own.append(change["seq"])
                continue
            if own:
                await _send_own(stream, own)
                own = []
            await stream.send(json.dumps(change), id=change["seq"], event="change")
        if own:
            await _send_own(stream, own)
        since = page[-1]["seq"] if page else since
        if len(page) < PAGE_DEFAULT:
            break
    return since


async def _send_own(stream: streams.EventStream, seqs: list[int]) -> None:
    """The writer's own stamps at `seqs`, named but not carried: its cursor moves past them
    (`id:` the last), and every seq reaches it, as a change or in an `own` event."""
    await stream.send(json.dumps({"seqs": seqs}), id=seqs[-1], event="own")


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
        "Change feed as SSE: `hello`, then `id: <seq>` `event: change`; `?omit=<tag>` leaves "
        "out the stamps this device posted with `Baton-Writer: <tag>`",
    )
