"""The history facts `why` reasons from, as values, and the questions asked of them.

Owns the shapes of what the space keeps append-only (SPEC "History and `why`"): a
record's revisions, lease terms, device windows, applied feed positions and clock offsets,
the claim of a fire with its run outcome, refused claims, the message of an event fire,
and `Facts` that gathers them for one slot; plus the look-ups `triggers.why` makes (the
revision in force, the term holding, the window covering an instant). The space reads
the tables into these (`space.recall`). Must not read the clock or do I/O.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import msgspec

from core.vocab import iso
from triggers import slots
from triggers.records import CronTrigger, load


class Revision(msgspec.Struct, frozen=True, kw_only=True):
    rev: int
    seq: int  # its position in the change feed (what `appliedSeq` is compared with)
    at: datetime
    op: str  # create, edit, pause, resume, repin, float, run, delete
    actor: str  # admin, device:<peer>, run:<runId>, space
    note: str = ""
    changes: dict[str, list[Any]] = {}
    record: dict[str, Any] | None = None  # the record as it then stood (None: deleted)

    def said(self) -> str:
        """`paused at 09:58:00.000Z by device:phone: "vacation"`."""
        words = {
            "create": "created",
            "delete": "deleted",
            "edit": "edited",
            "float": "floated",
            "run": "run asked",
        }
        verb = words.get(self.op, self.op + "d" if self.op.endswith("e") else self.op + "ed")
        text = f"{verb} at {iso(self.at)} by {self.actor} (rev {self.rev})"
        return text + (f': "{self.note}"' if self.note else "")


class Term(msgspec.Struct, frozen=True, kw_only=True):
    term: int
    holder: str
    began: datetime
    ended: datetime | None = None
    how: str | None = None  # released, expired, handed over, superseded

    def said(self) -> str:
        end = f"–{iso(self.ended)} ({self.how})" if self.ended else "– (still held)"
        return f"term {self.term}: {self.holder} {iso(self.began)}{end}"


class Window(msgspec.Struct, frozen=True, kw_only=True):
    peer: str
    began: datetime
    last_seen: datetime
    stopped: bool = False
    slept: float | None = None  # the suspend the device reported at this window's start


class Subscription(msgspec.Struct, frozen=True, kw_only=True):
    peer: str
    began: datetime
    ended: datetime | None = None  # None: still live
    resumed: bool = False  # from a `Last-Event-ID`: what came while it was away was replayed


class Applied(msgspec.Struct, frozen=True, kw_only=True):
    peer: str
    at: datetime
    seq: int


class Offset(msgspec.Struct, frozen=True, kw_only=True):
    """A device's clock offset as its heartbeat reported it: the space's clock minus the
    device's, in ms (negative: the device's clock is ahead); it fires by the space's."""

    peer: str
    at: datetime
    ms: float


class Claim(msgspec.Struct, frozen=True, kw_only=True):
    peer: str
    term: int
    claimed_at: datetime
    run_id: str | None = None
    status: str | None = None
    reason: str | None = None
    started_at: datetime | None = None
    late_ms: float | None = None


class Refused(msgspec.Struct, frozen=True, kw_only=True):
    at: datetime
    peer: str
    term: int
    code: str
    detail: str


class MessageFact(msgspec.Struct, frozen=True, kw_only=True):
    message_id: str
    accepted: datetime
    agent: str | None = None  # the agent's name, when the agent wrote it


class Facts(msgspec.Struct, frozen=True, kw_only=True):
    """What the space knows around one slot of one trigger."""

    now: datetime
    kept_since: datetime  # the oldest instant history still answers for
    revisions: list[Revision]  # oldest first
    terms: list[Term] = []  # oldest first
    windows: list[Window] = []  # every peer's, oldest first
    applied: list[Applied] = []
    offsets: list[Offset] = []  # oldest first
    claim: Claim | None = None
    refusals: list[Refused] = []
    run: dict[str, Any] | None = None  # the run record of the key, if still kept
    message: MessageFact | None = None  # an event trigger's message
    subscriptions: list[Subscription] = []  # the chat's streams around the message
    beat_seconds: float = 5.0  # a device beats this often: up this long past its last beat
    bridge_seconds: float = 120.0  # the bridge window W
    done_at: datetime | None = None  # when its `maxRuns`-th ok run ended, if it did
    retries: dict[str, Claim] = {}  # the claims of the fire's retries (`<key>#k`), in order


def in_force(revisions: list[Revision], t: datetime) -> Revision | None:
    """The last revision at or before `t`."""
    found = None
    for r in revisions:
        if r.at > t:
            break
        found = r
    return found


def holding(terms: list[Term], t: datetime) -> Term | None:
    """The term whose holder held the lease at `t`."""
    for term in reversed(terms):
        if term.began <= t and (term.ended is None or t < term.ended):
            return term
    return None


def next_term(terms: list[Term], t: datetime, within: float) -> Term | None:
    """The first term that began after `t`, within `within` seconds (the bridge)."""
    for term in terms:
        if t < term.began <= t + timedelta(seconds=within):
            return term
    return None


def covering(
    windows: list[Window], t: datetime, beat: float, peer: str | None = None
) -> Window | None:
    """A window of `peer` (any peer: None) in which the device was up at `t`."""
    for w in windows:
        if peer is not None and w.peer != peer:
            continue
        end = w.last_seen if w.stopped else w.last_seen + timedelta(seconds=beat)
        if w.began <= t <= end:
            return w
    return None


def streaming(
    subs: list[Subscription], t: datetime, peer: str, within: float
) -> Subscription | None:
    """The stream of `peer` that carried what came at `t`: live then, or resumed (replaying
    what it missed) within `within` seconds after."""
    for s in subs:
        if s.peer != peer:
            continue
        if s.began <= t and (s.ended is None or t <= s.ended):
            return s
        if s.resumed and t < s.began <= t + timedelta(seconds=within):
            return s
    return None


def sleep_over(windows: list[Window], t: datetime, peer: str) -> Window | None:
    """The window of `peer` that began after a suspend `t` fell in."""
    for w in windows:
        if w.peer == peer and w.slept and w.began - timedelta(seconds=w.slept) <= t < w.began:
            return w
    return None


def last_before(windows: list[Window], t: datetime, peer: str) -> Window | None:
    found = None
    for w in windows:
        if w.peer == peer and w.last_seen <= t:
            found = w
    return found


def applied_at(applied: list[Applied], t: datetime, peer: str) -> Applied | None:
    """The feed position `peer` had reported applied at `t`."""
    found = None
    for a in applied:
        if a.peer == peer and a.at <= t and (found is None or a.at >= found.at):
            found = a
    return found


def offset_at(offsets: list[Offset], t: datetime, peer: str, since: datetime) -> Offset | None:
    """The clock offset `peer` had last reported at `t`, if it did so since `since`."""
    found = None
    for o in offsets:
        if o.peer == peer and since <= o.at <= t and (found is None or o.at >= found.at):
            found = o
    return found


# --- a record's revisions ----------------------------------------------------------------

SCHEDULE = ("kind", "spec")  # the fields whose change starts a new firing regime


def record_at(revisions: list[Revision], t: datetime) -> dict[str, Any] | None:
    """The record as it stood at `t`; for a deleted one, as it stood before its delete."""
    for r in reversed(revisions):
        if r.at <= t and r.record is not None:
            return r.record
    return None


def is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def instant_of(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def began_with(revisions: list[Revision], since: datetime) -> str:
    for r in revisions:
        if abs((r.at - since).total_seconds()) < 0.001:
            return f": it was {r.said()}"
    return ""


def last_of(revisions: list[Revision], t: datetime, ops: tuple[str, ...]) -> Revision | None:
    found = None
    for r in revisions:
        if r.at <= t and r.op in ops:
            found = r
    return found


def regime(rev: Revision) -> bool:
    """Whether a device that had not applied `rev` would fire differently."""
    return rev.op in ("create", "resume", "repin", "float") or any(
        n in rev.changes for n in SCHEDULE
    )


def regime_change(
    revisions: list[Revision], slot: datetime, asked: dict[str, Any] | None
) -> Revision | None:
    """The later revision that made the schedule asked about, if the slot's was another."""
    at_slot = record_at(revisions, slot)
    if asked is None or at_slot is None:
        return None
    if all(at_slot.get(n) == asked.get(n) for n in SCHEDULE):
        return None
    for r in revisions:
        if r.at > slot and any(n in r.changes for n in SCHEDULE):
            return r
    return None


def timeout_of(record: dict[str, Any]) -> float:
    limits = record.get("limits")
    value = limits.get("timeoutSeconds") if isinstance(limits, dict) else None
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return 60.0


def wall_of(record: dict[str, Any] | None, slot: datetime) -> str:
    """`, 02:30 CEST in Europe/Berlin, the first 02:30 of the day`, or ''."""
    loaded = None if record is None else load(record)
    if not isinstance(loaded, CronTrigger):
        return ""
    words = slots.wall_words(loaded.spec, slot)
    return f", {words}" if words else ""
