"""The recorder: the one writer of run records and of a trigger's runtime stamps.

Owns every write of what happened (SPEC "Runs", "chat-watch"): a fire's run with its
stamps in one `POST …/runs` (close ends batched, in order), the health pass's stamps, a run
by hand, chat-watch's turns; then `RunFinished` on the bus. Transient refusals are retried;
a run refused for its body is sent again as an `error` without its result, so a run's
record is always written. A fire's stamps are marked with the device's writer tag and their
answers (the `seq` each was written at) given to `own`, the reconciler's, so its change
stream only names them.
What they say is runtime.fire.bodies' (pure). Must not decide
whether a fire runs, nor how a program is run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

import msgspec
from msgspec.structs import replace

from core.wire import RunIn, RunResult, Stamps, TurnIn
from programs.rollup import Rollup
from runtime.client.api import ApiError
from runtime.client.retry import retried
from runtime.client.seat import Seat
from runtime.events import Bus, RunFinished
from runtime.fire import bodies
from triggers.records import RESERVED_CHAT_WATCH, Loaded, Trigger, TriggerId

log = logging.getLogger("baton.recorder")

ChatWatchRecord = Callable[[], Loaded | None]
BATCH_MAX = 500  # runs in one write at most
StoredRun = dict[str, Any]  # a run record as the space stored it, its JSON whole (printed as is)


class StampSink(Protocol):
    """Where this device's stamps go as they are written (runtime.feeds.own.OwnStamps)."""

    tag: str

    def writing(self) -> None: ...

    def done(self) -> None: ...

    def written(self, tid: TriggerId, stamps: Stamps, seq: int) -> None: ...


class Waiting(msgspec.Struct, kw_only=True):
    """A run record (with its stamps, if any) waiting for the next write, and its answer."""

    tid: TriggerId
    body: RunIn
    done: asyncio.Future[None]
    refused: bool = False  # the space refused it once: sent again as `bodies.refused`


class Recorder:
    """Writes runs, stamps and chat-watch's turns to one space; `close()` writes what waits."""

    def __init__(
        self,
        seat: Seat,
        *,
        chat_watch: ChatWatchRecord | None = None,
        bus: Bus | None = None,
    ) -> None:
        self._client, self._space, _, self._clock = seat
        self._chat_watch, self._bus = chat_watch, bus
        self._waiting: list[Waiting] = []  # the next write's runs, in the order they ended
        self._stamped: dict[TriggerId, Waiting] = {}  # the waiting run carrying a trigger's stamps
        self._writer: asyncio.Task[None] | None = None
        self._turns_rollup: Rollup | None = None  # chat-watch's, as this device last stamped it
        self.keep: Callable[[RunIn], bool] | None = None  # True: kept elsewhere (the ledger)
        self.own: StampSink | None = None  # set by the device: the reconciler's

    # --- fires ---------------------------------------------------------------------------

    async def ended(self, record: Trigger, run: RunIn, stamps: Stamps | None) -> None:
        """Write a fire's run record with its stamps (None: not this device's to stamp);
        returns once written (or given up: logged). Never raises."""
        await asyncio.shield(self.enqueue(record, run, stamps))

    def enqueue(self, record: Trigger, run: RunIn, stamps: Stamps | None) -> asyncio.Future[None]:
        """Queue the run for the next write (done when written); a waiting run's stamps of
        the same trigger give way to these, newer ones. A run `keep` takes is done now."""
        if self.keep is not None and self.keep(run):
            kept: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            kept.set_result(None)
            return kept
        body = run if stamps is None else replace(run, stamps=stamps)
        waiting = Waiting(tid=record.id, body=body, done=asyncio.get_running_loop().create_future())
        if stamps is not None:
            if (older := self._stamped.pop(record.id, None)) is not None:
                older.body = replace(older.body, stamps=None)
            self._stamped[record.id] = waiting
        self._waiting.append(waiting)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_waiting(), name="recorder")
        return waiting.done

    async def close(self) -> None:
        """Write every run still waiting."""
        if self._writer is not None:
            await asyncio.shield(self._writer)

    async def _write_waiting(self) -> None:
        """One write at a time, in order: what ended while one was in flight goes in the next.
        The first waits out the loop's turn, so runs ending together share it."""
        await asyncio.sleep(0)
        while self._waiting:
            batch, self._waiting = self._waiting[:BATCH_MAX], self._waiting[BATCH_MAX:]
            for waiting in batch:
                if self._stamped.get(waiting.tid) is waiting:
                    del self._stamped[waiting.tid]
            try:
                await self._write(batch)
            except Exception:  # a bug: logged, and the runs after it still get written
                log.exception("%d runs not written", len(batch))
            finally:
                for waiting in batch:
                    if not waiting.done.done():
                        waiting.done.set_result(None)

    async def _write(self, batch: list[Waiting]) -> None:
        own = self.own
        if own is None:
            return await self._post(batch, None)
        own.writing()
        try:
            await self._post(batch, own)
        finally:
            own.done()

    async def _post(self, batch: list[Waiting], own: StampSink | None) -> None:
        sent = [waiting.body for waiting in batch]
        post, writer = self._client.run_create_list, own.tag if own is not None else None
        try:
            answer = await retried(lambda: post(self._space, sent, writer), self._clock)
        except ApiError as exc:
            if exc.status == 400 and len(batch) > 1:  # one bad run refuses the list: each alone
                for waiting in batch:
                    await self._post([waiting], own)
                return
            if exc.status == 400 and not batch[0].refused:  # its record, without what was refused
                batch[0].body, batch[0].refused = bodies.refused(batch[0].body, exc.detail), True
                await self._post(batch, own)
                return
            log.warning("%d runs not written: %s", len(batch), exc)
            return
        for waiting, result in zip(batch, answer.runs, strict=True):
            stamps = waiting.body.stamps
            if own is not None and stamps is not None and result.stampsSeq is not None:
                own.written(waiting.tid, stamps, result.stampsSeq)
            self._written(waiting, result)

    def _written(self, waiting: Waiting, result: RunResult) -> None:
        run = waiting.body
        if result.status >= 400:
            log.warning(
                "fire %s: run not written: %s: %s", waiting.tid, result.error, result.detail
            )
        if (result.stamps or 0) >= 400:
            log.warning(
                "fire %s: stamps not written: %s: %s",
                waiting.tid,
                result.stampsError,
                result.stampsDetail,
            )
        if self._bus is not None:
            self._bus.publish(
                RunFinished(
                    trigger_id=waiting.tid,
                    run_id=run.runId,
                    status=run.status.value,
                    reason=run.reason,
                )
            )

    async def stamp(self, tid: TriggerId, body: Stamps) -> None:
        """Write stamps the health pass decided (a verdict, `nextFireAt`), once: a refusal
        is raised, for the pass to judge (it tries again on its next pass)."""
        await self._client.trigger_status(self._space, tid, body)

    async def post_run(self, run: RunIn) -> StoredRun:
        """Post a run record; the record as stored, as JSON. Raises the last `ApiError`."""
        return await retried(lambda: self._client.run_create(self._space, run), self._clock)

    # --- chat-watch's turns ----------------------------------------------------------------

    async def turn(self, turn: TurnIn) -> None:
        """Log the turn in `agent_turns` and stamp chat-watch's record; never raises."""
        tid = turn.turnId
        log.info("chat-watch turn %s: %s", tid, turn.outcome.value)
        try:
            await self._client.turn_create(self._space, turn)
        except ApiError as exc:
            log.warning("chat-watch turn %s not recorded: %s", tid, exc)
        try:
            self._turns_rollup, stamps = bodies.turn_stamps(self._chat_watch_rollup(), turn)
            await self._client.trigger_status(self._space, RESERVED_CHAT_WATCH, stamps)
        except ApiError as exc:
            log.warning("chat-watch turn %s not stamped: %s", tid, exc)

    def _chat_watch_rollup(self) -> Rollup:
        """The rollup to add the next start to: the record's stamp when it has seen more
        starts than this device (another device answered meanwhile), else this device's."""
        record = self._chat_watch() if self._chat_watch is not None else None
        stamped = bodies.stamped_rollup(record)
        mine = self._turns_rollup
        return stamped if mine is None or stamped.starts > mine.starts else mine
