"""The async client: requests built from the route table, refusals as ApiError.

Against an echo server on 127.0.0.1 that answers what it was asked (method, path,
query, headers, body), so every route is checked without depending on the
space server's state; `test_contract.py` runs both clients against the real one.
"""

import asyncio
import inspect
import json

import pytest
from aiohttp import web

from core.clock import FakeClock
from core.routes import ROUTES, ApiError, path_params
from runtime.client.api import SpaceClient
from runtime.client.stream import Permanent


async def echo(request: web.Request) -> web.StreamResponse:
    if request.path.endswith("/fail-house"):
        return web.json_response({"error": "unknown_chat", "detail": "no chat"}, status=404)
    if request.path.endswith("/fail-plain"):
        return web.Response(text="upstream exploded", status=502)
    if request.path.endswith("/empty"):
        return web.Response(status=204)
    body = await request.read()
    return web.json_response(
        {
            "method": request.method,
            "path": request.raw_path.split("?")[0],
            "query": dict(request.query),
            "auth": request.headers.get("Authorization"),
            "ifMatch": request.headers.get("If-Match"),
            "type": request.headers.get("Content-Type"),
            "body": json.loads(body) if body else None,
        }
    )


async def stream(request: web.Request) -> web.StreamResponse:
    if request.match_info["objectId"] == "fail-house":
        return web.json_response({"error": "unknown_chat", "detail": "no chat"}, status=404)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(b'event: hello\ndata: {"cursor": 0}\n\n')
    await resp.write(b'id: 1\nevent: message\ndata: {"seq": 1}\n\n')
    await resp.write_eof()
    return resp


@pytest.fixture
async def client(aiohttp_server):
    app = web.Application()
    app.router.add_get("/v1/spaces/{space}/chats/{objectId}/stream", stream)
    app.router.add_route("*", "/{tail:.*}", echo)
    server = await aiohttp_server(app)
    async with SpaceClient(str(server.make_url("/")), "tok", clock=FakeClock()) as c:
        yield c


def test_every_route_has_a_client_method_of_its_name():
    for name, route in ROUTES.items():
        method = getattr(SpaceClient, name, None)
        assert method is not None, f"SpaceClient lacks {name}"
        assert inspect.iscoroutinefunction(method) != route.stream, name


async def test_a_patch_carries_path_body_auth_and_if_match(client):
    got = await client.trigger_patch("bao", "trg_1", {"name": "x"}, rev=4)
    assert got == {
        "method": "PATCH",
        "path": "/v1/spaces/bao/triggers/trg_1",
        "query": {},
        "auth": "Bearer tok",
        "ifMatch": "4",
        "type": "application/json",
        "body": {"name": "x"},
    }


async def test_query_leaves_out_none_and_path_segments_are_quoted(client):
    got = await client.call("chat_messages", space="my space", objectId="o/1", after=7)
    assert got["path"] == "/v1/spaces/my%20space/chats/o%2F1/messages"
    assert got["query"] == {"after": "7"}
    got = await client.runs("bao", trigger="trg_1", limit=5)
    assert got["query"] == {"trigger": "trg_1", "limit": "5"}


async def test_program_ref_keeps_its_at_sign(client):
    got = await client.program_put("bao", "triage@v2", {"source": "def main(a): pass"})
    assert (got["method"], got["path"]) == ("PUT", "/v1/spaces/bao/programs/triage@v2")


async def test_state_route_is_scoped_by_trigger_and_key(client):
    got = await client.state_put("bao", "trg_1", "cursor", {"value": 3})
    assert got["path"] == "/v1/spaces/bao/state/trg_1/cursor"
    assert got["body"] == {"value": 3}


async def test_house_error_body_becomes_api_error(client):
    with pytest.raises(ApiError) as caught:
        await client.trigger_get("bao", "fail-house")
    assert (caught.value.status, caught.value.code, caught.value.detail) == (
        404,
        "unknown_chat",
        "no chat",
    )


async def test_other_error_body_keeps_status_and_text(client):
    with pytest.raises(ApiError) as caught:
        await client.trigger_get("bao", "fail-plain")
    assert (caught.value.status, caught.value.code) == (502, "http_502")
    assert "exploded" in caught.value.detail


async def test_empty_answer_is_none(client):
    assert await client.trigger_delete("bao", "empty") is None


async def test_no_server_is_unreachable():
    async with SpaceClient("http://127.0.0.1:9", "tok") as c:
        with pytest.raises(ApiError) as caught:
            await c.spaces()
    assert (caught.value.status, caught.value.code) == (0, "unreachable")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda c: c.call("trigger_create", space="bao"), "body is required"),
        (lambda c: c.call("spaces", {"x": 1}), "takes no body"),
        (lambda c: c.call("trigger_get", space="bao"), "missing path parameter 'id'"),
        (lambda c: c.call("spaces", since=3), "unknown parameter 'since'"),
    ],
)
async def test_bad_calls_name_the_parameter(client, call, message):
    with pytest.raises(ValueError, match=message):
        await call(client)


async def test_chat_stream_is_a_subscription_on_the_stream_route(client):
    sub = client.chat_stream("bao", "o1", read_timeout=5.0)
    assert sub.url.endswith("/v1/spaces/bao/chats/o1/stream")
    got = []
    done = asyncio.Event()

    async def on_event(event):
        got.append(event.event)
        if event.event == "message":
            done.set()

    task = asyncio.create_task(sub.run(on_event))
    async with asyncio.timeout(5):
        await done.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert got == ["hello", "message"]
    assert sub.last_id == 1


async def test_stream_route_refused_is_permanent(client):
    sub = client.chat_stream("bao", "fail-house")
    with pytest.raises(Permanent) as caught:
        async with asyncio.timeout(5):
            await sub.run(_ignore)
    assert (caught.value.status, caught.value.code) == (404, "unknown_chat")


async def test_changes_stream_is_on_its_own_route(client):
    sub = client.changes_stream("bao", last_id=12)
    assert path_params(ROUTES["changes_stream"]) == ("space",)
    assert sub.url.endswith("/v1/spaces/bao/changes/stream")
    assert sub.last_id == 12


async def _ignore(event) -> None:
    return None


async def test_an_answer_that_does_not_fit_its_struct_is_an_api_error(client):
    with pytest.raises(ApiError) as caught:  # the echo is no page of records
        await client.trigger_page("bao")
    assert caught.value.code == "malformed_answer" and "triggers" in caught.value.detail


async def test_a_program_listing_that_does_not_fit_is_an_api_error(client):
    with pytest.raises(ApiError) as caught:  # the echo lists no programs
        await client.programs("bao")
    assert caught.value.code == "malformed_answer" and "programs" in caught.value.detail
