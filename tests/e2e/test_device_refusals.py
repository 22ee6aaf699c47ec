"""`baton device` refused for good by the space: one line and exit 1, never a retry loop.

A token the space does not know (401), one bound to another space (403), another peer's
token (403) are permanent: the device says so in
one line and exits 1 at once, with nothing else (no warning per retry, no "Unclosed
client session" at exit). A space that is not up yet is not a refusal: the device waits.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support import Procs, serve, write_token

from runtime.client.api import SpaceClient

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    ("peer", "token", "space", "says"),
    [
        ("a", "unknown", "home", "401 unauthorized: unknown bearer token"),
        ("a", "a", "other", "403 forbidden: this device token is bound to space 'home'"),
        ("b", "a", "home", "403 forbidden: this token is for peer 'a', it may not act as 'b'"),
    ],
)
async def test_a_permanent_refusal_is_one_line_and_exit_1(
    tmp_path: Path, peer: str, token: str, space: str, says: str
) -> None:
    async with Procs(tmp_path) as procs:
        _, url = await serve(procs, tmp_path / "space.db")
        admin = (tmp_path / "admin.token").read_text().strip()
        async with SpaceClient(url, admin) as api:
            await api.space_create({"id": "home"})
            await api.space_create({"id": "other"})
            minted = (await api.token_device({"peer": "a", "space": "home"}))["token"]
        secret = minted if token == "a" else "bt_" + "0" * 40
        where = ("--url", url, "--token-file", str(write_token(tmp_path / "t.token", secret)))
        argv = ("device", "--peer", peer, *where, "--space", space, "--data", str(tmp_path / "d"))
        code, output = await procs.run("device", *argv, timeout=15)
        joining, *rest = output.splitlines()
        assert code == 1, output
        assert joining.startswith(f"baton: device {peer!r} joining {url}"), output
        assert len(rest) == 1 and rest[0].startswith("baton device: refused by the space: "), output
        assert says in rest[0], output
