"""The policy words of `why`: snoozed, outside the window, maxRuns reached, a retry's key,
jitter, and what a policy's run reason says (SPEC "Trigger policies").

Pure checks of the record as it stood at the slot (a dict, as the history keeps it) and of
the facts; `triggers.whychain` calls them at its `slot`, `active`, `claim` and `run` steps.
Must not read the clock or do I/O.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from core.vocab import iso
from triggers import facts as f
from triggers import policies


def snoozed(record: dict[str, Any], revisions: list[f.Revision], slot: datetime) -> str | None:
    """Why the slot fell in a snooze (`pausedUntil` later than it), or None."""
    until = f.instant_of(record.get("pausedUntil"))
    if until is None or slot >= until:
        return None
    by = None
    for r in revisions:
        if r.at <= slot and "pausedUntil" in r.changes:
            by = r
    said = f": {by.said()}" if by is not None else ""
    return f"the trigger was snoozed until {iso(until)}{said}"


def outside(record: dict[str, Any], slot: datetime, done_at: datetime | None) -> str | None:
    """Why the slot is outside the record's window or past its `maxRuns`, or None."""
    window = record.get("window")
    if isinstance(window, dict):
        start, end = f.instant_of(window.get("startAt")), f.instant_of(window.get("endAt"))
        if start is not None and slot < start:
            return f"the slot is before its window, which starts at {iso(start)}"
        if end is not None and slot >= end:
            return f"the slot is after its window, which ended at {iso(end)}"
    most = record.get("maxRuns")
    if f.is_number(most) and done_at is not None and done_at <= slot:
        return f"maxRuns {most} reached: its last counted ok run started {iso(done_at)}; it is done"
    return None


def jitter(record: dict[str, Any], slot: datetime) -> timedelta:
    """The slot's jitter: a cron slot with `jitterSeconds` is due at slot + this."""
    seconds = record.get("jitterSeconds")
    if record.get("kind") != "cron" or not isinstance(seconds, int | float):
        return timedelta(0)
    return policies.jitter(str(record.get("id") or ""), slot, float(seconds))


def slot_words(record: dict[str, Any], key: str | None, slot: datetime) -> str:
    """What a slot's key and jitter add to its check: `; due 09:00:03.2Z (jitter 3.2 s)`."""
    words = ""
    if key is not None and (k := policies.attempt_of(key)) > 1:
        words += f"; attempt {k}, a retry of {policies.base_key(key)} after a failed run"
    delay = jitter(record, slot)
    if delay:
        words += f"; due {iso(slot + delay)} (jitter {delay.total_seconds():g} s)"
    return words


def run_words(reason: str, record: dict[str, Any]) -> str:
    """What a policy's run reason means for this record, or ''."""
    if reason == "superseded":
        return "a newer fire superseded it (overlap restart)"
    if reason == "budget" and isinstance(budget := record.get("budget"), dict):
        return f"its budget of {budget.get('runs')} runs per {budget.get('perSeconds')} s was spent"
    if reason == "chat_active" and isinstance(quiet := record.get("quietChat"), dict):
        chat, seconds = quiet.get("objectId"), quiet.get("seconds")
        return f"a person wrote in {chat} within {seconds} s before it (quiet chat)"
    return ""
