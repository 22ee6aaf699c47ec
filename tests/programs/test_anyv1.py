"""`use("any@v1")`: the synchronous program client against the real space server.

The server is `create_app` on a SQLite file in tmp_path, served on 127.0.0.1; the
client holds a real run token minted for one trigger. Blocking calls run in a
thread so the server's loop keeps serving.
"""

import asyncio
from pathlib import Path

import pytest

from core.routes import ROUTES
from programs.anyv1 import AnyV1, ApiError
from programs.context import RunContext
from programs.use import make_use
from runtime.client.api import SpaceClient
from space.app import create_app, default_admin_token_file

SPACE = "home"
CRON = {"name": "tick", "kind": "cron", "spec": {"expr": "*/5 * * * *"}, "program": "tick@v1"}


@pytest.fixture
async def space(tmp_path: Path, aiohttp_server):
    db = tmp_path / "space.db"
    server = await aiohttp_server(create_app(db))
    url = str(server.make_url("/")).rstrip("/")
    admin = SpaceClient(url, default_admin_token_file(db).read_text().strip())
    created = await admin.space_create({"id": SPACE, "name": "Home"})
    trigger = await admin.trigger_create(SPACE, CRON)
    yield admin, url, created.generalChat, trigger
    await admin.close()


async def run_client(admin, url, trigger_id, **ctx) -> AnyV1:
    minted = await admin.token_run(SPACE, {"triggerId": trigger_id, "runId": "run_1"})
    fields = {"run_id": "run_1", "trigger_id": trigger_id, "program": "tick@v1", "peer": "lap"}
    fields |= {"space": SPACE, "url": url, "token": minted.token, "term": 3, "key": "k1"}
    return make_use(RunContext(**(fields | ctx)))("any@v1")


def call(fn, *args, **kwargs):
    return asyncio.to_thread(fn, *args, **kwargs)


async def test_use_gives_the_client_with_its_context(space):
    admin, url, _, trigger = space
    c = await run_client(admin, url, trigger["id"])
    assert isinstance(c, AnyV1)
    assert c.context == {
        "trigger_id": trigger["id"],
        "run_id": "run_1",
        "program": "tick@v1",
        "peer": "lap",
        "space": SPACE,
        "term": 3,
        "key": "k1",
    }


async def test_chat_send_and_history(space):
    admin, url, chat, trigger = space
    c = await run_client(admin, url, trigger["id"])
    first = await call(c.chat_send, SPACE, chat, {"text": "hello"})
    agent = {"name": "triage", "done": True}
    second = await call(c.chat_send, SPACE, chat, {"text": "done", "agent": agent})
    assert (first["text"], first["objectId"]) == ("hello", chat)
    assert second["seq"] > first["seq"]
    assert second["agent"]["name"] == "triage"
    history = await call(c.chat_messages, SPACE, chat)
    assert [m["messageId"] for m in history] == [first["messageId"], second["messageId"]]
    later = await call(c.chat_messages, SPACE, chat, after=first["seq"], limit=5)
    assert [m["text"] for m in later] == ["done"]


async def test_refusals_carry_status_code_and_detail(space):
    admin, url, chat, trigger = space
    c = await run_client(admin, url, trigger["id"])
    with pytest.raises(ApiError) as unknown:
        await call(c.chat_send, SPACE, "no-such-chat", {"text": "x"})
    assert (unknown.value.status, unknown.value.code) == (404, "unknown_chat")
    with pytest.raises(ApiError) as bad:
        await call(c.chat_send, SPACE, chat, {"txt": "x"})
    assert bad.value.status == 400
    assert "txt" in bad.value.detail  # the field is named


async def test_triggers_and_patch_with_compare_and_set(space):
    admin, url, _, trigger = space
    c = await run_client(admin, url, trigger["id"])
    records = await call(c.triggers, SPACE)
    assert [r["id"] for r in records] == [trigger["id"]]
    patched = await call(c.trigger_patch, SPACE, trigger["id"], {"owner": "lap"}, trigger["rev"])
    assert (patched["owner"], patched["rev"]) == ("lap", trigger["rev"] + 1)
    with pytest.raises(ApiError) as stale:
        await call(c.trigger_patch, SPACE, trigger["id"], {"owner": ""}, trigger["rev"])
    assert stale.value.status == 409


async def test_cursor_is_this_triggers_persistent_state(space):
    admin, url, _, trigger = space
    c = await run_client(admin, url, trigger["id"])
    assert await call(c.cursor_get, "seen", default=0) == 0
    await call(c.cursor_set, "seen", {"seq": 41, "ids": ["a"]})
    again = await run_client(admin, url, trigger["id"], run_id="run_2")
    assert await call(again.cursor_get, "seen") == {"seq": 41, "ids": ["a"]}
    stored = await admin.state_get(SPACE, trigger["id"], "seen")
    assert stored["value"] == {"seq": 41, "ids": ["a"]}


async def test_cursor_of_another_trigger_is_refused(space):
    admin, url, _, trigger = space
    other = await admin.trigger_create(SPACE, CRON | {"name": "other"})
    minted = await admin.token_run(SPACE, {"triggerId": trigger["id"], "runId": "r"})
    ctx = RunContext(
        run_id="r",
        trigger_id=other["id"],
        program="tick@v1",
        peer="lap",
        space=SPACE,
        url=url,
        token=minted.token,
    )
    with pytest.raises(ApiError) as refused:
        await call(AnyV1(ctx).cursor_set, "seen", 1)
    assert (refused.value.status, refused.value.code) == (403, "forbidden")


@pytest.mark.parametrize("key", ["", None])
def test_cursor_key_must_be_a_non_empty_string(key):
    ctx = RunContext(
        run_id="r",
        trigger_id="t",
        program="p@v1",
        peer="lap",
        space=SPACE,
        url="http://127.0.0.1:9",
        token="x",
    )
    with pytest.raises(ValueError, match="key"):
        AnyV1(ctx).cursor_get(key)


def test_no_server_is_unreachable():
    ctx = RunContext(
        run_id="r",
        trigger_id="t",
        program="p@v1",
        peer="lap",
        space=SPACE,
        url="http://127.0.0.1:9",
        token="x",
    )
    with pytest.raises(ApiError) as caught:
        AnyV1(ctx, timeout=5).triggers(SPACE)
    assert (caught.value.status, caught.value.code) == (0, "unreachable")


def test_program_calls_are_routes_of_the_shared_table():
    used = {"chat_send", "chat_messages", "triggers", "trigger_patch", "state_get", "state_put"}
    assert used <= set(ROUTES)


async def test_why_explains_a_trigger_by_name_or_id_to_a_program(space):
    admin, url, _, trigger = space
    c = await run_client(admin, url, trigger["id"])
    by_name = await call(c.why, "tick")
    assert by_name["trigger"] == trigger["id"] and by_name["verdict"] in ("not_due", "not_fired")
    assert by_name["checks"][0]["name"] == "slot"
    with pytest.raises(ApiError) as refused:
        await call(c.why, trigger["id"], at="not an instant")
    assert (refused.value.status, refused.value.code) == (400, "invalid_query")
