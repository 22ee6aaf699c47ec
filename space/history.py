"""The history `why` answers from (SPEC "History and `why`"): append-only facts, written once.

Owns the `history_*` tables and the outcome columns of the claim ledger (`fires`): record
revisions (rev, instant, actor, changed fields old → new, note, the record as it then
stood), lease terms (holder, began, ended, how), device windows (unbroken runs of
heartbeats, the sleep a device reported, the feed position it had applied, its clock's
offset to the space's when it moved by `OFFSET_STEP_MS`), each device's chat streams (when
live, and whether it resumed), claim refusals, and each claimed fire's run outcome. Every
write happens inside the transaction of the fact it describes (a record write, a lease
change, a heartbeat, a claim, a run): no request of its own, nothing only in memory.
Must not decide anything: the reasoning is `triggers.why`, the reading `space.recall`.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import sqlite_utils

from space.db import add_columns

SCHEMA = """
CREATE TABLE IF NOT EXISTS history_revisions (space TEXT NOT NULL, trigger_id TEXT NOT NULL,
  rev INTEGER NOT NULL, seq INTEGER NOT NULL, at REAL NOT NULL, op TEXT NOT NULL,
  actor TEXT NOT NULL, note TEXT NOT NULL, changes TEXT NOT NULL, record TEXT,
  PRIMARY KEY (space, trigger_id, rev));
CREATE INDEX IF NOT EXISTS history_revisions_by_seq ON history_revisions (space, seq);
CREATE TABLE IF NOT EXISTS history_terms (space TEXT NOT NULL, term INTEGER NOT NULL,
  holder TEXT NOT NULL, began REAL NOT NULL, ended REAL, how TEXT,
  PRIMARY KEY (space, term));
CREATE TABLE IF NOT EXISTS history_windows (space TEXT NOT NULL, peer TEXT NOT NULL,
  began REAL NOT NULL, last_seen REAL NOT NULL, stopped INTEGER NOT NULL DEFAULT 0,
  slept REAL, applied_seq INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (space, peer, began));
CREATE TABLE IF NOT EXISTS history_applied (space TEXT NOT NULL, peer TEXT NOT NULL,
  at REAL NOT NULL, seq INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS history_applied_by_peer ON history_applied (space, peer, at);
CREATE TABLE IF NOT EXISTS history_offsets (space TEXT NOT NULL, peer TEXT NOT NULL,
  at REAL NOT NULL, offset_ms REAL NOT NULL);
CREATE INDEX IF NOT EXISTS history_offsets_by_at ON history_offsets (space, at);
CREATE TABLE IF NOT EXISTS history_refusals (space TEXT NOT NULL, trigger_id TEXT NOT NULL,
  key TEXT NOT NULL, at REAL NOT NULL, peer TEXT NOT NULL, term INTEGER NOT NULL,
  code TEXT NOT NULL, detail TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS history_refusals_by_key ON history_refusals (space, trigger_id, key);
CREATE TABLE IF NOT EXISTS history_subscriptions (space TEXT NOT NULL, peer TEXT NOT NULL,
  object_id TEXT NOT NULL, began REAL NOT NULL, ended REAL, resumed INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS history_subscriptions_by_chat ON history_subscriptions
  (space, object_id, began);
CREATE TABLE IF NOT EXISTS history_meta (name TEXT PRIMARY KEY, value REAL NOT NULL);
"""
FIRE_OUTCOME = {  # the claim ledger's entry closes with its run's outcome
    "run_id": "TEXT",
    "status": "TEXT",
    "reason": "TEXT",
    "started_at": "REAL",
    "late_ms": "REAL",
}
NOTE_MAX = 500  # characters of a revision's note
OFFSET_STEP_MS = 100.0  # a device's clock offset is noted when it moved this far (or anew)
STAMP_FIELDS = frozenset(
    {"lastStatus", "lastStatusDetail", "lastRunAt", "nextFireAt", "breaker", "rollup"}
)


class Author(msgspec.Struct, frozen=True):
    """Who changed a record (`admin`, `device:<peer>`, `run:<runId>`) and their note."""

    actor: str
    note: str = ""


SPACE_AUTHOR = Author("space")  # a write of the space itself (a store written in a test)


def ensure_schema(db: sqlite_utils.Database, now: float) -> None:
    """The tables, the outcome columns of `fires` (made by `space.fires` first), and the
    instant this store began keeping history (kept from its first start)."""
    db.executescript(SCHEMA)
    add_columns(db, "fires", FIRE_OUTCOME)
    db.execute("INSERT OR IGNORE INTO history_meta VALUES ('since', ?)", [now])


def began(db: sqlite_utils.Database) -> float:
    row = db.execute("SELECT value FROM history_meta WHERE name = 'since'").fetchone()
    return float(row[0]) if row else 0.0


# --- record revisions -----------------------------------------------------------------------


def revision(
    db: sqlite_utils.Database,
    space: str,
    old: dict[str, Any] | None,
    new: dict[str, Any] | None,
    seq: int,
    at: float,
    by: Author,
) -> None:
    """One revision: `old` None is a create, `new` None a delete."""
    db.execute(
        "INSERT OR REPLACE INTO history_revisions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        revision_row(space, old, new, seq, at, by),
    )


def revision_row(
    space: str,
    old: dict[str, Any] | None,
    new: dict[str, Any] | None,
    seq: int,
    at: float,
    by: Author,
) -> list[Any]:
    """The `history_revisions` row of a revision, in its columns' order (either store)."""
    record = new if new is not None else old
    assert record is not None
    rev = int(record.get("rev", 0)) + (1 if new is None else 0)
    changed = _changes(old or {}, new or {}) if old is not None and new is not None else {}
    kept = None if new is None else _user(new)
    return [
        space,
        record["id"],
        rev,
        seq,
        at,
        operation(old, new, changed),
        by.actor,
        by.note[:NOTE_MAX],
        json.dumps(changed, separators=(",", ":")),
        None if kept is None else json.dumps(kept, separators=(",", ":")),
    ]


def _user(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in STAMP_FIELDS}


def _changes(old: dict[str, Any], new: dict[str, Any]) -> dict[str, list[Any]]:
    skip = STAMP_FIELDS | {"rev", "updatedAt"}
    names = (set(old) | set(new)) - skip
    return {n: [old.get(n), new.get(n)] for n in sorted(names) if old.get(n) != new.get(n)}


def operation(
    old: dict[str, Any] | None, new: dict[str, Any] | None, changed: dict[str, list[Any]]
) -> str:
    """create, delete, pause, resume, repin, float, run or edit (the first that applies)."""
    if old is None:
        return "create"
    if new is None:
        return "delete"
    if "enabled" in changed:
        return "resume" if new.get("enabled", True) is not False else "pause"
    if "owner" in changed:
        return "repin" if new.get("owner") else "float"
    if "runAsked" in changed:  # a `triggers run` (space.run_asks)
        return "run"
    return "edit"


# --- terms, device windows -------------------------------------------------------------------


def term_began(db: sqlite_utils.Database, space: str, term: int, holder: str, at: float) -> None:
    """A new term; a term still open before it is closed as superseded (its end unseen)."""
    db.execute(
        "UPDATE history_terms SET ended = ?, how = 'superseded' "
        "WHERE space = ? AND term < ? AND ended IS NULL",
        [at, space, term],
    )
    db.execute(
        "INSERT OR REPLACE INTO history_terms VALUES (?, ?, ?, ?, NULL, NULL)",
        [space, term, holder, at],
    )


def term_ended(db: sqlite_utils.Database, space: str, term: int, at: float, how: str) -> None:
    db.execute(
        "UPDATE history_terms SET ended = ?, how = ? "
        "WHERE space = ? AND term = ? AND ended IS NULL",
        [at, how, space, term],
    )


def beat(
    db: sqlite_utils.Database,
    space: str,
    peer: str,
    up_since: float,
    now: float,
    *,
    stopped: bool,
    slept: float | None,
    applied: int | None,
    offset_ms: float | None = None,
) -> None:
    """A heartbeat: the window `up_since` begins (or goes on) up to `now`."""
    if up_since == now:
        db.execute(
            "INSERT OR REPLACE INTO history_windows VALUES (?, ?, ?, ?, ?, ?, 0)",
            [space, peer, now, now, int(stopped), slept],
        )
    else:
        db.execute(
            "UPDATE history_windows SET last_seen = ?, stopped = ? "
            "WHERE space = ? AND peer = ? AND began = ?",
            [now, int(stopped), space, peer, up_since],
        )
    if applied is not None:
        _applied(db, space, peer, up_since, now, applied)
    if offset_ms is not None:
        _offset(db, space, peer, up_since, now, offset_ms)


def _offset(
    db: sqlite_utils.Database, space: str, peer: str, up_since: float, now: float, ms: float
) -> None:
    """Note the device's clock offset: the first of its window, then only when it moved."""
    row = db.execute(
        "SELECT offset_ms FROM history_offsets WHERE space = ? AND peer = ? AND at >= ? "
        "ORDER BY at DESC LIMIT 1",
        [space, peer, up_since],
    ).fetchone()
    if offset_noted(None if row is None else float(row[0]), ms):
        db.execute("INSERT INTO history_offsets VALUES (?, ?, ?, ?)", [space, peer, now, ms])


def offset_noted(last: float | None, ms: float) -> bool:
    """Whether an offset of `ms` is noted after `last` of its window (either store)."""
    return last is None or abs(ms - last) >= OFFSET_STEP_MS


def _applied(
    db: sqlite_utils.Database, space: str, peer: str, up_since: float, now: float, seq: int
) -> None:
    """Note when the device's applied feed position first passed a revision (only then)."""
    row = db.execute(
        "SELECT applied_seq FROM history_windows WHERE space = ? AND peer = ? AND began = ?",
        [space, peer, up_since],
    ).fetchone()
    before = int(row[0]) if row else 0
    if seq <= before:
        return
    db.execute(
        "UPDATE history_windows SET applied_seq = ? WHERE space = ? AND peer = ? AND began = ?",
        [seq, space, peer, up_since],
    )
    crossed = db.execute(
        "SELECT 1 FROM history_revisions WHERE space = ? AND seq > ? AND seq <= ? LIMIT 1",
        [space, before, seq],
    ).fetchone()
    if crossed or before == 0:
        db.execute("INSERT INTO history_applied VALUES (?, ?, ?, ?)", [space, peer, now, seq])


def subscribed(
    db: sqlite_utils.Database, space: str, peer: str, object_id: str, at: float, resumed: bool
) -> int:
    """A device's stream of a chat went live (`resumed`: from a `Last-Event-ID`); its row."""
    cur = db.execute(
        "INSERT INTO history_subscriptions VALUES (?, ?, ?, ?, NULL, ?)",
        [space, peer, object_id, at, int(resumed)],
    )
    return int(cur.lastrowid or 0)


def unsubscribed(db: sqlite_utils.Database, row: int, at: float) -> None:
    db.execute("UPDATE history_subscriptions SET ended = ? WHERE rowid = ?", [at, row])


# --- the claim ledger ------------------------------------------------------------------------


def refused(
    db: sqlite_utils.Database,
    space: str,
    fire: tuple[str, str, str, int],
    at: float,
    code: str,
    detail: str,
) -> None:
    """A refused claim of `(triggerId, key, peer, term)`."""
    tid, key, peer, term = fire
    db.execute(
        "INSERT INTO history_refusals VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [space, tid, key, at, peer, term, code, detail],
    )


def outcome(
    db: sqlite_utils.Database,
    space: str,
    fire: tuple[str, str],
    run: tuple[str, str, str, float, float | None],
) -> None:
    """The run `(runId, status, reason, startedAt, lateMs)` of the claimed fire `fire`."""
    tid, key = fire
    db.execute(
        "UPDATE fires SET run_id = ?, status = ?, reason = ?, started_at = ?, late_ms = ? "
        "WHERE space = ? AND trigger_id = ? AND key = ?",
        [*run, space, tid, key],
    )
