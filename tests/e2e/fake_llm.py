"""A fake OpenAI-compatible chat endpoint on 127.0.0.1: the one fake of the responder tests.

`FakeLlm` serves `GET /v1/models` and `POST /v1/chat/completions` with aiohttp. It
keeps every request body it was sent (`requests`), answers with `reply` split into
`pieces`, streamed as SSE `data:` chunks ending with `data: [DONE]` when the request
asks to stream and `streaming` is on, else as one JSON answer. With `hold` set, the
stream stops after its first piece until the test calls `release()`, so a test can
look at the half-written reply without sleeping. A piece "FAIL" is sent as an error
chunk, as a server reports a model failing mid-stream. `stop()` / `start()` take it down
and bring it back on the same port.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web


class FakeLlm:
    def __init__(self, pieces: list[str], *, streaming: bool = True, hold: bool = False) -> None:
        self.pieces, self.streaming, self.hold = pieces, streaming, hold
        self.requests: list[dict[str, Any]] = []
        self.first_piece_sent = asyncio.Event()
        self._gate = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def release(self) -> None:
        self._gate.set()

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._complete)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            self.release()  # a held stream must not keep the shutdown waiting
            await self._runner.cleanup()
            self._runner = None

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "fake", "object": "model"}]})

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        if not (self.streaming and body.get("stream")):
            message = {"role": "assistant", "content": "".join(self.pieces)}
            return web.json_response({"choices": [{"index": 0, "message": message}]})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i, piece in enumerate(self.pieces):
            chunk: dict[str, Any] = {"choices": [{"index": 0, "delta": {"content": piece}}]}
            if piece == "FAIL":  # the model fails mid-stream, as a server reports it
                chunk = {"error": {"message": "the model ran out of memory"}}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            if i == 0:
                self.first_piece_sent.set()
                if self.hold:
                    await self._gate.wait()
                    if request.transport is None or request.transport.is_closing():
                        return resp  # the client hung up while held
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp
