"""In-process devices against a real space server on 127.0.0.1: the fixtures and helpers.

`Space` is the embedded space server on a SQLite file in `tmp_path`, run by an
`AppRunner` on a loopback port, with an admin client; it can be stopped and
started again on the same file and port, and its clock can be a `FakeClock`'s
wall; `Spaces.on_postgres(dsn)` is one more server on a PostgreSQL database.
`make_device(**overrides)` starts a `runtime.device.Device` as a task (a real
Executor with two workers) and, at teardown, cancels it and checks that no task
of the runtime is left. Waits are on conditions under a deadline.
"""

from __future__ import annotations

import asyncio
import functools
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
import waiting
from aiohttp import web
from pages import read_all

from core.chatwire import Message
from core.clock import FakeClock
from runtime.client.api import ApiError, SpaceClient
from runtime.device import Device, DeviceSettings
from runtime.events import RoleChanged
from space.app import create_app, default_admin_token_file
from space.dbthread import DB_THREAD, DbThread
from space.servertime import system_clock
from space.serving import HEADER_TIMEOUT_S, SpaceRunner
from space.streams import STREAMS

SPACE = "home"
DEADLINE = 10.0
ECHO = "def main(args):\n    return {'ok': True, 'args': args}\n"


eventually = functools.partial(waiting.eventually, timeout=DEADLINE, every=0.02)
"""The suite's one condition wait (tests/waiting.py), with a device's longer deadline."""


class Space:
    """The space server on one SQLite file (or a PostgreSQL DSN, with `token_file` shared
    by every server on it), restartable on the same port, with an admin client."""

    def __init__(
        self, db: Path | str, clock: FakeClock | None = None, token_file: Path | None = None
    ) -> None:
        self.db, self.clock = db, clock
        self.token_file = token_file or default_admin_token_file(db)
        self.lease_seconds = 15.0
        self.runner: web.AppRunner | None = None
        self.port = 0
        self.admin: SpaceClient | None = None
        self.general = ""
        self.made = 0  # records made by `trigger`
        self.header_timeout = HEADER_TIMEOUT_S

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def app(self) -> web.Application:
        assert self.runner is not None
        return self.runner.app

    async def start(self) -> None:
        server_clock = self.clock.wall if self.clock is not None else system_clock
        token_file, lease = self.token_file, self.lease_seconds
        app = create_app(
            self.db, clock=server_clock, admin_token_file=token_file, lease_seconds=lease
        )
        SERVING.extend([app[DB_THREAD]] if DB_THREAD in app else [])  # none on PostgreSQL
        self.runner = SpaceRunner(app, handle_signals=False, header_timeout=self.header_timeout)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()
        self.port = self.runner.addresses[0][1]
        if self.admin is None:
            self.admin = SpaceClient(self.url, self.token_file.read_text().strip())
            try:
                self.general = (await self.admin.space_create({"id": SPACE})).generalChat
            except ApiError as exc:  # on PostgreSQL, created through another server
                assert exc.status == 409, exc
                self.general = (await self.admin.space_get(SPACE)).generalChat

    async def stop(self) -> None:
        if self.runner is not None:
            if DB_THREAD in self.runner.app:
                SERVING.remove(self.runner.app[DB_THREAD])
            await self.runner.cleanup()
            self.runner = None

    async def restart(self) -> None:
        """Stop the server and start it again on the same file and port."""
        await self.stop()
        await self.start()

    def cut_streams(self) -> None:
        """Abort every open SSE stream of the server (chat streams and the change feed)."""
        self.app[STREAMS].close_all("cut")

    async def close(self) -> None:
        await self.stop()
        if self.admin is not None:
            await self.admin.close()

    # -- admin calls the tests use

    @property
    def api(self) -> SpaceClient:
        assert self.admin is not None
        return self.admin

    async def device_token(self, peer: str, space: str = SPACE) -> str:
        return (await self.api.token_device({"peer": peer, "space": space}))["token"]

    async def chat(self, name: str) -> str:
        return (await self.api.chat_create(SPACE, {"name": name}))["objectId"]

    async def send(self, chat: str, text: str, **fields: Any) -> Message:
        return await self.api.chat_send(SPACE, chat, {"text": text, **fields})

    async def publish(self, ref: str, source: str = ECHO) -> None:
        await self.api.program_put(SPACE, ref, {"source": source})

    async def trigger(self, **fields: Any) -> dict[str, Any]:
        """A record, named `t`, `t-2`, … unless `name` is given (names are unique)."""
        self.made += 1
        name = "t" if self.made == 1 else f"t-{self.made}"
        return await self.api.trigger_create(SPACE, {"name": name, **fields})

    async def event_trigger(self, chat: str, **fields: Any) -> dict[str, Any]:
        spec = {"dataset": "chat_messages", "objectId": chat}
        return await self.trigger(**{"kind": "event", "spec": spec, "program": "echo@v1", **fields})

    async def record(self, tid: str) -> dict[str, Any]:
        return await self.api.trigger_get(SPACE, tid)

    async def patch(self, tid: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.api.trigger_patch(SPACE, tid, body)

    async def runs(self, tid: str) -> list[dict[str, Any]]:
        return (await self.api.runs(SPACE, trigger=tid, limit=1000))["runs"]

    async def fires(self, tid: str) -> list[dict[str, Any]]:
        return (await self.api.fires(SPACE, trigger=tid, limit=1000))["fires"]

    async def messages(self, chat: str) -> list[Message]:
        return read_all(await self.api.chat_messages(SPACE, chat, limit=1000))

    async def until_runs(self, tid: str, count: int, **kw: Any) -> list[dict[str, Any]]:
        """Wait until `tid` has at least `count` run records; return them."""

        async def enough() -> list[dict[str, Any]] | None:
            runs = await self.runs(tid)
            return runs if len(runs) >= count else None

        return await eventually(enough, **kw)

    async def until_stamped(self, tid: str, status: str) -> dict[str, Any]:
        async def stamped() -> dict[str, Any] | None:
            record = await self.record(tid)
            return record if record.get("lastStatus") == status else None

        return await eventually(stamped)


SERVING: list[DbThread] = []  # the database threads of the spaces running in this test


QUIET_TURNS = 20  # loop turns with no database work in hand that count as quiet


async def parked(clock: FakeClock, count: int) -> None:
    """Wait until `count` sleeps are pending on `clock` and no space has had database work
    in hand for `QUIET_TURNS` turns of the loop, both at once: what may move fake time on.
    In fake time, time must not move while a request waits on a space's database thread
    (or its answer is on its way back)."""
    async with asyncio.timeout(DEADLINE):
        quiet = 0
        while quiet < QUIET_TURNS:
            await clock.wait_for_sleepers(count)
            busy = not all(thread.idle() for thread in SERVING)
            quiet = 0 if busy or clock.sleepers < count else quiet + 1
            await asyncio.sleep(0.001 if busy else 0)


PARKED = 6  # an idle holder's parts asleep on its clock: elector, its renewal task (it
# holds the lease), ticker, sleep watch, health pass, reconciler resync timer


async def pass_time(clock: FakeClock, seconds: int, dev: Running) -> None:
    """Fake time a second at a time, each step once `dev` has no run in flight and every
    part is back asleep. A run is a real process: fake seconds that passed while it ran
    (more of them on a busy machine) would have its trigger's next slots overlap it and be
    skipped."""
    busy = dev.device.firing.status
    for _ in range(seconds):
        await eventually(lambda: not any(n["running"] for n in busy().triggers.values()))
        clock.advance(1.0)
        await parked(clock, PARKED)


class Spaces:
    """The test's space servers: `default()` (real time) on first use, `new(clock)` for more."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.all: list[Space] = []
        self._default: Space | None = None

    async def new(self, clock: FakeClock | None = None) -> Space:
        space = Space(self.tmp_path / f"space-{len(self.all)}.db", clock)
        self.all.append(space)
        await space.start()
        return space

    async def on_postgres(self, dsn: str, lease_seconds: float = 15.0) -> Space:
        """One more server on the PostgreSQL database `dsn` (one admin token file for all)."""
        space = Space(dsn, token_file=self.tmp_path / "admin.token")
        space.lease_seconds = lease_seconds
        self.all.append(space)
        await space.start()
        return space

    async def default(self) -> Space:
        if self._default is None:
            self._default = await self.new()
        return self._default


class Running:
    """A device running as a task; `stop()` cancels it and waits for its clean stop."""

    def __init__(self, device: Device, task: asyncio.Task[None], space: Space) -> None:
        self.device, self.task, self.space = device, task, space

    @property
    def peer(self) -> str:
        return self.device.peer

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)

    async def active(self) -> None:
        """Wait until its first sync is done and this device holds the lease (as its bus
        announces: `may_fire()` reports the turn it sees)."""
        d = self.device
        async with asyncio.timeout(DEADLINE):
            await d.reconciler.ready.wait()
            while not d.elector.may_fire():
                await d.bus.next(RoleChanged, lambda e: e.active)

    def chat_state(self, chat: str) -> dict[str, Any] | None:
        found = next((c for c in self.device.subscriptions.status() if c.chat == chat), None)
        return msgspec.to_builtins(found)  # as `baton status` reads it

    async def live(self, chat: str, trigger: str | None = None) -> None:
        """Wait until the chat's stream is live here (with `trigger` armed on it, if given)."""

        def ready() -> bool:
            found = self.chat_state(chat)
            armed = found is not None and (trigger is None or trigger in found["triggers"])
            return armed and found["state"] == "live" and found["lastId"] is not None

        await eventually(ready)

    async def not_following(self, chat: str) -> None:
        await eventually(lambda: self.chat_state(chat) is None)

    async def settled(self) -> None:
        """Wait until every fire taken so far is recorded."""
        async with asyncio.timeout(DEADLINE):
            await self.device.firing.settled()


def runtime_tasks() -> list[asyncio.Task[Any]]:
    """Pending tasks running our runtime's code (not the space server's handlers)."""
    me = asyncio.current_task()
    left = []
    for task in asyncio.all_tasks():
        code = getattr(task.get_coro(), "cr_code", None)
        where = code.co_filename if code is not None else ""
        ours = any(f"/{p}/" in where for p in ("runtime", "programs", "core"))  # core: TaskSet
        ours = ours and "/space/" not in where
        if task is not me and not task.done() and ours:
            left.append(task)
    return left


@pytest.fixture
async def spaces(tmp_path: Path) -> AsyncIterator[Spaces]:
    held = Spaces(tmp_path)
    try:
        yield held
    finally:
        for space in held.all:
            await space.close()


@pytest.fixture
async def space(spaces: Spaces) -> Space:
    return await spaces.default()


MakeDevice = Callable[..., Awaitable[Running]]


@pytest.fixture
async def make_device(spaces: Spaces) -> AsyncIterator[MakeDevice]:
    """`await make_device(**overrides)`: a Device running as a task, stopped at teardown.

    Overrides: `space` (a `Space`; default the test's real-time one), `space_id` (default
    SPACE), `peer` (default `dev1`, `dev2`, …), `clock`, `responder` and any field of
    `DeviceSettings` (`executor_size`, `lease`, …).
    """
    running: list[Running] = []

    async def make(**overrides: Any) -> Running:
        space = overrides.pop("space", None) or await spaces.default()
        peer = overrides.pop("peer", f"dev{len(running) + 1}")
        space_id = overrides.pop("space_id", SPACE)
        token = overrides.pop("token", None) or await space.device_token(peer, space_id)
        parts = {k: overrides.pop(k) for k in ("clock", "responder") if k in overrides}
        options: dict[str, Any] = {"executor_size": 2, **overrides}
        settings = DeviceSettings(url=space.url, token=token, space=space_id, peer=peer, **options)
        device = Device(settings, **parts)
        task = asyncio.create_task(device.run(), name=f"device {peer} {secrets.token_hex(2)}")
        run = Running(device, task, space)
        running.append(run)
        return run

    try:
        yield make
    finally:
        for run in running:
            await run.stop()
        for run in running:
            assert run.task.done()
        left = await _settle_tasks()
        assert not left, f"tasks of the runtime left after the devices stopped: {left}"


async def _settle_tasks() -> list[asyncio.Task[Any]]:
    for _ in range(20):
        left = runtime_tasks()
        if not left:
            return []
        await asyncio.sleep(0)
    return runtime_tasks()
