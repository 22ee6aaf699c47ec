"""The failover tests' household: device processes started and stopped at will, and
what the space recorded (its runs, claims and agent turns), read by the admin client.

One server (tests/e2e/test_failover.py, on a SQLite file) or several on one PostgreSQL
database (pg_household.py): each device talks to one, the servers in turn by first
start. The constants are the tests': a 3 s lease and an every-second cron.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from support import Proc, Procs, duplicates, eventually, fires_of, runs_of, write_token

from core.chatwire import Message
from runtime.client.api import SpaceClient

SPACE = "home"
LEASE = 3.0
PEERS = ("a", "b", "c")
QUICK = 'def main(args):\n    return {"ok": True}\n'
EVERY_SECOND = {"kind": "cron", "spec": {"expr": "* * * * * *"}, "program": "quick@v1"}
S = timedelta(seconds=1)
SETTLE = 20.0  # a takeover, its bridge and the runs it queues, on a busy 2-core machine
LEASE_FLAGS = ("--lease-seconds", str(LEASE), "--live-seconds", str(2 * LEASE))


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


class Household:
    """The space's servers (`urls`), devices started and stopped at will, and what the space
    recorded. A device talks to one server: the servers in turn by first start, the same
    one when it is started again."""

    def __init__(self, procs: Procs, api: SpaceClient, *urls: str) -> None:
        self.procs, self.api, self.urls = procs, api, urls
        self.server_of: dict[str, int] = {}
        self.devices: dict[str, Proc] = {}
        self.chat = ""
        self.general = ""

    async def prepare(self) -> Household:
        """The space, its `feed` chat and the `quick@v1` program."""
        self.general = (await self.api.space_create({"id": SPACE})).generalChat
        self.chat = (await self.api.chat_create(SPACE, {"name": "feed"}))["objectId"]
        await self.api.program_put(SPACE, "quick@v1", {"source": QUICK})
        return self

    def url_of(self, peer: str) -> str:
        return self.urls[self.server_of.setdefault(peer, len(self.server_of) % len(self.urls))]

    async def start(self, peer: str) -> Proc:
        token = self.procs.logs / f"{peer}.token"
        if not token.exists():
            minted = await self.api.token_device({"peer": peer, "space": SPACE})
            write_token(token, minted["token"])
        where = ("--url", self.url_of(peer), "--token-file", str(token), "--space", SPACE)
        tuning = ("--health-seconds", "1", "--workers", "1", "--data", str(self.procs.logs / peer))
        proc = await self.procs.start(
            f"{peer}-{len(self.procs.started)}", "device", "--peer", peer, *where, *tuning
        )
        self.devices[peer] = proc
        return proc

    async def holder(self) -> str:
        """The device holding the lease, once every running device is live."""

        async def settled() -> str | None:
            listed = (await self.api.devices(SPACE)).devices
            live = {d.peer for d in listed if d.live}
            running = {p for p, proc in self.devices.items() if proc.running}
            active = (await self.api.election(SPACE)).active
            return active if running <= live and active in running else None

        return await eventually(settled, timeout=SETTLE, what="a holder among the running devices")

    async def first_run(self, trigger: str) -> str:
        """Wait for `trigger`'s first run; the holder then."""
        await eventually(lambda: self.slots(trigger), timeout=SETTLE, what="a first run")
        return await self.holder()

    async def bridged_holder(self) -> str:
        """The holder once it has bridged its term: a restarted holder that renewed its term,
        or a standby that took over (whichever it was, its own process said so)."""

        async def done() -> str | None:
            election = await self.api.election(SPACE)
            proc = self.devices.get(election.active or "")
            if proc is None or not proc.running:
                return None
            told = f"takeover at term {election.term}: bridging from" in proc.output()
            return election.active if told else None

        return await eventually(done, timeout=SETTLE, what="a holder that bridged its term")

    async def cron(self, name: str) -> dict[str, Any]:
        return await self.api.trigger_create(SPACE, {**EVERY_SECOND, "name": name})

    async def event(self, name: str) -> dict[str, Any]:
        spec = {"dataset": "chat_messages", "objectId": self.chat}
        body = {"kind": "event", "name": name, "spec": spec, "program": "quick@v1"}
        return await self.api.trigger_create(SPACE, body)

    async def send(self, chat: str, text: str) -> Message:
        return await self.api.chat_send(SPACE, chat, {"text": text})

    async def keys(self, trigger: str) -> list[str]:
        return [r["key"] for r in await runs_of(self.api, SPACE, trigger)]

    async def slots(self, trigger: str) -> list[datetime]:
        return sorted(at(k) for k in await self.keys(trigger))

    async def answered(self) -> list[str]:
        """Message ids chat-watch's turns took up, in the order of the turns."""
        turns = (await self.api.turns(SPACE, limit=1000))["turns"]
        return [m for t in turns for m in t["messageIds"]]

    async def every_slot(self, trigger: str, first: datetime, last: datetime) -> list[datetime]:
        """Wait until the trigger has run every second in [first, last]; its slots."""

        async def complete() -> list[datetime] | None:
            slots = await self.slots(trigger)
            want = {first + i * S for i in range(int((last - first) / S) + 1)}
            return slots if want <= set(slots) else None

        return await eventually(
            complete, timeout=SETTLE, what=f"every slot of {trigger} from {first} to {last}"
        )

    async def fired_for(self, trigger: str, messages: list[Message]) -> list[str]:
        ids = {m.message_id for m in messages}

        async def all_in() -> list[str] | None:
            keys = await self.keys(trigger)
            return keys if ids <= set(keys) else None

        return await eventually(all_in, timeout=SETTLE, what=f"{trigger} fired for {len(ids)}")

    async def chat_watch_took(self, messages: list[Message]) -> list[str]:
        ids = {m.message_id for m in messages}

        async def all_in() -> list[str] | None:
            took = await self.answered()
            return took if ids <= set(took) else None

        return await eventually(all_in, timeout=SETTLE, what="chat-watch took them up")

    async def no_duplicate_claims(self, *triggers: str) -> None:
        for tid in triggers:
            assert duplicates([f["key"] for f in await fires_of(self.api, SPACE, tid)]) == []
            assert duplicates(await self.keys(tid)) == []
        assert duplicates(await self.answered()) == []
