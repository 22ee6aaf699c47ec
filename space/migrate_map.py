"""The map of `baton space migrate`: each SQLite table's columns onto PostgreSQL's.

Owns `TABLES` (pgschema's tables but for its counters, each column with how its SQLite
value converts and is checked) and the conversions. A test compares it with both schemas
as this build creates them. Must not read or write a database (`space.migrate` does).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import msgspec

Convert = Callable[[object], object]


def _text(v: object) -> object:
    if v is None or isinstance(v, str):
        return v
    raise TypeError(f"{v!r} is not text")


def _int(v: object) -> object:
    if v is None or (isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63):
        return v
    raise TypeError(f"{v!r} is not a 64-bit integer")


def number(v: object) -> object:
    if v is None or isinstance(v, float):
        return v
    if isinstance(v, int) and not isinstance(v, bool):
        return float(v)
    raise TypeError(f"{v!r} is not a number")


def _bool(v: object) -> object:
    if v is None or v in (0, 1):
        return None if v is None else bool(v)
    raise TypeError(f"{v!r} is not 0 or 1")


def _epoch(v: object) -> object:
    """Epoch seconds (SQLite REAL) as a timestamptz."""
    n = number(v)
    return None if n is None else datetime.fromtimestamp(n, UTC)  # type: ignore[arg-type]


def _instant(v: object) -> object:
    """RFC 3339 text (SQLite TEXT) as a timestamptz."""
    if v is None:
        return None
    at = datetime.fromisoformat(str(_text(v)))
    if at.tzinfo is None:
        raise TypeError(f"{v!r} has no offset")
    return at


def _bytes(v: object) -> object:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    raise TypeError(f"{v!r} is not bytes")


def record_name(body: object) -> object:
    """A record's `name` as PostgreSQL's `triggers.name` holds it (`pg_records`)."""
    try:
        record = msgspec.json.decode(str(body))
    except msgspec.DecodeError:
        return None
    name = record.get("name") if isinstance(record, dict) else None
    return name if isinstance(name, str) else None


@dataclass(frozen=True)
class Table:
    """One table: PostgreSQL's columns, each read from SQLite's column of that name."""

    name: str
    columns: tuple[tuple[str, Convert], ...]
    key: str = ""  # the key whose existing rows are left as they are ("": any key)
    order: str = "rowid"
    identity: str = ""  # GENERATED ALWAYS: copied past the target's largest, then setval
    rowid: bool = False  # SQLite has no such column: its rowid is the identity's value


KINDS: dict[str, Convert] = {
    "T": _text,
    "I": _int,
    "F": number,
    "B": _bool,
    "E": _epoch,
    "S": _instant,
    "X": _bytes,
    "N": record_name,
}
# table column:kind …, then key= order= identity=[col, @rowid]; an indented line goes on.
# T text, I integer, F double, B 0/1 as boolean, E epoch seconds and S RFC 3339 text as
# timestamptz, X bytes, N the record's name read out of its body (SQLite indexes the body).
MAP = """
spaces id:T name:T general_chat:T created_at:T key=(id)
tokens hash:T role:T peer:T space:T trigger_id:T run_id:T created_at:F expires_at:F
  revoked_at:F last_used_at:F key=(hash)
idempotency owner:T key:T digest:T status:I content_type:T headers:T body:X at:F
trigger_ids space:T id:T
triggers space:T id:T rev:I body:T name:N
changes space:T seq:I trigger_id:T op:T rev:I body:T at:T writer:T order=seq
leases space:T active:T term:I expires_at:E want:T
history_terms space:T term:I holder:T began:E ended:E how:T
fires space:T trigger_id:T key:T term:I peer:T claimed_at:S claim_id:T run_id:T status:T
  reason:T started_at:F late_ms:F n:I identity=n@rowid
programs space:T name:T version:I source:T sha256:T any_tool:B created_at:T publisher:T
devices space:T peer:T name:T priority:I last_seen:F live_since:F status:T instance:T
  stopped:B
runs seq:I space:T run_id:T trigger_id:T status:T started_at:F failure:B body:T
  key=(space,run_id) order=seq identity=seq
run_rollups space:T trigger_id:T status:T count:I last_run_at:T
agent_turns seq:I space:T turn_id:T object_id:T started_at:F failure:B body:T
  key=(space,turn_id) order=seq identity=seq
state space:T trigger_id:T key:T value:T updated_at:T
history_revisions space:T trigger_id:T rev:I seq:I at:F op:T actor:T note:T changes:T
  record:T
history_windows space:T peer:T began:F last_seen:F stopped:B slept:F applied_seq:I
history_applied space:T peer:T at:F seq:I
history_offsets space:T peer:T at:F offset_ms:F
history_refusals space:T trigger_id:T key:T at:F peer:T term:I code:T detail:T
history_subscriptions space:T peer:T object_id:T began:F ended:F resumed:B id:I
  identity=id@rowid
chats object_id:T space:T name:T created_at:T last_seq:I key=(object_id)
chat_messages object_id:T seq:I message_id:T created_ts:F body:T order=seq
"""
KEEP_LARGER = {"chats": " DO UPDATE SET last_seq = greatest(chats.last_seq, excluded.last_seq)"}


def _tables(text: str) -> tuple[Table, ...]:
    tables = []
    for line in text.replace("\n  ", " ").strip().splitlines():
        name, *words = line.split()
        cols = tuple((w.split(":")[0], KINDS[w.split(":")[1]]) for w in words if ":" in w)
        opts = dict(w.split("=", 1) for w in words if "=" in w)
        identity, _, rowid = opts.get("identity", "").partition("@")
        key = opts.get("key", "").replace(",", ", ")
        order = opts.get("order", "rowid")
        tables.append(Table(name, cols, key, order, identity, rowid == "rowid"))
    return tuple(tables)


TABLES = _tables(MAP)  # in this order; a table's rows in `order`
# Not here: `feeds` (set from `changes`), `history_meta` (its 'since' merged as the earlier).
