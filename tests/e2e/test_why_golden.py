"""`baton why`, golden: real processes make each reason happen, `baton why` explains it.

A `baton space serve` with a 3 s lease and two `baton device` processes share an
every-second floating trigger. What happens is real: runs, a pause with a note from the
CLI, a holder SIGKILLed (nobody up until the next device starts), a zombie's refused
claim, the agent asked in the chat. Each slot's answer is read with `baton why` (a
process too), and read again after the space and every device restarted: nothing of it
lives only in memory.
"""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from support import Proc, Procs, eventually, runs_of, serve, write_token

from core.chatwire import WIRE_MESSAGE, each
from runtime.client.api import ApiError, SpaceClient

SPACE = "home"
QUICK = 'def main(args):\n    return {"ok": True}\n'
TICK = {"name": "tick", "kind": "cron", "spec": {"expr": "* * * * * *"}, "program": "quick@v1"}
SETTLE = 20.0
S = timedelta(seconds=1)


class House:
    def __init__(self, procs: Procs, db: Path) -> None:
        self.procs, self.db = procs, db
        self.url, self.admin = "", procs.logs / "admin.token"
        self.api: SpaceClient | None = None
        self.space: Proc | None = None
        self.devices: dict[str, Proc] = {}

    @property
    def client(self) -> SpaceClient:
        assert self.api is not None
        return self.api

    async def serve(self) -> None:
        lease = (
            "--lease-seconds",
            "3",
            "--live-seconds",
            "6",
            "--admin-token-file",
            str(self.admin),
        )
        self.space, self.url = await serve(self.procs, self.db, *lease)
        if self.api is not None:
            await self.api.close()
        self.api = SpaceClient(self.url, self.admin.read_text().strip())

    async def device(self, peer: str) -> Proc:
        token = self.procs.logs / f"{peer}.token"
        if not token.exists():
            write_token(
                token, (await self.client.token_device({"peer": peer, "space": SPACE}))["token"]
            )
        where = ("--url", self.url, "--token-file", str(token), "--space", SPACE)
        tuning = ("--health-seconds", "1", "--workers", "1", "--lease-seconds", "3")
        data = ("--data", str(self.procs.logs / peer))
        proc = await self.procs.start(
            f"{peer}-{len(self.procs.started)}", "device", "--peer", peer, *where, *tuning, *data
        )
        self.devices[peer] = proc
        return proc

    async def holder(self, peer: str) -> None:
        async def holds() -> bool:
            return (await self.client.election(SPACE)).active == peer

        await eventually(holds, timeout=SETTLE, what=f"{peer} holding the lease")

    async def why(self, *args: str) -> dict[str, Any]:
        """`baton why … --json`, as a process."""
        flags = ("--url", self.url, "--token-file", str(self.admin), "--space", SPACE, "--json")
        code, out = await self.procs.run(f"why-{len(self.procs.started)}", "why", *args, *flags)
        assert code == 0, out
        return json.loads(out.strip().splitlines()[-1])

    async def why_text(self, *args: str) -> str:
        flags = ("--url", self.url, "--token-file", str(self.admin), "--space", SPACE)
        code, out = await self.procs.run(f"why-{len(self.procs.started)}", "why", *args, *flags)
        assert code == 0, out
        return out

    async def ok_runs(self, tid: str, after: datetime) -> list[dict[str, Any]]:
        async def some() -> list[dict[str, Any]] | None:
            runs = [r for r in await runs_of(self.client, SPACE, tid) if r["status"] == "ok"]
            later = [r for r in runs if datetime.fromisoformat(r["key"]) > after]
            return later or None

        return await eventually(some, timeout=SETTLE, what=f"a run of {tid} after {after}")


@pytest.fixture
async def house(tmp_path: Path) -> AsyncIterator[House]:
    async with Procs(tmp_path) as procs:
        held = House(procs, tmp_path / "space.db")
        await held.serve()
        await held.client.space_create({"id": SPACE})
        await held.client.program_put(SPACE, "quick@v1", {"source": QUICK})
        try:
            yield held
        finally:
            await held.client.close()


def whole(t: datetime) -> datetime:
    return t.replace(microsecond=0) + S


def key(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_each_reason_happens_for_real_and_why_explains_it_after_restarts(
    house: House,
) -> None:
    api = house.client
    tid = (await api.trigger_create(SPACE, TICK))["id"]
    await house.device("a")
    await house.holder("a")
    fired = (await house.ok_runs(tid, datetime.fromisoformat("2000-01-01T00:00:00+00:00")))[0]
    got = await house.why("tick", "--at", fired["key"])
    assert (got["verdict"], got["run"]["runId"]) == ("fired", fired["runId"])
    assert all(c["ok"] for c in got["checks"]) and "on a at term 1" in got["detail"]

    flags = ("--url", house.url, "--token-file", str(house.admin), "--space", SPACE)
    code, out = await house.procs.run(
        "pause", "triggers", "pause", tid, "--note", "maintenance window", *flags
    )
    assert code == 0, out

    async def paused_slot() -> str | None:
        answer = await api.trigger_why(SPACE, tid)
        return answer["slot"] if answer["reason"] == "paused" else None

    paused_at = await eventually(paused_slot, timeout=SETTLE, what="a slot passing paused")
    text = await house.why_text(tid, paused_at)
    assert "verdict  not_fired: paused" in text and "✗ enabled" in text
    assert 'by admin (rev 2): "maintenance window"' in text and f"triggers resume {tid}" in text

    resumed = datetime.now().astimezone()
    assert (await house.procs.run("resume", "triggers", "resume", tid, *flags))[0] == 0
    await house.ok_runs(tid, resumed)

    await house.devices["a"].kill()  # SIGKILL: no release, no last word
    killed = datetime.now().astimezone()
    down = whole(killed) + 3 * S  # a slot while nobody is up (past the heartbeat slack)

    async def nobody_up() -> dict[str, Any] | None:
        answer = await api.trigger_why(SPACE, tid, at=down.isoformat())
        return answer if answer["reason"] == "no_device_up" else None

    got = await eventually(nobody_up, timeout=SETTLE, what="the slot after the kill explained")
    assert "the holder a was not up" in got["detail"]

    async def lapsed() -> bool:
        return (await api.election(SPACE)).active is None

    await eventually(lapsed, timeout=SETTLE, what="a's lease lapsing")
    stale = whole(datetime.now(UTC))  # a slot while nobody is up, after a's term

    async def passed_unfired() -> bool:
        answer = await api.trigger_why(SPACE, tid, at=stale.isoformat())
        return bool(answer["reason"] == "no_device_up")

    await eventually(passed_unfired, timeout=SETTLE, what="a slot passing with nobody up")
    await house.device("b")
    await house.holder("b")
    after_b = await house.ok_runs(tid, datetime.now().astimezone())
    assert after_b[0]["peer"] == "b"
    zombie = SpaceClient(house.url, (house.procs.logs / "a.token").read_text().strip())
    async with zombie:  # a late claim of the dead holder's, at its old term
        with pytest.raises(ApiError) as refused:
            await zombie.fires_claim(
                SPACE, {"triggerId": tid, "key": key(stale), "term": 1, "peer": "a"}
            )
    assert refused.value.code == "stale_term"
    got = await house.why("tick", "--at", down.isoformat())
    assert got["reason"] == "no_device_up" and "no device was up" in got["detail"]
    got = await house.why("tick", "--key", key(stale))
    assert got["reason"] == "no_device_up", got  # nobody was up: the zombie came later
    assert got["detail"].endswith("a claim of it was refused too: a at term 1, stale_term")

    general = (await api.space_get(SPACE)).generalChat
    asked = await api.chat_send(SPACE, general, {"text": "why didn't tick fire?"})

    async def replied() -> str | None:
        page = await api.chat_messages(SPACE, general, after=asked.seq)
        got, _ = each(page.messages, WIRE_MESSAGE)
        done = [m.text for m in got if m.agent is not None and m.agent.done is not False]
        return done[0] if done else None

    reply = await eventually(replied, timeout=SETTLE, what="the agent's answer in the chat")
    assert "- tick: " in reply and "at 20" in reply
    got = await house.why("chat-watch", "--key", asked.message_id)  # its fires are turns
    assert (got["verdict"], got["reason"]) == ("fired", "fired"), got
    assert got["run"]["messageIds"] == [asked.message_id] and got["run"]["outcome"] == "ok"

    asked_before = {
        k: await house.why("tick", "--at", k)
        for k in (fired["key"], paused_at, down.isoformat(), stale.isoformat())
    }
    await house.devices["b"].stop(signal.SIGINT)
    assert house.space is not None
    await house.space.stop(signal.SIGINT)
    await house.serve()  # the same file, a new process
    for k, before in asked_before.items():
        again = await house.why("tick", "--at", k)
        kept = ("slot", "key", "verdict", "reason", "detail")
        assert {n: again.get(n) for n in kept} == {n: before.get(n) for n in kept}, k
