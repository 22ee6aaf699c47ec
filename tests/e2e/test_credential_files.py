"""Credentials on disk and at the command line, with real `baton` processes: files owner-only,
loose token files refused, `baton space token list|revoke|rotate-admin`, and a stop that does
not wait on a client holding a half-sent body."""

from __future__ import annotations

import asyncio
import functools
import json
import re
import signal
import stat
import time
from pathlib import Path

import aiohttp
from support import Procs, eventually, matched, serve

from runtime.client.api import SpaceClient
from space.token_store import token_id


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def status_of(url: str, token: str, method: str = "GET", path: str = "/v1/spaces") -> int:
    async with aiohttp.ClientSession() as session:
        headers = {"Authorization": f"Bearer {token}"}
        async with session.request(method, url + path, headers=headers, json={}) as resp:
            return resp.status


async def test_the_space_creates_its_files_owner_only(tmp_path: Path) -> None:
    db = tmp_path / "fresh" / "space.db"
    async with Procs(tmp_path) as procs:
        _, url = await serve(procs, db)
        admin = (db.parent / "admin.token").read_text().strip()
        async with aiohttp.ClientSession() as session:
            headers = {"Authorization": f"Bearer {admin}"}
            async with session.post(url + "/v1/spaces", json={"id": "home"}, headers=headers) as r:
                assert r.status == 201
        assert mode(db.parent) == 0o700
        for path in (db, db.parent / "admin.token", *db.parent.glob("space.db-*")):
            assert mode(path) == 0o600, path


async def test_a_token_file_others_can_read_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "space.db"
    async with Procs(tmp_path) as procs:
        proc, url = await serve(procs, db)
        admin = db.parent / "admin.token"
        loose = tmp_path / "loose.token"
        loose.write_text(admin.read_text())
        loose.chmod(0o644)
        commands = {
            "list": ("space", "token", "list", "--url", url, "--token-file", str(loose)),
            "device": (
                "device",
                "--peer",
                "p",
                "--url",
                url,
                "--token-file",
                str(loose),
                "--space",
                "home",
                "--data",
                str(tmp_path / "d"),
            ),
            "serve": (
                "space",
                "serve",
                "--db",
                str(tmp_path / "other.db"),
                "--port",
                "0",
                "--admin-token-file",
                str(loose),
            ),
            "up": ("up", "--data", str(tmp_path / "up"), "--port", "0"),
        }
        (tmp_path / "up").mkdir(mode=0o700)
        (tmp_path / "up" / "admin.token").write_text(admin.read_text())
        (tmp_path / "up" / "admin.token").chmod(0o640)
        for name, args in commands.items():
            code, out = await procs.run(name, *args)
            lines = [line for line in out.splitlines() if line.strip()]
            assert code == 2, (name, out)
            assert "group or others" in lines[-1] and "chmod 600" in lines[-1], (name, out)
            assert len([line for line in lines if "Traceback" in line]) == 0, (name, out)
        assert proc.running  # the space stays up


async def test_tokens_are_listed_revoked_and_the_admin_token_rotated_from_the_cli(
    tmp_path: Path,
) -> None:
    db = tmp_path / "space.db"
    async with Procs(tmp_path) as procs:
        _, url = await serve(procs, db)
        admin_file = db.parent / "admin.token"
        old = admin_file.read_text().strip()
        async with aiohttp.ClientSession() as session:
            headers = {"Authorization": f"Bearer {old}"}
            await session.post(url + "/v1/spaces", json={"id": "home"}, headers=headers)
        where = ("--url", url, "--token-file", str(admin_file))
        code, out = await procs.run(
            "mint", "space", "token", "--peer", "laptop", "--space", "home", "--db", str(db)
        )
        device = out.strip().splitlines()[-1]
        assert code == 0 and device.startswith("btd_")
        code, out = await procs.run("list", "space", "token", "list", "--json", *where)
        listed = json.loads(out[out.index("[") :])
        assert code == 0 and token_id(device) in [t["id"] for t in listed]
        assert device not in out and old not in out
        code, out = await procs.run("table", "space", "token", "list", *where)
        assert code == 0 and "laptop" in out and "LAST USED" in out
        code, out = await procs.run("revoke", "space", "token", "revoke", token_id(device), *where)
        assert code == 0, out
        assert await status_of(url, device, "PUT", "/v1/spaces/home/devices/laptop") == 401
        code, out = await procs.run("rotate", "space", "token", "rotate-admin", *where)
        assert code == 0, out
        new = admin_file.read_text().strip()
        assert new != old and mode(admin_file) == 0o600
        assert await status_of(url, old) == 401
        assert await status_of(url, new) == 200
        code, out = await procs.run("unknown", "space", "token", "revoke", "0" * 16, *where)
        assert code == 2 and "unknown_token" in out


async def test_a_stop_does_not_wait_on_a_half_sent_body(tmp_path: Path) -> None:
    db = tmp_path / "space.db"
    async with Procs(tmp_path) as procs:
        proc, url = await serve(procs, db)
        token = (db.parent / "admin.token").read_text().strip()
        port = int(url.rsplit(":", 1)[1])
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        head = (
            f"POST /v1/spaces HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        )
        writer.write(head.encode() + b'{"id": "ha')  # and never the rest
        await writer.drain()
        # A whole request on another connection answered: the server has read the first one.
        assert await status_of(url, token) == 200
        started = time.monotonic()
        code = await proc.stop(signal.SIGTERM, timeout=30)
        took = time.monotonic() - started
        writer.close()
        assert code == 0 and took < 5, (code, took, proc.output())
        assert "stopped" in proc.output()


UP_URL = re.compile(r"space API on (http://127\.0\.0\.1:\d+)/v1")


async def test_baton_up_mints_its_device_token_for_its_space_and_peer(tmp_path: Path) -> None:
    data = tmp_path / "up"
    token_file = data / "device-solo.token"
    seen = []
    async with Procs(tmp_path) as procs:
        for run, space in enumerate(("home", "home", "work")):
            up = await procs.start(
                f"up-{run}",
                "up",
                "--data",
                str(data),
                "--port",
                "0",
                "--peer",
                "solo",
                "--space",
                space,
            )
            url = (await matched(up, UP_URL)).group(1)
            admin = (data / "admin.token").read_text().strip()
            async with SpaceClient(url, admin) as api:
                live_here = functools.partial(_device_live, api, space)
                await eventually(live_here, timeout=20, what="solo live")
                seen.append(token_file.read_text().strip())
                live = {t["id"]: t for t in (await api.tokens())["tokens"]}
                entry = live[token_id(seen[-1])]
                assert (entry["role"], entry["space"], entry["peer"]) == ("device", space, "solo")
                if run == 2:  # bound to `home`: replaced, and the old one revoked
                    assert token_id(seen[0]) not in live
            assert mode(token_file) == 0o600 and mode(data) == 0o700
            assert await up.stop(signal.SIGTERM) == 0
    assert seen[0] == seen[1] != seen[2]


async def _device_live(api: SpaceClient, space: str) -> bool:
    devices = (await api.devices(space)).devices
    return any(d.peer == "solo" and d.live for d in devices)
