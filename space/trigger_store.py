"""Trigger records in SQLite: ids never reused, raw JSON kept, every write a change.

Owns the `triggers` and `trigger_ids` tables, each write appended to the change feed
(`change_log`: a `seq` over create, update, stamp and delete); records stored as raw
JSON, so unknown fields survive; `activeSince`, the instant a record's firing regime
began (moved to the end of a snooze, `pausedUntil`). Input is checked by `record_input`,
reads shaped by `record_view`. Callers hold no transaction. Must not know HTTP beyond
raising `Refusal`.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from datetime import datetime
from typing import Any

import msgspec
import sqlite_utils

from core.vocab import MANUAL_PREFIX
from space import change_log, history, record_input, record_view
from space.db import transaction
from space.history import SPACE_AUTHOR, Author
from space.http import Refusal
from space.servertime import iso
from triggers import records

RESERVED_IDS = frozenset({records.RESERVED_CHAT_WATCH})
ID_PREFIX = "trg_"

# a record's name, for the index that keeps names unique (a body that is not JSON has none)
NAME_OF_BODY = "(CASE WHEN json_valid(body) THEN json_extract(body, '$.name') END)"
SCHEMA = """
CREATE TABLE IF NOT EXISTS trigger_ids (space TEXT NOT NULL, id TEXT NOT NULL,
  PRIMARY KEY (space, id));
CREATE TABLE IF NOT EXISTS triggers (space TEXT NOT NULL, id TEXT NOT NULL,
  rev INTEGER NOT NULL, body TEXT NOT NULL, PRIMARY KEY (space, id));
CREATE INDEX IF NOT EXISTS triggers_by_name ON triggers (space, NAME_OF_BODY);
""".replace("NAME_OF_BODY", NAME_OF_BODY)

Record = dict[str, Any]


def ensure_schema(db: sqlite_utils.Database) -> None:
    db.executescript(SCHEMA)
    change_log.ensure_schema(db)


def _mint_id(db: sqlite_utils.Database, space: str) -> str:
    while True:
        tid = ID_PREFIX + secrets.token_hex(8)
        if db.execute("INSERT OR IGNORE INTO trigger_ids VALUES (?, ?)", [space, tid]).rowcount:
            return tid


def stored_row(db: sqlite_utils.Database, space: str, tid: str) -> tuple[int, str] | None:
    """The stored `(rev, body)` of `tid`, None if there is none."""
    rows = db.execute("SELECT rev, body FROM triggers WHERE space = ? AND id = ?", [space, tid])
    row = rows.fetchone()
    return (row[0], row[1]) if row else None


def current(db: sqlite_utils.Database, space: str, tid: str) -> tuple[int, Record]:
    """The stored record (rev, raw object); 404 `unknown_trigger` if absent."""
    return parsed(space, tid, stored_row(db, space, tid))


def parsed(space: str, tid: str, row: tuple[int, str] | None) -> tuple[int, Record]:
    """A stored row `(rev, body)` as `current` answers it (either store)."""
    if row is None:
        raise unknown(space, tid)
    record = record_view.parse(row[1])
    if record is None:
        raise Refusal(
            409,
            "undecodable_record",
            f"trigger {tid!r} is not a JSON object as stored; it can only be read or deleted",
        )
    return row[0], record


def unknown(space: str, tid: str) -> Refusal:
    return Refusal(404, "unknown_trigger", f"no trigger {tid!r} in space {space!r}")


def get_one(db: sqlite_utils.Database, space: str, tid: str) -> tuple[int, Record]:
    """The stored record as listed (undecodable ones flagged); 404 if absent."""
    return flagged(space, tid, stored_row(db, space, tid))


def flagged(space: str, tid: str, stored: tuple[int, str] | None) -> tuple[int, Record]:
    """A stored row `(rev, body)` as `get_one` answers it (either store)."""
    if stored is None:
        raise unknown(space, tid)
    return stored[0], record_view.flagged(tid, stored[1])


def check_rev(rev: int, if_match: int | None) -> None:
    if if_match is not None and if_match != rev:
        raise Refusal(
            409, "rev_mismatch", f"If-Match rev {if_match} but the record is at {rev}", rev=rev
        )


def _write(
    db: sqlite_utils.Database, space: str, record: Record, op: str, now: str, writer: str = ""
) -> int:
    body = json.dumps(record, separators=(",", ":"))
    db.execute(
        "INSERT OR REPLACE INTO triggers VALUES (?, ?, ?, ?)",
        [space, record["id"], record["rev"], body],
    )
    change = change_log.Change(space, record["id"], op, record["rev"], body, now, writer)
    return change_log.append(db, change)


def _name_free(db: sqlite_utils.Database, space: str, name: object, tid: str = "") -> None:
    """Names are unique within a space: 409 `name_taken` naming the record that has it."""
    rows = db.execute(
        f"SELECT id FROM triggers WHERE space = ? AND {NAME_OF_BODY} = ? AND id != ? LIMIT 1",
        [space, name, tid],
    )
    if (row := rows.fetchone()) is not None:
        detail = f"trigger {row[0]} in space {space!r} is named {name!r} already - at `$.name`"
        raise Refusal(409, "name_taken", detail, id=row[0])


def create(
    db: sqlite_utils.Database, space: str, body: Record, now: str, by: Author = SPACE_AUTHOR
) -> Record:
    """Store a new record under a freshly minted `id` (its name not taken)."""
    record_input.check(body)
    with transaction(db):
        _name_free(db, space, body.get("name"))
        tid = _mint_id(db, space)
        record = new_record(tid, body, now)
        seq = _write(db, space, record, "create", now)
        history.revision(db, space, None, record, seq, _unix(now), by)
    return record


def _unix(now: str) -> float:
    return datetime.fromisoformat(now).timestamp()


def new_record(tid: str, body: Record, now: str) -> Record:
    """A new record under `tid` at rev 1 (created snoozed: active from the snooze's end)."""
    snooze = _instant_text(body.get("pausedUntil"))
    since = snooze if snooze is not None and snooze > now else now  # created snoozed
    return {"id": tid, **body, "rev": 1, "createdAt": now, "updatedAt": now, "activeSince": since}


def _active_since(old: Record, new: Record, now: str) -> str | None:
    """When the record's firing regime began (SPEC "Active since"): reset to `now` by a resume
    (`enabled` false → true, a snooze lifted early) or a change of `kind` or `spec` (its chat
    included); a snooze (`pausedUntil` later than now) moves it to the snooze's end."""
    snooze = _instant_text(new.get("pausedUntil"))
    if snooze is not None and snooze > now and snooze != old.get("pausedUntil"):
        return snooze  # both in the one wire format: text order is time order
    was = _instant_text(old.get("pausedUntil"))
    lifted = was is not None and was > now and snooze != was
    resumed = old.get("enabled", True) is False and new.get("enabled", True) is not False
    moved = old.get("kind") != new.get("kind") or old.get("spec") != new.get("spec")
    if resumed or moved or lifted:
        return now
    kept = old.get("activeSince", old.get("createdAt"))
    return kept if isinstance(kept, str) else None


def _instant_text(value: object) -> str | None:
    """A record's instant field in the one wire format (the space's `iso`), None if absent."""
    if not isinstance(value, str):
        return None
    try:
        return iso(datetime.fromisoformat(value))
    except ValueError:
        return None


def check_reserved(tid: str, body: Record) -> None:
    """`tid` is a reserved id and `body` a valid record for it."""
    if tid not in RESERVED_IDS:
        raise Refusal(
            400,
            "not_reserved",
            f"id {tid!r} is not reserved; reserved ids: "
            + ", ".join(sorted(RESERVED_IDS))
            + "; other ids are minted by POST",
        )
    record_input.check(body, tid)


def create_reserved(
    db: sqlite_utils.Database,
    space: str,
    tid: str,
    body: Record,
    now: str,
    by: Author = SPACE_AUTHOR,
) -> tuple[Record, bool]:
    """Create-if-absent for a reserved id; an existing record is returned untouched."""
    check_reserved(tid, body)
    with transaction(db):
        row = stored_row(db, space, tid)
        if row is not None:
            return record_view.parse(row[1]) or {"id": tid}, False
        record = new_record(tid, body, now)
        seq = _write(db, space, record, "create", now)
        history.revision(db, space, None, record, seq, _unix(now), by)
    return record, True


def patch(
    db: sqlite_utils.Database,
    space: str,
    tid: str,
    changes: Record,
    now: str,
    if_match: int | None = None,
    by: Author = SPACE_AUTHOR,
) -> Record:
    """Replace the given top-level user fields; the result must be a valid record."""

    def revised(rev: int, old: Record) -> Record:
        record = patched(tid, rev, old, changes, now)
        if renames(old, changes):
            _name_free(db, space, changes["name"], tid)
        return record

    return _revise(db, space, tid, now, if_match, by, revised)


def patched(tid: str, rev: int, record: Record, changes: Record, now: str) -> Record:
    """`record` at `rev` with `changes` (checked: the result must be a valid record), at the
    next rev; its `activeSince` moved as SPEC "Active since" says. The caller checks the
    name is free when the patch `renames` it."""
    user = {k: v for k, v in record.items() if k in records.USER_FIELDS}
    record_input.check({**user, **changes}, tid)
    merged = {**record, **changes, "id": tid, "rev": rev + 1, "updatedAt": now}
    since = _active_since(record, merged, now)
    return merged if since is None else {**merged, "activeSince": since}


def asked(tid: str, rev: int, record: Record, now: str) -> Record:
    """`record` with a run asked at `now` (`runAsked`, SPEC "CLI conventions", `triggers
    run`), at the next rev: a person's write, kept in its history as op `run`."""
    ask = {"key": MANUAL_PREFIX + now, "requestedAt": now}
    return {**record, "runAsked": ask, "id": tid, "rev": rev + 1, "updatedAt": now}


def ask_run(
    db: sqlite_utils.Database,
    space: str,
    tid: str,
    now: str,
    if_match: int | None = None,
    by: Author = SPACE_AUTHOR,
) -> Record:
    """Record a run asked of `tid` (compare-and-set on `if_match`); the record written."""
    return _revise(db, space, tid, now, if_match, by, lambda rev, old: asked(tid, rev, old, now))


def _revise(
    db: sqlite_utils.Database,
    space: str,
    tid: str,
    now: str,
    if_match: int | None,
    by: Author,
    revised: Callable[[int, Record], Record],
) -> Record:
    """Compare-and-set `tid` on `if_match`, then write what `revised(rev, old)` makes of it,
    with its change and its revision, in one transaction."""
    with transaction(db):
        rev, old = current(db, space, tid)
        check_rev(rev, if_match)
        record = revised(rev, old)
        seq = _write(db, space, record, "update", now)
        history.revision(db, space, old, record, seq, _unix(now), by)
    return record


def renames(record: Record, changes: Record) -> bool:
    return "name" in changes and changes["name"] != record.get("name")


def stamp(
    db: sqlite_utils.Database,
    space: str,
    tid: str,
    stamps: Record,
    now: str,
    if_match: int | None = None,
    writer: str = "",
) -> tuple[Record, int]:
    """Write runtime stamps only: the record and the `seq` of its change (0: not written).

    A stamp is a change on the feed but never bumps `rev` nor `updatedAt`: those say
    when a person or a program last wrote the record, so `If-Match` with the rev a user
    last read holds whatever the runtime stamped since. Unchanged stamps write nothing.
    """
    with transaction(db):
        rev, record = current(db, space, tid)
        check_rev(rev, if_match)
        return stamp_over(db, space, tid, (rev, record), stamps, now, writer)


def stamp_over(
    db: sqlite_utils.Database,
    space: str,
    tid: str,
    held: tuple[int, Record],
    stamps: Record,
    now: str,
    writer: str = "",
) -> tuple[Record, int]:
    """`stamp` of the record `held` as `current` read it in the caller's transaction."""
    rev, record = held
    new = stamped(tid, rev, record, stamps)
    if new is None:
        return record, 0
    return new, _write(db, space, new, "stamp", now, writer)


def stamped(tid: str, rev: int, record: Record, stamps: Record) -> Record | None:
    """`record` with `stamps`, its rev kept; None when they change nothing."""
    if all(k in record and record[k] == v for k, v in stamps.items()):
        return None
    return {**record, **stamps, "id": tid, "rev": rev}  # the row's own, lest the body lack them


def delete(
    db: sqlite_utils.Database,
    space: str,
    tid: str,
    now: str,
    if_match: int | None = None,
    by: Author = SPACE_AUTHOR,
) -> None:
    with transaction(db):
        row = stored_row(db, space, tid)
        if row is None:
            raise unknown(space, tid)
        rev = row[0]
        check_rev(rev, if_match)
        db.execute("DELETE FROM triggers WHERE space = ? AND id = ?", [space, tid])
        seq = change_log.append(db, change_log.Change(space, tid, "delete", rev + 1, None, now))
        old = record_view.parse(row[1]) or {"id": tid}
        old = {**old, "id": tid, "rev": rev}
        history.revision(db, space, old, None, seq, _unix(now), by)


def listing(
    db: sqlite_utils.Database, space: str, after: str = "", limit: int = -1
) -> list[Record]:
    """Records by id after `after` (at most `limit`, -1: all), defaults filled in."""
    return [record_view.flagged(tid, body) for tid, body in _rows(db, space, after, limit)]


def listing_page(
    db: sqlite_utils.Database, space: str, after: str, limit: int, *, stored: bool
) -> tuple[list[Record | msgspec.Raw], str | None]:
    """Up to `limit` records by id after `after`, and the `after` of the next page (None at
    the end). `stored`: each record as stored (no defaults filled in), spliced into the
    answer without a parse; a body that is not a JSON object is flagged as in `listing`."""
    rows = _rows(db, space, after, limit)
    read = record_view.as_stored if stored else record_view.flagged
    last = rows[-1][0] if len(rows) == limit else None
    return [read(tid, body) for tid, body in rows], last


def _rows(db: sqlite_utils.Database, space: str, after: str, limit: int) -> list[tuple[str, str]]:
    rows = db.execute(
        "SELECT id, body FROM triggers WHERE space = ? AND id > ? ORDER BY id LIMIT ?",
        [space, after, limit],
    )
    return rows.fetchall()
