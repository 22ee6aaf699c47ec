"""Reading the history back for `why`: the facts around one slot of one trigger.

Owns the SQLite queries that turn the `history_*` tables, the claim ledger, the runs, the
chat messages and the devices' chat streams into `triggers.facts` values, read narrowly
around the slot (a year of a minutely trigger costs what a day does: every read is by key
or by a short range), and the pure row → fact conversions both stores share (the
PostgreSQL twins of the queries are `store.pg_history`'s). Reads only; must not decide
anything (that is `triggers.why`).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import msgspec
import sqlite_utils

from triggers import facts as f
from triggers import policies

AROUND = 3600.0  # seconds of windows and terms read on either side of a slot
SCAN = 3600.0  # a run record of the key is looked for up to this long after the slot


class TriggerHistory(msgspec.Struct, frozen=True, kw_only=True):
    """A trigger's revisions, when the store began keeping history, the record as it stands
    (`(rev, body)`, for one older than the history) and the store's `now`."""

    began: datetime
    now: datetime
    revisions: list[f.Revision]
    stored: tuple[int, str] | None


class SlotHistory(msgspec.Struct, frozen=True, kw_only=True):
    """The facts around one slot and its key, read in one unit of work."""

    terms: list[f.Term]
    windows: list[f.Window]
    applied: list[f.Applied]
    offsets: list[f.Offset]
    claim: f.Claim | None
    refusals: list[f.Refused]
    retries: dict[str, f.Claim]
    run: dict[str, Any] | None  # the run record of the key


def _at(unix: float) -> datetime:
    return datetime.fromtimestamp(unix, UTC)


def revisions(db: sqlite_utils.Database, space: str, tid: str) -> list[f.Revision]:
    rows = db.execute(
        "SELECT rev, seq, at, op, actor, note, changes, record FROM history_revisions "
        "WHERE space = ? AND trigger_id = ? ORDER BY rev",
        [space, tid],
    ).fetchall()
    return revisions_of(rows)


def revisions_of(rows: list[Any]) -> list[f.Revision]:
    found = []
    for rev, seq, at, op, actor, note, changes, record in rows:
        try:
            changed, body = json.loads(changes), None if record is None else json.loads(record)
        except ValueError:  # an odd row says nothing
            continue
        found.append(
            f.Revision(
                rev=rev,
                seq=seq,
                at=_at(at),
                op=op,
                actor=actor,
                note=note,
                changes=changed if isinstance(changed, dict) else {},
                record=body if isinstance(body, dict) else None,
            )
        )
    return found


def terms(db: sqlite_utils.Database, space: str, slot: float, bridge: float) -> list[f.Term]:
    """The terms that overlap `[slot − AROUND, slot + bridge]`, oldest first."""
    rows = db.execute(
        "SELECT term, holder, began, ended, how FROM history_terms WHERE space = ? "
        "AND began <= ? AND (ended IS NULL OR ended >= ?) ORDER BY term",
        [space, slot + bridge, slot - AROUND],
    ).fetchall()
    return terms_of(rows)


def terms_of(rows: list[Any]) -> list[f.Term]:
    return [
        f.Term(term=t, holder=h, began=_at(b), ended=None if e is None else _at(e), how=how)
        for t, h, b, e, how in rows
    ]


def windows(db: sqlite_utils.Database, space: str, slot: float) -> list[f.Window]:
    """Every device's windows near `slot`, and each device's last one before it."""
    rows = db.execute(
        "SELECT peer, began, last_seen, stopped, slept FROM history_windows WHERE space = ? "
        "AND began <= ? AND last_seen >= ? ORDER BY began",
        [space, slot + AROUND, slot - AROUND],
    ).fetchall()
    earlier = db.execute(
        "SELECT peer, began, MAX(last_seen), stopped, slept FROM history_windows "
        "WHERE space = ? AND last_seen < ? GROUP BY peer",
        [space, slot - AROUND],
    ).fetchall()
    return windows_of([*earlier, *rows])


def windows_of(rows: list[Any]) -> list[f.Window]:
    return [
        f.Window(peer=p, began=_at(b), last_seen=_at(s), stopped=bool(st), slept=sl)
        for p, b, s, st, sl in sorted(rows, key=lambda r: r[1])
    ]


def applied(db: sqlite_utils.Database, space: str, slot: float) -> list[f.Applied]:
    """Each device's last applied position at or before `slot`, and those reported after."""
    rows = db.execute(
        "SELECT peer, MAX(at), seq FROM history_applied WHERE space = ? AND at <= ? GROUP BY peer",
        [space, slot],
    ).fetchall()
    after = db.execute(
        "SELECT peer, at, seq FROM history_applied WHERE space = ? AND at > ? AND at <= ? "
        "ORDER BY at",
        [space, slot, slot + AROUND],
    ).fetchall()
    return applied_of([*rows, *after])


def applied_of(rows: list[Any]) -> list[f.Applied]:
    return [f.Applied(peer=p, at=_at(a), seq=s) for p, a, s in rows]


def offsets(db: sqlite_utils.Database, space: str, slot: float) -> list[f.Offset]:
    """Each device's clock offset as last noted before the hour around `slot`, and those
    noted within it (a claim or a refusal near the slot went by one of them), oldest first."""
    before = db.execute(
        "SELECT peer, MAX(at), offset_ms FROM history_offsets WHERE space = ? AND at < ? "
        "GROUP BY peer",
        [space, slot - AROUND],
    ).fetchall()
    near = db.execute(
        "SELECT peer, at, offset_ms FROM history_offsets WHERE space = ? AND at >= ? "
        "AND at <= ? ORDER BY at",
        [space, slot - AROUND, slot + AROUND],
    ).fetchall()
    return offsets_of([*before, *near])


def offsets_of(rows: list[Any]) -> list[f.Offset]:
    return [f.Offset(peer=p, at=_at(a), ms=ms) for p, a, ms in rows]


_CLAIM = (
    "SELECT peer, term, claimed_at, run_id, status, reason, started_at, late_ms, key FROM fires"
)


def claim(db: sqlite_utils.Database, space: str, tid: str, key: str) -> f.Claim | None:
    row = db.execute(
        f"{_CLAIM} WHERE space = ? AND trigger_id = ? AND key = ?", [space, tid, key]
    ).fetchone()
    return None if row is None else claim_of(row)


def retries(db: sqlite_utils.Database, space: str, tid: str, key: str) -> dict[str, f.Claim]:
    """The claims of a fire's retries (`<key>#k`), by key, in attempt order."""
    rows = db.execute(  # `#` sorts right before `$`: the keys that begin `<key>#`
        f"{_CLAIM} WHERE space = ? AND trigger_id = ? AND key > ? AND key < ?",
        [space, tid, key + "#", key + "$"],
    ).fetchall()
    return retries_of(rows)


def retries_of(rows: list[Any]) -> dict[str, f.Claim]:
    found = {row[8]: claim_of(row) for row in rows}
    return dict(sorted(found.items(), key=lambda kv: policies.attempt_of(kv[0])))


def claim_of(row: Any) -> f.Claim:
    """A claim ledger's row (`claimed_at` the wire's text, or an instant) as a fact."""
    peer, term, claimed, run_id, status, reason, started, late, _ = row
    return f.Claim(
        peer=peer,
        term=term,
        claimed_at=claimed if isinstance(claimed, datetime) else datetime.fromisoformat(claimed),
        run_id=run_id,
        status=status,
        reason=reason,
        started_at=None if started is None else _at(started),
        late_ms=late,
    )


def done_at(db: sqlite_utils.Database, space: str, tid: str, max_runs: int) -> datetime | None:
    """When the `max_runs`-th ok run of the trigger started (its last counted), if it did."""
    row = db.execute(
        "SELECT started_at FROM fires WHERE space = ? AND trigger_id = ? AND status = 'ok' "
        "AND started_at IS NOT NULL ORDER BY started_at LIMIT 1 OFFSET ?",
        [space, tid, max_runs - 1],
    ).fetchone()
    return None if row is None else _at(row[0])


def refusals(db: sqlite_utils.Database, space: str, tid: str, key: str) -> list[f.Refused]:
    rows = db.execute(
        "SELECT at, peer, term, code, detail FROM history_refusals "
        "WHERE space = ? AND trigger_id = ? AND key = ? ORDER BY at",
        [space, tid, key],
    ).fetchall()
    return refusals_of(rows)


def refusals_of(rows: list[Any]) -> list[f.Refused]:
    return [f.Refused(at=_at(a), peer=p, term=t, code=c, detail=d) for a, p, t, c, d in rows]


def run(
    db: sqlite_utils.Database, space: str, tid: str, key: str, run_id: str | None, slot: float
) -> dict[str, Any] | None:
    """The run record of the fire `key` (by its run id, else looked for after the slot)."""
    if run_id is not None:
        rows = db.execute(
            "SELECT body FROM runs WHERE space = ? AND run_id = ?", [space, run_id]
        ).fetchall()
    else:
        rows = db.execute(
            "SELECT body FROM runs WHERE space = ? AND trigger_id = ? "
            "AND started_at >= ? AND started_at <= ? ORDER BY seq LIMIT 100",
            [space, tid, slot - 1, slot + SCAN],
        ).fetchall()
    return first_of(rows, lambda doc: doc.get("key") == key)


def first_of(rows: list[Any], wanted: Any) -> dict[str, Any] | None:
    """The first of the rows' JSON bodies that is an object `wanted` accepts."""
    for (body,) in rows:
        try:
            doc = json.loads(body)
        except ValueError:
            continue
        if isinstance(doc, dict) and wanted(doc):
            return doc
    return None


def message(
    db: sqlite_utils.Database, object_id: str, at: float, message_id: str | None
) -> f.MessageFact | None:
    """The message asked about: by id, else the last of the chat accepted at or before `at`."""
    columns = "SELECT message_id, created_ts, body FROM chat_messages"
    params: list[object]
    if message_id is not None:
        sql, params = f"{columns} WHERE message_id = ?", [message_id]
    else:
        sql = f"{columns} WHERE object_id = ? AND created_ts <= ? ORDER BY seq DESC LIMIT 1"
        params = [object_id, at]
    return message_of(db.execute(sql, params).fetchone())


def message_of(row: Any) -> f.MessageFact | None:
    if row is None:
        return None
    try:
        agent = json.loads(row[2]).get("agent")
    except (ValueError, AttributeError):
        agent = None
    name = agent.get("name") if isinstance(agent, dict) else None
    return f.MessageFact(
        message_id=row[0], accepted=_at(row[1]), agent=None if agent is None else str(name)
    )


def subscriptions(
    db: sqlite_utils.Database, space: str, object_id: str, at: float
) -> list[f.Subscription]:
    """The devices' streams of the chat around the instant `at`, oldest first."""
    rows = db.execute(
        "SELECT peer, began, ended, resumed FROM history_subscriptions WHERE space = ? "
        "AND object_id = ? AND began <= ? AND (ended IS NULL OR ended >= ?) ORDER BY began",
        [space, object_id, at + AROUND, at - AROUND],
    ).fetchall()
    return subscriptions_of(rows)


def subscriptions_of(rows: list[Any]) -> list[f.Subscription]:
    return [
        f.Subscription(peer=p, began=_at(b), ended=None if e is None else _at(e), resumed=bool(r))
        for p, b, e, r in rows
    ]


def turn(
    db: sqlite_utils.Database, space: str, object_id: str, message_id: str, accepted: float
) -> dict[str, Any] | None:
    """The chat responder's turn that took up `message_id` (its fires are turns, not runs)."""
    rows = db.execute(
        "SELECT body FROM agent_turns WHERE space = ? AND object_id = ? AND started_at >= ? "
        "AND started_at <= ? ORDER BY seq LIMIT 200",
        [space, object_id, accepted - 1, accepted + SCAN],
    ).fetchall()
    return first_of(rows, lambda doc: message_id in (doc.get("messageIds") or []))
