"""A record's slots as `why` asks about them: which slot an instant names; a range's slots.

Owns `slot_at(spec, at, exact)` (the slot at or nearest before `at`, and whether `at` was
a slot, a wall time swallowed by the spring gap, the second occurrence of a repeated hour,
or no slot at all) and `slots_between(spec, lo, hi, limit)`. Slots are computed from the
spec, never stored (SPEC "History and `why`"). The DST rule itself is `triggers.cron`'s.
Must not read the clock or do I/O.
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime, timedelta

import msgspec

from core.vocab import iso
from triggers import cron, schedule
from triggers.records import CronSpec, OnceSpec

SECOND = timedelta(seconds=1)


class Asked(enum.StrEnum):  # what the instant asked about is, for the trigger's schedule
    SLOT = "slot"  # a slot (or, not exact: the slot nearest before it)
    NOT_A_SLOT = "not_a_slot"
    DST_GAP = "dst_gap"  # a fixed-time job's wall time in the spring gap: moved to the gap's end
    DST_REPEAT = "dst_repeat"  # its wall time's second occurrence: only the first fires
    NONE = "none"  # no slot at or before it


class SlotOf(msgspec.Struct, frozen=True, kw_only=True):
    asked: Asked
    slot: datetime | None  # the slot the answer is about (UTC)
    detail: str = ""


def slot_at(spec: CronSpec | OnceSpec, at: datetime, *, exact: bool) -> SlotOf:
    """The slot `at` names. `exact`: `at` was asked for itself (a slot, or why not one);
    else the slot at or nearest before it is meant (the last due slot, "now")."""
    if isinstance(spec, OnceSpec):
        return _once(spec, at, exact)
    slot = schedule.latest_at_or_before(spec, at)
    if slot is None:
        after = schedule.next_fire(spec, at)
        return SlotOf(asked=Asked.NONE, slot=None, detail=_none(after))
    if slot == at or not exact:
        return SlotOf(asked=Asked.SLOT, slot=slot)
    r = cron.rule_of(spec)
    if not r.wildcard:
        moved = _gap(r, spec, slot, at)
        if moved is not None:
            return moved
        first = _repeat(r, spec, at)
        if first is not None:
            return first
    after = schedule.next_fire(spec, at)
    detail = f"{_wall(r, at)} is not a slot of {spec.expr!r}; the slot before is {_wall(r, slot)}"
    if after is not None:
        detail += f", the next {_wall(r, after)}"
    return SlotOf(asked=Asked.NOT_A_SLOT, slot=slot, detail=detail)


def _once(spec: OnceSpec, at: datetime, exact: bool) -> SlotOf:
    one = spec.at_utc
    if one > at:
        return SlotOf(asked=Asked.NONE, slot=None, detail=_none(one))
    if exact and one != at:
        detail = f"a once trigger has one slot, {iso(one)}; {iso(at)} is not it"
        return SlotOf(asked=Asked.NOT_A_SLOT, slot=one, detail=detail)
    return SlotOf(asked=Asked.SLOT, slot=one)


def _gap(r: cron.CronRule, spec: CronSpec, slot: datetime, at: datetime) -> SlotOf | None:
    """`at` read in the offset before the spring gap is a wall time the gap swallowed."""
    if schedule.dst_note(spec, slot) is not schedule.DstNote.SHIFTED:
        return None
    before, after = cron.offset(r.tz, slot - SECOND), cron.offset(r.tz, slot)
    if not at - slot < after - before:
        return None
    wall = (at + before).replace(tzinfo=None)
    detail = (
        f"{wall:%H:%M} did not exist on {wall:%Y-%m-%d} in {spec.tz} (the spring gap); "
        f"the slot moved to {_wall(r, slot)}"
    )
    return SlotOf(asked=Asked.DST_GAP, slot=slot, detail=detail)


def _repeat(r: cron.CronRule, spec: CronSpec, at: datetime) -> SlotOf | None:
    """`at` is the second occurrence of a matching wall time of the repeated autumn hour."""
    local = at.astimezone(r.tz)
    if local.fold != 1 or not cron.repeated(r.tz, at):
        return None
    wall = local.replace(tzinfo=None)
    if r.matcher.next(wall - SECOND) != wall:
        return None
    first = wall.replace(tzinfo=r.tz, fold=0).astimezone(UTC)
    detail = (
        f"{wall:%H:%M} came twice on {wall:%Y-%m-%d} in {spec.tz}; a fixed-time job fires "
        f"at the first only, {_wall(r, first)}"
    )
    return SlotOf(asked=Asked.DST_REPEAT, slot=first, detail=detail)


def slots_between(
    spec: CronSpec | OnceSpec, lo: datetime, hi: datetime, limit: int
) -> list[datetime]:
    """The slots in `[lo, hi]`, oldest first, at most `limit`."""
    found: list[datetime] = []
    t = schedule.next_fire(spec, lo - timedelta(microseconds=1))
    while t is not None and t <= hi and len(found) < limit:
        found.append(t)
        t = schedule.next_fire(spec, t)
    return found


def _none(after: datetime | None) -> str:
    if after is None:
        return "the schedule has no slot before this instant, nor after it"
    return f"the schedule has no slot before this instant; the first is {iso(after)}"


def _wall(r: cron.CronRule, t: datetime) -> str:
    """`2027-03-28T01:00:00.000Z (03:00 CEST)`: the instant, and its wall time in the zone."""
    local = t.astimezone(r.tz)
    return f"{iso(t)} ({local:%H:%M} {local.tzname()})"


def wall_words(spec: CronSpec | OnceSpec, slot: datetime) -> str:
    """What tells a slot from one that looks like it: its wall time in the zone, and what
    the DST rule did (`02:30 CET, the second 02:30 of the day`), or '' in UTC."""
    if isinstance(spec, OnceSpec) or spec.tz in ("UTC", "Etc/UTC"):
        return ""
    r = cron.rule_of(spec)
    local = slot.astimezone(r.tz)
    said = f"{local:%H:%M} {local.tzname()} in {spec.tz}"
    note = schedule.dst_note(spec, slot)
    if note is schedule.DstNote.SHIFTED:
        return said + ", moved out of the spring gap"
    if cron.repeated(r.tz, slot):
        which = "second" if local.fold else "first"
        return said + f", the {which} {local:%H:%M} of the day"
    return said
