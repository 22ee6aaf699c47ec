"""Several space servers on one PostgreSQL database: real aiohttp sites on 127.0.0.1.

Each `Server` is `create_app(dsn)`: the PostgreSQL store and its `Wakes` listener opened at
its startup, one admin token file for all (the first mints it, the others accept it).
The space `SPACE` is created through the first. A `Feed` reads a change stream and keeps
every seq it was sent.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from chats_support import SseReader

from space.app import create_app
from space.opening import WAKES, PgOptions
from space.store.pgwake import Wakes

SPACE = "home"
CRON = {"name": "tick", "kind": "cron", "spec": {"expr": "*/5 * * * *"}, "program": "tick@v1"}


@dataclass
class Server:
    app: web.Application
    runner: web.AppRunner
    url: str
    session: aiohttp.ClientSession
    token: str = ""

    @property
    def wakes(self) -> Wakes:
        return self.app[WAKES]

    def headers(self, **more: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", **more}

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        kwargs = {} if body is None else {"json": body}
        url = f"{self.url}/v1{path}"
        async with self.session.request(method, url, headers=self.headers(), **kwargs) as resp:
            return resp.status, await resp.json()

    async def post(self, path: str, body: Any = None) -> tuple[int, Any]:
        return await self.call("POST", path, body)

    async def close(self) -> None:
        await self.session.close()
        await self.runner.cleanup()


async def start_servers(
    dsn: str, tmp: Path, n: int = 3, *, pg: PgOptions | None = None
) -> list[Server]:
    """`n` servers on `dsn`, started one after another (the first mints the admin token)."""
    token_file = tmp / "admin.token"
    servers = []
    for _ in range(n):
        app = create_app(dsn, admin_token_file=token_file, pg=pg, lease_seconds=30)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
        servers.append(Server(app, runner, f"http://127.0.0.1:{port}", session))
    token = token_file.read_text().strip()
    for server in servers:
        server.token = token
    status, body = await servers[0].post("/spaces", {"id": SPACE, "name": "Home"})
    assert status == 201 or body["error"] == "space_exists", body  # servers started again
    return servers


@dataclass
class Feed:
    """One change stream on `server`: every seq it was sent, in the order sent."""

    server: Server
    seqs: list[int] = field(default_factory=list)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    def start(self, last_id: str | None = None) -> Feed:
        self.task = asyncio.create_task(self._read(last_id))
        return self

    async def _read(self, last_id: str | None) -> None:
        headers = self.server.headers(Accept="text/event-stream")
        if last_id is not None:
            headers["Last-Event-ID"] = last_id
        url = f"{self.server.url}/v1/spaces/{SPACE}/changes/stream"
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        async with self.server.session.get(url, headers=headers, timeout=timeout) as resp:
            assert resp.status == 200, await resp.text()
            reader = SseReader(resp)
            while (event := await reader.next()) is not None:
                if event.event == "hello":
                    self.ready.set()
                elif event.event == "change":
                    self.seqs.append(json.loads(event.text)["seq"])

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
