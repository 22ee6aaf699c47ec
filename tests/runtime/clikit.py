"""What the CLI tests share: a real space server on 127.0.0.1 and the `baton` command aimed at it.

`start_space` serves `create_app` on a real SQLite file in `tmp_path` (through
pytest-aiohttp's `aiohttp_server`) with one space created. `Cli` runs
`runtime.cli.main([...])` in a thread (it has its own event loop while the server
runs in the test's) with `--url`, `--token-file` and `--space` pointed at it, and
returns (exit code, stdout, stderr); `Cli.process` runs it as a process of its own.
`Follower` runs `baton` as a subprocess, for
the verbs that follow a stream until signalled, and reads its lines under a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from runtime.cli.main import main
from runtime.client.api import SpaceClient
from space.app import create_app, default_admin_token_file

SPACE = "home"
DEADLINE_S = 15.0


class World:
    """A running space: its URL, admin token file, an admin client, the general chat."""

    def __init__(self, url: str, token_file: Path, admin: SpaceClient, chat: str) -> None:
        self.url, self.token_file, self.admin, self.chat = url, token_file, admin, chat
        self.app: Any = None  # the server's aiohttp app, for a test that breaks its store

    def flags(self, space: str = SPACE) -> list[str]:
        return ["--url", self.url, "--token-file", str(self.token_file), "--space", space]


async def start_space(tmp_path: Path, aiohttp_server: Any) -> tuple[World, SpaceClient]:
    db = tmp_path / "space.db"
    server = await aiohttp_server(create_app(db))
    url = str(server.make_url("/")).rstrip("/")
    token_file = default_admin_token_file(db)
    admin = SpaceClient(url, token_file.read_text().strip())
    created = await admin.space_create({"id": SPACE})
    world = World(url, token_file, admin, created.generalChat)
    world.app = server.app
    return world, admin


class Cli:
    """The `baton` command pointed at one test server."""

    def __init__(self, world: World, capsys: pytest.CaptureFixture[str]) -> None:
        self.world, self.capsys = world, capsys

    async def __call__(self, *argv: str) -> tuple[int, str, str]:
        flags = self.world.flags()
        if "--space" in argv:  # the test's own --space wins
            flags = flags[:-2]
        code = await asyncio.to_thread(main, [*argv, *flags])
        out, err = self.capsys.readouterr()
        return code, out, err

    async def process(self, *argv: str, flags: bool = True) -> tuple[int, str, str]:
        """`baton ARGV` as a process of its own (the command exactly as a user runs it)."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "runtime.cli",
            *argv,
            *(self.world.flags() if flags else ()),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        async with asyncio.timeout(DEADLINE_S):
            out, err = await proc.communicate()
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()

    async def json(self, *argv: str) -> Any:
        code, out, err = await self(*argv, "--json")
        assert code == 0, err
        return json.loads(out)

    async def fails(self, code: int, *argv: str) -> str:
        """Run a command that must fail with `code`: nothing on stdout, one line on stderr."""
        got, out, err = await self(*argv)
        assert (got, out) == (code, ""), (got, out, err)
        assert err.startswith("baton: ") and err.count("\n") == 1, err
        return err


class Follower:
    """`baton ARGV --follow …` as a subprocess; `line()` waits for its next line."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    @contextlib.asynccontextmanager
    async def start(cls, world: World, *argv: str) -> AsyncIterator[Follower]:
        """Started here; killed at the end if the test did not stop it."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "runtime.cli",
            *argv,
            *world.flags(),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            yield cls(proc)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.communicate()

    async def line(self) -> str:
        assert self.proc.stdout is not None
        async with asyncio.timeout(DEADLINE_S):
            raw = await self.proc.stdout.readline()
        assert raw, await self._stderr()
        return raw.decode().rstrip("\n")

    async def until(self, text: str) -> str:
        """The first line containing `text` (earlier lines are skipped)."""
        async with asyncio.timeout(DEADLINE_S):
            while text not in (got := await self.line()):
                pass
        return got

    async def stop(self) -> int:
        """SIGTERM, as a service manager stops it; its exit code."""
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(DEADLINE_S):
            await self.proc.communicate()
        assert self.proc.returncode is not None
        return self.proc.returncode

    async def _stderr(self) -> str:
        assert self.proc.stderr is not None
        return (await self.proc.stderr.read()).decode()
