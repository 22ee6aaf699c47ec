"""`GET /v1/spaces/{space}/triggers/{id}/next`: a record's next fires, with DST notes.

Owns the route: the next `count` fires (default 10, at most 100) from the server's now, as
`triggers.schedule.upcoming_of` computes them (`triggers show` lists the same), each
`{at, local, dst}`: the UTC instant, the wall time in the spec's zone, and what the DST
rule did to it (`shifted`, `merged`, null), with the legend of the notes it uses. An event
trigger, a paused one and a once that has fired have none. Must not write.
"""

from __future__ import annotations

from datetime import UTC, tzinfo

from aiohttp import web

from core.vocab import iso, local_instant
from core.wire import Answer
from space import trigger_store
from space.http import Refusal, add_route, answer, int_query, now_of
from space.spaces import require_space
from space.store import STORE
from triggers import records, schedule

COUNT_MAX = 100


class NextFire(Answer, frozen=True, kw_only=True):
    at: str  # RFC 3339 UTC, milliseconds, `Z`
    local: str  # the same instant as a wall time of the spec's zone, with its offset
    dst: schedule.DstNote | None


class NextFires(Answer, frozen=True, kw_only=True):
    trigger: str
    zone: str  # the zone `local` is in: a cron's `tz`, a once's own offset
    fires: list[NextFire]
    notes: dict[str, str]  # the legend of each DST note used in `fires`


def _zone(record: records.Trigger) -> str:
    if isinstance(record, records.CronTrigger):
        return str(record.spec.tz) or "UTC"
    if isinstance(record, records.OnceTrigger):
        at = record.spec.at
        shown: tzinfo | None = getattr(at, "tzinfo", None)
        name = shown.tzname(None) if shown is not None else None
        return name or "UTC"
    return "UTC"


async def get_next(request: web.Request) -> web.Response:
    space, tid = require_space(request), request.match_info["id"]
    count = int_query(request, "count", 10, low=1, high=COUNT_MAX, clamp=False)
    _, raw = trigger_store.flagged(space, tid, await request.app[STORE].record_row(space, tid))
    record = records.load(raw)
    if isinstance(record, records.Salvaged):
        detail = f"trigger {tid!r} does not decode: {record.error}"
        raise Refusal(409, "undecodable_record", detail)
    fires = schedule.upcoming_of(record, now_of(request).astimezone(UTC), count)
    notes = {str(f.dst): schedule.LEGEND[f.dst] for f in fires if f.dst is not None}
    shown = [NextFire(at=iso(f.at), local=local_instant(f.local), dst=f.dst) for f in fires]
    return answer(NextFires(trigger=tid, zone=_zone(record), fires=shown, notes=notes))


def setup(app: web.Application) -> None:
    add_route(
        app,
        "trigger_next",
        get_next,
        "Its next fires from now (`?count=`, default 10, at most 100), each with the UTC "
        "instant, the wall time of its zone and the DST rule's note",
        answer=NextFires,
    )
