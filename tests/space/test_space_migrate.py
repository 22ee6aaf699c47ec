"""`baton space migrate`: a space built through the HTTP API on SQLite, copied into a fresh
PostgreSQL database, then served from there by `create_app(dsn)`: the same records, revs,
seqs, runs, tokens and history; the refusals (a target with rows, two histories of one
space under --merge, a bad URL or file) change nothing."""

from __future__ import annotations

import asyncio
import contextlib
import io
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
from aiohttp import web
from space_support import Api, snapshot
from test_change_stream import next_event
from waiting import eventually

from core.vocab import iso
from runtime.cli.main import main
from space.app import create_app
from space.db import open_db
from space.migrate import TABLES
from space.store.sqlite import ensure_schemas

S = "/spaces/home"
SOURCE = "def main(args):\n    return {'ok': True}\n"


async def start(aiohttp_client: Any, db: str | Path, token_file: Path) -> Api:
    app: web.Application = create_app(
        db, admin_token_file=token_file, lease_seconds=300, live_seconds=300
    )
    client = await aiohttp_client(app)
    return Api(client, token_file.read_text().strip(), Path(str(db)))


async def build(api: Api, space: str = "home") -> dict[str, Any]:
    """Every kind of row, through the API: what the test reads back after the copy."""
    s = f"/spaces/{space}"
    assert (await api.post("/spaces", {"id": space, "name": space.title()}))[0] == 201
    box = api.as_(await api.device_token("box", space))
    made = {}
    for name in ("tick", "other"):
        body = {"name": name, "kind": "cron", "spec": {"expr": "*/5 * * * *"}, "program": "p@v1"}
        status, made[name] = await api.post(f"{s}/triggers", body)
        assert status == 201, made[name]
    status, renamed = await api.patch(f"{s}/triggers/{made['tick']['id']}", {"name": "tock"})
    assert status == 200 and renamed["rev"] == 2, renamed
    at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)  # after history began
    slot = iso(at)
    once = {"name": "once", "kind": "once", "spec": {"at": slot}, "program": "p@v1"}
    status, made["once"] = await api.post(f"{s}/triggers", once)
    assert status == 201, made["once"]
    assert (await api.put(f"{s}/programs/p@v1", {"source": SOURCE}))[0] == 201
    assert (await box.put(f"{s}/devices/box", {"name": "Box", "priority": 10}))[0] == 200
    status, lease = await box.post(f"{s}/election/claim", {"peer": "box", "term": 0})
    assert status == 200 and lease["active"] == "box", lease
    await eventually(lambda: datetime.now(UTC) > at + timedelta(seconds=0.1), what="the slot")
    fire = {"triggerId": made["once"]["id"], "key": slot, "term": lease["term"], "peer": "box"}
    status, claimed = await box.post(f"{s}/fires", fire)
    assert status == 201, claimed
    run = {"runId": "r1", "triggerId": made["once"]["id"], "peer": "box", "key": slot}
    run |= {"startedAt": slot, "finishedAt": slot, "status": "ok", "term": lease["term"]}
    run |= {"stamps": {"lastStatus": "ok", "lastRunAt": slot}}
    status, ran = await box.post(f"{s}/runs", run)
    assert status == 201, ran
    tid = made["once"]["id"]
    assert (await api.put(f"{s}/state/{tid}/seen", {"value": {"n": 3}}))[0] == 200
    status, chat = await api.post(f"{s}/chats", {"name": "feed"})
    assert status == 201, chat
    for text in ("one", "two", "three"):
        status, sent = await api.post(f"{s}/chats/{chat['objectId']}/messages", {"text": text})
        assert status == 201, sent
    return {"box": box.token, "chat": chat["objectId"], "slot": slot, "ids": made}


async def reads(api: Api, facts: dict[str, Any], space: str = "home") -> dict[str, Any]:
    """What the space answers, with what a second's passing changes left out."""
    s, tid = f"/spaces/{space}", facts["ids"]["once"]["id"]
    paths = ["/triggers", "/changes", f"/chats/{facts['chat']}/messages", "/runs"]
    paths += ["/runs/rollup", "/programs", "/fires", f"/state/{tid}/seen", "/chats"]
    got = {}
    for path in paths:
        status, got[path] = await api.get(s + path)
        assert status == 200, (path, got[path])
    status, why = await api.get(f"{s}/triggers/{tid}/why?at={facts['slot']}")
    assert status == 200, why
    got["why"] = {k: why[k] for k in ("verdict", "reason")}
    status, lease = await api.get(f"{s}/election")
    got["lease"] = (status, lease["active"], lease["term"])
    status, devices = await api.get(f"{s}/devices")
    got["devices"] = [(d["peer"], d["name"], d["priority"]) for d in devices["devices"]]
    status, tokens = await api.get("/tokens")
    got["tokens"] = tokens
    return got


def baton(*argv: str) -> tuple[int, str]:
    """`baton space migrate …` as the shell runs it (its own event loop): status, stderr."""
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main(["space", "migrate", *argv])
    return code, err.getvalue() + out.getvalue()


async def migrate(*argv: str) -> tuple[int, str]:
    return await asyncio.to_thread(baton, *argv)


async def test_a_migrated_space_serves_the_same_answers_from_postgresql(
    aiohttp_client: Any, tmp_path: Path, pg_dsn: str
) -> None:
    token_file = tmp_path / "admin.token"
    lite = await start(aiohttp_client, tmp_path / "space.db", token_file)
    facts = await build(lite)
    before = await reads(lite, facts)
    await lite.client.close()
    written = snapshot(tmp_path / "space.db")
    code, said = await migrate("--from", str(tmp_path / "space.db"), "--to", pg_dsn)
    assert code == 0 and "1 spaces" in said, said
    assert snapshot(tmp_path / "space.db") == written  # the file was only read
    pg = await start(aiohttp_client, pg_dsn, token_file)  # the file's admin token still serves
    after = await reads(pg, facts)
    for part in before:
        assert after[part] == before[part], part
    assert before["why"] == {"verdict": "fired", "reason": "fired"}  # its claim and its run
    assert before["lease"] == (200, "box", 1) and len(before["/fires"]["fires"]) == 1
    changes = before["/changes"]["changes"]
    assert [c["seq"] for c in changes] == list(range(1, len(changes) + 1))
    # a device token from before still authenticates as its device
    box = pg.as_(facts["box"])
    assert (await box.put(f"{S}/devices/box", {"name": "Box", "priority": 10}))[0] == 200
    # the renamed record's new name is taken, its old one free
    cron = {"kind": "cron", "spec": {"expr": "*/5 * * * *"}, "program": "p@v1"}
    status, taken = await pg.post(f"{S}/triggers", {**cron, "name": "tock"})
    assert (status, taken["error"]) == (409, "name_taken")
    # the change feed resumes at its last seq and goes on from there, seq by seq
    last = changes[-1]["seq"]
    headers = {"Authorization": f"Bearer {pg.token}", "Last-Event-ID": str(last)}
    resp = await pg.client.get(f"/v1{S}/changes/stream", headers=headers)
    try:
        assert (await next_event(resp))["data"] == {"cursor": last}
        status, new = await pg.post(f"{S}/triggers", {**cron, "name": "tick"})
        assert status == 201, new
        change = await next_event(resp)
        assert (change["id"], change["data"]["record"]["id"]) == (str(last + 1), new["id"])
    finally:
        resp.close()
    # the chat goes on from its last seq
    status, sent = await pg.post(f"{S}/chats/{facts['chat']}/messages", {"text": "four"})
    assert status == 201 and sent["seq"] == 4, sent
    # runs go on (the identity sequence was set past the copied rows)
    run = {"runId": "r2", "triggerId": facts["ids"]["other"]["id"], "peer": "box"}
    run |= {"key": "k2", "startedAt": facts["slot"], "status": "ok"}
    assert (await pg.post(f"{S}/runs", run))[0] == 201
    _, runs = await pg.get(f"{S}/runs")
    assert sorted(r["runId"] for r in runs["runs"]) == ["r1", "r2"]


async def test_a_target_with_rows_is_refused_and_merge_adds_other_spaces(
    aiohttp_client: Any, tmp_path: Path, pg_dsn: str
) -> None:
    token_file = tmp_path / "admin.token"
    first, second = tmp_path / "a" / "space.db", tmp_path / "b" / "space.db"
    lite = await start(aiohttp_client, first, token_file)
    facts = await build(lite)
    await lite.client.close()
    other = await start(aiohttp_client, second, tmp_path / "b" / "admin.token")
    work = await build(other, "work")
    work_reads = await reads(other, work, "work")
    await other.client.close()
    assert (await migrate("--from", str(first), "--to", pg_dsn))[0] == 0
    conn = await asyncpg.connect(pg_dsn)
    try:
        rows = await conn.fetchval("SELECT count(*) FROM changes")
        code, said = await migrate("--from", str(second), "--to", pg_dsn)
        assert code == 2 and "table spaces has rows" in said and "--merge" in said, said
        code, said = await migrate("--from", str(first), "--to", pg_dsn, "--merge")
        assert code == 2 and "space 'home' has changes or messages in both" in said, said
        assert await conn.fetchval("SELECT count(*) FROM changes") == rows  # nothing written
        code, said = await migrate("--from", str(second), "--to", pg_dsn, "--merge")
        assert code == 0, said
        feeds = dict(await conn.fetch("SELECT space, seq FROM feeds"))
    finally:
        await conn.close()
    pg = await start(aiohttp_client, pg_dsn, token_file)
    _, listed = await pg.get("/spaces")
    assert sorted(s["id"] for s in listed["spaces"]) == ["home", "work"]
    got = await reads(pg, work, "work")
    for part in ("/triggers", "/changes", f"/chats/{work['chat']}/messages", "/runs", "why"):
        assert got[part] == work_reads[part], part
    home_seqs = [c["seq"] for c in (await pg.get(f"{S}/changes"))[1]["changes"]]
    work_seqs = [c["seq"] for c in got["/changes"]["changes"]]
    assert feeds == {"home": home_seqs[-1], "work": work_seqs[-1]}
    work_box = pg.as_(work["box"])  # the merged file's device token authenticates there
    assert (await work_box.put("/spaces/work/devices/box", {"name": "Box"}))[0] == 200
    assert (await work_box.get(f"{S}/devices"))[0] == 403  # and only there
    assert (await pg.as_(facts["box"]).get(f"{S}/devices"))[0] == 200
    run = {"runId": "r9", "triggerId": work["ids"]["other"]["id"], "peer": "box"}
    run |= {"key": "k9", "startedAt": work["slot"], "status": "ok"}
    assert (await pg.post("/spaces/work/runs", run))[0] == 201  # past both files' run seqs


async def test_bad_arguments_exit_2_naming_the_flag(tmp_path: Path, pg_dsn: str) -> None:
    code, said = await migrate("--from", str(tmp_path / "none.db"), "--to", pg_dsn)
    assert code == 2 and said.startswith("baton: --from: ") and "no such file" in said, said
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 100)
    code, said = await migrate("--from", str(junk), "--to", pg_dsn)
    assert code == 2 and said.startswith("baton: --from: "), said
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    code, said = await migrate("--from", str(empty), "--to", pg_dsn)
    assert code == 2 and "has no table spaces" in said, said
    code, said = await migrate("--from", str(junk), "--to", "mysql://x")
    assert code == 2 and said.startswith("baton: --to: 'mysql://x' is not a postgresql"), said
    code, said = await migrate("--from", str(junk), "--to", "postgresql://127.0.0.1:1/none")
    assert code == 2 and said.startswith("baton: --from: "), said  # the file is read first


async def test_an_odd_row_refuses_the_copy_and_nothing_is_written(
    aiohttp_client: Any, tmp_path: Path, pg_dsn: str
) -> None:
    db = tmp_path / "space.db"
    lite = await start(aiohttp_client, db, tmp_path / "admin.token")
    await build(lite)
    await lite.client.close()
    code, said = await migrate("--from", str(db), "--to", "postgresql://127.0.0.1:1/none")
    assert code == 2 and said.startswith("baton: --to: cannot connect"), said
    conn = sqlite3.connect(db)
    conn.execute("UPDATE devices SET stopped = 'yes'")  # written past the API
    conn.commit()
    conn.close()
    code, said = await migrate("--from", str(db), "--to", pg_dsn)
    assert code == 2 and "table devices, row 1" in said and "'yes' is not 0 or 1" in said, said
    pg = await asyncpg.connect(pg_dsn)
    try:
        assert await pg.fetchval("SELECT count(*) FROM spaces") == 0  # the copy was one transaction
        assert await pg.fetchval("SELECT count(*) FROM tokens") == 0
    finally:
        await pg.close()


async def test_every_table_and_column_of_both_schemas_is_mapped(
    tmp_path: Path, pg_dsn: str
) -> None:
    db = open_db(tmp_path / "space.db")
    ensure_schemas(db, 0.0)
    lite = {
        t: {c[1] for c in db.execute(f"PRAGMA table_info({t})").fetchall()}
        for t in db.table_names()
        if t != "sqlite_sequence"
    }
    db.conn.close()
    conn = await asyncpg.connect(pg_dsn)
    try:
        rows = await conn.fetch(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'public'"
        )
    finally:
        await conn.close()
    pg: dict[str, set[str]] = {}
    for row in rows:
        pg.setdefault(row[0], set()).add(row[1])
    mapped = {t.name: {c for c, _ in t.columns} for t in TABLES}
    set_after = {"baton_schema", "feeds", "history_meta"}  # counters and the schema's own
    assert set(pg) - set_after == set(mapped)
    for name, cols in mapped.items():
        assert cols == pg[name], name
        identity = {t.identity for t in TABLES if t.name == name and t.rowid}
        derived = {"name"} if name == "triggers" else set()
        assert cols - identity - derived == lite[name], name
    assert set(lite) == set(mapped) | {"history_meta"}
