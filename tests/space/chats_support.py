"""For the chat tests: a space server on a SQLite file, a settable clock, a tiny SSE reader;
given a PostgreSQL `dsn`, its store seam is a `PostgresStore` there (`store_dsn`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from space.app import create_app, default_admin_token_file
from space.chats import CHAT_SETTINGS, ChatSettings
from space.store import STORE
from space.store.postgres import PostgresStore

SPACE = "home"


class FakeClock:
    """The server's clock, moved by the test."""

    def __init__(self, start: datetime = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def make_app(db_path: Path, clock: FakeClock, **settings: Any) -> web.Application:
    app = create_app(db_path, clock=clock)
    app[CHAT_SETTINGS] = ChatSettings(**settings)
    return app


def admin_headers(db_path: Path) -> dict[str, str]:
    token = default_admin_token_file(db_path).read_text().strip()
    return {"Authorization": f"Bearer {token}"}


@dataclass
class Event:
    event: str | None = None
    id: str | None = None
    data: list[str] = field(default_factory=list)
    comment: str | None = None

    @property
    def text(self) -> str:
        return "\n".join(self.data)


class SseReader:
    """Reads one SSE response frame by frame (WHATWG rules, LF endings as our server sends)."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response

    async def next(self, *, comments: bool = False) -> Event | None:
        """The next event (or comment if asked); None at the end of the stream."""
        ev = Event()
        while True:
            raw = await self.response.content.readline()
            if not raw:
                return None
            line = raw.decode().rstrip("\n")
            if line == "":
                if ev.data or ev.event or ev.id is not None:
                    return ev
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "":
                if comments:
                    return Event(comment=value)
                continue
            if name == "data":
                ev.data.append(value)
            elif name in ("event", "id"):
                setattr(ev, name, value)

    async def until_end(self) -> list[Event]:
        events = []
        while (ev := await self.next()) is not None:
            events.append(ev)
        return events


@asynccontextmanager
async def open_stream(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str], last_id: str | None = None
) -> AsyncIterator[SseReader]:
    hdrs = dict(headers)
    if last_id is not None:
        hdrs["Last-Event-ID"] = last_id
    async with session.get(url, headers=hdrs) as response:
        assert response.status == 200, await response.text()
        assert response.headers["Content-Type"].startswith("text/event-stream")
        yield SseReader(response)


@dataclass
class Space:
    """A running space server with one space (`home`) and its general chat."""

    client: Any  # pytest-aiohttp TestClient
    headers: dict[str, str]
    clock: FakeClock
    db_path: Path
    chat: str = ""

    @property
    def app(self) -> web.Application:
        return self.client.server.app

    def chat_url(self, chat: str | None = None, tail: str = "") -> str:
        return f"/v1/spaces/{SPACE}/chats/{chat or self.chat}{tail}"

    async def call(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        async with self.client.request(method, path, headers=self.headers, **kwargs) as resp:
            return resp.status, await resp.json()

    async def send(self, text: str, chat: str | None = None, **extra: Any) -> dict:
        status, body = await self.call(
            "POST", self.chat_url(chat, "/messages"), json={"text": text, **extra}
        )
        assert status == 201, body
        return body

    async def history(self, chat: str | None = None, query: str = "") -> list[dict]:
        status, body = await self.call("GET", self.chat_url(chat, f"/messages{query}"))
        assert status == 200, body
        return body["messages"]

    def stream(self, last_id: str | None = None, chat: str | None = None):
        url = self.chat_url(chat, "/stream")
        full = str(self.client.make_url(url))
        return open_stream(self.client.session, full, self.headers, last_id)


async def start_space(
    aiohttp_client: Any,
    db_path: Path,
    clock: FakeClock,
    dsn: str | None = None,
    **settings: Any,
) -> Space:
    app = make_app(db_path, clock, **settings)
    if dsn is not None:  # the routes behind the seam answer from PostgreSQL
        store = await PostgresStore.open(dsn)
        app[STORE] = store
        app.on_cleanup.append(lambda _: store.close())
        await store.ensure_admin_token(default_admin_token_file(db_path))
    client = await aiohttp_client(app)
    space = Space(client=client, headers=admin_headers(db_path), clock=clock, db_path=db_path)
    status, body = await space.call("POST", "/v1/spaces", json={"id": SPACE})
    if status == 409:  # a restarted server on the same file
        status, body = await space.call("GET", f"/v1/spaces/{SPACE}")
    assert status in (200, 201), body
    space.chat = body["generalChat"]
    return space
