"""The SSE stream of one chat: hello, resume within the window W, gaps, then live messages.

Owns the order of events on `GET …/chats/{objectId}/stream`: registered before reading,
`hello` with the chat's cursor, a `gap` for what is older than W (by the store's clock) or
an unknown cursor, the backlog oldest first, then live messages and `update` edits (no
`id`). A live item past the next seq, or a `WAKE` (`wake`: another server wrote), is read
by seq from the store, so nothing is skipped whoever wrote it. The order in full is in
docs/architecture.md, "Module notes". Must not write messages nor know the HTTP routes'
shapes; every read goes through the store seam.
"""

from __future__ import annotations

import msgspec

from space.http import int64
from space.store import Store
from space.streams import EventStream, Fanout, last_event_id

REPLAY_PAGE = 500
MESSAGE, UPDATE, WAKE = "message", "update", "wake"
_WAKE = (0, "", WAKE)  # read the chat from the store after what was sent

Topics = Fanout[str]  # items: (seq, message JSON, MESSAGE or UPDATE), or `_WAKE`


def wake(topics: Topics, object_id: str | None) -> int:
    """Wake the streams of `object_id` (None: of every chat) to read the store by seq (a
    message posted on another server; `Fanout.nudge`: a burst is one read); how many."""
    keys = topics.keys() if object_id is None else [object_id]
    return sum(topics.nudge(key, _WAKE) for key in keys)


async def run(
    stream: EventStream, topics: Topics, store: Store, space: str, object_id: str, window: float
) -> None:
    """Serve one subscriber until it leaves, overflows or the server shuts down."""
    topics.add(object_id, stream)
    try:
        cursor = await store.chat_seq(space, object_id)
        sent = await _open(stream, store, object_id, cursor, window)
        async for seq, body, kind in stream:
            if kind == UPDATE:
                if seq <= sent:  # past it, the read by seq sends the message as it is now
                    await stream.send(body, event=UPDATE)
            elif kind == WAKE or seq > sent + 1:  # read by seq: none skipped, none twice
                sent = await _read_on(stream, store, object_id, sent)
            elif seq > sent:
                await stream.send(body, id=seq, event="message")
                sent = seq
    finally:
        topics.discard(object_id, stream)


async def _open(
    stream: EventStream, store: Store, object_id: str, cursor: int, window: float
) -> int:
    """Hello, any gap and the replay; the last seq the client now holds."""
    raw = last_event_id(stream.request)
    resume = _resume_point(raw, cursor)
    start = cursor if resume is None else resume
    await stream.send(_json({"cursor": cursor}), id=start, event="hello")
    if raw is not None and resume is None:
        gap = {"reason": "unknown_cursor", "skipped": 0, "lastEventId": raw}
        await stream.send(_json(gap), id=cursor, event="gap")
    if resume is None:
        return cursor
    return await _catch_up(stream, store, object_id, resume, cursor, window)


async def _catch_up(
    stream: EventStream, store: Store, object_id: str, after: int, upto: int, window: float
) -> int:
    """The gap of `(after, upto]` older than the window, then the rest; the last seq sent."""
    skipped, since = await store.resume_gap(object_id, after, upto, window)
    if skipped is not None:
        first, last, count = skipped
        gap = {"from": first, "to": last, "skipped": count, "reason": "window"}
        await stream.send(_json(gap), id=last, event="gap")
    sent = after
    while rows := await store.replay(object_id, sent, upto, since, REPLAY_PAGE):
        for seq, body in rows:
            if not await stream.send(body, id=seq, event="message"):
                return sent
            sent = seq
    return max(sent, upto)


async def _read_on(stream: EventStream, store: Store, object_id: str, sent: int) -> int:
    """Every message after `sent`, by seq; the last seq sent."""
    while rows := await store.messages_since(object_id, sent, REPLAY_PAGE):
        for seq, body in rows:
            if not await stream.send(body, id=seq, event="message"):
                return sent
            sent = seq
        if len(rows) < REPLAY_PAGE:
            break
    return sent


def _resume_point(raw: str | None, cursor: int) -> int | None:
    """The seq to resume after, or None for a fresh start or an id this chat never sent."""
    seq = None if raw is None else int64(raw)
    return seq if seq is not None and seq <= cursor else None


def _json(obj: object) -> str:
    return msgspec.json.encode(obj).decode()
