"""Runs made by hand: `baton programs run` (`triggers run` is a claimed fire: fire.asked).

Owns running one program now, outside the fire pipeline: no claim, no admission, no
breaker and no stamps on a record. It runs the program as a fire does
(`runtime.fire.execute`: the program loaded and inspected, a run token scoped to the
trigger id and the run, so a trigger's own cursors are reachable and nothing else,
the isolated executor), translates the ending into a run record as a fire does
(`runtime.fire.bodies`) and posts it through `runtime.fire.recorder`. A program that is not
published or not valid, or a token that cannot be had, is an `error` run with its
reason. The run's key is `manual:<started>`, its peer `cli@<host>`; nothing is due,
so it has no `lateMs`.
"""

from __future__ import annotations

import socket
from datetime import datetime

import msgspec

from core.clock import Clock, SystemClock
from core.vocab import iso
from programs.executor import Executor
from programs.loader import ProgramCache
from programs.outcome import Outcome
from runtime.client.api import SpaceClient
from runtime.client.seat import Seat
from runtime.fire import bodies
from runtime.fire.execute import Execute, new_run_id, program_fetch
from runtime.fire.recorder import Recorder, StoredRun
from runtime.fire.secrets import Args
from triggers.records import Limits, PeerId

KEY_PREFIX = "manual:"


class Manual(msgspec.Struct, frozen=True, kw_only=True):
    """What to run by hand, recorded as a run of `trigger_id`."""

    trigger_id: str
    program: str
    args: Args = {}
    timeout_seconds: float = 60.0
    memory_mb: int = 512


async def run_by_hand(
    client: SpaceClient, space: str, url: str, manual: Manual, clock: Clock | None = None
) -> tuple[StoredRun, Outcome]:
    """Run `manual` now in a worker process; the run record as stored, and the ending."""
    clock = clock or SystemClock()
    fire = _fire(manual, clock.wall())
    limits = Limits(timeout_seconds=manual.timeout_seconds, memory_mb=manual.memory_mb)
    seat = Seat(client, space, PeerId(fire.peer), clock)
    programs = ProgramCache(program_fetch(client, space))
    async with Executor(1) as executor:
        execute = Execute(seat, url, executor=executor, programs=programs)
        program = await execute.load(fire.program)
        outcome, reason = await execute.run(fire, program, manual.args, limits, None)
    fire = bodies.entered(fire, (), outcome)  # started when main() was entered
    record = bodies.run_record(fire, outcome, finished_at=clock.wall(), reason=reason)
    return await Recorder(seat).post_run(record), outcome


def _fire(manual: Manual, now: datetime) -> bodies.RunIdentity:
    return bodies.RunIdentity(
        run_id=new_run_id(),
        trigger_id=manual.trigger_id,
        program=manual.program,
        peer=f"cli@{socket.gethostname()}",
        term=0,
        key=KEY_PREFIX + iso(now),
        started_at=now,
    )
