"""The world of the fire pipeline's tests: a real space server, its admin and this device's
clients, a fake clock, a real executor (two workers) and the pipeline under test."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from waiting import eventually

from core.clock import FakeClock
from programs.executor import Executor
from programs.loader import ProgramCache
from runtime.client.api import SpaceClient
from runtime.client.seat import Seat
from runtime.fire.dispatch import FireRequest
from runtime.fire.execute import Execute, program_fetch
from runtime.fire.firing import Firing
from runtime.fire.recorder import Recorder
from space.app import create_app, default_admin_token_file
from triggers.records import CHAT_WATCH_PROGRAM, RESERVED_CHAT_WATCH, FireKey, PeerId, Trigger, load

SPACE = "home"
PEER = "dev1"
OK = "def main(args):\n    return {'ok': True, 'n': args.get('n')}\n"
FAIL = "def main(args):\n    raise RuntimeError('nope ' + str(args.get('n')))\n"
ECHO = "def main(args):\n    return {'ok': True, 'args': args}\n"
GATED = """
import os, time

def main(args):
    deadline = time.monotonic() + 10
    while not os.path.exists(args["gate"]) and time.monotonic() < deadline:
        time.sleep(0.01)
    return {"ok": os.path.exists(args["gate"])}
"""
CHATTY = """
def main(args):
    c = use("any@v1")
    sent = c.chat_send(args["space"], args["chat"],
                       {"text": "hello from a program", "agent": {"name": "greeter"}})
    return {"ok": True, "messageId": sent["messageId"]}
"""


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text)


class World:
    """A space, its admin client, this device's client, a clock and the pipeline under test."""

    def __init__(self, url: str, admin: SpaceClient, device: SpaceClient, chat: str) -> None:
        self.url, self.admin, self.device, self.chat = url, admin, device, chat
        self.made = 0  # triggers made: each gets a name of its own
        self.clock = FakeClock(datetime.now(UTC).replace(microsecond=0))
        self.firing: Firing | None = None
        self.seen: list[tuple[str, str]] = []  # (method, route) of every request the space answered

    def seat(self) -> Seat:
        """This device in the space, as the device gives it to its parts."""
        return Seat(self.device, SPACE, PeerId(PEER), self.clock)

    def asked(self, method: str, route: str) -> int:
        return self.seen.count((method, "/v1/spaces/{space}" + route))

    async def publish(self, ref: str, source: str) -> None:
        await self.admin.program_put(SPACE, ref, {"source": source})

    async def trigger(self, program: str, **fields: Any) -> Trigger:
        self.made += 1  # names are unique within a space
        body = {
            "name": f"t-{self.made}",
            "kind": "cron",
            "spec": {"expr": "*/5 * * * *"},
            "program": program,
            "owner": PEER,
            **fields,
        }
        if program == CHAT_WATCH_PROGRAM:  # the reserved record: by its id, created in place
            made = await self.admin.trigger_put(SPACE, RESERVED_CHAT_WATCH, body)
        else:
            made = await self.admin.trigger_create(SPACE, body)
        record = load(made)
        assert not hasattr(record, "raw"), record
        return record

    def request(self, record: Trigger, key: str, **kw: Any) -> FireRequest:
        due = kw.pop("due_at", self.clock.wall())
        return FireRequest(trigger=record, key=FireKey(key), due_at=due, **kw)

    async def fire(self, *requests: FireRequest) -> None:
        assert self.firing is not None
        for request in requests:
            await self.firing.fire(request)
        async with asyncio.timeout(15):
            await self.firing.settled()

    async def runs(self, record: Trigger) -> list[dict[str, Any]]:
        return (await self.admin.runs(SPACE, trigger=record.id))["runs"]

    async def stamped(self, record: Trigger) -> dict[str, Any]:
        return await self.admin.trigger_get(SPACE, record.id)

    async def until_running(self, record: Trigger, running: int = 1) -> None:
        assert self.firing is not None
        firing = self.firing
        await eventually(
            lambda: firing.status().triggers.get(record.id, {}).get("running") == running
        )


class FakeResponder:
    """The world's edge for chat-watch: records what it was asked to answer."""

    ready = True

    def __init__(self) -> None:
        self.asked: list[list[dict[str, Any]]] = []
        self.called = asyncio.Event()

    async def respond(self, snapshot: list[dict], pending: list[dict]) -> str | None:
        self.asked.append(pending)
        self.called.set()
        return None


@pytest.fixture
async def world(tmp_path: Path, aiohttp_server: Any):
    db = tmp_path / "space.db"
    app = create_app(db)
    seen: list[tuple[str, str]] = []

    async def access(request: Any, _: Any) -> None:  # the server's own account of requests
        resource = request.match_info.route.resource
        seen.append((request.method, resource.canonical if resource is not None else ""))

    app.on_response_prepare.append(access)
    server = await aiohttp_server(app)
    url = str(server.make_url("/")).rstrip("/")
    admin = SpaceClient(url, default_admin_token_file(db).read_text().strip())
    created = await admin.space_create({"id": SPACE})
    token = (await admin.token_device({"peer": PEER, "space": SPACE}))["token"]
    device = SpaceClient(url, token)
    w = World(url, admin, device, created.generalChat)
    w.seen = seen
    try:
        yield w
    finally:
        await device.close()
        await admin.close()


@pytest.fixture
async def executor():
    async with Executor(2) as pool:
        yield pool


def make_firing(w: World, executor: Executor, **kw: Any) -> Firing:
    options: dict[str, Any] = {"term": lambda: 0, "may_fire_floating": lambda: True}
    options.update(kw)
    seat = w.seat()
    recorder = Recorder(seat, bus=options.pop("bus", None))
    programs = ProgramCache(program_fetch(w.device, SPACE))
    execute = Execute(seat, w.url, executor=executor, programs=programs)
    w.firing = Firing(seat, execute=execute, recorder=recorder, **options)
    return w.firing


@pytest.fixture
async def w(world: World, executor: Executor):
    firing = make_firing(world, executor)
    yield world
    await firing.close()
