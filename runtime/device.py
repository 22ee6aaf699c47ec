"""One device of the agent: the parts of the runtime composed and wired together.

Owns the wiring only (SPEC "Reconcile, registry, health pass", "Who runs what"):
the reconciler's diffs go to the ticker, the chat subscriptions and the firing
pipeline; the election's flips re-sync responsibility, and a takeover bridges
what came while this device did not hold the lease (runtime.takeover says from
when); a detected sleep makes every part distrust what it knew and starts a new
instance (the space's `upSince` restarts). The parts run supervised
(runtime.supervise): one that dies is restarted while the device holds no lease,
and one that keeps dying stops the device. It must not decide anything the parts
decide.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Coroutine
from datetime import datetime, timedelta
from typing import Any

import msgspec

from core.clock import Clock, SystemClock, iso
from programs.executor import Executor
from programs.loader import ProgramCache
from runtime.chatwatch import ChatWatch
from runtime.client import ApiError, SpaceClient
from runtime.election import Elector
from runtime.execute import Execute, program_fetch
from runtime.firing import Firing
from runtime.healthpass import HealthPass
from runtime.lease import Config as LeaseConfig
from runtime.readiness import Readiness
from runtime.reconciler import Reconciler
from runtime.recorder import Recorder
from runtime.responders import BuiltinResponder, Responder
from runtime.sleepwatch import SleepWatch
from runtime.subscriptions import Subscriptions
from runtime.supervise import Supervisor
from runtime.takeover import BRIDGE_WINDOW, Takeover
from runtime.ticker import Ticker
from triggers.records import CHAT_WATCH_PROGRAM, RESERVED_CHAT_WATCH, PeerId
from triggers.registry import Diff

log = logging.getLogger("baton.device")

CHAT_WATCH_NAME = "Chat responder"
SEED_RETRY_MIN, SEED_RETRY_MAX = 1.0, 30.0


class Device:
    """A device of one space: `await run()` until cancelled; it stops cleanly."""

    def __init__(
        self,
        *,
        url: str,
        token: str,
        space: str,
        peer: str,
        name: str = "",
        priority: int = 0,
        clock: Clock | None = None,
        executor_size: int | None = None,
        responder: Responder | None = None,
        lease: LeaseConfig | None = None,
        bridge_seconds: float = BRIDGE_WINDOW.total_seconds(),
        health_interval: float = 30.0,
    ) -> None:
        self.space, self.peer = space, PeerId(peer)
        self.clock = clock or SystemClock()
        self.client = SpaceClient(url, token, clock=self.clock)
        self.executor = Executor(size=executor_size)
        self.programs = ProgramCache(program_fetch(self.client, space))
        self.up_since: datetime = self.clock.wall()
        self._background: set[asyncio.Task[None]] = set()  # resyncs and re-seeds in flight
        self.elector = Elector(
            self.client,
            space,
            peer,
            name=name or peer,
            priority=priority,
            clock=self.clock,
            config=lease or LeaseConfig(),
            report=self._report,
        )
        self.elector.instance = _instance()
        self.takeover = Takeover(
            self.client, space, peer, clock=self.clock, window=timedelta(seconds=bridge_seconds)
        )
        self.responder = responder or BuiltinResponder(self.clock.wall)
        self.recorder = Recorder(
            self.client,
            space,
            clock=self.clock,
            next_fire=lambda tid: self.ticker.next_fire(tid),
            chat_watch=lambda: self.reconciler.records.get(RESERVED_CHAT_WATCH),
        )
        self.chatwatch = ChatWatch(
            self.responder,
            self._chat_send,
            self._chat_history,
            record_turn=self.recorder.turn,
            clock=self.clock,
            edit=self.client.chat_edit,
        )
        self.readiness = Readiness(self.responder, self.chatwatch, clock=self.clock)
        self.firing = Firing(
            self.client,
            space,
            peer,
            execute=Execute(
                self.client,
                space,
                url,
                executor=self.executor,
                programs=self.programs,
                clock=self.clock,
            ),
            recorder=self.recorder,
            clock=self.clock,
            term=lambda: self.elector.term,
            may_fire_floating=self.elector.may_fire,
            chatwatch=self.chatwatch,
        )
        self.ticker = Ticker(self.firing, clock=self.clock)
        self.subscriptions = Subscriptions(self.client, space, self.firing, clock=self.clock)
        self.reconciler = Reconciler(
            self.client,
            space,
            peer,
            clock=self.clock,
            is_active=self.elector.may_fire,
            on_diff=self._on_diff,
            on_edit=lambda: self.health.kick(),
        )
        self.health = HealthPass(
            self.client,
            space,
            peer,
            clock=self.clock,
            recorder=self.recorder,
            records=lambda: self.reconciler.records,
            elector=self.elector,
            missing_chats=lambda: self.subscriptions.missing,
            next_fires=self.ticker.next_fires,
            interval=health_interval,
            version=lambda: (self.reconciler.version, self.ticker.version),
        )
        self.sleepwatch = SleepWatch(self.clock)
        self.supervisor = Supervisor(
            self.clock, on_down=self.elector.part_down, on_up=self.elector.part_up
        )
        self.elector.on_change(self._on_election)
        self.sleepwatch.add_listener(self._on_slept)

    async def run(self) -> None:
        """Run every part until cancelled; then stop them, release the lease, close up.

        Raises `PartFailed` when a part cannot be kept running (the device stops)."""
        try:
            await self.executor.start()
            if not await self._seed_chat_watch():
                self._spawn(self._keep_seeding())  # e.g. the space does not exist yet
            parts = {
                "election": self.elector.run,
                "reconciler": self.reconciler.run,
                "ticker": self.ticker.run,
                "subscriptions": self.subscriptions.run,
                "health": self.health.run,
                "sleepwatch": self.sleepwatch.run,
            }
            if self.readiness.needed:
                parts["responder"] = self.readiness.run
            await self.supervisor.run(parts)
        finally:
            await self._close()

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(_guarded(work))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _close(self) -> None:
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self.elector.release()
        await self.elector.sign_off()
        await self.subscriptions.close()
        await self.chatwatch.close()
        close = getattr(self.responder, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):
                await close()
        await self.firing.close()
        await self.executor.close()
        await self.client.close()

    # --- wiring --------------------------------------------------------------------------

    def _on_diff(self, diff: Diff) -> None:
        self.ticker.apply(diff, self.clock.wall())
        self.subscriptions.apply(diff)
        self.firing.apply(diff)
        self.health.kick()
        if (
            RESERVED_CHAT_WATCH in diff.remove
            and RESERVED_CHAT_WATCH not in self.reconciler.records
        ):
            self._spawn(self._keep_seeding())  # deleted, not merely paused or moved away

    def _on_election(self, active: bool) -> None:
        self.sleepwatch.check()  # a sleep the elector saw first must not open the bridge into it
        if active:
            self._spawn(self._take_over(self.clock.wall(), self.elector.term))
        else:
            self._spawn(self._resync())

    async def _resync(self) -> None:
        await self.reconciler.resync()

    async def _take_over(self, gained: datetime, term: int) -> None:
        """Arm the floating triggers live, then bridge what came before (runtime.takeover)."""
        await self.reconciler.resync()
        settle = 2 * self.elector.beat_seconds
        try:
            start = await self.takeover.start(gained, settle)
        except (ApiError, ValueError) as exc:  # bridge nothing rather than replay downtime
            log.warning("takeover at term %d: devices unreadable, no bridge: %s", term, exc)
            return
        if not (self.elector.may_fire() and self.elector.term == term):
            return  # lost again meanwhile: the next holder bridges
        slots, chats = self.ticker.bridge(start), self.subscriptions.bridge(start)
        log.info("takeover at term %d: bridging from %s: %d cron slots, %d chats",
                 term, iso(start), slots, chats)  # fmt: skip

    def _on_slept(self) -> None:
        log.warning("the machine slept or its clock jumped: distrusting the lease and streams")
        self.up_since = self.clock.wall()
        self.elector.instance = _instance()  # the space's upSince restarts: nothing of the sleep
        self.elector.slept()
        self.ticker.slept(self.up_since)
        self.subscriptions.slept(self.up_since)

    # --- chat-watch and programs -----------------------------------------------------------

    async def _keep_seeding(self) -> None:
        """Retry the seed until it holds: a space that appears while the device runs gets
        its chat responder without a restart."""
        delay = SEED_RETRY_MIN
        while not await self._seed_chat_watch():
            await self.clock.sleep(delay)
            delay = min(SEED_RETRY_MAX, delay * 2)

    async def _seed_chat_watch(self) -> bool:
        """Create the reserved chat responder record if it is missing; never overwrite it.

        True when the record exists now (made here or before)."""
        try:
            space = await self.client.space_get(self.space)
            body = {
                "name": CHAT_WATCH_NAME,
                "kind": "event",
                "program": CHAT_WATCH_PROGRAM,
                "spec": {"dataset": "chat_messages", "objectId": space["generalChat"]},
                "owner": "",
                "enabled": True,
            }
            await self.client.trigger_put(self.space, RESERVED_CHAT_WATCH, body)
        except ApiError as exc:
            if exc.status == 409:
                return True
            log.warning("chat-watch: could not seed the record: %s", exc)
            return False
        return True

    async def _chat_send(
        self, space: str, object_id: str, text: str, agent: dict[str, Any]
    ) -> dict[str, Any]:
        return await self.client.chat_send(space, object_id, {"text": text, "agent": agent})

    async def _chat_history(self, space: str, object_id: str, limit: int) -> list[dict[str, Any]]:
        """The chat's most recent `limit` messages, oldest first (never its oldest ones)."""
        page = await self.client.chat_messages(space, object_id, limit=limit, latest=True)
        return page["messages"]

    def _report(self) -> dict[str, Any]:
        """What this device says of itself in its heartbeat, for `baton status`."""
        return {
            "upSince": iso(self.up_since),
            "subscriptions": self.subscriptions.status(),
            "armed": len(self.reconciler.registry),
            "chatWatch": msgspec.to_builtins(self.chatwatch.status()),
            "responder": _describe(self.responder),
            "containment": msgspec.to_builtins(self.executor.containment),
        }


def _describe(responder: Responder) -> str:
    """The responder in a few words, for `baton status` and the dashboard."""
    told = getattr(responder, "describe", None)
    return told if isinstance(told, str) else type(responder).__name__


def _instance() -> str:
    """A new id for this run of the device (and for each wake from sleep)."""
    return secrets.token_hex(8)


async def _guarded(work: Awaitable[None]) -> None:
    """Background work (a resync, a re-seed) logs its failure rather than end the device."""
    try:
        await work
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("device: background work failed")
