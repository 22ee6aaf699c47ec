"""Least privilege, round 2 (issue 25), point 6, with real `baton` processes: a revoked
device stops, `baton space token` mints for the space the user named, and the admin token
makes nothing for a space that does not exist. (`baton up` and the dashboard line:
tests/space/test_dashboard.py.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
from support import Procs, eventually, serve, write_token

from runtime.client.api import ApiError, SpaceClient
from space.token_store import token_id


async def test_a_revoked_device_stops_with_one_line(tmp_path: Path) -> None:
    """Before, a revoked device retried its 401s forever; now it exits 1 saying why."""
    async with Procs(tmp_path) as procs:
        _, url = await serve(procs, tmp_path / "space.db")
        admin = SpaceClient(url, (tmp_path / "admin.token").read_text().strip())
        try:
            await admin.space_create({"id": "home"})
            minted = await admin.token_device({"peer": "laptop", "space": "home"})
            token = write_token(tmp_path / "laptop.token", minted["token"])
            where = ("--url", url, "--token-file", str(token), "--space", "home")
            device = await procs.start(
                "device", "device", "--peer", "laptop", *where, "--data", str(tmp_path / "d")
            )

            async def beating() -> bool:
                listed = (await admin.devices("home")).devices
                return any(d.peer == "laptop" for d in listed)

            await eventually(beating, timeout=20, what="the device's first heartbeat")
            await admin.token_revoke(token_id(minted["token"]))
        finally:
            await admin.close()
        async with asyncio.timeout(20):  # it stops by itself
            code = await device.proc.wait()
        out = device.output()
        told = [line for line in out.splitlines() if line.startswith("baton device:")]
        assert code == 1, out
        assert len(told) == 1 and "token_revoked" in told[0], out
        assert "baton space token --peer laptop --space home" in told[0], out


async def test_space_token_mints_for_the_space_the_user_named(tmp_path: Path) -> None:
    """Before, `baton space token` without `--db` ignored `BATON_URL` and wrote the token into
    the default local database (a space the user did not name); now it asks the named space,
    and no token or lease is made for a space that does not exist."""
    async with Procs(tmp_path) as procs:
        _, url = await serve(procs, tmp_path / "space.db")
        admin_file = tmp_path / "admin.token"
        admin = SpaceClient(url, admin_file.read_text().strip())
        try:
            await admin.space_create({"id": "home"})
            data = tmp_path / "elsewhere"
            code, out = await procs.run(
                "mint",
                "space",
                "token",
                "--peer",
                "laptop",
                "--space",
                "home",
                "--url",
                url,
                "--token-file",
                str(admin_file),
                "--data",
                str(data),
            )
            token = out.strip().splitlines()[-1]
            assert code == 0 and token.startswith("btd_"), out
            assert not (data / "space.db").exists()  # not the default local database
            async with aiohttp.ClientSession() as session:
                headers = {"Authorization": f"Bearer {token}"}
                async with session.get(f"{url}/v1/spaces/home/triggers", headers=headers) as r:
                    assert r.status == 200  # minted by the space that was named
            code, out = await procs.run(
                "nospace",
                "space",
                "token",
                "--peer",
                "laptop",
                "--space",
                "nowhere",
                "--url",
                url,
                "--token-file",
                str(admin_file),
                "--data",
                str(data),
            )
            assert code == 2 and "unknown_space" in out, out
            for make in (
                lambda: admin.token_device({"peer": "x", "space": "nowhere"}),
                lambda: admin.call("election_claim", {"peer": "x", "term": 1}, space="nowhere"),
            ):
                try:
                    await make()
                except ApiError as exc:
                    assert (exc.status, exc.code) == (404, "unknown_space"), exc
                else:
                    raise AssertionError("made for a space that does not exist")
        finally:
            await admin.close()
