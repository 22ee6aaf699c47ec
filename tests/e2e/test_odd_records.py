# ruff: noqa: F811  (pytest fixtures imported from device_support are parameters here)
"""Odd records written past the API (straight into SQLite) beside canary triggers.

Each kind of record that once stopped a device (a `once` with a grace of 1e308 or an
`at` off the calendar, `args` beyond 64 bits or nested beyond the stack, a cron that
never matches) is armed by a real device beside a cron canary and a chat canary: the
canaries keep firing, before and after a restart of the device, the odd records are
stamped with why they cannot run, and none of them ever runs.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from device_support import (  # noqa: F401  (the fixtures are used by name)
    SPACE,
    MakeDevice,
    Space,
    Spaces,
    make_device,
    space,
    spaces,
)

COMMON = {
    "program": "echo@v1",
    "owner": "",
    "enabled": True,
    "name": "odd",
    "createdAt": "2026-01-01T00:00:00Z",
    "updatedAt": "2026-01-01T00:00:00Z",
}
ODD: dict[str, tuple[dict[str, Any], str]] = {
    # id: (the record's own fields, the stamp it must get)
    "trg_grace": (
        {"kind": "once", "spec": {"at": "2026-01-01T00:00:00Z", "graceSeconds": 1e308}},
        "invalid_spec",
    ),
    "trg_at_far": ({"kind": "once", "spec": {"at": 1e300}}, "invalid_spec"),
    "trg_at_edge": ({"kind": "once", "spec": {"at": "9999-12-31T23:59:59-14:00"}}, "invalid_spec"),
    "trg_bigarg": (
        {"kind": "cron", "spec": {"expr": "* * * * * *"}, "args": {"n": 2**70}},
        "invalid_record",
    ),
    "trg_never": ({"kind": "cron", "spec": {"expr": "0 0 30 2 *"}}, "invalid_spec"),
}
DEEP = '{"x":' + "[" * 5000 + "]" * 5000 + "}"


def insert_raw(space: Space) -> None:
    with sqlite3.connect(space.db) as conn:
        for tid, (fields, _) in ODD.items():
            body = json.dumps({"id": tid, "rev": 1, **COMMON, **fields})
            conn.execute("INSERT INTO triggers VALUES (?, ?, 1, ?)", [SPACE, tid, body])
        head = {
            "id": "trg_deep",
            "rev": 1,
            **COMMON,
            "kind": "cron",
            "spec": {"expr": "* * * * * *"},
        }
        deep = json.dumps(head)[:-1] + ',"args":' + DEEP + "}"
        conn.execute("INSERT INTO triggers VALUES (?, ?, 1, ?)", [SPACE, "trg_deep", deep])
    conn.close()


async def test_odd_records_are_stamped_and_the_canaries_keep_firing(
    space: Space, make_device: MakeDevice
) -> None:
    await space.publish("echo@v1")
    chat = await space.chat("inbox")
    insert_raw(space)
    cron = (await space.trigger(kind="cron", spec={"expr": "* * * * * *"}, program="echo@v1"))["id"]
    event = (await space.event_trigger(chat))["id"]

    for attempt in range(2):  # a restart must not bring any of it back
        dev = await make_device(health_interval=0.2)
        await dev.active()
        await dev.live(chat, event)
        done = len(await space.runs(cron))
        await space.until_runs(cron, done + 2)
        await space.send(chat, f"hello {attempt}")
        await space.until_runs(event, attempt + 1)
        for tid, (_, status) in ODD.items():
            stamped = await space.until_stamped(tid, status)
            assert stamped["lastStatusDetail"], tid
        deep = await space.record("trg_deep")  # not JSON to the server: listed, never stamped
        assert deep["undecodable"] is True and "raw" in deep
        assert not dev.task.done()
        assert dev.device.ticker.failed == {}  # refused at decode: nothing reached the ticker
        await dev.stop()

    for tid in (*ODD, "trg_deep"):
        assert await space.runs(tid) == [], tid
