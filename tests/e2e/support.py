"""Real `baton` processes for the end-to-end tests: start, stop, wait on conditions, read runs.

Every process is `python -m runtime.cli …` with `BATON_LOG=INFO`, its stdout and
stderr together in one log file under the test's `tmp_path`, so a failing test can
show what each process said. `Procs` kills whatever is still running when it
closes and waits for it, leaving no zombie. Waits poll a condition under a
deadline; nothing here sleeps to let a race settle.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import signal
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import waiting

from runtime.client.api import SpaceClient

ROOT = Path(__file__).resolve().parents[2]
LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")
SCRUBBED = ("BATON_URL", "BATON_TOKEN_FILE", "BATON_SPACE", "BATON_DATA", "BATON_DB")
TAIL_CHARS = 4000


# The one wait (tests/waiting.py), looking again every 0.1 s: these probes ask processes over HTTP.
eventually = functools.partial(waiting.eventually, every=0.1)


class Proc:
    """One running `baton` process and its log."""

    def __init__(self, name: str, proc: asyncio.subprocess.Process, log: Path) -> None:
        self.name, self.proc, self.log = name, proc, log

    @property
    def running(self) -> bool:
        return self.proc.returncode is None

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    async def stop(self, sig: signal.Signals = signal.SIGINT, timeout: float = 20.0) -> int:
        """Send `sig` and wait for the exit status (a hang is a failure, and is killed)."""
        if self.running:
            self.proc.send_signal(sig)
        try:
            async with asyncio.timeout(timeout):
                return await self.proc.wait()
        except TimeoutError:
            await self.kill()
            message = f"{self.name} did not stop on {sig.name}:\n{self.tail()}"
            raise AssertionError(message) from None

    async def kill(self) -> None:
        """SIGKILL, as a crash or a pulled plug would; waits for it to be gone."""
        if self.running:
            self.proc.kill()
        await self.proc.wait()

    def tail(self) -> str:
        return f"--- {self.name} ({self.log}) ---\n{self.output()[-TAIL_CHARS:]}"


class Procs:
    """Starts processes; on close kills what still runs and prints every log's tail."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.started: list[Proc] = []

    async def __aenter__(self) -> Procs:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.gather(*(p.kill() for p in self.started))
        print(self.tails())  # shown by pytest only when the test failed

    async def start(self, name: str, *args: str) -> Proc:
        log = self.logs / f"{name}.log"
        with log.open("wb") as out:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "runtime.cli",
                *args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                cwd=ROOT,
                env=_env(),
            )
        started = Proc(name, proc, log)
        self.started.append(started)
        return started

    async def run(self, name: str, *args: str, timeout: float = 20.0) -> tuple[int, str]:
        """Run a short command to its end; its exit status and output."""
        proc = await self.start(name, *args)
        try:
            async with asyncio.timeout(timeout):
                code = await proc.proc.wait()
        except TimeoutError:
            raise AssertionError(f"{name} did not finish:\n{proc.tail()}") from None
        return code, proc.output()

    def tails(self) -> str:
        return "\n".join(p.tail() for p in self.started)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    return {**env, "BATON_LOG": "INFO", "PYTHONUNBUFFERED": "1"}


async def matched(proc: Proc, pattern: re.Pattern[str], *, timeout: float = 20.0) -> re.Match[str]:
    """Wait until the process's output matches `pattern`; fail early if it ended."""

    async def check() -> re.Match[str] | None:
        found = pattern.search(proc.output())
        if found is None and not proc.running:
            raise AssertionError(f"{proc.name} ended before printing {pattern.pattern!r}")
        return found

    return await eventually(check, timeout=timeout, what=f"{proc.name} printing {pattern.pattern}")


async def serve(procs: Procs, db: Path, *extra: str) -> tuple[Proc, str]:
    """`baton space serve` on a free port; the process and its URL."""
    proc = await procs.start("space", "space", "serve", "--db", str(db), "--port", "0", *extra)
    return proc, (await matched(proc, LISTENING)).group(1)


class Servers:
    """`baton space serve` processes on one PostgreSQL database and one admin token file,
    started one after another (the first mints the token); each can be SIGKILLed and
    started again on its port."""

    def __init__(self, procs: Procs, dsn: str, token_file: Path, *extra: str) -> None:
        self.procs, self.dsn, self.token_file, self.extra = procs, dsn, token_file, extra
        self.running: list[Proc] = []
        self.urls: list[str] = []

    async def start(self, count: int) -> list[str]:
        for _ in range(count):
            proc, url = await self._serve(len(self.urls), "0")
            self.running.append(proc)
            self.urls.append(url)
        return self.urls

    async def kill(self, index: int) -> None:
        await self.running[index].kill()

    async def restart(self, index: int) -> None:
        """Start server `index` again on the port it had."""
        proc, url = await self._serve(index, self.urls[index].rsplit(":", 1)[1])
        assert url == self.urls[index], (url, self.urls[index])
        self.running[index] = proc

    async def _serve(self, index: int, port: str) -> tuple[Proc, str]:
        name = f"space-{index}-{len(self.procs.started)}"
        where = ("--db", self.dsn, "--admin-token-file", str(self.token_file), "--port", port)
        proc = await self.procs.start(name, "space", "serve", *where, *self.extra)
        return proc, (await matched(proc, LISTENING)).group(1)


def write_token(path: Path, token: str) -> Path:
    """A token file as the CLI and the device accept it: owner-only (0600)."""
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(token + "\n")
    return path


async def runs_of(api: SpaceClient, space: str, trigger: str) -> list[dict[str, Any]]:
    """Every run record of `trigger`, oldest first."""
    return (await api.runs(space, trigger=trigger, limit=1000))["runs"]


async def fires_of(api: SpaceClient, space: str, trigger: str) -> list[dict[str, Any]]:
    """Every fire claim of `trigger`, oldest first."""
    return (await api.fires(space, trigger=trigger, limit=1000))["fires"]


def duplicates(keys: Sequence[str]) -> list[str]:
    """The keys that occur more than once."""
    return sorted(k for k, n in Counter(keys).items() if n > 1)
