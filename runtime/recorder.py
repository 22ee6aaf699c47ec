"""The recorder: the one writer of run records and of a trigger's runtime stamps.

Owns every write of what happened to the space (SPEC "Runs", "chat-watch"):

- a fire's run record (`POST …/runs`, which also ends the run's token), then its
  trigger's stamps (`POST …/triggers/{id}/status`: lastStatus, lastStatusDetail,
  lastRunAt, breaker, rollup, and `nextFireAt`, the next fire the ticker has armed,
  asked of `next_fire` when the run ends). A trigger's stamps are written in order, and
  a newer set replaces one still waiting, so a burst of fires costs one write;
- the health pass's stamps (runtime.healthpass: a verdict's lastStatus and
  lastStatusDetail, and `nextFireAt` between runs), written once as it decided them;
- a run made by hand (runtime.manual), whose stored record is the answer;
- chat-watch's turns: the `agent_turns` entry, then one more conversation start on the
  reserved record's rollup (counted from the record's stamp when another device has
  answered meanwhile, else from this device's own count).

Once a fire's run and stamps are written (or given up), it publishes `RunFinished` on
the device's bus (runtime.events).

A transient refusal (no answer, a 5xx) is retried a few times. What the record and the
stamps say is `runtime.outcomes`' (pure); this module only writes it. Must not decide
whether a fire runs, nor how a program is run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from core.clock import Clock, iso
from programs.rollup import Rollup
from runtime import outcomes
from runtime.client import ApiError, SpaceClient, retried
from runtime.events import Bus, RunFinished
from triggers.records import RESERVED_CHAT_WATCH, Loaded, Trigger, TriggerId

log = logging.getLogger("baton.recorder")

NextFire = Callable[[TriggerId], datetime | None]
ChatWatchRecord = Callable[[], Loaded | None]


class Recorder:
    """Writes runs, stamps and chat-watch's turns to one space."""

    def __init__(
        self,
        client: SpaceClient,
        space: str,
        *,
        clock: Clock,
        next_fire: NextFire | None = None,
        chat_watch: ChatWatchRecord | None = None,
        bus: Bus | None = None,
    ) -> None:
        self._client, self._space, self._clock = client, space, clock
        self._next_fire, self._chat_watch, self._bus = next_fire, chat_watch, bus
        self._latest: dict[TriggerId, dict[str, Any]] = {}  # stamps not yet written
        self._writing: set[TriggerId] = set()  # triggers whose stamps are being written
        self._turns_rollup: Rollup | None = None  # chat-watch's, as this device last stamped it

    def read_next_fires_from(self, next_fire: NextFire) -> None:
        """Where `nextFireAt` comes from, when it cannot be given at construction: the
        device's ticker is built after the recorder (Ticker → Firing → Recorder)."""
        self._next_fire = next_fire

    # --- fires ---------------------------------------------------------------------------

    async def ended(
        self, record: Trigger, run: dict[str, Any], stamps: dict[str, Any] | None
    ) -> None:
        """Write a fire's run record, then its stamps (None: not this device's to stamp);
        then publish `RunFinished`. Never raises: a write that fails for good is logged."""
        if stamps is not None:
            self._latest[record.id] = self._with_next_fire(record, stamps)
        try:
            await self.post_run(run)
        except ApiError as exc:
            log.warning("fire %s: run not written: %s", record.id, exc)
        if stamps is not None:
            await self._write_stamps(record.id)
        if self._bus is not None:
            self._bus.publish(RunFinished(trigger_id=record.id, run_id=run["runId"],
                                          status=run["status"], reason=run["reason"]))  # fmt: skip

    def _with_next_fire(self, record: Trigger, stamps: dict[str, Any]) -> dict[str, Any]:
        if self._next_fire is None or record.kind == "event":
            return stamps
        upcoming = self._next_fire(record.id)  # stamped with the run
        return {**stamps, "nextFireAt": iso(upcoming) if upcoming else None}

    async def _write_stamps(self, tid: TriggerId) -> None:
        """Stamps of one trigger are written in order; a newer set replaces a waiting one
        (the write in flight takes it up when it is done)."""
        if tid in self._writing:
            return
        self._writing.add(tid)
        try:
            while (stamps := self._latest.pop(tid, None)) is not None:
                await self._stamp(tid, stamps)
        finally:
            self._writing.discard(tid)

    async def _stamp(self, tid: TriggerId, body: dict[str, Any]) -> None:
        try:
            await retried(lambda: self._client.trigger_status(self._space, tid, body), self._clock)
        except ApiError as exc:
            log.warning("fire %s: stamps not written: %s", tid, exc)

    async def stamp(self, tid: TriggerId, body: dict[str, Any]) -> None:
        """Write stamps the health pass decided (a verdict, `nextFireAt`), once: a refusal
        is raised, for the pass to judge (it tries again on its next pass)."""
        await self._client.trigger_status(self._space, tid, body)

    async def post_run(self, run: dict[str, Any]) -> dict[str, Any]:
        """Post a run record; the record as stored. Raises the last `ApiError`."""
        return await retried(lambda: self._client.run_create(self._space, run), self._clock)

    # --- chat-watch's turns ----------------------------------------------------------------

    async def turn(self, turn: dict[str, Any]) -> None:
        """Log the turn in `agent_turns` and stamp chat-watch's record; never raises."""
        tid = turn.get("turnId")
        log.info("chat-watch turn %s: %s", tid, turn.get("outcome"))
        try:
            await self._client.turn_create(self._space, turn)
        except ApiError as exc:
            log.warning("chat-watch turn %s not recorded: %s", tid, exc)
        try:
            self._turns_rollup, stamps = outcomes.turn_stamps(self._chat_watch_rollup(), turn)
            await self._client.trigger_status(self._space, RESERVED_CHAT_WATCH, stamps)
        except (ApiError, ValueError) as exc:
            log.warning("chat-watch turn %s not stamped: %s", tid, exc)

    def _chat_watch_rollup(self) -> Rollup:
        """The rollup to add the next start to: the record's stamp when it has seen more
        starts than this device (another device answered meanwhile), else this device's."""
        record = self._chat_watch() if self._chat_watch is not None else None
        stamped = outcomes.stamped_rollup(record)
        mine = self._turns_rollup
        return stamped if mine is None or stamped.starts > mine.starts else mine
