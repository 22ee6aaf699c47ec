# ruff: noqa: F811  (pytest fixtures imported from device_support are parameters here)
"""Least privilege, round 2 (issue 25): hostile programs and tokens against a real space and
real devices (in-process, with real worker processes).

Each test is an attack that succeeded before its defence: a run that erased its own record
and kept its token alive, …. Each asserts the attack now fails, on the space's side.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from device_support import (  # noqa: F401  (the fixtures are used by name)
    SPACE,
    MakeDevice,
    Running,
    Space,
    Spaces,
    make_device,
    space,
    spaces,
)

UNSTORABLE = """
def main(args):
    c = use("any@v1")
    c.cursor_set("token", c._ctx.token)
    if args["shape"] == "wide":
        return {"n": 2**70}
    deep = {}
    for _ in range(70):
        deep = {"d": deep}
    return deep
"""


async def fired(space: Space, dev: Running, chat: str, tid: str, text: str) -> dict[str, Any]:
    """Send `text` into `chat` and wait for `tid`'s next run; that run."""
    await dev.live(chat, tid)
    before = len(await space.runs(tid))
    await space.send(chat, text)
    return (await space.until_runs(tid, before + 1, timeout=20))[-1]


async def use_token(space: Space, token: str, method: str, path: str, body: Any = None) -> tuple:
    async with aiohttp.ClientSession() as session:
        headers = {"Authorization": f"Bearer {token}"}
        url = f"{space.url}/v1/spaces/{SPACE}{path}"
        async with session.request(method, url, json=body, headers=headers) as resp:
            return resp.status, await resp.json()


@pytest.mark.parametrize(
    ("shape", "why"),
    [("wide", "integer beyond 64 bits - at `$.n`"), ("deep", "JSON nested deeper than 64")],
)
async def test_a_result_the_space_cannot_take_is_an_error_and_its_token_dies(
    space: Space, make_device: MakeDevice, shape: str, why: str
) -> None:
    await space.publish("unstorable@v1", UNSTORABLE)
    chat = await space.chat("inbox")
    tid = (await space.event_trigger(chat, program="unstorable@v1", args={"shape": shape}))["id"]
    dev = await make_device()
    await dev.active()

    run = await fired(space, dev, chat, tid, "go")
    assert (run["status"], run["result"]) == ("error", None), run
    assert f"result cannot be stored: {why}" in run["error"], run
    record = await space.until_stamped(tid, "error")
    assert "result cannot be stored" in record["lastStatusDetail"], record
    token = (await space.api.state_get(SPACE, tid, "token"))["value"]
    status, body = await use_token(space, token, "GET", f"/state/{tid}/token")
    assert (status, body["error"]) == (401, "token_revoked"), body
