"""`GET /v1/spaces/{space}/triggers/{id}/why`: why a slot fired or did not, from history.

Owns the route (SPEC "History and `why`"): `?at=<instant>` (RFC 3339 with offset, or unix
seconds; default now: the last due slot), `?key=<fire key>`, or `?since=&until=` for
every slot of a range (at most `limit`, 100). It reads the facts around the slot through
the store seam (`recall`'s values from either store) and answers what `triggers.why`
decides. An instant older than the retention, or than the history itself, is `410
past_retention`; bad input is 400 naming the field. A run token may ask too (the agent
explains itself), and is answered without the run's result. Must not write.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
from aiohttp import web

from core.vocab import canonical_key, iso
from space import history, trigger_store
from space.appstate import SETTINGS
from space.auth import Role, principal
from space.http import Refusal, add_route, answer, int_query
from space.recall import TriggerHistory
from space.spaces import require_space
from space.store import STORE, Store
from triggers import facts as f
from triggers import policies, slots, why
from triggers.facts import record_at
from triggers.records import CHAT_WATCH_PROGRAM, CronTrigger, OnceTrigger, load
from triggers.whychain import Located

BRIDGE_SECONDS = 120.0  # the bridge window W a taking-over device fires back over
BEATS_PER_LIVE = 3  # a device beats three times per liveness window (every 5 s of 15)
RUN_FIELDS = ("runId", "peer", "term", "key", "status", "reason", "dueAt", "startedAt", "lateMs")
_encoder = msgspec.json.Encoder()


class Question(msgspec.Struct, frozen=True, kw_only=True):
    space: str
    trigger: str
    now: datetime
    kept_since: datetime
    revisions: list[f.Revision]


def _instant(name: str, text: str) -> datetime:
    """`text` as an instant: RFC 3339 with an offset, or unix seconds; 400 naming `name`."""
    try:
        if text.replace(".", "", 1).isdigit() and len(text) <= 20:
            return datetime.fromtimestamp(float(text), UTC)
        when = datetime.fromisoformat(text)
        if when.tzinfo is not None:
            return when.astimezone(UTC)
    except (ValueError, OverflowError, OSError):  # OverflowError: an offset past year 1 or 9999
        pass
    detail = f"query `{name}` must be RFC 3339 with an offset, or unix seconds; got {text!r}"
    raise Refusal(400, "invalid_query", detail)


async def _question(store: Store, request: web.Request) -> Question:
    space, tid = require_space(request), request.match_info["id"]
    told = await store.trigger_history(space, tid)
    began, now = told.began, told.now  # by the store's clock
    revisions = told.revisions or _as_it_stands(told, space, tid)
    days = request.app[SETTINGS].history_days
    kept = max(now - timedelta(days=days), began)
    return Question(space=space, trigger=tid, now=now, kept_since=kept, revisions=revisions)


def _as_it_stands(told: TriggerHistory, space: str, tid: str) -> list[f.Revision]:
    """A record older than the history (a store kept by an older build): as it stands, from
    when the history began; 404 if there is no such record either."""
    try:
        rev, record = trigger_store.parsed(space, tid, told.stored)
    except Refusal as exc:
        if exc.status != 404:
            raise  # an undecodable record: 409, as its other routes say
        detail = f"space {space!r} has no trigger {tid!r}, nor history of one"
        raise Refusal(404, "not_found", detail) from exc
    kept = {k: v for k, v in record.items() if k not in history.STAMP_FIELDS}
    return [f.Revision(rev=rev, seq=0, at=told.began, op="edit", actor="space", record=kept)]


def _kept(q: Question, name: str, at: datetime) -> None:
    if at < q.kept_since:
        detail = (
            f"`{name}` {iso(at)} is older than the history kept (from {iso(q.kept_since)}); "
            "`--history-days` sets how long it is kept"
        )
        raise Refusal(410, "past_retention", detail)


async def get_why(request: web.Request) -> web.Response:
    """The facts through the store seam (each slot's in one unit of work), reasoned here."""
    db = request.app[STORE]
    q = await _question(db, request)
    query = request.query
    given = [n for n in ("at", "key", "since") if n in query]
    if len(given) > 1:
        raise Refusal(400, "invalid_query", f"give one of `at`, `key`, `since`, not {given}")
    if "since" in query:
        return await _range(db, request, q)
    if "key" in query:
        where, at = await _by_key(db, q, query["key"])
    else:
        at = _instant("at", query["at"]) if "at" in query else q.now
        _kept(q, "at", at)
        where = await _located(db, q, at, exact="at" in query)
    return _answer(request, await _explain(db, request, q, at, where))


async def _located(db: Store, q: Question, at: datetime, *, exact: bool) -> Located:
    record = record_at(q.revisions, at)
    if record is not None and record.get("kind") == "event":
        spec = record.get("spec")
        chat = spec.get("objectId") if isinstance(spec, dict) else None
        found = await db.chat_message(str(chat or ""), at.timestamp(), None)
        return why.locate_message(q.revisions, at, found)
    return why.locate(q.revisions, at, exact=exact)


async def _by_key(db: Store, q: Question, key: str) -> tuple[Located, datetime]:
    """The slot of a fire key; a retry's key (`<key>#k`) is its fire's slot, asked as itself."""
    base = policies.base_key(key)
    where, at = await _by_base_key(db, q, base)
    if base == key or where.key is None:
        return where, at
    return msgspec.structs.replace(where, key=canonical_key(key)), at


async def _by_base_key(db: Store, q: Question, key: str) -> tuple[Located, datetime]:
    record = record_at(q.revisions, q.now)
    if record is not None and record.get("kind") == "event":
        found = await db.chat_message("", 0.0, key)
        if found is None:
            raise Refusal(
                404, "not_found", f"no message {key!r}: `key` of an event trigger is a messageId"
            )
        _kept(q, "key", found.accepted)
        return why.locate_message(q.revisions, found.accepted, found), found.accepted
    try:
        at = _instant("key", key)
    except Refusal:
        detail = f"`key` of a cron or once trigger is its slot's instant (RFC 3339), got {key!r}"
        raise Refusal(400, "invalid_query", detail) from None
    _kept(q, "key", at)
    return why.locate(q.revisions, at, exact=True), at


async def _explain(
    db: Store, request: web.Request, q: Question, at: datetime, where: Located
) -> why.Explanation:
    settings = request.app[SETTINGS]
    known = f.Facts(now=q.now, kept_since=q.kept_since, revisions=q.revisions)
    if where.slot is not None and where.key is not None:
        slot = where.slot.timestamp()
        told = await db.slot_history(q.space, q.trigger, where.key, slot, BRIDGE_SECONDS)
        claim = told.claim
        turn = await _turn(db, q.space, where, claim)
        if turn is not None and claim is not None:  # chat-watch: the turn is its run
            claim = _turned(claim, turn, where.slot)
        known = f.Facts(
            now=q.now,
            kept_since=q.kept_since,
            revisions=q.revisions,
            terms=told.terms,
            windows=told.windows,
            applied=told.applied,
            offsets=told.offsets,
            claim=claim,
            refusals=told.refusals,
            run=turn or told.run,  # the run of the claim as read (`turn`: not a run's)
            message=await _message(db, where),
            subscriptions=await _streams(db, q.space, where),
            beat_seconds=settings.live_seconds / BEATS_PER_LIVE,
            bridge_seconds=BRIDGE_SECONDS,
            done_at=await _done_at(db, q, where),
            retries=told.retries,
        )
    return why.explain(q.trigger, at, where, known)


async def _done_at(db: Store, q: Question, where: Located) -> datetime | None:
    most = (where.record or {}).get("maxRuns")
    if not isinstance(most, int) or isinstance(most, bool) or most < 1:
        return None
    return await db.done_at(q.space, q.trigger, most)


async def _turn(
    db: Store, space: str, where: Located, claim: f.Claim | None
) -> dict[str, Any] | None:
    """The chat responder's turn that took up the message, for a claim with no run."""
    record = where.record or {}
    if claim is None or claim.status is not None or record.get("program") != CHAT_WATCH_PROGRAM:
        return None
    spec = record.get("spec")
    chat = spec.get("objectId") if isinstance(spec, dict) else None
    if not isinstance(chat, str) or where.key is None or where.slot is None:
        return None
    return await db.chat_turn(space, chat, where.key, where.slot.timestamp())


def _turned(claim: f.Claim, turn: dict[str, Any], accepted: datetime) -> f.Claim:
    """The claim as its turn ended: `ok`, or an error (timeout, cancelled) with the outcome."""
    outcome = str(turn.get("outcome") or "")
    started = turn.get("startedAt")
    when = datetime.fromisoformat(started) if isinstance(started, str) else None
    late = None if when is None else (when - accepted).total_seconds() * 1000
    return msgspec.structs.replace(
        claim,
        run_id=str(turn.get("turnId") or ""),
        status="ok" if outcome == "ok" else "error",
        reason=None if outcome == "ok" else outcome,
        started_at=when,
        late_ms=late,
    )


async def _message(db: Store, where: Located) -> f.MessageFact | None:
    if where.record is None or where.record.get("kind") != "event" or where.key is None:
        return None
    return await db.chat_message("", 0.0, where.key)


async def _streams(db: Store, space: str, where: Located) -> list[f.Subscription]:
    record = where.record or {}
    spec = record.get("spec")
    chat = spec.get("objectId") if isinstance(spec, dict) else None
    if where.slot is None or not isinstance(chat, str) or record.get("kind") != "event":
        return []
    return await db.chat_streams(space, chat, where.slot.timestamp())


async def _range(db: Store, request: web.Request, q: Question) -> web.Response:
    """Every slot of `[since, until]` (until: default now), each answered, oldest first; the
    part of the range older than the history kept is left out."""
    since = _instant("since", request.query["since"])
    until = _instant("until", request.query["until"]) if "until" in request.query else q.now
    _kept(q, "until", until)
    since = max(since, q.kept_since)  # a range reaching past the history: from where it begins
    limit = int_query(request, "limit", 100, low=1, high=1000)
    record = load(record_at(q.revisions, until) or {})
    if not isinstance(record, CronTrigger | OnceTrigger):
        raise Refusal(400, "invalid_query", "`since` lists the slots of a cron or once trigger")
    found = slots.slots_between(record.spec, since, min(until, q.now), limit)
    answers = [
        await _explain(db, request, q, s, why.locate(q.revisions, s, exact=True)) for s in found
    ]
    return answer(
        {
            "trigger": q.trigger,
            "since": iso(since),
            "until": iso(until),
            "answers": [_shown(request, a) for a in answers],
        }
    )


def _shown(request: web.Request, got: why.Explanation) -> dict[str, Any]:
    doc: dict[str, Any] = msgspec.to_builtins(got)
    if principal(request).role is Role.RUN and isinstance(doc.get("run"), dict):
        doc["run"] = {k: v for k, v in doc["run"].items() if k in RUN_FIELDS}
    return doc


def _answer(request: web.Request, got: why.Explanation) -> web.Response:
    return answer(_shown(request, got))


def setup(app: web.Application) -> None:
    add_route(
        app,
        "trigger_why",
        get_why,
        "Why a slot fired or did not, from history: `?at=<instant>` (default now: the last "
        "due slot), `?key=<fire key>`, or `?since=&until=&limit=` for every slot of a range",
        answer=why.Explanation,
    )
