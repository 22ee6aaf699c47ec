"""The words of a `why` answer: verdicts, reasons, their remedies, and how a run's or a
refusal's own word maps onto a reason (SPEC "History and `why`").

Holds no reasoning (that is `triggers.whychain`); must not read the clock or do I/O.
"""

from __future__ import annotations

import enum


class Verdict(enum.StrEnum):  # what became of the slot
    FIRED = "fired"
    NOT_FIRED = "not_fired"
    NOT_DUE = "not_due"
    PENDING = "pending"


class Reason(enum.StrEnum):  # the first check that failed (or `fired`, `fired_late`)
    FIRED = "fired"
    FIRED_LATE = "fired_late"
    NOT_A_SLOT = "not_a_slot"
    DST_GAP = "dst_gap"
    DST_REPEAT = "dst_repeat"
    BEFORE_ACTIVE = "before_active"
    PAUSED = "paused"
    DELETED = "deleted"
    OUTSIDE_WINDOW = "outside_window"
    NO_DEVICE_UP = "no_device_up"
    OWNER_OFFLINE = "owner_offline"
    HOLDER_ASLEEP = "holder_asleep"
    NOT_APPLIED = "not_applied"
    NO_SUBSCRIBER = "no_subscriber"
    BREAKER_OPEN = "breaker_open"
    OVERLAP = "overlap"
    QUEUE_FULL = "queue_full"
    BUDGET = "budget"
    CHAT_ACTIVE = "chat_active"
    UNKNOWN_PROGRAM = "unknown_program"
    CLAIMED_ELSEWHERE = "claimed_elsewhere"
    STALE_TERM = "stale_term"
    CLAIMED_NOT_RUN = "claimed_not_run"
    RUN_FAILED = "run_failed"


_FIRED = frozenset({Reason.FIRED, Reason.FIRED_LATE, Reason.RUN_FAILED})
_NOT_DUE = frozenset({Reason.NOT_A_SLOT, Reason.DST_GAP, Reason.DST_REPEAT})


def verdict_of(reason: Reason) -> Verdict:
    if reason in _FIRED:
        return Verdict.FIRED
    if reason in _NOT_DUE:
        return Verdict.NOT_DUE
    return Verdict.NOT_FIRED


# A refused claim's code (SPEC "Fire claims"), and a run record's `reason`, as a reason.
_CODES = {
    "stale_term": Reason.STALE_TERM,
    "paused": Reason.PAUSED,
    "before_active": Reason.BEFORE_ACTIVE,
    "already_claimed": Reason.CLAIMED_ELSEWHERE,
    "not_owner": Reason.CLAIMED_ELSEWHERE,
    "ahead_of_clock": Reason.HOLDER_ASLEEP,  # and it never claimed again when the slot came
}
_RUN_REASONS = {
    **_CODES,
    "overlap": Reason.OVERLAP,
    "queue_full": Reason.QUEUE_FULL,
    "breaker_open": Reason.BREAKER_OPEN,
    "unknown_program": Reason.UNKNOWN_PROGRAM,
    "invalid_program": Reason.UNKNOWN_PROGRAM,
    "budget": Reason.BUDGET,
    "chat_active": Reason.CHAT_ACTIVE,
    "slept": Reason.HOLDER_ASLEEP,
    "withdrawn": Reason.NOT_APPLIED,  # claimed ahead, then the record changed under it
    "shutdown": Reason.CLAIMED_NOT_RUN,
    "superseded": Reason.OVERLAP,
}


def reason_of_code(code: str) -> Reason:
    return _CODES.get(code, Reason.CLAIMED_ELSEWHERE)


def reason_of_run(reason: str) -> Reason:
    return _RUN_REASONS.get(reason, Reason.RUN_FAILED)


REMEDY = {  # `{id}` is the trigger's id
    Reason.FIRED_LATE: "see the phases: a late wake is a suspend or a busy loop; a long queue "
    "wants more workers (`baton up --workers`)",
    Reason.NOT_A_SLOT: "ask about a slot of its schedule: `baton triggers show {id}` lists them",
    Reason.DST_GAP: "nothing is lost: the slot moved to the end of the gap; ask about that one",
    Reason.DST_REPEAT: "a fixed-time job fires once in the repeated hour; use a wildcard hour "
    "field to follow real time",
    Reason.BEFORE_ACTIVE: "nothing fires for an instant before the trigger's current regime; "
    "`baton triggers run {id}` runs it now",
    Reason.PAUSED: "`baton triggers resume {id}` (what passed while paused never fires)",
    Reason.DELETED: "re-create it: `baton triggers add`",
    Reason.NO_DEVICE_UP: "keep a device up when it is due, or let a missed slot fire later with "
    '`"catchup": "latest"`',
    Reason.OWNER_OFFLINE: "start that device, or float the trigger: `baton triggers float {id}`",
    Reason.HOLDER_ASLEEP: "let an always-on device hold the lease (`--priority`), or pin the "
    "trigger to one",
    Reason.NOT_APPLIED: "the device's change feed was behind: check its connection "
    "(`baton status`)",
    Reason.NO_SUBSCRIBER: "keep a device up and subscribed; messages that came while none was "
    "are never replayed",
    Reason.BREAKER_OPEN: "fix what makes its runs fail (`baton runs --trigger {id}`); the "
    "breaker closes after a good trial",
    Reason.OVERLAP: 'the run before was still running: set `limits.overlap` to "queue" or '
    '"parallel", or make runs shorter',
    Reason.QUEUE_FULL: "raise `limits.maxQueue`, or make runs shorter",
    Reason.UNKNOWN_PROGRAM: "publish the program: `baton programs publish`",
    Reason.CLAIMED_ELSEWHERE: "nothing to do: one device claims a fire, the others are refused",
    Reason.STALE_TERM: "nothing to do: the lease had moved; the new holder fires what is due",
    Reason.CLAIMED_NOT_RUN: "the device stopped mid-run (killed, crashed): `baton triggers run "
    "{id}` runs it now",
    Reason.RUN_FAILED: "read the run's error: `baton runs --trigger {id}`",
}
