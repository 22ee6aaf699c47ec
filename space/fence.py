"""The fence of a fire claim: whether a fire may be claimed now, and the refusal if not.

A claim for a floating trigger is refused (`stale_term`) unless the claimer holds the
current lease at that term; one for a pinned trigger (`not_owner`) from any peer but its
owner. A paused record is refused (`paused`), a fire for an instant before `activeSince`
(`before_active`), outside the `window` (`outside_window`; a retry `<key>#k` is fenced as
its fire's key), and a cron or once slot more than `AHEAD_S` ahead of the space's clock
(`ahead_of_clock`: it claims again when the slot comes). The refusal codes are the reasons
the device records (`core.vocab.RunReason`). Reads only, inside the caller's transaction;
`check` is the fence on what either store read.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import sqlite_utils

from core.vocab import RunReason
from core.wire import FireIn
from space import chat_store, leases, trigger_store
from space.http import Refusal
from space.servertime import iso
from triggers.policies import base_key

AHEAD_S = 5.0  # a slot claimed this far before the space's clock reaches it is refused


def record_to_claim(
    db: sqlite_utils.Database, space: str, fire: FireIn, now: datetime
) -> dict[str, Any]:
    """The record of the fire, if `fire` may be claimed now; `Refusal` if not."""
    _, record = trigger_store.current(db, space, fire.triggerId)
    event = record.get("kind") == "event"
    message_at = chat_store.created_at(db, base_key(fire.key)) if event else None
    lease = None if pinned(record) else leases.load(db, space)
    check(record, fire, now, lease, message_at)
    return record


def pinned(record: dict[str, Any]) -> bool:
    """Whether the record is pinned to a device (its claims are not fenced by the lease)."""
    owner = record.get("owner", "")
    return isinstance(owner, str) and bool(owner)


def check(
    record: dict[str, Any],
    fire: FireIn,
    now: datetime,
    lease: leases.Lease | None,
    message_at: str | None,
) -> None:
    """The fence itself, on what the store read in the claim's transaction (either store):
    the lease (None for a pinned record) and, for an event fire, its message's `createdAt`."""
    _active(record, fire, message_at)
    if pinned(record):
        if fire.peer != record["owner"]:
            owner = record["owner"]
            raise Refusal(409, "not_owner", f"trigger {fire.triggerId!r} is pinned to {owner!r}")
        _not_ahead(record, fire, now)
        return
    lease = lease or leases.Lease()
    if not leases.holds(lease, fire.peer, fire.term, now):
        holder = lease.active if not lease.lapsed(now) else None
        raise Refusal(
            409,
            RunReason.STALE_TERM,
            f"term {fire.term} by {fire.peer!r} is not the current "
            f"lease (held by {holder!r} at term {lease.term})",
            term=lease.term,
        )
    _not_ahead(record, fire, now)


def _active(record: dict[str, Any], fire: FireIn, message_at: str | None) -> None:
    """Refuse a fire of a paused record, for an instant before its `activeSince` or outside
    its `window`; a retry is fenced by the instant of the fire it retries."""
    tid, key = fire.triggerId, base_key(fire.key)
    if record.get("enabled") is False:
        raise Refusal(409, RunReason.PAUSED, f"trigger {tid!r} is paused")
    kind = record.get("kind")
    at = _instant(message_at if kind == "event" else key)
    if at is None or kind not in ("cron", "event"):
        return
    _in_window(record, key, at)
    text = record.get("activeSince")
    since = _instant(text)
    if kind == "event" and since is not None and at <= since:
        raise Refusal(409, RunReason.BEFORE_ACTIVE, f"message {key!r} came before {text}")
    if kind == "cron" and _before(at, since):
        raise Refusal(409, RunReason.BEFORE_ACTIVE, f"slot {key} is before {text}")


def _in_window(record: dict[str, Any], key: str, at: datetime) -> None:
    window = record.get("window")
    if not isinstance(window, dict):
        return
    start, end = _instant(window.get("startAt")), _instant(window.get("endAt"))
    if (start is not None and at < start) or (end is not None and at >= end):
        raise Refusal(409, RunReason.OUTSIDE_WINDOW, f"{key} is outside the trigger's window")


def _not_ahead(record: dict[str, Any], fire: FireIn, now: datetime) -> None:
    """Refuse a cron or once slot further ahead of the space's clock than `AHEAD_S`."""
    if record.get("kind") not in ("cron", "once"):
        return
    slot = _instant(fire.key)
    if slot is not None and slot > now + timedelta(seconds=AHEAD_S):
        ahead = (slot - now).total_seconds()
        detail = f"slot {fire.key} is {ahead:.1f} s ahead of the space's clock ({iso(now)})"
        raise Refusal(409, RunReason.AHEAD_OF_CLOCK, detail, serverTime=iso(now))


def _before(slot: datetime | None, start: datetime | None) -> bool:
    """A slot strictly before the start (a slot at `activeSince` itself may fire)."""
    return slot is not None and start is not None and slot < start


def _instant(text: object) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return when if when.tzinfo is not None else None
