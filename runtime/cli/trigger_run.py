"""`baton triggers run ID`: ask the device that runs a trigger to run it now; wait for the run.

Owns the verb (SPEC "CLI conventions"): the trigger by id or name; an `internal:` program
(chat-watch) refused as bad input, an undecodable record as a failure; the ask posted
(`POST …/triggers/{id}/run`, space.run_asks: 202 with the key `manual:<instant>` and the
device that runs it, 409 naming a device that is offline); then the run record of that key
waited for (`--wait SECONDS`, default 30; `--no-wait` prints the key and exits 0) and
printed. Exit 0 for an `ok` run, 1 for any other ending or a wait that ran out. The run is
the device's (runtime.fire.asked): this process runs nothing.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timedelta
from typing import Any

from core.answers import RunOut
from core.clock import SystemClock, iso
from core.wire import FireList
from runtime.cli.common import Target, seconds
from runtime.cli.main import UsageError
from runtime.cli.programs import render_run
from runtime.cli.talk import Failure, emit, read, talk
from runtime.cli.trigger_names import resolve
from runtime.client.api import SpaceClient
from space.run_asks import RunAskOut
from triggers.records import INTERNAL_PREFIX, Salvaged, load

WAIT_S = 30.0
POLL_S = (0.2, 1.0)  # the first look for the run record, and the longest between two
SKEW = timedelta(minutes=1)  # runs started this long before the ask are looked at too


def add_flags(run: argparse.ArgumentParser) -> None:
    wait = run.add_mutually_exclusive_group()
    wait.add_argument(
        "--wait",
        type=seconds,
        default=WAIT_S,
        metavar="SECONDS",
        help=f"how long to wait for the run record (default {WAIT_S:g})",
    )
    wait.add_argument("--no-wait", action="store_true", help="print the run's key and exit")
    run.add_argument("--note", metavar="TEXT", help="why (kept in its history)")
    run.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    return talk(args, lambda c, w: run_now(c, w, args))


async def run_now(client: SpaceClient, where: Target, args: argparse.Namespace) -> int:
    tid = await resolve(client, where, args.id)
    record = load(await client.trigger_get(where.space, tid))
    if isinstance(record, Salvaged):
        raise Failure("undecodable_record", f"trigger {tid} does not decode: {record.error}")
    if record.program.startswith(INTERNAL_PREFIX):
        raise UsageError(f"ID: {tid} runs {record.program}, which only the runtime runs")
    sent = await client.trigger_run(where.space, tid, note=args.note or "")
    asked = read(sent, RunAskOut, "trigger_run")
    key, peer = asked.key, asked.peer
    if args.no_wait:
        emit(sent) if args.json else print(key)
        return 0
    if not args.json:
        print(f"asked {peer} to run {tid} ({record.name}) as {key}", flush=True)
    run = await until_run(client, where.space, tid, asked, args.wait)
    if run is None:
        raise Failure("no_run_yet", await _not_yet(client, where.space, tid, asked, args.wait))
    sent_run, ran = run
    print(json.dumps(sent_run) if args.json else render_run(ran, ""))
    return 0 if ran.status == "ok" else 1


async def until_run(
    client: SpaceClient, space: str, tid: str, asked: RunAskOut, wait: float
) -> tuple[Any, RunOut] | None:
    """The run record of the asked key once the space has it, as sent and as read; None
    after `wait` seconds."""
    clock = SystemClock()
    deadline = clock.monotonic() + wait
    since = iso(datetime.fromisoformat(asked.requested_at) - SKEW)
    delay = POLL_S[0]
    while True:
        runs = (await client.runs(space, trigger=tid, since=since, limit=1000))["runs"]
        read_runs = read(runs, list[RunOut], "runs")
        found = next(
            ((s, r) for s, r in zip(runs, read_runs, strict=True) if r.key == asked.key), None
        )
        left = deadline - clock.monotonic()
        if found is not None or left <= 0:
            return found
        await clock.sleep(min(delay, left))
        delay = min(2 * delay, POLL_S[1])


async def _not_yet(client: SpaceClient, space: str, tid: str, asked: RunAskOut, wait: float) -> str:
    """Why no run record came within the wait: claimed and still running, or not claimed."""
    key, peer = asked.key, asked.peer
    claims = read(await client.fires(space, trigger=tid, limit=1000), FireList, "fires").fires
    claim = next((c for c in claims if c.key == key), None)
    if claim is None:
        said = f"{peer} has not claimed {key} within {wait:g} s"
    else:
        said = f"{claim.peer} claimed {key} at {claim.claimedAt}, no run within {wait:g} s"
    return f"{said}; `baton runs --trigger {tid}` shows its run once it ends"
