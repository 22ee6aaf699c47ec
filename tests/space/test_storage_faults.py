"""Storage faults: a full or read-only database answers 503 `storage_unavailable`, never 500.

The faults are SQLite's own, made on the server's real connection: `max_page_count` at
the file's size is a full disk (SQLITE_FULL), `query_only` a read-only database
(SQLITE_READONLY). `/healthz` and `/metrics` say so until a write commits again.
"""

from __future__ import annotations

import sqlite3

import sqlite_utils
from aiohttp import web
from space_support import CRON, SPACE, Api, on_db

S = f"/spaces/{SPACE}"
BIG = "x" * 3000  # a message that needs a new page


def app_of(api: Api) -> web.Application:
    app = api.client.server.app
    assert app is not None
    return app


async def fill_disk(api: Api) -> None:
    def fill(db: sqlite_utils.Database) -> None:
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        db.execute(f"PRAGMA max_page_count = {pages}")

    await on_db(api, fill)


async def general_chat(api: Api) -> str:
    status, body = await api.get(f"/spaces/{SPACE}")
    assert status == 200, body
    return body["generalChat"]


async def healthz(api: Api) -> tuple[int, dict, str | None]:
    async with api.client.get("/healthz") as resp:
        return resp.status, await resp.json(), resp.headers.get("Retry-After")


async def metrics_text(api: Api) -> str:
    headers = {"Authorization": f"Bearer {api.token}"}
    async with api.client.get("/metrics", headers=headers) as resp:
        assert resp.status == 200
        return await resp.text()


async def test_a_full_disk_is_503_with_retry_after_and_healthz_says_so(api: Api) -> None:
    chat = await general_chat(api)
    await fill_disk(api)
    for _ in range(3):  # the first messages may still fit in the last page
        async with api.client.post(
            f"/v1{S}/chats/{chat}/messages",
            json={"text": BIG},
            headers={"Authorization": f"Bearer {api.token}"},
        ) as resp:
            status, body, retry = resp.status, await resp.json(), resp.headers.get("Retry-After")
    assert status == 503, body
    assert body["error"] == "storage_unavailable" and "disk_full" in body["detail"]
    assert retry is not None and int(retry) > 0
    status, health, retry = await healthz(api)
    assert status == 503 and health["status"] == "storage_unavailable", health
    assert health["storage"] == "disk_full" and health["since"].endswith("Z") and retry
    text = await metrics_text(api)
    assert "baton_storage_up 0" in text
    assert 'baton_storage_faults_total{fault="disk_full"}' in text


async def test_a_read_only_database_is_503_and_a_commit_clears_it(api: Api) -> None:
    await on_db(api, lambda db: db.execute("PRAGMA query_only = ON"))
    status, body = await api.post(f"{S}/triggers", CRON)
    assert status == 503 and body["error"] == "storage_unavailable", body
    assert body["fault"] == "read_only"
    status, again = await api.put(f"{S}/devices/laptop", {"priority": 0, "name": "laptop"})
    assert status == 503 and again["error"] == "storage_unavailable", again
    assert (await healthz(api))[1]["storage"] == "read_only"
    status, listing = await api.get(f"{S}/triggers")  # reads still answer
    assert status == 200 and listing["triggers"] == []
    await on_db(api, lambda db: db.execute("PRAGMA query_only = OFF"))
    await api.create_trigger()
    assert await healthz(api) == (200, {"status": "ok"}, None)
    assert "baton_storage_up 1" in await metrics_text(api)


async def test_a_failed_commit_leaves_no_transaction_open(api: Api) -> None:
    """The next request after a storage fault starts a transaction of its own."""
    await on_db(api, lambda db: db.execute("PRAGMA query_only = ON"))
    assert (await api.post(f"{S}/triggers", CRON))[0] == 503
    assert not await on_db(api, lambda db: db.conn.in_transaction)
    await on_db(api, lambda db: db.execute("PRAGMA query_only = OFF"))
    await api.create_trigger()


def test_a_bug_is_not_a_storage_fault() -> None:
    from space.storage import fault_of

    assert fault_of(sqlite3.OperationalError("no such table: nope")) is None
    assert fault_of(ValueError("x")) is None
    full = sqlite3.connect(":memory:")
    full.execute("CREATE TABLE t (x)")
    full.execute("PRAGMA query_only = ON")
    try:
        full.execute("INSERT INTO t VALUES (1)")
    except sqlite3.Error as exc:
        assert fault_of(exc) == "read_only"
    else:
        raise AssertionError("query_only let a write through")
