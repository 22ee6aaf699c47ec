"""Hostile bytes on the wire: every answer is a 4xx with the JSON error body, never a 5xx.

What the request table of test_bad_input.py cannot send through an HTTP client: raw
bytes in `Authorization`, request lines aiohttp itself refuses, and an event stream
that fails after its 200.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from space import streams
from space.app import create_app, default_admin_token_file
from space.http import refusals
from space.serving import SpaceRunner

SPACE = "home"


class Served:
    def __init__(self, port: int, token: str) -> None:
        self.port, self.token = port, token

    async def raw(self, request: bytes) -> tuple[int, dict[str, str], bytes]:
        """Send `request` as is; the status, headers and body of the one answer."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            writer.write(request)
            await writer.drain()
            async with asyncio.timeout(10):
                data = await reader.read()  # every refusal closes the connection
        finally:
            writer.close()
        return parse(data)

    async def get(self, path: str, auth: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
        auth = auth if auth is not None else f"Bearer {self.token}".encode()
        head = b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        return await self.raw(head + b"Authorization: " + auth + b"\r\n\r\n")


def parse(data: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    return status, headers, body


async def serve(app: web.Application) -> AsyncIterator[int]:
    runner = SpaceRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    db = tmp_path / "space.db"
    app = create_app(db)
    token = default_admin_token_file(db).read_text().strip()
    async for port in serve(app):
        yield Served(port, token)


def assert_refusal(status: int, headers: dict[str, str], body: bytes, want: int) -> dict:
    assert status == want, body
    assert headers["content-type"].startswith("application/json")
    answer = json.loads(body)
    assert set(answer) >= {"error", "detail"} and answer["detail"], answer
    return answer


@pytest.mark.parametrize(
    "auth",
    [b"Bearer \xff\xfe", b"Bearer bta_\xc3\xa9t\xc3\xa9", b"\xff", b"Bearer \x80abc", b"Bearer "],
)
async def test_authorization_that_is_not_ascii_is_401(served: Served, auth: bytes) -> None:
    answer = assert_refusal(*await served.get(f"/v1/spaces/{SPACE}/triggers", auth), want=401)
    assert answer["error"] == "unauthorized"


async def test_a_good_token_still_passes(served: Served) -> None:
    status, _, body = await served.get("/v1/spaces")
    assert status == 200, body


@pytest.mark.parametrize(
    ("request_bytes", "want"),
    [
        (b"GET /v1/spaces HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n", 400),
        (b"G\x01T /v1/spaces HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET /v1/spaces HTTP/9.9\r\nHost: x\r\n\r\n", 505),
        (b"this is not http\r\n\r\n", 400),
        (b"POST /v1/spaces HTTP/1.1\r\nHost: x\r\nContent-Length: x\r\n\r\n", 400),
        (b"POST /v1/spaces HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
    ],
    ids=["header-too-large", "bad-method", "bad-version", "not-http", "bad-length", "bad-chunk"],
)
async def test_aiohttp_refusals_answer_the_json_body_and_log_no_error(
    served: Served, request_bytes: bytes, want: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    status, headers, body = await served.raw(request_bytes)
    if want == 505 and status != 505:  # aiohttp versions differ: a 400 is a refusal too
        want = 400
    assert_refusal(status, headers, body, want=want)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]


async def test_chat_history_after_beyond_64_bits_is_400(served: Served) -> None:
    status, _, body = await served.raw(
        b"POST /v1/spaces HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: "
        b"application/json\r\nAuthorization: Bearer " + served.token.encode() + b"\r\n"
        b'Content-Length: 11\r\n\r\n{"id":"ab"}'
    )
    assert status == 201, body
    chat = json.loads(body)["generalChat"]
    for query in (f"after={2**64}", f"after={'9' * 5000}", f"limit={2**63}"):
        path = f"/v1/spaces/ab/chats/{chat}/messages?{query}"
        answer = assert_refusal(*await served.get(path), want=400)
        assert answer["error"] == "invalid_query"


async def failing_stream(request: web.Request) -> web.StreamResponse:
    async with streams.EventStream.open(request) as stream:
        await stream.send("{}", id=1, event="hello")
        raise OverflowError("a bug after the 200")
    return stream.response


async def test_a_stream_that_fails_after_its_200_carries_no_second_response(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = web.Application(middlewares=[refusals])
    streams.install(app)
    app.router.add_get("/stream", failing_stream)
    async for port in serve(app):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        async with asyncio.timeout(10):
            data = await reader.read()
        writer.close()
    assert data.startswith(b"HTTP/1.1 200")
    assert data.count(b"HTTP/1.1") == 1, data
    assert b"event: hello" in data
    assert "event stream failed" in caplog.text


async def test_a_client_gone_mid_body_is_no_server_error(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="baton.space")
    _, writer = await asyncio.open_connection("127.0.0.1", served.port)
    head = f"POST /v1/spaces HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {served.token}\r\n"
    writer.write(head.encode() + b"Content-Type: application/json\r\nContent-Length: 500\r\n\r\n{")
    await writer.drain()
    writer.close()  # the body is cut off: the server reads a reset, not a request
    async with asyncio.timeout(10):
        while "the client went away" not in caplog.text:
            await asyncio.sleep(0.01)
    assert " failed" not in caplog.text and "Traceback" not in caplog.text
    status, _, body = await served.get("/v1/spaces")
    assert status == 200, body
