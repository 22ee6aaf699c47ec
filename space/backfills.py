"""`POST …/triggers/{id}/backfill`: a user's request to run the missed slots of a range.

Owns the route (SPEC "Trigger policies", backfill): the slots of `[from, to]` that were
never claimed (the claim ledger, `fires`), chosen by the pure rule `triggers.backfill`
(at most 100, none before `activeSince`, inside the window); `dryRun` answers them and
writes nothing. Otherwise the record is stamped `backfill: {id, keys, requestedAt}`,
and the device responsible for the trigger fires those keys as catch-up fires, each
claimed with its slot key, so a slot runs once however often it is asked. Must not
claim or run.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from typing import Annotated

import msgspec
import sqlite_utils
from aiohttp import web

from core.vocab import key_instant
from core.wire import Answer, Body
from space import fires, forget, trigger_store
from space.changes import notify
from space.dbthread import db_call
from space.http import Refusal, add_route, answer, now_of, read_body
from space.servertime import iso
from space.spaces import require_space
from triggers import backfill
from triggers.records import Salvaged, load

Aware = Annotated[datetime, msgspec.Meta(tz=True)]


class BackfillIn(Body, frozen=True, kw_only=True, rename="camel"):
    from_: Aware = msgspec.field(name="from")
    to: Aware
    dry_run: bool = False


class BackfillOut(Answer, frozen=True, kw_only=True, rename="camel"):
    id: str | None  # the request's id; None for a dry run or when no slot is left to run
    keys: list[str]  # the slots to run, oldest first
    skipped: int  # slots of the range already claimed
    dry_run: bool


async def post_backfill(request: web.Request) -> web.Response:
    space = require_space(request)
    asked = await read_body(request, BackfillIn, code="invalid_backfill")
    tid, now = request.match_info["id"], now_of(request)
    out = await db_call(request.app, _backfill, space, tid, asked, now)
    if out.id is not None:
        notify(request.app, space)
    return answer(out)


def _backfill(
    db: sqlite_utils.Database, space: str, tid: str, asked: BackfillIn, now: datetime
) -> BackfillOut:
    """The slots to run, stamped on the record: one unit of work on the database thread."""
    record = load(trigger_store.current(db, space, tid)[1])
    if isinstance(record, Salvaged):
        raise Refusal(409, "undecodable_record", f"trigger {tid!r} does not decode: {record.error}")
    kept = now - timedelta(days=forget.CLAIMS_FLOOR_DAYS)
    if asked.from_ < kept:  # older claims may be forgotten: a fired slot would look missed
        detail = f"`from`: before {iso(kept)}, where the claim ledger's memory ends"
        raise Refusal(400, "invalid_backfill", detail)
    try:
        slots = backfill.slots(record, asked.from_, asked.to, (), now=now)
    except backfill.BackfillRefused as exc:
        raise Refusal(400, "invalid_backfill", str(exc)) from None
    keys = [key_instant(s) for s in slots]
    fresh = [k for k in keys if fires.claim_of(db, space, tid, k) is None]
    bid = None
    if fresh and not asked.dry_run:
        bid = "bf_" + secrets.token_hex(6)
        stamp = {"id": bid, "keys": fresh, "requestedAt": iso(now)}
        trigger_store.stamp(db, space, tid, {"backfill": stamp}, iso(now))
    return BackfillOut(id=bid, keys=fresh, skipped=len(keys) - len(fresh), dry_run=asked.dry_run)


def setup(app: web.Application) -> None:
    add_route(
        app,
        "trigger_backfill",
        post_backfill,
        "Run the never-claimed slots of `[from, to]` (at most 100) on the device that owns "
        "the trigger, each claimed with its slot key; `dryRun` only lists them",
        body=BackfillIn,
        answer=BackfillOut,
    )
