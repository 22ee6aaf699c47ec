"""`baton space serve` and `token` as real processes; SIGKILL loses no acknowledged write."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from runtime.cli.common import SPACE_DB, data_dir
from runtime.cli.space import default_db
from space.app import default_admin_token_file

pytestmark = pytest.mark.e2e  # the server as a process

S = "/v1/spaces/home"
CRON = {"name": "tick", "kind": "cron", "spec": {"expr": "*/5 * * * *"}, "program": "tick@v1"}
LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")


class Server:
    def __init__(self, proc: asyncio.subprocess.Process, url: str, lines: list[str]) -> None:
        self.proc, self.url, self.lines = proc, url, lines


@asynccontextmanager
async def serving(db: Path) -> AsyncIterator[Server]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "runtime.cli",
        "space",
        "serve",
        "--db",
        str(db),
        "--port",
        "0",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        lines: list[str] = []
        async with asyncio.timeout(20):
            while not (m := LISTENING.search("".join(lines))):
                line = (await proc.stdout.readline()).decode()  # type: ignore[union-attr]
                assert line, f"server ended: {await proc.stderr.read()!r}"  # type: ignore[union-attr]
                lines.append(line)
            lines.append((await proc.stdout.readline()).decode())  # type: ignore[union-attr]
        yield Server(proc, m.group(1), lines)
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.communicate()


async def call(
    session: aiohttp.ClientSession, token: str, method: str, url: str, body: Any = None
) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    async with session.request(method, url, json=body, headers=headers) as resp:
        return resp.status, await resp.json()


async def acknowledged_writes(session: aiohttp.ClientSession, url: str, token: str) -> dict:
    assert (await call(session, token, "POST", url + "/v1/spaces", {"id": "home"}))[0] == 201
    ids = []
    for i in range(10):
        status, rec = await call(
            session, token, "POST", url + S + "/triggers", {**CRON, "name": f"t{i}"}
        )
        assert status == 201
        ids.append(rec["id"])
    status, patched = await call(
        session, token, "PATCH", f"{url}{S}/triggers/{ids[0]}", {"enabled": False}
    )
    assert status == 200
    status, lease = await call(
        session, token, "POST", url + S + "/election/claim", {"peer": "laptop", "term": 0}
    )
    assert status == 200
    fire = {
        "triggerId": ids[1],
        "key": "k1",  # any key (a slot before the record was created would be refused)
        "term": lease["term"],
        "peer": "laptop",
    }
    assert (await call(session, token, "POST", url + S + "/fires", fire))[0] == 201
    run = {
        "runId": "run_1",
        "triggerId": ids[1],
        "startedAt": "2026-12-01T09:05:00Z",
        "status": "ok",
        "term": lease["term"],
    }
    assert (await call(session, token, "POST", url + S + "/runs", run))[0] == 201
    return {"ids": ids, "patchedRev": patched["rev"], "fire": fire}


async def test_sigkill_loses_no_acknowledged_write(tmp_path: Path) -> None:
    db = tmp_path / "space.db"
    async with aiohttp.ClientSession() as session:
        async with serving(db) as server:
            token = default_admin_token_file(db).read_text().strip()
            assert str(default_admin_token_file(db)) in "".join(server.lines)
            done = await acknowledged_writes(session, server.url, token)
            server.proc.send_signal(signal.SIGKILL)
            await server.proc.wait()
        async with serving(db) as server:
            _, listing = await call(session, token, "GET", server.url + S + "/triggers")
            by_id = {r["id"]: r for r in listing["triggers"]}
            assert set(by_id) == set(done["ids"])
            assert by_id[done["ids"][0]]["enabled"] is False
            assert by_id[done["ids"][0]]["rev"] == done["patchedRev"]
            status, body = await call(
                session, token, "POST", server.url + S + "/fires", done["fire"]
            )
            assert (status, body["error"]) == (409, "already_claimed")
            _, runs = await call(session, token, "GET", server.url + S + "/runs")
            assert [r["runId"] for r in runs["runs"]] == ["run_1"]


async def test_token_command_and_clean_stop(tmp_path: Path) -> None:
    db = tmp_path / "space.db"
    async with aiohttp.ClientSession() as session, serving(db) as server:
        token = default_admin_token_file(db).read_text().strip()
        await call(session, token, "POST", server.url + "/v1/spaces", {"id": "home"})
        minted = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "runtime.cli",
            "space",
            "token",
            "--peer",
            "laptop",
            "--space",
            "home",
            "--db",
            str(db),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, _ = await minted.communicate()
        assert minted.returncode == 0
        device = out.decode().strip()
        assert device.startswith("btd_")
        assert (await call(session, device, "PUT", server.url + S + "/devices/laptop", {}))[
            0
        ] == 200
        assert (await call(session, device, "PUT", server.url + S + "/devices/phone", {}))[0] == 403
        server.proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(10):
            out, _ = await server.proc.communicate()
        assert server.proc.returncode == 0 and b"stopped" in out


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"BATON_DATA": "{tmp}/data"}, "{tmp}/data/space.db"),
        ({"BATON_DATA": "{tmp}/data", "BATON_DB": "{tmp}/own.db"}, "{tmp}/own.db"),
        ({"HOME": "{tmp}/home"}, "{tmp}/home/.baton/space.db"),
    ],
)
def test_default_db_is_the_one_baton_up_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: str
) -> None:
    monkeypatch.delenv("BATON_DATA", raising=False)
    monkeypatch.delenv("BATON_DB", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value.format(tmp=tmp_path))
    assert default_db() == Path(expected.format(tmp=tmp_path))
    if "BATON_DB" not in env:
        assert default_db() == data_dir() / SPACE_DB
