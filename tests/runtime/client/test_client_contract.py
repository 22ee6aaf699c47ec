"""The async client against the real space server (`create_app`, SQLite in tmp_path).

Checks the route table against the server's own OpenAPI document both ways, then
the calls the daemon and CLI rely on: records CRUD with compare-and-set, status
stamps and the change feed (page and stream), chats (send, history, a stream that
resumes after a reconnect without loss or repeat, 404 for an unknown chat as a
permanent refusal) and state through a run token.
"""

import asyncio
import re
from pathlib import Path

import pytest
from aiohttp import web
from pages import read_all

from core.clock import FakeClock
from core.routes import PREFIX, ROUTES, ApiError
from runtime.client.api import SpaceClient
from runtime.client.stream import ConnectionState, Permanent
from space.app import create_app, default_admin_token_file

SPACE = "home"
CRON = {"name": "tick", "kind": "cron", "spec": {"expr": "*/5 * * * *"}, "program": "tick@v1"}
_PARAM = re.compile(r"\{[^}]+\}")


@pytest.fixture
async def space(tmp_path: Path, aiohttp_server):
    db = tmp_path / "space.db"
    server = await aiohttp_server(create_app(db))
    url = str(server.make_url("/"))
    async with SpaceClient(url, default_admin_token_file(db).read_text().strip()) as admin:
        created = await admin.space_create({"id": SPACE, "name": "Home"})
        yield admin, created


class Inbox:
    """What a subscription delivered, awaited under a deadline."""

    def __init__(self) -> None:
        self.events = []
        self.changed = asyncio.Condition()

    async def __call__(self, event) -> None:
        async with self.changed:
            self.events.append(event)
            self.changed.notify_all()

    def of(self, kind: str) -> list:
        return [e for e in self.events if e.event == kind]

    async def until(self, predicate) -> None:
        async with asyncio.timeout(5), self.changed:
            await self.changed.wait_for(lambda: predicate(self))


async def stop(task: asyncio.Task) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def drive(clock: FakeClock) -> None:
    """Let every backoff sleep end at once."""
    while True:
        await clock.wait_for_sleepers()
        clock.advance_to_next()


def shape(method: str, path: str) -> tuple[str, str]:
    return method.upper(), _PARAM.sub("{}", path)


async def served(admin: SpaceClient) -> set[tuple[str, str]]:
    doc = await admin.openapi()
    return {shape(m, p) for p, ops in doc["paths"].items() for m in ops if m != "parameters"}


OURS = {shape(r.method, PREFIX + r.path) for r in ROUTES.values()}


async def test_every_route_of_the_table_is_served(space):
    admin, _ = space
    assert OURS - await served(admin) == set()


async def test_every_served_route_is_in_the_table(space):
    admin, _ = space
    missing = await served(admin) - OURS
    assert missing == set(), "add them to core/routes.py and a SpaceClient method"


async def test_spaces_create_list_get(space):
    admin, created = space
    assert created.id == SPACE
    assert created.generalChat
    listed = await admin.spaces()
    assert [s.id for s in listed.spaces] == [SPACE]
    assert (await admin.space_get(SPACE)).id == SPACE
    with pytest.raises(ApiError) as missing:
        await admin.space_get("nope")
    assert missing.value.status == 404


async def test_records_crud_with_compare_and_set(space):
    admin, _ = space
    made = await admin.trigger_create(SPACE, CRON)
    assert made["id"].startswith("trg_")
    assert (await admin.trigger_get(SPACE, made["id"]))["name"] == "tick"
    patched = await admin.trigger_patch(SPACE, made["id"], {"name": "tock"}, rev=made["rev"])
    assert (patched["name"], patched["rev"]) == ("tock", made["rev"] + 1)
    with pytest.raises(ApiError) as stale:
        await admin.trigger_patch(SPACE, made["id"], {"name": "x"}, rev=made["rev"])
    assert stale.value.status == 409
    listed = await admin.triggers(SPACE)
    assert [r["id"] for r in listed["triggers"]] == [made["id"]]
    await admin.trigger_delete(SPACE, made["id"])
    with pytest.raises(ApiError) as gone:
        await admin.trigger_get(SPACE, made["id"])
    assert gone.value.status == 404


async def test_bad_record_is_refused_naming_the_field(space):
    admin, _ = space
    with pytest.raises(ApiError) as bad:
        await admin.trigger_create(SPACE, CRON | {"spec": {"expr": "61 * * * *"}})
    assert bad.value.status == 400
    assert "expr" in bad.value.detail


async def test_status_stamps_and_change_feed(space):
    admin, _ = space
    made = await admin.trigger_create(SPACE, CRON)
    before = await admin.changes(SPACE)
    stamped = await admin.trigger_status(SPACE, made["id"], {"lastStatus": "ok"})
    assert stamped["lastStatus"] == "ok"
    after = await admin.changes(SPACE, since=before.next)
    assert after.next > before.next
    assert made["id"] in {c.triggerId for c in after.changes}


async def test_change_feed_stream_delivers_new_changes(space):
    admin, _ = space
    got = Inbox()
    sub = admin.changes_stream(SPACE, read_timeout=10.0)
    task = asyncio.create_task(sub.run(got))
    try:
        await got.until(lambda g: g.of("hello"))
        made = await admin.trigger_create(SPACE, CRON)
        await got.until(lambda g: made["id"] in str([e.data for e in g.of("change")]))
        assert sub.status.state == ConnectionState.LIVE
    finally:
        await stop(task)


async def test_chat_send_history_and_stream_resume(space):
    admin, created = space
    chat = created.generalChat
    got = Inbox()
    first = admin.chat_stream(SPACE, chat, read_timeout=10.0)
    task = asyncio.create_task(first.run(got))
    await got.until(lambda g: g.of("hello"))
    sent = [await admin.chat_send(SPACE, chat, {"text": f"m{i}"}) for i in range(3)]
    await got.until(lambda g: len(g.of("message")) == 3)
    await stop(task)
    sent += [await admin.chat_send(SPACE, chat, {"text": f"m{i}"}) for i in range(3, 5)]
    again = admin.chat_stream(SPACE, chat, last_id=first.last_id, read_timeout=10.0)
    task = asyncio.create_task(again.run(got))
    try:
        sent.append(await admin.chat_send(SPACE, chat, {"text": "m5"}))
        await got.until(lambda g: len(g.of("message")) == 6)
    finally:
        await stop(task)
    ids = [e.json()["messageId"] for e in got.of("message")]
    assert ids == [m.message_id for m in sent]
    page = await admin.chat_messages(SPACE, chat, after=sent[3].seq)
    assert [m.text for m in read_all(page)] == ["m4", "m5"]


async def test_stream_of_an_unknown_chat_is_permanent(space):
    admin, _ = space
    sub = admin.chat_stream(SPACE, "no-such-chat")
    with pytest.raises(Permanent) as refused:
        async with asyncio.timeout(5):
            await sub.run(Inbox())
    assert refused.value.status == 404
    assert sub.status.state == ConnectionState.FAILED


async def test_stream_survives_a_server_drop(tmp_path, aiohttp_server):
    db = tmp_path / "space.db"
    server = await aiohttp_server(create_app(db))
    port, token = server.port, default_admin_token_file(db).read_text().strip()
    clock = FakeClock()
    async with SpaceClient(str(server.make_url("/")), token, clock=clock) as admin:
        chat = (await admin.space_create({"id": SPACE})).generalChat
        got = Inbox()
        sub = admin.chat_stream(SPACE, chat, read_timeout=10.0)
        task = asyncio.create_task(sub.run(got))
        await got.until(lambda g: g.of("hello"))
        await admin.chat_send(SPACE, chat, {"text": "before"})
        await got.until(lambda g: len(g.of("message")) == 1)
        await server.close()
        server = await aiohttp_server(create_app(db), port=port)
        await admin.chat_send(SPACE, chat, {"text": "after"})
        driver = asyncio.create_task(drive(clock))
        try:
            await got.until(lambda g: len(g.of("message")) == 2)
        finally:
            await stop(driver)
            await stop(task)
    assert [e.json()["text"] for e in got.of("message")] == ["before", "after"]


async def test_state_through_a_run_token(space):
    admin, _ = space
    made = await admin.trigger_create(SPACE, CRON)
    minted = await admin.token_run(SPACE, {"triggerId": made["id"], "runId": "run_1"})
    async with SpaceClient(admin.url, minted.token) as run:
        with pytest.raises(ApiError) as unset:
            await run.state_get(SPACE, made["id"], "cursor")
        assert unset.value.status == 404
        await run.state_put(SPACE, made["id"], "cursor", {"value": 7})
        assert (await run.state_get(SPACE, made["id"], "cursor"))["value"] == 7
        with pytest.raises(ApiError) as refused:
            await run.trigger_create(SPACE, CRON)
        assert refused.value.status == 403


async def test_a_change_page_that_does_not_fit_is_an_api_error(tmp_path, aiohttp_server):
    async def bad_page(_: web.Request) -> web.Response:
        return web.json_response({"changes": [{"seq": "x"}]})

    app = web.Application()
    app.router.add_get(PREFIX + "/spaces/{space}/changes", bad_page)
    server = await aiohttp_server(app)
    async with SpaceClient(str(server.make_url("/")), "tok") as client:
        with pytest.raises(ApiError) as caught:
            await client.changes(SPACE)
    assert caught.value.code == "malformed_answer" and "changes" in caught.value.detail
