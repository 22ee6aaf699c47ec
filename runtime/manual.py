"""Runs made by hand: `baton programs run` and `baton triggers run`.

Owns running one program now, outside the fire pipeline: no claim, no admission, no
breaker and no stamps on a record. It uses what a fire uses: the isolated executor
(`programs.executor`), a run token scoped to the trigger id and the run
(`runtime.firing.run_token`, so a trigger's own cursors are reachable and nothing
else), `runtime.firing.run_job`, and the one translation of an ending into a run
record (`runtime.outcomes`), which is posted to the space. A program that is not
published, or a token that cannot be had, is an `error` run with its reason, as for
a fire. The run's key is `manual:<started>`, its peer `cli@<host>`; nothing is due,
so it has no `lateMs`.
"""

from __future__ import annotations

import socket
from datetime import datetime
from typing import Any

import msgspec

from core.clock import Clock, SystemClock
from core.vocab import RunReason
from programs.context import RunContext
from programs.executor import Executor
from programs.job import Job
from programs.result import Outcome
from runtime import outcomes
from runtime.client import ApiError, SpaceClient
from runtime.firing import new_run_id, run_job, run_token

KEY_PREFIX = "manual:"


class Manual(msgspec.Struct, frozen=True, kw_only=True):
    """What to run by hand, recorded as a run of `trigger_id`."""

    trigger_id: str
    program: str
    args: dict[str, Any] = {}
    timeout_seconds: float = 60.0
    memory_mb: int = 512


async def run_by_hand(
    client: SpaceClient, space: str, url: str, manual: Manual, clock: Clock | None = None
) -> tuple[dict[str, Any], Outcome]:
    """Run `manual` now in a worker process; the run record as stored, and the ending."""
    clock = clock or SystemClock()
    fire = _fire(manual, clock.wall())
    outcome, reason = await _execute(client, space, url, fire, manual, clock)
    record = outcomes.run_record(fire, outcome, finished_at=clock.wall(), reason=reason)
    return await client.run_create(space, record), outcome


def _fire(manual: Manual, now: datetime) -> outcomes.Fire:
    return outcomes.Fire(run_id=new_run_id(), trigger_id=manual.trigger_id,
                         program=manual.program, peer=f"cli@{socket.gethostname()}", term=0,
                         key=KEY_PREFIX + outcomes.iso(now), started_at=now)  # fmt: skip


async def _execute(client: SpaceClient, space: str, url: str, fire: outcomes.Fire,
                   manual: Manual, clock: Clock) -> tuple[Outcome, str]:  # fmt: skip
    try:
        source = (await client.program_get(space, fire.program))["source"]
    except ApiError as exc:
        if exc.status != 404:
            raise
        return outcomes.failed_before_run(exc.detail), RunReason.UNKNOWN_PROGRAM
    token = await run_token(client, space, fire, manual.timeout_seconds, clock)
    if isinstance(token, Outcome):
        return token, RunReason.RUN_TOKEN
    context = RunContext(run_id=fire.run_id, trigger_id=fire.trigger_id, program=fire.program,
                         peer=fire.peer, space=space, url=url, token=token,
                         key=fire.key)  # fmt: skip
    job = Job(source=source, ref=fire.program, args=manual.args, context=context,
              timeout_seconds=manual.timeout_seconds, memory_mb=manual.memory_mb)  # fmt: skip
    async with Executor(1) as executor:
        return await run_job(executor, job)
