"""Routes of trigger records: list, create, read, patch, delete, reserved create, status stamps.

Owns the HTTP side of records (headers, bodies, answers) and wakes change-feed
streams after each committed write. A run token's patch is limited to `owner`
and `enabled` (`auth.limit_patch`); a device stamps only the records it answers
for (`duties`). Storage goes through the store seam (`app[STORE]`), the rules are
`trigger_store`'s; this module must not write SQL.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from aiohttp import web

from core.wire import Answer, Body, Stamps
from space import duties, record_view, trigger_store
from space.auth import Role, author, limit_patch, principal
from space.changes import notify
from space.http import Refusal, add_route, answer, decode, int64, int_query, raw_body
from space.spaces import require_space
from space.store import STORE
from triggers import bounds, records


class TriggerPatch(Body, frozen=True, kw_only=True):
    """`PATCH …/triggers/{id}` as documented: any user fields; the result must be a valid record.

    For the OpenAPI document only; the store checks the merged record (`records.validate_input`).
    """

    name: str | msgspec.UnsetType = msgspec.UNSET
    kind: Literal["cron", "once", "event"] | msgspec.UnsetType = msgspec.UNSET
    spec: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET  # as the kind says
    program: bounds.RefText | msgspec.UnsetType = msgspec.UNSET
    args: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET
    owner: str | msgspec.UnsetType = msgspec.UNSET
    enabled: bool | msgspec.UnsetType = msgspec.UNSET
    limits: records.LimitsInput | msgspec.UnsetType = msgspec.UNSET


class RecordList(Answer, frozen=True, kw_only=True):
    triggers: list[dict[str, Any]]
    seq: int
    next: str | None = None  # with `limit`: the `after` of the next page; null at the end


PAGE_MAX = 10_000


def if_match(request: web.Request) -> int | None:
    value = request.headers.get("If-Match")
    if value is None:
        return None
    rev = int64(value.strip().removeprefix("W/").strip('"'))
    if rev is None:
        detail = f"If-Match must be a record rev (an integer within 64 bits), got {value[:40]!r}"
        raise Refusal(400, "invalid_header", detail)
    return rev


async def object_body(request: web.Request, code: str = "invalid_record") -> dict[str, Any]:
    return decode(await raw_body(request), dict[str, Any], code=code)


def _one(request: web.Request, record: dict[str, Any], status: int = 200) -> web.Response:
    """One record, its defaults filled in (`enabled`, `limits` …), its rev as the ETag; to a
    run token, without what it is told (`record_view.for_run`)."""
    full = record_view.complete(record)
    if principal(request).role is Role.RUN:
        full = record_view.for_run(full)
    return answer(full, status=status, headers={"ETag": f'"{record.get("rev", 0)}"'})


async def list_triggers(request: web.Request) -> web.Response:
    """All records; with `limit`, a page by id (`after`, `next`); `stored=1`: as stored."""
    space = require_space(request)
    store = request.app[STORE]
    seq = await store.latest_seq(space)  # before the rows: the feed from here covers them
    stored = request.query.get("stored") in ("1", "true")
    if principal(request).role is Role.RUN:  # a run lists who and what state, never args
        listed, _ = await store.records_page(space, "", -1, stored=False)
        shown = [record_view.for_run(r) for r in listed]  # type: ignore[arg-type]  # not stored
        return answer({"triggers": shown, "seq": seq})
    if "limit" not in request.query and not stored:
        listed, _ = await store.records_page(space, "", -1, stored=False)
        return answer({"triggers": listed, "seq": seq})
    limit = int_query(request, "limit", PAGE_MAX, low=1, high=PAGE_MAX)
    after = request.query.get("after", "")
    page, last = await store.records_page(space, after, limit, stored=stored)
    return answer({"triggers": page, "seq": seq, "next": last})


async def create_trigger(request: web.Request) -> web.Response:
    space = require_space(request)
    body = await object_body(request)
    by = author(request)
    duties.require_own_programming(request, None, body)
    record = await request.app[STORE].create_record(space, body, by)
    notify(request.app, space)
    return _one(request, record, 201)


async def put_trigger(request: web.Request) -> web.Response:
    space = require_space(request)
    body = await object_body(request)
    tid = request.match_info["id"]
    by = author(request)
    duties.require_own_programming(request, await _stored(request, space, tid), body)
    record, created = await request.app[STORE].create_reserved_record(space, tid, body, by)
    if created:
        notify(request.app, space)
    return _one(request, record, 201 if created else 200)


async def get_trigger(request: web.Request) -> web.Response:
    space = require_space(request)
    tid = request.match_info["id"]
    row = await request.app[STORE].record_row(space, tid)
    _, record = trigger_store.flagged(space, tid, row)
    return _one(request, record)


async def patch_trigger(request: web.Request) -> web.Response:
    space = require_space(request)
    changes = await object_body(request)
    limit_patch(request, changes)
    tid = request.match_info["id"]
    if (stored := await _stored(request, space, tid)) is not None:
        duties.require_own_programming(request, stored, changes)
    by = author(request)
    record = await request.app[STORE].patch_record(space, tid, changes, if_match(request), by)
    notify(request.app, space)
    return _one(request, record)


async def _stored(request: web.Request, space: str, tid: str) -> dict[str, Any] | None:
    """The record as stored now, None if there is none (or it is not a JSON object)."""
    try:
        return trigger_store.parsed(space, tid, await request.app[STORE].record_row(space, tid))[1]
    except Refusal:
        return None


async def delete_trigger(request: web.Request) -> web.Response:
    space = require_space(request)
    tid = request.match_info["id"]
    await request.app[STORE].delete_record(space, tid, if_match(request), author(request))
    notify(request.app, space)
    return answer({"id": tid, "deleted": True})


async def post_status(request: web.Request) -> web.Response:
    space = require_space(request)
    data = await raw_body(request)
    decode(data, Stamps, code="invalid_status")
    stamps = decode(data, dict[str, Any], code="invalid_status")
    tid, who = request.match_info["id"], duties.device(request)
    record, written = await request.app[STORE].stamp_record(
        space, tid, stamps, if_match(request), who
    )
    if written:
        notify(request.app, space)
    return _one(request, record)


def setup(app: web.Application) -> None:
    add_route(
        app,
        "triggers",
        list_triggers,
        "List raw records, undecodable ones flagged; `?limit=N&after=<id>` pages by id "
        "(`next`), `&stored=1` answers them as stored",
        answer=RecordList,
    )
    add_route(
        app,
        "trigger_create",
        create_trigger,
        "Create a record; the server mints `id`",
        body=records.TriggerInput,
    )
    add_route(app, "trigger_get", get_trigger, "One record")
    add_route(
        app,
        "trigger_put",
        put_trigger,
        "Create-if-absent a record with a reserved id (`chat-watch`)",
        body=records.TriggerInput,
    )
    add_route(
        app,
        "trigger_patch",
        patch_trigger,
        "Partial update of user fields; `If-Match: <rev>` compare-and-set",
        body=TriggerPatch,
    )
    add_route(app, "trigger_delete", delete_trigger, "Delete a record (its id stays used)")
    add_route(app, "trigger_status", post_status, "Write runtime stamps only", body=Stamps)
