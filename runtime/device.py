"""One device of the agent: the parts of the runtime composed and wired together.

Owns the wiring only: `_wire` subscribes the parts to the device's event bus
(runtime.events) — diffs to the ticker, the chat subscriptions and the firing, kicks of the
health pass, the election's turns, a takeover's bridge, a detected sleep or clock step —
and runs them supervised (runtime.supervise); every part reads the space's clock
(runtime.client.offset). What a device is given comes in one frozen `DeviceSettings`.
Must not decide anything the parts decide.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import msgspec

from core.aio import TaskSet
from core.clock import Clock, SystemClock, iso
from programs.confine import Containment
from programs.executor import Executor
from programs.loader import ProgramCache
from programs.process import StartFailed
from runtime.chat.link import ChatLink
from runtime.chat.readiness import Readiness
from runtime.chat.responders import BuiltinResponder, Responder
from runtime.chat.watch import ChatWatch, WatchStatus
from runtime.client.api import ApiError, SpaceClient
from runtime.client.offset import ClockOffset, ClockStatus, SpaceTime
from runtime.client.retry import retried_for
from runtime.client.seat import Seat
from runtime.election.decision import Config as LeaseConfig
from runtime.election.loop import Elector
from runtime.election.sleepwatch import SleepWatch
from runtime.election.takeover import BRIDGE_WINDOW, Takeover
from runtime.events import Bus, DiffApplied, RecordEdited, RoleChanged, Slept
from runtime.feeds.chats import Subscriptions
from runtime.feeds.followed import FollowedStatus
from runtime.feeds.reconciler import Reconciler
from runtime.fire.asked import RunAsks
from runtime.fire.execute import Execute, program_fetch
from runtime.fire.firing import Firing
from runtime.fire.handover import HandOver
from runtime.fire.nextfires import Entries
from runtime.fire.recorder import Recorder
from runtime.fire.secrets import Secrets
from runtime.fire.ticker import Ticker
from runtime.health.stamper import HealthPass
from runtime.health.touched import Touched
from runtime.supervise import PartFailed, Supervisor
from triggers.records import RESERVED_CHAT_WATCH, PeerId

log = logging.getLogger("baton.device")


@dataclass(frozen=True, kw_only=True)
class DeviceSettings:
    """What one device is: where its space is, who it is, and its few knobs."""

    url: str
    token: str
    space: str
    peer: str
    name: str = ""  # shown in `baton status`; the peer id when empty
    priority: int = 0
    executor_size: int | None = None  # worker processes (None: the executor's default)
    lease: LeaseConfig = field(default_factory=LeaseConfig)
    bridge_seconds: float = BRIDGE_WINDOW.total_seconds()
    health_interval: float = 30.0
    programs_from: str = "own"  # "own": the admin's programs and this device's; "any": all
    secrets_file: Path | None = None  # `{"secret": NAME}` args resolve from it (JSON, 0600)
    ledger_file: Path | None = None  # the owner's ledger (SQLite); None: pinned fires wait


class Device:
    """A device of one space: `await run()` until cancelled; it stops cleanly."""

    def __init__(
        self,
        settings: DeviceSettings,
        *,
        clock: Clock | None = None,
        responder: Responder | None = None,
    ) -> None:
        self.settings = s = settings
        self.space, self.peer = s.space, PeerId(s.peer)
        self.offset = ClockOffset(clock or SystemClock())  # the space's clock: fires go by it
        self.clock = SpaceTime(self.offset)
        self.bus = Bus()
        self.client = SpaceClient(s.url, s.token, clock=self.clock, offset=self.offset)
        self._refused: ApiError | None = None
        self._token_refused = asyncio.Event()  # the space answered 401: revoked or expired
        self.client.on_refused = self._refuse
        self.seat = Seat(self.client, s.space, self.peer, self.clock)
        self.executor = Executor(size=s.executor_size)
        runs_from = s.peer if s.programs_from == "own" else None
        self.programs = ProgramCache(program_fetch(self.client, s.space, runs_from))
        self.up_since: datetime = self.clock.wall()
        self._background = TaskSet("device")  # resyncs, takeovers and re-seeds in flight
        self.sleepwatch = SleepWatch(self.clock, self.bus)
        self.elector = Elector(
            self.seat,
            name=s.name or s.peer,
            priority=s.priority,
            config=s.lease,
            report=self._report,
            sleepwatch=self.sleepwatch,
        )
        self.elector.heartbeat.anew()
        self.takeover = Takeover(self.seat, window=timedelta(seconds=s.bridge_seconds))
        self.recorder = Recorder(
            self.seat,
            bus=self.bus,
            chat_watch=lambda: self.reconciler.records.get(RESERVED_CHAT_WATCH),
        )  # the reconciler is made next; read when a run ends
        self.handover = HandOver.kept_in(self.seat, s.ledger_file)
        self._compose_chat(responder)
        self._compose_triggers()
        self.supervisor = Supervisor(
            self.clock, on_down=self.elector.part_down, on_up=self.elector.part_up
        )
        self._wire()

    def _compose_chat(self, responder: Responder | None) -> None:
        self.chatlink = ChatLink(self.seat)
        self.responder = responder or BuiltinResponder(self.clock.wall)
        if isinstance(self.responder, BuiltinResponder) and self.responder.explain is None:
            self.responder.explain = self.chatlink.explain  # "why didn't X fire?" in the chat
        self.chatwatch = ChatWatch(
            self.responder,
            self.chatlink.send,
            self.chatlink.history,
            record_turn=self.recorder.turn,
            clock=self.clock,
            edit=self.chatlink.edit,
        )
        self.readiness = Readiness(self.responder, self.chatwatch, clock=self.clock)

    def _compose_triggers(self) -> None:
        """The firing pipeline, what feeds it (ticker, subscriptions, asks), what arms them
        (reconciler); then what judges them (health pass)."""
        s, elector = self.settings, self.elector
        execute = Execute(
            self.seat,
            s.url,
            executor=self.executor,
            programs=self.programs,
            secrets=Secrets(s.secrets_file),
        )
        self.entries = Entries()  # the ticker's armed entries: where `nextFireAt` is read
        self.firing = Firing(
            self.seat,
            execute=execute,
            recorder=self.recorder,
            next_fire=self.entries.next_fire,
            term=lambda: elector.term,
            may_fire_floating=elector.may_fire,
            offer=self.chatwatch.offer,
            handover=self.handover,
        )
        self.asked = RunAsks()  # runs asked by hand (`baton triggers run`): fires of the diffs
        self.touched = Touched()  # records and fires changed: what the health pass judges
        self.ticker = Ticker(
            self.firing,
            clock=self.clock,
            touched=self.touched,
            awake=self.sleepwatch.check,
            expect=self.executor.prepare,  # it readies spares ahead of a slot's fires
            entries=self.entries,
        )
        self.subscriptions = Subscriptions(self.seat, self.firing)
        self.reconciler = Reconciler(
            self.seat, is_active=elector.holds, bus=self.bus, touched=self.touched
        )
        self._compose_health()

    def _compose_health(self) -> None:
        """What judges the triggers: the health pass, over what the parts above hold."""
        s, elector = self.settings, self.elector
        reconciler, ticker, subscriptions = self.reconciler, self.ticker, self.subscriptions
        self.health = HealthPass(
            self.seat,
            recorder=self.recorder,
            records=lambda: reconciler.records,
            elector=elector,
            missing_chats=lambda: subscriptions.missing,
            next_fire=self.entries.next_fire,
            interval=s.health_interval,
            touched=self.touched,
            settled=ticker.settled.wait,
        )

    def _wire(self) -> None:
        """Who hears what, in this order (the elector hears `Slept` first: it subscribed
        when it was made); what the heartbeat tells the space's history for `why`; a fire's
        stamps go to the reconciler (its feed only names them)."""
        beat, reconciler = self.elector.heartbeat, self.reconciler
        beat.applied = lambda: reconciler.seq  # the change feed it applied
        beat.offset = self.offset.known  # the clock it fires by
        self.recorder.own = reconciler.own
        self.bus.subscribe(DiffApplied, self._on_diff)
        self.bus.subscribe(RecordEdited, lambda _: self.health.kick())
        self.bus.subscribe(RoleChanged, self._on_role)
        self.bus.subscribe(Slept, self._on_slept)

    async def run(self) -> None:
        """Run every part until cancelled; then stop them, release the lease, close up.

        Raises `PartFailed` when a part cannot be kept running (the device stops), and
        `StartFailed` when the workers cannot start. They start beside the parts (a first
        sync of 100,000 records need not wait for them); the lease waits for them."""
        try:
            if not await self.chatlink.seed():
                self._background.spawn(self.chatlink.keep_seeding(), name="seed")
            self._start_by_the_spaces_clock()
            if self.handover is not None:  # what an earlier run left in the ledger
                self.handover.kick()
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
            self.elector.part_down("executor")  # no lease before a run can start
            async with asyncio.TaskGroup() as group:
                group.create_task(self._start_executor(), name="executor")
                group.create_task(self.supervisor.run(parts), name="parts")
                group.create_task(self._until_refused(), name="credentials")
        except* (PartFailed, StartFailed) as failed:
            raise failed.exceptions[0] from None
        finally:
            await self._close()

    def _start_by_the_spaces_clock(self) -> None:
        """The first answer set the clock's offset: this device is up from now by the
        space's clock, and from here on a step of the offset is handled like a wake."""
        self.up_since = self.clock.wall()
        self.ticker.slept(self.up_since)
        self.subscriptions.up_since = self.up_since
        self.offset.on_step = lambda _: self.sleepwatch.check()

    def _refuse(self, error: ApiError) -> None:
        self._refused = error
        self._token_refused.set()

    async def _until_refused(self) -> None:
        """A device whose token the space refuses (revoked, expired) stops, in one line:
        retrying cannot help."""
        await self._token_refused.wait()
        error, s = self._refused, self.settings
        assert error is not None
        raise PartFailed(
            f"the space refused this device's token ({error.code}: {error.detail}); mint a new "
            f"one: baton space token --peer {s.peer} --space {s.space}"
        )

    async def _start_executor(self) -> None:
        await self.executor.start()
        self.elector.part_up("executor")

    async def _close(self) -> None:
        with contextlib.suppress(Exception):
            await self.elector.release()  # first: the resync its turn spawns is cancelled next
        await self._background.close()
        await self.elector.sign_off()
        await self.subscriptions.close()
        await self.chatwatch.close()
        close = getattr(self.responder, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):
                await close()
        await self.firing.close()
        await self.recorder.close()  # the runs of the fires just ended are written
        if self.handover is not None:
            self.handover.ledger.close()
        await self.executor.close()
        await self.client.close()

    # --- what the parts announce -----------------------------------------------------------

    def _on_diff(self, event: DiffApplied) -> None:
        diff = event.diff
        self.ticker.apply(diff, self.clock.wall())
        self.subscriptions.apply(diff)
        self.firing.apply(diff)
        if asked := self.asked.take(diff, self.clock.wall()):
            self._background.spawn(self.firing.fire(*asked), name="asked")
        self.health.kick()
        if (
            RESERVED_CHAT_WATCH in diff.remove
            and RESERVED_CHAT_WATCH not in self.reconciler.records
        ):  # deleted, not merely paused or moved away
            self._background.spawn(self.chatlink.keep_seeding(), name="seed")

    def _on_role(self, event: RoleChanged) -> None:
        self.sleepwatch.check()  # a sleep the elector saw first must not open the bridge into it
        if event.active:
            self._background.spawn(
                self._take_over(self.clock.wall(), self.elector.term), name="takeover"
            )
        else:
            self._background.spawn(self._resync(), name="resync")

    async def _resync(self) -> None:
        await self.reconciler.resync()

    async def _take_over(self, gained: datetime, term: int) -> None:
        """Arm the floating triggers live, then bridge what came before (election.takeover)."""
        await self.reconciler.resync()
        settle = 2 * self.elector.beat_seconds

        def holding() -> bool:
            return self.elector.may_fire() and self.elector.term == term

        def unreadable(exc: Exception, delay: float) -> None:
            log.warning(
                "takeover at term %d: devices unreadable, again in %g s: %s", term, delay, exc
            )

        try:  # until it reads, the term is lost, or the window it could bridge has passed
            start = await retried_for(
                lambda: self.takeover.start(gained, settle),
                self.clock,
                self.settings.bridge_seconds,
                still=holding,
                on_failure=unreadable,
            )
        except (ApiError, ValueError) as exc:  # bridge nothing rather than replay downtime
            log.warning("takeover at term %d: devices unreadable, no bridge: %s", term, exc)
            return
        if not holding():
            return  # lost again meanwhile: the next holder bridges
        slots, chats = self.ticker.bridge(start), self.subscriptions.bridge(start)
        held = (armed.record for armed in self.reconciler.registry.values())
        retries = self.firing.retries.adopt(held, start)
        log.info(
            "takeover at term %d: bridging from %s: %d cron slots, %d chats, %d event retries",
            term,
            iso(start),
            slots,
            chats,
            retries,
        )

    def _on_slept(self, event: Slept) -> None:
        """The elector already stopped acting (it hears `Slept` first)."""
        log.warning("the machine slept or its clock jumped: distrusting the lease and streams")
        self.up_since = self.clock.wall()
        # a new instance: the space's upSince restarts, nothing of the sleep counts as up
        self.elector.heartbeat.anew()
        self.elector.heartbeat.slept = abs(event.jump)  # the space keeps it for `why`
        self.ticker.slept(self.up_since)
        self.firing.slept()
        self.subscriptions.slept(self.up_since)

    # --- what the parts ask ----------------------------------------------------------------

    def _report(self) -> DeviceReport:
        """What this device says of itself in its heartbeat, for `baton status`."""
        return DeviceReport(
            up_since=iso(self.up_since),
            subscriptions=self.subscriptions.status(),
            armed=len(self.reconciler.registry),
            changes_received=self.reconciler.received,
            chat_watch=self.chatwatch.status(),
            responder=_describe(self.responder),
            containment=self.executor.containment,
            clock=self.offset.status(),
        )


class DeviceReport(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    up_since: str
    subscriptions: list[FollowedStatus]
    armed: int
    changes_received: int  # from the change feed since the start
    chat_watch: WatchStatus
    responder: str
    containment: Containment | None
    clock: ClockStatus


def _describe(responder: Responder) -> str:
    """The responder in a few words, for `baton status` and the dashboard."""
    told = getattr(responder, "describe", None)
    return told if isinstance(told, str) else type(responder).__name__
