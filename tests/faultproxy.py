"""A loopback TCP proxy that the tests turn into a bad link: latency, a freeze, refusals,
and answers that never come back.

`FaultProxy(target_port)` listens on 127.0.0.1 and forwards bytes both ways. Set, at any
moment: `latency` (seconds added to every chunk, each way), `frozen` (no byte moves while
set), `refusing` (every connection is cut and a new one closed at once: the space is
down), `drop_answers` (the next N answers, on any connection, are swallowed and their
connection cut: the request landed, the client never hears). It knows nothing of HTTP
beyond "the answer is what comes back".
"""

from __future__ import annotations

import asyncio
import contextlib


class FaultProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.latency = 0.0
        self._refusing = False
        self._clients: set[asyncio.StreamWriter] = set()
        self.drop_answers = 0
        self.answers_dropped = 0
        self._thawed = asyncio.Event()
        self._thawed.set()
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()

    @property
    def frozen(self) -> bool:
        return not self._thawed.is_set()

    @frozen.setter
    def frozen(self, value: bool) -> None:
        if value:
            self._thawed.clear()
        else:
            self._thawed.set()

    @property
    def refusing(self) -> bool:
        return self._refusing

    @refusing.setter
    def refusing(self, value: bool) -> None:
        self._refusing = value
        if value:
            for writer in list(self._clients):
                writer.transport.abort()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> FaultProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> FaultProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refusing:
            writer.close()
            return
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._clients.add(writer)
        for task in (
            asyncio.create_task(self._pipe(reader, up_w)),
            asyncio.create_task(self._pipe(up_r, writer, answers_to=writer)),
        ):
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)

    async def _pipe(
        self,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        *,
        answers_to: asyncio.StreamWriter | None = None,
    ) -> None:
        """Forward `src` to `dst`, each chunk `latency` after it came (in order, pipelined)."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        sender = asyncio.create_task(self._send(queue, dst, answers_to))
        try:
            while chunk := await src.read(65536):
                await queue.put((loop.time() + self.latency, chunk))
            await queue.put((loop.time() + self.latency, b""))
            await sender
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
            if answers_to is not None:
                self._clients.discard(answers_to)
            with contextlib.suppress(OSError, RuntimeError):
                dst.close()

    async def _send(
        self,
        queue: asyncio.Queue[tuple[float, bytes]],
        dst: asyncio.StreamWriter,
        answers_to: asyncio.StreamWriter | None,
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due, chunk = await queue.get()
            if not chunk:
                return
            await asyncio.sleep(max(0.0, due - loop.time()))  # the link's delay, not a wait
            await self._thawed.wait()
            if answers_to is not None and self.drop_answers > 0:
                self.drop_answers -= 1
                self.answers_dropped += 1
                answers_to.transport.abort()  # the answer came; the client never hears it
                return
            dst.write(chunk)
            await dst.drain()
