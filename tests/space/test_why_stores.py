"""`why` names the same chain on either store: one history, built through the HTTP API on a
SQLite space and on a PostgreSQL one (both by the real clock), explained alike."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from space_support import SPACE, Api, serve
from waiting import eventually

from core.vocab import iso
from space.servertime import system_clock

S = f"/spaces/{SPACE}"
INSTANT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")
AMOUNT = re.compile(r"\d+(\.\d+)? (ms|s|min|h)\b")
TRIGGER = re.compile(r"(trg|msg|chat)_[0-9a-f]+")
PROGRAM = {"program": "tick@v1"}


async def history(api: Api) -> dict[str, Any]:
    """Four once triggers of `box` due in a moment: one not claimed yet (box beating, its
    clock 1.25 s ahead), one another device claims, one box claims and does not run yet,
    one a device paused with a note, and an event trigger of a chat with a message posted
    while box is up (no stream of it); then `why` of each (by key: the refused, the event)."""
    slot = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    key, made = iso(slot), {}
    for name in ("unclaimed", "refused", "claimed", "paused"):
        body = {"name": name, "kind": "once", "spec": {"at": key}, "owner": "box", **PROGRAM}
        status, got = await api.post(f"{S}/triggers", body)
        assert status == 201, got
        made[name] = got["id"]
    chat = (await api.post(f"{S}/chats", {"name": "feed"}))[1]["objectId"]
    body = {"name": "event", "kind": "event", "owner": "box", **PROGRAM}
    spec = {"dataset": "chat_messages", "objectId": chat}
    status, got = await api.post(f"{S}/triggers", {**body, "spec": spec})
    assert status == 201, got
    made["event"] = got["id"]
    box, laptop, phone = [api.as_(await api.device_token(p)) for p in ("box", "laptop", "phone")]
    beat = {"instance": "i1", "offsetMs": -1250.0}
    assert (await box.put(f"{S}/devices/box", beat))[0] == 200
    status, _ = await phone.patch(
        f"{S}/triggers/{made['paused']}", {"enabled": False}, headers={"Baton-Note": "away"}
    )
    assert status == 200
    await eventually(lambda: datetime.now(UTC) > slot + timedelta(seconds=0.2), what="the slot")
    assert (await box.put(f"{S}/devices/box", beat))[0] == 200
    fire = {"key": key, "term": 0}
    claim = {**fire, "triggerId": made["claimed"], "peer": "box"}
    assert (await box.post(f"{S}/fires", claim))[0] == 201
    claim = {**fire, "triggerId": made["refused"], "peer": "laptop"}
    status, refused = await laptop.post(f"{S}/fires", claim)
    assert (status, refused["error"]) == (409, "not_owner")
    sent = (await api.post(f"{S}/chats/{chat}/messages", {"text": "while up"}))[1]
    assert (await box.put(f"{S}/devices/box", beat))[0] == 200
    answers = {}
    for name, tid in made.items():
        query = {"key": key} if name == "refused" else {"at": key}
        query = {"key": sent["messageId"]} if name == "event" else query
        status, got = await api.get(f"{S}/triggers/{tid}/why?{urlencode(query)}")
        assert status == 200, got
        answers[name] = got
    return answers


def chain(got: Any) -> Any:
    """An explanation without what differs between two runs of one history: its instants,
    its amounts of time and the ids of its records, messages and chats."""
    if isinstance(got, dict):
        return {k: chain(v) for k, v in got.items()}
    if isinstance(got, list):
        return [chain(v) for v in got]
    if isinstance(got, str):
        return TRIGGER.sub("<id>", AMOUNT.sub("<amount>", INSTANT.sub("<instant>", got)))
    return got


async def test_why_names_the_same_chain_on_sqlite_and_on_postgresql(
    aiohttp_client: Any, tmp_path: Path, pg_dsn: str
) -> None:
    on_sqlite = await serve(aiohttp_client, tmp_path / "a" / "space.db", system_clock)
    on_postgres = await serve(aiohttp_client, tmp_path / "b" / "space.db", system_clock, pg_dsn)
    lite, pg = await history(on_sqlite), await history(on_postgres)
    assert {name: got["reason"] for name, got in lite.items()} == {
        "unclaimed": "claimed_not_run",  # pending: box is up, its claim may come yet
        "refused": "claimed_elsewhere",
        "claimed": "claimed_not_run",
        "paused": "paused",
        "event": "no_subscriber",  # box was up, but no stream of the chat was live
    }
    assert "by device:phone" in lite["paused"]["detail"] and '"away"' in lite["paused"]["detail"]
    assert "laptop's claim" in lite["refused"]["detail"]
    assert "box's clock was 1.2 s ahead" in str(lite["claimed"]["checks"])
    assert (
        lite["unclaimed"]["verdict"] == "pending"
        and "not claimed yet" in lite["unclaimed"]["detail"]
    )
    for name in lite:
        assert chain(pg[name]) == chain(lite[name]), name
