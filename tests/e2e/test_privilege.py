# ruff: noqa: F811  (pytest fixtures imported from device_support are parameters here)
"""Least privilege, round 2 (issue 25): hostile programs and tokens against a real space and
real devices (in-process, with real worker processes).

Each test is an attack that succeeded before its defence: a run that erased its own record
and kept its token alive, …. Each asserts the attack now fails, on the space's side.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
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

from runtime.client.api import ApiError, SpaceClient

RUN_SEES = (
    *("id", "name", "kind", "owner", "enabled", "rev"),
    *("lastStatus", "lastStatusDetail", "lastRunAt", "nextFireAt"),
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


PROBE_NETWORK = """
import socket

def main(args):
    c = use("any@v1")
    found = {}
    for name, port in (("space", args["spacePort"]), ("other", args["otherPort"])):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            found[name] = "connected"
        except OSError as exc:
            found[name] = type(exc).__name__
    try:
        socket.socket().bind(("127.0.0.1", 0))
        found["bind"] = "bound"
    except OSError as exc:
        found["bind"] = type(exc).__name__
    try:
        c.cursor_get("x")
        found["api"] = "answered"
    except Exception as exc:
        found["api"] = type(exc).__name__
    return found
"""


@pytest.mark.parametrize(
    ("network", "expected"),
    [
        ("none", {"space": "PermissionError", "other": "PermissionError", "api": "ApiError"}),
        (None, {"space": "connected", "other": "PermissionError", "api": "answered"}),
        ("any", {"space": "connected", "other": "connected", "api": "answered"}),
    ],
)
async def test_a_program_reaches_only_the_network_its_record_allows(
    space: Space, make_device: MakeDevice, network: str | None, expected: dict[str, str]
) -> None:
    """Before, any run connected anywhere (it held 1,100 connections to the space); now
    `limits.network` is a Landlock TCP rule: `space` (the default) its API's port only."""
    other = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    other_port = other.sockets[0].getsockname()[1]
    await space.publish("probe@v1", PROBE_NETWORK)
    chat = await space.chat("inbox")
    limits = {} if network is None else {"limits": {"network": network}}
    args = {"spacePort": space.port, "otherPort": other_port}
    tid = (await space.event_trigger(chat, program="probe@v1", args=args, **limits))["id"]
    dev = await make_device()
    await dev.active()
    try:
        run = await fired(space, dev, chat, tid, "go")
    finally:
        other.close()
    assert run["status"] == "ok", run
    bind = "bound" if network == "any" else "PermissionError"
    assert run["result"] == {**expected, "bind": bind}, run


FILL_SCRATCH = """
import os

def main(args):
    chunk = b"x" * (1 << 20)
    held = []
    for i in range(args["files"]):
        f = open(f"f{i}", "wb")
        if args["unlink"]:
            os.unlink(f"f{i}")
            held.append(f)
        for _ in range(4):
            f.write(chunk)
        f.flush()
        if not args["unlink"]:
            f.close()
    import time
    time.sleep(args["hold"])
    return {"wrote": args["files"] * 4}
"""


@pytest.mark.parametrize("unlink", [False, True])
async def test_a_run_past_its_scratch_quota_ends_in_error(
    space: Space, make_device: MakeDevice, unlink: bool
) -> None:
    """Before, scratch disk was uncapped (1 GB in 2.5 s); now `limits.diskMB` is measured,
    files unlinked but held open included, and a run past it ends `error` saying why."""
    await space.publish("fill@v1", FILL_SCRATCH)
    chat = await space.chat("inbox")
    limits = {"diskMB": 8, "timeoutSeconds": 20}
    args = {"files": 6, "unlink": unlink, "hold": 5}
    tid = (await space.event_trigger(chat, program="fill@v1", args=args, limits=limits))["id"]
    dev = await make_device()
    await dev.active()
    run = await fired(space, dev, chat, tid, "go")
    assert run["status"] == "error", run
    assert "scratch disk quota exceeded" in run["error"], run
    assert "over the limit of 8 MB (limits.diskMB)" in run["error"], run
    assert run["durationMs"] < 4000, run  # ended as it passed the quota, not at its end


SNOOP = """
import json, urllib.request

def main(args):
    c = use("any@v1")
    ctx = c._ctx
    listed = c.triggers(ctx.space)
    def get(path):
        req = urllib.request.Request(
            f"{ctx.url}/v1/spaces/{ctx.space}{path}",
            headers={"Authorization": f"Bearer {ctx.token}"},
        )
        with urllib.request.urlopen(req, timeout=5) as resp:
            return json.loads(resp.read())
    one = get(f"/triggers/{args['victim']}")
    feed = get("/changes?since=0")
    nudge = {"text": "wake", "agent": {"name": "trigger:payroll"}}
    sent = c.chat_send(ctx.space, args["chat"], nudge)
    return {"listed": listed, "one": one, "feed": feed, "sent": sent["agent"]}
"""


async def test_a_run_token_reads_no_args_and_nudges_only_as_its_trigger(
    space: Space, make_device: MakeDevice
) -> None:
    """Before, a run token read every record's `args` (a planted secret included) and sent
    nudges under any `trigger:` name; now it sees name, kind, owner, enabled and status,
    and its nudge is `trigger:<its own trigger's name>`."""
    await space.publish("snoop@v1", SNOOP)
    chat = await space.chat("inbox")
    planted = "hunter2-planted-secret"
    victim = await space.trigger(
        name="payroll",
        kind="cron",
        spec={"expr": "0 0 1 1 *"},
        program="echo@v1",
        args={"password": planted},
        enabled=False,
    )
    args = {"victim": victim["id"], "chat": chat}
    tid = (await space.event_trigger(chat, name="snoop", program="snoop@v1", args=args))["id"]
    dev = await make_device()
    await dev.active()
    run = await fired(space, dev, chat, tid, "go")
    assert run["status"] == "ok", run
    seen = run["result"]
    assert planted not in json.dumps(seen), seen
    listed = {r["name"]: r for r in seen["listed"]}
    assert set(listed["payroll"]) <= set(RUN_SEES), listed["payroll"]
    assert listed["payroll"]["enabled"] is False and listed["payroll"]["kind"] == "cron"
    assert "args" not in seen["one"] and seen["one"]["name"] == "payroll", seen["one"]
    assert all("args" not in (c["record"] or {}) for c in seen["feed"]["changes"]), seen
    assert seen["sent"]["name"] == "trigger:snoop", seen["sent"]
    stored = [m for m in await space.messages(chat) if m.text == "wake"]
    assert [m.agent.name for m in stored if m.agent] == ["trigger:snoop"], stored


HIJACK = "def main(args):\n    return {'ran': 'the code of device a'}\n"


async def test_a_device_cannot_make_another_device_run_its_code(
    space: Space, make_device: MakeDevice
) -> None:
    """Before, device a published a program and repointed b's pinned trigger to it; b ran
    a's code 3 of 3 times. Now a's token may not reprogram b's record, nor publish the ref
    b's record waits for, and b does not run a program a published onto a floating record
    it runs, unless b is told to (`programs_from="any"`)."""
    chat = await space.chat("inbox")
    pinned = await space.event_trigger(chat, name="b-job", owner="b")
    a_token = await space.device_token("a")
    b = await make_device(peer="b")
    await b.active()
    a = SpaceClient(space.url, a_token)
    try:
        await a.program_put(SPACE, "hijack@v1", {"source": HIJACK})  # a's own program: allowed
        for change in (
            {"program": "hijack@v1"},
            {"args": {"x": 1}},
            {"limits": {"network": "any"}},
        ):
            with pytest.raises(ApiError) as refused:
                await a.trigger_patch(SPACE, pinned["id"], change)
            assert refused.value.status == 403 and "needs the admin token" in refused.value.detail
        with pytest.raises(ApiError) as refused:  # nor a new record pinned to b
            await a.trigger_create(
                SPACE, {**event_spec(chat), "name": "x", "owner": "b", "program": "hijack@v1"}
            )
        assert refused.value.status == 403, refused.value
        waiting = await space.event_trigger(chat, name="b-next", owner="b", program="next@v2")
        with pytest.raises(ApiError) as refused:  # nor be first to publish what b's record runs
            await a.program_put(SPACE, "next@v2", {"source": HIJACK})
        assert refused.value.status == 403 and waiting["id"] in refused.value.detail
        # a floating record with a's program: b (active) refuses to run it
        floating = await a.trigger_create(
            SPACE, {**event_spec(chat), "name": "float", "program": "hijack@v1"}
        )
        run = await fired(space, b, chat, floating["id"], "go")
        assert (run["status"], run["reason"]) == ("error", "untrusted_program"), run
        assert "published by device:a" in run["error"], run
        assert (await space.record(pinned["id"]))["program"] == "echo@v1"
        await a.program_put(SPACE, "mine@v1", {"source": HIJACK})  # a still runs its own
    finally:
        await a.close()


def event_spec(chat: str) -> dict[str, Any]:
    return {"kind": "event", "spec": {"dataset": "chat_messages", "objectId": chat}}


STREAMS = """
import urllib.error, urllib.request

def main(args):
    ctx = use("any@v1")._ctx
    held, statuses = [], []
    for _ in range(args["streams"]):
        req = urllib.request.Request(
            f"{ctx.url}/v1/spaces/{ctx.space}/changes/stream",
            headers={"Authorization": f"Bearer {ctx.token}", "Accept": "text/event-stream"},
        )
        try:
            held.append(urllib.request.urlopen(req, timeout=5))
            statuses.append(200)
        except urllib.error.HTTPError as exc:
            statuses.append((exc.code, exc.headers.get("Retry-After")))
    for resp in held:
        resp.close()
    return {"statuses": statuses}
"""


async def test_a_run_token_holds_a_bounded_number_of_streams(
    space: Space, make_device: MakeDevice
) -> None:
    """Before, a program held as many connections to the space as it liked (1,100: no one
    else could connect); now a run token's streams and requests in flight are capped, the
    ones past the cap answered 429 with `Retry-After`, and the space still answers others."""
    await space.publish("streams@v1", STREAMS)
    chat = await space.chat("inbox")
    tid = (await space.event_trigger(chat, program="streams@v1", args={"streams": 12}))["id"]
    dev = await make_device()
    await dev.active()
    run = await fired(space, dev, chat, tid, "go")
    assert run["status"] == "ok", run
    statuses = run["result"]["statuses"]
    assert statuses[:8] == [200] * 8, statuses
    assert statuses[8:] == [[429, "1"]] * 4, statuses
    assert (await space.record(tid))["id"] == tid  # the admin is not held up


async def test_slow_headers_are_cut_and_the_space_still_answers(space: Space) -> None:
    """Before, 1,500 connections sending their headers slowly were held 45 s, none closed;
    now a request's headers must be in within the header timeout of its first byte."""
    await space.stop()
    space.header_timeout = 0.5
    await space.start()
    held = []
    for _ in range(100):
        reader, writer = await asyncio.open_connection("127.0.0.1", space.port)
        writer.write(b"GET /v1/spaces HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        held.append((reader, writer))
    idle = [await asyncio.open_connection("127.0.0.1", space.port) for _ in range(20)]
    try:
        assert (await space.api.space_get(SPACE)).id == SPACE
        async with asyncio.timeout(10):
            for reader, _ in [*held, *idle]:
                assert await reader.read() == b""  # closed by the space
        assert (await space.api.space_get(SPACE)).id == SPACE
    finally:
        for _, writer in [*held, *idle]:
            writer.close()


DIGEST = """
import hashlib

def main(args):
    return {"digest": hashlib.sha256(args["key"].encode()).hexdigest()}
"""


async def test_a_secret_is_resolved_on_its_device_and_never_stored_in_the_space(
    space: Space, make_device: MakeDevice, tmp_path: Path
) -> None:
    """Before, a secret had no home but `args`, stored in the space and read by every run
    token; now `{"secret": NAME}` is resolved from the running device's own secrets file."""
    value = "s3cr3t-" + "x" * 20
    secrets_file = tmp_path / "secrets.json"
    secrets_file.touch(mode=0o600)
    secrets_file.write_text(json.dumps({"API_KEY": value}))
    await space.publish("digest@v1", DIGEST)
    chat = await space.chat("inbox")
    args = {"key": {"secret": "API_KEY"}}
    tid = (await space.event_trigger(chat, name="uses", program="digest@v1", args=args))["id"]
    missing = {"key": {"secret": "NOPE"}}
    other = await space.event_trigger(chat, name="lacks", program="digest@v1", args=missing)
    dev = await make_device(secrets_file=secrets_file)
    await dev.active()
    run = await fired(space, dev, chat, tid, "go")
    assert run["result"] == {"digest": hashlib.sha256(value.encode()).hexdigest()}, run
    lacking = (await space.until_runs(other["id"], 1))[-1]
    assert (lacking["status"], lacking["reason"]) == ("error", "secret"), lacking
    assert "'NOPE' is not in this device's secrets file" in lacking["error"], lacking
    assert (await space.record(tid))["args"] == args  # the space holds the name only
    stored = b"".join(p.read_bytes() for p in space.db.parent.glob(space.db.name + "*"))
    assert value.encode() not in stored


ENDINGS = """
import os, time

def main(args):
    c = use("any@v1")
    c.cursor_set("token", c._ctx.token)  # a copy sent out of the run
    if args["end"] == "timeout":
        time.sleep(30)
    if args["end"] == "crashed":
        os._exit(3)
    if args["end"] == "error":
        raise RuntimeError("boom")
    return {"ok": True}
"""


@pytest.mark.parametrize("end", ["ok", "error", "timeout", "crashed"])
async def test_a_run_token_dies_as_its_run_ends_however_it_ends(
    space: Space, make_device: MakeDevice, end: str
) -> None:
    """A copy of the run's token sent out of the run is refused as soon as the run's record
    is there, whether the run returned, raised, timed out or died: not at its expiry."""
    await space.publish("endings@v1", ENDINGS)
    chat = await space.chat("inbox")
    limits = {"timeoutSeconds": 1}
    args = {"end": end}
    tid = (await space.event_trigger(chat, program="endings@v1", args=args, limits=limits))["id"]
    dev = await make_device()
    await dev.active()
    run = await fired(space, dev, chat, tid, "go")
    assert run["status"] == end, run
    token = (await space.api.state_get(SPACE, tid, "token"))["value"]
    status, body = await use_token(space, token, "GET", f"/state/{tid}/token")
    assert (status, body["error"]) == (401, "token_revoked"), body


async def test_a_device_told_to_runs_another_devices_program(
    space: Space, make_device: MakeDevice
) -> None:
    """`programs_from="any"` (`--programs-from any`): the owner's consent to run the
    programs every device of its space publishes."""
    chat = await space.chat("inbox")
    a = SpaceClient(space.url, await space.device_token("a"))
    try:
        await a.program_put(SPACE, "hijack@v1", {"source": HIJACK})
        body = {**event_spec(chat), "name": "float", "program": "hijack@v1"}
        floating = await a.trigger_create(SPACE, body)
    finally:
        await a.close()
    b = await make_device(peer="b", programs_from="any")
    await b.active()
    run = await fired(space, b, chat, floating["id"], "go")
    assert (run["status"], run["result"]) == ("ok", {"ran": "the code of device a"}), run
