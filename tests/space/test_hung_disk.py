"""The database really hangs while the server goes on: another process holds the SQLite
file's write lock, or the file system under it is frozen (`fsfreeze` on a loop-mounted
ext4 image; root only, else skipped with the reason).

While the write is stuck: `/healthz` answers 503 `stalled` within a second, an open SSE
stream still gets its pings, a request queued behind the stall past `WAIT_S` is 503 with
`Retry-After` and does nothing. After it: the stuck write and the queued reads complete,
nothing is lost, and the lease held through the stall is kept (`on_stall` credits it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from space_support import SPACE, Api, on_db

from space import dbthread
from space.app import create_app, default_admin_token_file
from space.chats import CHAT_SETTINGS, ChatSettings

E = f"/spaces/{SPACE}/election"
Hang = Callable[[Path], contextlib.AbstractAsyncContextManager[None]]
HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()  # until the test closes it
conn.execute("ROLLBACK")
"""


@contextlib.asynccontextmanager
async def write_locked(db: Path) -> AsyncIterator[None]:
    """Another process holds the file's write lock: the space's BEGIN waits (busy_timeout)."""
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", HOLDER, str(db), stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert holder.stdout is not None and holder.stdin is not None
    try:
        assert await asyncio.wait_for(holder.stdout.readline(), 10) == b"locked\n"
        yield
    finally:
        holder.stdin.close()
        await asyncio.wait_for(holder.wait(), 10)


def frozen_mount(tmp: Path) -> Path:
    """A loop-mounted ext4 image under `tmp`, or skip saying why there can be none."""
    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("fsfreeze", "mkfs.ext4")):
        pytest.skip("fsfreeze needs root, fsfreeze and mkfs.ext4 (util-linux, e2fsprogs)")
    image, mnt = tmp / "disk.img", tmp / "mnt"
    mnt.mkdir()
    with image.open("wb") as f:
        f.truncate(32 * 1024 * 1024)
    made = subprocess.run(["mkfs.ext4", "-q", str(image)], capture_output=True, timeout=60)
    mounted = made.returncode == 0 and (
        subprocess.run(
            ["mount", "-o", "loop", str(image), str(mnt)], capture_output=True, timeout=60
        ).returncode
        == 0
    )
    if not mounted:
        pytest.skip("no loop device can be mounted here (a container without /dev/loop*)")
    return mnt


@contextlib.asynccontextmanager
async def frozen(db: Path) -> AsyncIterator[None]:
    """The file system holding `db` is frozen: every write to it blocks until the thaw.
    A watchdog thaws it anyway after 60 s, should this test die frozen."""
    mnt = str(db.parent)
    watchdog = subprocess.Popen(["sh", "-c", f"sleep 60; fsfreeze -u {mnt}"])
    subprocess.run(["fsfreeze", "-f", mnt], check=True, timeout=30)
    try:
        yield
    finally:
        subprocess.run(["fsfreeze", "-u", mnt], check=False, timeout=30)
        watchdog.kill()
        watchdog.wait()


async def healthz(api: Api) -> tuple[int, dict[str, Any], str | None, float]:
    began = time.monotonic()
    async with api.client.get("/healthz") as resp:
        body = await resp.json()
        return resp.status, body, resp.headers.get("Retry-After"), time.monotonic() - began


async def until(check: Callable[[], Awaitable[bool]], deadline: float, what: str) -> None:
    end = time.monotonic() + deadline
    while not await check():
        assert time.monotonic() < end, f"not within {deadline} s: {what}"
        await asyncio.sleep(0.05)


async def served(tmp: Path, aiohttp_client: Any, db: Path) -> Api:
    app = create_app(db, lease_seconds=2.0, prune_every_seconds=0)
    app[CHAT_SETTINGS] = ChatSettings(heartbeat=0.3)
    client = await aiohttp_client(app)
    api = Api(client, default_admin_token_file(db).read_text().strip(), db)
    assert (await api.post("/spaces", {"id": SPACE, "name": "Home"}))[0] == 201
    # a locked file is waited on for 30 s, not the 5 s of the server: a slow machine's
    # stall must not end in SQLITE_BUSY before the test has seen what it looks for
    await on_db(api, lambda db: db.execute("PRAGMA busy_timeout = 30000"))
    return api


async def pings(api: Api, chat: str, seen: list[float]) -> None:
    """Follow the chat's stream, noting when each ping comes."""
    headers = {"Authorization": f"Bearer {api.token}"}
    async with api.client.get(f"/v1/spaces/{SPACE}/chats/{chat}/stream", headers=headers) as resp:
        assert resp.status == 200
        async for line in resp.content:
            if line.startswith(b": ping"):
                seen.append(time.monotonic())


async def stall_scenario(api: Api, hang: Hang) -> None:
    chat = (await api.get(f"/spaces/{SPACE}"))[1]["generalChat"]
    seen: list[float] = []
    stream = asyncio.create_task(pings(api, chat, seen))
    await until(lambda: asyncio.sleep(0, bool(seen)), 10, "a first ping")
    status, lease = await api.post(f"{E}/claim", {"peer": "laptop", "term": 0})
    assert status == 200 and lease["active"] == "laptop", lease  # lapses 2 s from now
    claimed = time.monotonic()
    async with hang(api.db_path):
        write = asyncio.create_task(api.put(f"/spaces/{SPACE}/devices/phone", {"name": "Phone"}))

        async def stalled() -> bool:  # the first answers may wait for the unit to stall
            status, body, retry, took = await healthz(api)
            assert took < dbthread.STALL_S + 1.0, f"/healthz took {took:.2f} s"
            return status == 503 and body.get("storage") == "stalled" and retry is not None

        await until(stalled, 10, "/healthz says the store stalled")
        status, body, retry, took = await healthz(api)
        assert status == 503 and body["status"] == "storage_unavailable", body
        assert body["stalledFor"] > dbthread.STALL_S and took < 1.0 and retry, body
        pinged = len(seen)
        await until(lambda: asyncio.sleep(0, len(seen) > pinged), 5, "a ping during the stall")
        assert not write.done()  # still stuck on the disk
        late = asyncio.create_task(api.post(f"{E}/claim", {"peer": "phone", "term": 1}))
        lease_read = asyncio.create_task(api.get(E))

        async def lapsed() -> bool:  # by the clock: only the stall's credit keeps it
            return time.monotonic() - claimed > 2.5

        await until(lapsed, 10, "the lease's end, during the stall")
    held = time.monotonic() - claimed
    status, device = await write
    assert status == 200 and device["peer"] == "phone", device  # the stuck write: not lost
    status, body = await late  # it ran after the stall's credit: the lease is still laptop's
    assert status == 409 and body["active"] == "laptop", (held, body)
    status, lease = await lease_read
    assert status == 200 and lease["active"] == "laptop", lease
    status, lease = await api.post(f"{E}/claim", {"peer": "laptop", "term": 1})
    assert status == 200 and lease["term"] == 1, lease  # the holder renews at its term
    status, body, _, _ = await healthz(api)
    assert status == 200 and body == {"status": "ok"}, body
    stream.cancel()
    await asyncio.gather(stream, return_exceptions=True)


async def test_a_write_locked_by_another_process_stalls_no_answer_but_its_own(
    tmp_path: Path, aiohttp_client: Any
) -> None:
    api = await served(tmp_path, aiohttp_client, tmp_path / "space.db")
    await stall_scenario(api, write_locked)


async def test_a_frozen_file_system_stalls_no_answer_but_its_own(
    tmp_path: Path, aiohttp_client: Any
) -> None:
    mnt = frozen_mount(tmp_path)
    try:
        api = await served(tmp_path, aiohttp_client, mnt / "space.db")
        try:
            await stall_scenario(api, frozen)
        finally:
            await api.client.close()  # the server and its database: the mount is free
    finally:
        if subprocess.run(["umount", str(mnt)], check=False, timeout=60).returncode:
            subprocess.run(["umount", "-l", str(mnt)], check=False, timeout=60)


async def test_work_queued_behind_a_stall_past_the_bound_is_503_and_does_nothing(
    tmp_path: Path, aiohttp_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dbthread, "WAIT_S", 0.5)
    api = await served(tmp_path, aiohttp_client, tmp_path / "space.db")
    async with write_locked(api.db_path):
        stuck = asyncio.create_task(api.put(f"/spaces/{SPACE}/devices/phone", {"name": "Phone"}))
        await until(lambda: asyncio.sleep(0, in_hand(api) > 0.2), 10, "the write stuck on the lock")
        began = time.monotonic()
        async with api.client.put(
            f"/v1/spaces/{SPACE}/state/trg_x/cursor",
            json={"value": 1},
            headers={"Authorization": f"Bearer {api.token}"},
        ) as resp:
            status, body = resp.status, await resp.json()
            retry, took = resp.headers.get("Retry-After"), time.monotonic() - began
        assert status == 503 and body["error"] == "storage_unavailable", body
        assert body["fault"] == "stalled" and retry is not None and took < 2.0, (took, body)
    assert (await stuck)[0] == 200
    status, body = await api.get(f"/spaces/{SPACE}/state/trg_x/cursor")
    assert status == 404, body  # the refused write never ran
    text = await metrics(api)
    assert 'baton_storage_faults_total{fault="stalled"}' in text


def in_hand(api: Api) -> float:
    """How long the server's database thread has had its unit in hand (0: none)."""
    app = api.client.server.app
    assert app is not None
    thread = app[dbthread.DB_THREAD]
    began = thread.began
    return 0.0 if began is None else thread.ticks.monotonic() - began


async def metrics(api: Api) -> str:
    headers = {"Authorization": f"Bearer {api.token}"}
    async with api.client.get("/metrics", headers=headers) as resp:
        assert resp.status == 200
        return await resp.text()
