"""`POST …/triggers/{id}/backfill`: a user's request to run the missed slots of a range.

Owns the route (SPEC "Trigger policies", backfill): the slots of `[from, to]` that were
never claimed (the claim ledger, `fires`), chosen by the pure rule `triggers.backfill`
(at most 100, none before `activeSince`, inside the window); `dryRun` answers them and
writes nothing. Otherwise the record is stamped `backfill: {id, keys, requestedAt}`,
and the device responsible for the trigger fires those keys as catch-up fires, each
claimed with its slot key, so a slot runs once however often it is asked. The store
reads, judges and stamps in one transaction at its clock (`Store.backfill`). Must not
claim or run.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from typing import Annotated

import msgspec
from aiohttp import web

from core.vocab import key_instant
from core.wire import Answer, Body
from space import forget
from space.changes import notify
from space.http import Refusal, add_route, answer, read_body
from space.servertime import iso
from space.spaces import require_space
from space.store import STORE
from space.trigger_store import Record
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
    tid, bid = request.match_info["id"], "bf_" + secrets.token_hex(6)

    def slots(stored: Record, now: datetime) -> list[str]:
        return _slots(tid, asked, stored, now)

    def stamp(fresh: list[str], now: datetime) -> Record | None:
        if not fresh or asked.dry_run:
            return None
        return {"backfill": {"id": bid, "keys": fresh, "requestedAt": iso(now)}}

    fresh, skipped = await request.app[STORE].backfill(space, tid, slots, stamp)
    out = BackfillOut(
        id=bid if fresh and not asked.dry_run else None,  # as `stamp` stamped
        keys=fresh,
        skipped=skipped,
        dry_run=asked.dry_run,
    )
    if out.id is not None:
        notify(request.app, space)
    return answer(out)


def _slots(tid: str, asked: BackfillIn, stored: Record, now: datetime) -> list[str]:
    """The keys of the slots asked, by the rule `triggers.backfill` at the store's `now`."""
    record = load(stored)
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
    return [key_instant(s) for s in slots]


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
