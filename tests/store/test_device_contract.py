"""Devices on both stores of the seam: heartbeats, `live` by the store's clock, sign-off,
the devices list, and the history a heartbeat writes (its window, the feed position it
applied, its clock's offset), through two servers on one database (`other_store`)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from waiting import eventually

from core.peerwire import HeartbeatIn
from space import devices
from space.history import Author
from space.store import Store
from space.store.postgres import PostgresStore
from space.store.sqlite import SqliteStore

SPACE = "home"
WINDOW = 15.0


def _view(row: dict[str, Any], now: Any, window: float = WINDOW) -> dict[str, Any]:
    return devices.view(row, now, timedelta(seconds=window))


async def _history(store: Store, sql: str) -> list[tuple[Any, ...]]:
    """Rows of a history table as either store keeps them (booleans as `bool`)."""
    if isinstance(store, PostgresStore):
        rows = [tuple(r) for r in await store.pool.fetch(sql)]
    else:
        assert isinstance(store, SqliteStore)
        found = await store.thread.call(lambda db: db.execute(sql).fetchall())
        rows = [tuple(r) for r in found]
    cols = _cols(sql)
    return [
        tuple(bool(v) if k == "stopped" else v for k, v in zip(cols, r, strict=True)) for r in rows
    ]


def _cols(sql: str) -> list[str]:
    return [c.strip() for c in sql.split("SELECT", 1)[1].split("FROM", 1)[0].split(",")]


async def test_a_device_stays_up_since_its_first_beat_through_either_server(
    store: Store, other_store: Store
) -> None:
    first, now = await store.heartbeat(SPACE, "box", HeartbeatIn(instance="i1"), WINDOW)
    shown = _view(first, now)
    assert shown["live"] and shown["upSince"] == shown["lastSeen"] and shown["name"] == "box"
    beat = HeartbeatIn(name="Box", priority=3, status={"ready": True})
    second, now = await other_store.heartbeat(SPACE, "box", beat, WINDOW)
    shown = _view(second, now)
    assert second["live_since"] == first["live_since"] < second["last_seen"]
    assert (shown["name"], shown["priority"], shown["status"]) == ("Box", 3, {"ready": True})
    kept, now = await store.heartbeat(SPACE, "box", HeartbeatIn(), WINDOW)  # a bare beat
    assert _view(kept, now)["name"] == "Box" and _view(kept, now)["status"] == {"ready": True}
    restarted, now = await other_store.heartbeat(SPACE, "box", HeartbeatIn(instance="i2"), WINDOW)
    shown = _view(restarted, now)
    assert restarted["live_since"] == restarted["last_seen"] > first["live_since"]
    assert await store.last_seen(SPACE, "box", WINDOW) == (True, shown["lastSeen"])
    assert await store.last_seen(SPACE, "cart", WINDOW) == (False, None)


async def test_a_signed_off_device_is_not_live_at_once_and_its_next_beat_starts_anew(
    store: Store, other_store: Store
) -> None:
    await store.heartbeat(SPACE, "box", HeartbeatIn(), WINDOW)
    gone, now = await other_store.heartbeat(SPACE, "box", HeartbeatIn(stopped=True), WINDOW)
    shown = _view(gone, now)
    assert not shown["live"] and shown["stopped"]
    assert await store.last_seen(SPACE, "box", WINDOW) == (False, shown["lastSeen"])
    back, now = await store.heartbeat(SPACE, "box", HeartbeatIn(), WINDOW)
    again = _view(back, now)
    assert again["live"] and not again["stopped"] and again["upSince"] == again["lastSeen"]


async def test_a_device_silent_past_the_window_is_not_live_by_the_stores_clock(
    store: Store, other_store: Store
) -> None:
    window = 0.3
    beat, _ = await store.heartbeat(SPACE, "box", HeartbeatIn(), window)

    async def lapsed() -> bool:
        live, _ = await other_store.last_seen(SPACE, "box", window)
        return not live

    await eventually(lapsed, what="the device's window lapsing by the store's clock")
    listed, now = await other_store.devices(SPACE)
    assert [_view(r, now, window)["live"] for r in listed] == [False]
    back, now = await other_store.heartbeat(SPACE, "box", HeartbeatIn(), window)
    assert back["live_since"] == back["last_seen"] > beat["live_since"]


async def test_the_devices_are_listed_by_peer_within_their_space(
    store: Store, other_store: Store
) -> None:
    for peer in ("cart", "box", "attic"):
        await (store, other_store)[len(peer) % 2].heartbeat(SPACE, peer, HeartbeatIn(), WINDOW)
    await store.heartbeat("elsewhere", "zed", HeartbeatIn(), WINDOW)
    listed, now = await other_store.devices(SPACE)
    assert [r["peer"] for r in listed] == ["attic", "box", "cart"]
    assert all(_view(r, now)["live"] for r in listed)
    assert (await store.devices("nowhere"))[0] == []


async def test_concurrent_first_beats_through_two_servers_open_one_window(
    store: Store, other_store: Store
) -> None:
    servers = (store, other_store)
    beats = [servers[n % 2].heartbeat(SPACE, "box", HeartbeatIn(), WINDOW) for n in range(20)]
    rows = [row for row, _ in await asyncio.gather(*beats)]
    windows = await _history(store, "SELECT began, last_seen FROM history_windows")
    assert len(windows) == 1 and {r["live_since"] for r in rows} == {windows[0][0]}
    assert windows[0][1] == max(r["last_seen"] for r in rows)


async def test_a_heartbeat_writes_its_window_the_feed_it_applied_and_its_clocks_offset(
    store: Store, other_store: Store
) -> None:
    b1, _ = await store.heartbeat(SPACE, "box", HeartbeatIn(sleptSeconds=5, offsetMs=10), WINDOW)
    body = {"name": "tick", "kind": "cron", "spec": {"expr": "0 8 * * *"}, "program": "p@v1"}
    await store.create_record(SPACE, body, Author("admin"))  # its revision is at seq 1
    b2, _ = await other_store.heartbeat(
        SPACE, "box", HeartbeatIn(appliedSeq=1, offsetMs=50), WINDOW
    )
    b3, _ = await store.heartbeat(SPACE, "box", HeartbeatIn(appliedSeq=1, offsetMs=200), WINDOW)
    b4, _ = await other_store.heartbeat(SPACE, "box", HeartbeatIn(stopped=True), WINDOW)
    b5, _ = await store.heartbeat(SPACE, "box", HeartbeatIn(appliedSeq=1), WINDOW)
    windows = await _history(
        other_store,
        "SELECT began, last_seen, stopped, slept, applied_seq FROM history_windows ORDER BY began",
    )
    t1, t5 = b1["last_seen"], b5["last_seen"]
    assert windows == [(t1, b4["last_seen"], True, 5.0, 1), (t5, t5, False, None, 1)]
    applied = await _history(store, "SELECT peer, at, seq FROM history_applied ORDER BY at")
    assert applied == [("box", b2["last_seen"], 1), ("box", t5, 1)]  # each window's first
    offsets = await _history(store, "SELECT at, offset_ms FROM history_offsets ORDER BY at")
    assert offsets == [(t1, 10.0), (b3["last_seen"], 200.0)]  # 50 moved too little
