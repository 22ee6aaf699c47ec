# ruff: noqa: F811  (pytest fixtures imported from device_support are parameters here)
"""Hostile programs, run by a real device against a real space, try their run token on what it
must not reach (SPEC "Containment and credentials").

Each program reports what the space answered it; the test then checks the space's side:
a record a program tried to reprogram is unchanged, a token whose run has ended (returned,
or left in state by a run that timed out) is a 401 when used afterwards, and the device
keeps firing a canary trigger after every attack.
"""

from __future__ import annotations

from typing import Any

import aiohttp
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

RAW = """
import json, urllib.error, urllib.request

def raw(method, path, body=None):
    ctx = use("any@v1")._ctx
    data = None if body is None else json.dumps(body).encode()
    head = {"Authorization": "Bearer " + ctx.token, "Content-Type": "application/json"}
    request = urllib.request.Request(ctx.url + "/v1" + path, data=data, headers=head,
                                     method=method)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as resp:
            return {"status": resp.status}
    except urllib.error.HTTPError as exc:
        return {"status": exc.code, **json.loads(exc.read())}

def attempt(call):
    try:
        call()
    except Exception as exc:
        return {"status": exc.status, "error": exc.code, "detail": exc.detail}
    return {"status": 200}
"""

ATTACK_MAIN = """
def main(args):
    c, space, victim = use("any@v1"), args["space"], args["victim"]
    s = "/spaces/" + space
    me = c.context["trigger_id"]
    return {
        "program": attempt(lambda: c.trigger_patch(space, victim, {"program": "evil@v1"})),
        "args": attempt(lambda: c.trigger_patch(space, victim, {"args": {"steal": True}})),
        "spec": attempt(lambda: c.trigger_patch(space, me, {"spec": {"expr": "* * * * *"}})),
        "pause": attempt(lambda: c.trigger_patch(space, args["pausable"], {"enabled": False})),
        "repin": attempt(lambda: c.trigger_patch(space, args["pausable"], {"owner": "box"})),
        "list": attempt(lambda: c.triggers(space)),
        "state": raw("GET", s + "/state/" + victim + "/secret"),
        "run": raw("POST", s + "/runs", {"runId": "run_forged", "triggerId": victim,
                                          "startedAt": "2026-12-01T09:00:00Z",
                                          "status": "ok"}),
        "stamp": raw("POST", s + "/triggers/" + victim + "/status", {"lastStatus": "ok"}),
        "claim": raw("POST", s + "/fires", {"triggerId": victim, "key": "k", "term": 0,
                                             "peer": "dev1"}),
        "token": raw("POST", s + "/tokens/run", {"triggerId": victim, "runId": "r"}),
        "device": raw("POST", "/tokens/device", {"peer": "evil", "space": space}),
        "election": raw("POST", s + "/election/claim", {"peer": "dev1", "term": 0}),
        "turn": raw("POST", s + "/turns", {}),
        "said": c.chat_send(space, args["quiet"], {"text": "as a person?", "agent": None}),
    }
"""
ATTACK = RAW + ATTACK_MAIN

LEAK = """
def main(args):
    return {"token": use("any@v1")._ctx.token}
"""

LINGER = """
import time

def main(args):
    c = use("any@v1")
    c.cursor_set("token", c._ctx.token)
    time.sleep(60)
"""

VICTIM_ARGS = {"secret": "the victim's"}


async def fired(space: Space, dev: Running, chat: str, tid: str, text: str) -> dict[str, Any]:
    """Send `text` into `chat` and wait for `tid`'s next run; that run."""
    await dev.live(chat, tid)
    before = len(await space.runs(tid))
    await space.send(chat, text)
    return (await space.until_runs(tid, before + 1, timeout=20))[-1]


async def use_token(space: Space, token: str, method: str, path: str, body: Any) -> tuple:
    async with aiohttp.ClientSession() as session:
        headers = {"Authorization": f"Bearer {token}"}
        url = f"{space.url}/v1/spaces/{SPACE}{path}"
        async with session.request(method, url, json=body, headers=headers) as resp:
            return resp.status, await resp.json()


async def canary_fires(space: Space, dev: Running, chat: str, canary: str) -> None:
    """The device is up and firing after the attack."""
    assert not dev.task.done()
    run = await fired(space, dev, chat, canary, "still there?")
    assert run["status"] == "ok", run


async def test_a_program_cannot_reprogram_another_trigger_or_reach_device_routes(
    space: Space, make_device: MakeDevice
) -> None:
    await space.publish("echo@v1")
    await space.publish("attack@v1", ATTACK)
    quiet, chat = await space.chat("quiet"), await space.chat("inbox")
    victim = await space.event_trigger(quiet, args=VICTIM_ARGS)
    pausable = await space.event_trigger(quiet)
    args = {"space": SPACE, "victim": victim["id"], "pausable": pausable["id"], "quiet": quiet}
    attacker = await space.event_trigger(chat, program="attack@v1", args=args)
    canary = await space.event_trigger(chat)
    await space.api.state_put(SPACE, victim["id"], "secret", {"value": "hidden"})
    dev = await make_device()
    await dev.active()

    run = await fired(space, dev, chat, attacker["id"], "go")
    tried = run["result"]
    assert run["status"] == "ok", run
    for field in ("program", "args", "spec"):
        assert (tried[field]["status"], tried[field]["error"]) == (403, "forbidden"), tried
        assert f"`$.{field}`" in tried[field]["detail"], tried[field]
    assert tried["pause"]["status"] == tried["repin"]["status"] == tried["list"]["status"] == 200
    for name in ("state", "run", "stamp", "claim", "token", "device", "election", "turn"):
        assert tried[name]["status"] == 403, (name, tried[name])
    after = await space.record(victim["id"])
    assert (after["program"], after["args"], after["rev"]) == ("echo@v1", VICTIM_ARGS, 1)
    assert [r["runId"] for r in await space.runs(victim["id"])] == []
    assert tried["said"]["agent"]["name"] == "attack@v1"  # a run token speaks as the agent
    paused = await space.record(pausable["id"])
    assert (paused["enabled"], paused["owner"]) == (False, "box")
    await canary_fires(space, dev, chat, canary["id"])


async def test_a_token_kept_after_its_run_is_refused(space: Space, make_device: MakeDevice) -> None:
    await space.publish("echo@v1")
    await space.publish("leak@v1", LEAK)
    chat = await space.chat("inbox")
    leaker = await space.event_trigger(chat, program="leak@v1")
    canary = await space.event_trigger(chat)
    dev = await make_device()
    await dev.active()

    run = await fired(space, dev, chat, leaker["id"], "leak it")
    token = run["result"]["token"]
    status, body = await use_token(space, token, "PUT", f"/state/{leaker['id']}/k", {"value": 1})
    assert (status, body["error"]) == (401, "token_revoked"), body
    general = (await space.api.space_get(SPACE)).generalChat
    status, body = await use_token(
        space, token, "POST", f"/chats/{general}/messages", {"text": "after the end"}
    )
    assert status == 401, body
    await canary_fires(space, dev, chat, canary["id"])


async def test_a_token_left_behind_by_a_run_that_timed_out_is_refused(
    space: Space, make_device: MakeDevice
) -> None:
    await space.publish("echo@v1")
    await space.publish("linger@v1", LINGER)
    chat = await space.chat("inbox")
    limits = {"timeoutSeconds": 1}
    lingerer = await space.event_trigger(chat, program="linger@v1", limits=limits)
    canary = await space.event_trigger(chat)
    dev = await make_device()
    await dev.active()

    run = await fired(space, dev, chat, lingerer["id"], "stay")
    assert run["status"] == "timeout", run
    token = (await space.api.state_get(SPACE, lingerer["id"], "token"))["value"]
    status, body = await use_token(space, token, "GET", f"/state/{lingerer['id']}/token", None)
    assert (status, body["error"]) == (401, "token_revoked"), body
    await canary_fires(space, dev, chat, canary["id"])
