"""The chat routes of the space API: chats, messages, history and the message stream.

Owns the HTTP side of `…/chats`, `…/chats/{objectId}/messages` and `…/stream` (SPEC "The
space and its API"): strict body checks naming the path, the 404 `unknown_chat`, publishing
each accepted message to the chat's streams. Storage is the store seam's (`app[STORE]`),
the event order `chat_stream`; knobs in `app[CHAT_SETTINGS]`. Must not check tokens (the
app's middleware does).
"""

from __future__ import annotations

import logging

import msgspec
from aiohttp import web

from core.chatwire import (
    NAME_MAX,
    NUDGE_PREFIX,
    AgentIn,
    Message,
    MessageEdit,
    MessageIn,
    MessagePage,
)
from core.wire import Answer
from space import (
    auth,
    chat_stream,
    oddrows,
    trigger_store,
)
from space.auth import Role, principal
from space.chat_store import Chat, ChatIn, NotEditable, UnknownChat
from space.http import Refusal, add_route, answer, decode, int_query, raw_body
from space.spaces import require_space
from space.storage import STORE_FAULTS
from space.store import STORE
from space.streams import EventStream, install, last_event_id

log = logging.getLogger("baton.space")


class ChatSettings(msgspec.Struct, frozen=True, kw_only=True):
    window: float = 120.0  # W: how far back a resume replays, in seconds
    heartbeat: float = 15.0
    queue_size: int = 1000  # per subscriber; a subscriber that falls further behind is cut
    send_timeout: float = 60.0
    text_limit: int = 64 * 1024  # bytes of UTF-8
    page_default: int = 100
    page_max: int = 1000


class ChatList(Answer, frozen=True, kw_only=True):
    chats: list[Chat]


CHAT_SETTINGS = web.AppKey("chat_settings", ChatSettings)
TOPICS = web.AppKey("chat_topics", chat_stream.Topics)


def setup(app: web.Application) -> None:
    """Add the chat routes, their tables and the shutdown that ends their streams."""
    install(app)
    app[TOPICS] = chat_stream.Topics()
    add_route(app, "chat_create", post_chat, "Create a chat", body=ChatIn, answer=Chat)
    add_route(app, "chats", get_chats, "List the space's chats", answer=ChatList)
    add_route(
        app,
        "chat_send",
        post_message,
        "Send a message",
        body=MessageIn,
        answer=Message,
    )
    add_route(
        app,
        "chat_edit",
        patch_message,
        "Edit an agent message still being written: `{text?, done?}` (the whole new text); "
        "streams see `event: update`; a person's message or a done one is 409",
        body=MessageEdit,
        answer=Message,
    )
    add_route(
        app,
        "chat_messages",
        get_messages,
        "History page: `?after=<seq>&limit=`, oldest first; `&latest=1`: the newest "
        "`limit` (`more`: older ones exist)",
        answer=MessagePage[Message],
    )
    add_route(
        app,
        "chat_stream",
        get_stream,
        "SSE: `hello`, then `message` events (`id` = seq); honours `Last-Event-ID`",
    )


def settings(app: web.Application) -> ChatSettings:
    return app.get(CHAT_SETTINGS) or ChatSettings()


async def _chat_cursor(request: web.Request) -> tuple[str, str, int]:
    """`(space, objectId, latest seq)` of the route's chat; 404 if either is unknown."""
    space, object_id = require_space(request), request.match_info["objectId"]
    try:
        return space, object_id, await request.app[STORE].chat_seq(space, object_id)
    except UnknownChat:
        detail = f"no chat with objectId {object_id!r} in space {space!r}"
        raise Refusal(404, "unknown_chat", detail) from None


async def post_chat(request: web.Request) -> web.Response:
    space = require_space(request)
    body = decode(await raw_body(request) or b"{}", ChatIn)
    chat = await request.app[STORE].create_chat(space, body.name)
    return answer(chat, status=201)


async def get_chats(request: web.Request) -> web.Response:
    space = require_space(request)
    return answer({"chats": await request.app[STORE].chats(space)})


async def post_message(request: web.Request) -> web.Response:
    space, object_id = require_space(request), request.match_info["objectId"]
    msg = await _signed(request, decode(await raw_body(request), MessageIn))
    _check_text(msg.text, settings(request.app).text_limit)
    try:
        message, body = await request.app[STORE].add_message(space, object_id, msg)
    except UnknownChat:
        detail = f"no chat with objectId {object_id!r} in space {space!r}"
        raise Refusal(404, "unknown_chat", detail) from None
    request.app[TOPICS].publish(object_id, (message.seq, body.decode(), chat_stream.MESSAGE))
    return web.Response(body=body, status=201, content_type="application/json")


async def patch_message(request: web.Request) -> web.Response:
    """An agent message grows in place: its new `text` and/or `done`, seen by streams as
    `event: update`. A person's message, or one that is done, is 409 `not_editable`."""
    _, object_id, _ = await _chat_cursor(request)
    message_id = request.match_info["messageId"]
    edit = decode(await raw_body(request), MessageEdit)
    if edit.text is not None:
        _check_text(edit.text, settings(request.app).text_limit)
    try:
        message, body = await request.app[STORE].edit_message(object_id, message_id, edit)
    except UnknownChat:
        detail = f"no message {message_id!r} in chat {object_id!r}"
        raise Refusal(404, "unknown_message", detail) from None
    except NotEditable as exc:
        raise Refusal(409, "not_editable", f"message {message_id!r}: {exc}") from None
    request.app[TOPICS].publish(object_id, (message.seq, body.decode(), chat_stream.UPDATE))
    return web.Response(body=body, content_type="application/json")


async def _signed(request: web.Request, msg: MessageIn) -> MessageIn:
    """A message sent with a run token is the agent's: `agent.name` defaults to the program's
    ref, so a program posting into a chat its own event trigger watches never re-fires it;
    a nudge it sends (`trigger:…`) is always `trigger:<its own trigger's name>`."""
    who = auth.principal(request)
    nudge = msg.agent is not None and msg.agent.name.startswith(NUDGE_PREFIX)
    if who.role is not auth.Role.RUN or (msg.agent is not None and not nudge):
        return msg
    space, tid = str(who.space), str(who.trigger_id or "run")
    try:
        row = await request.app[STORE].record_row(space, tid)
        _, record = trigger_store.parsed(space, tid, row)
    except Refusal:
        record = {}  # the trigger was deleted meanwhile: its id still says who wrote
    if nudge:
        name = NUDGE_PREFIX + str(record.get("name") or tid)
    else:
        name = str(record.get("program") or tid)
    return msgspec.structs.replace(msg, agent=AgentIn(name=name[:NAME_MAX]))


def _check_text(text: str, limit: int) -> None:
    size = len(text.encode())
    if size > limit:
        detail = f"`text` is {size} bytes, over the limit of {limit} - at `$.text`"
        raise Refusal(413, "text_too_large", detail)


async def get_messages(request: web.Request) -> web.Response:
    _, object_id, _ = await _chat_cursor(request)
    conf = settings(request.app)
    after = int_query(request, "after", 0, clamp=False)
    limit = int_query(request, "limit", conf.page_default, low=1, high=conf.page_max, clamp=False)
    if request.query.get("latest", "") in ("1", "true"):  # the newest `limit`, oldest first
        rows = await request.app[STORE].latest_messages(object_id, after, limit + 1)
        more, rows = len(rows) > limit, rows[-limit:]
    else:
        rows = await request.app[STORE].messages_since(object_id, after, limit + 1)
        more, rows = len(rows) > limit, rows[:limit]
    nxt = rows[-1][0] if rows else after
    good, _ = oddrows.each(rows, _checked, lambda r: r[0], "chat_messages")
    messages = ",".join(good)  # an odd row is left out: the page stays valid JSON
    text = f'{{"messages":[{messages}],"next":{nxt},"more":{"true" if more else "false"}}}'
    return web.Response(text=text, content_type="application/json")


class _Shape(msgspec.Struct):
    """What a stored message must hold to be served (other fields pass as they are)."""

    messageId: str
    seq: int
    objectId: str
    text: str
    createdAt: str


_shape = msgspec.json.Decoder(_Shape)


def _checked(row: tuple[int, str]) -> str:
    if _shape.decode(row[1]).seq != row[0]:
        raise ValueError("its seq is not its row's")
    return row[1]


async def get_stream(request: web.Request) -> web.StreamResponse:
    space, object_id, _ = await _chat_cursor(request)
    app, conf = request.app, settings(request.app)
    options = {"heartbeat": conf.heartbeat, "queue_size": conf.queue_size}
    async with EventStream.open(request, send_timeout=conf.send_timeout, **options) as stream:
        live = await _subscribed(request, space, object_id)
        try:
            await chat_stream.run(stream, app[TOPICS], app[STORE], space, object_id, conf.window)
        finally:
            await _unsubscribed(request, live)
    return stream.response


async def _subscribed(request: web.Request, space: str, object_id: str) -> int | None:
    """A device's stream goes into its history (`why`: who was subscribed when)."""
    who = principal(request)
    if who.role is not Role.DEVICE or who.peer is None:
        return None
    resumed = last_event_id(request) is not None
    try:
        return await request.app[STORE].stream_began(space, who.peer, object_id, resumed)
    except STORE_FAULTS as exc:  # a storage fault costs the history, never the stream
        log.warning("history: stream of %s not noted: %s", object_id, exc)
        return None


async def _unsubscribed(request: web.Request, row: int | None) -> None:
    if row is None:
        return
    try:
        await request.app[STORE].stream_ended(row)
    except STORE_FAULTS as exc:
        log.warning("history: end of a stream not noted: %s", exc)
