"""The words every package of baton speaks: statuses, their sets, reasons, policies, instants.

Owns the run statuses and which of them failed, ran or did not run; the reasons
a run record or a stamp carries; the outcomes of a chat-watch turn; the overlap
policies of a record; and how an instant is written as text. Their `str`
values are the wire values (SPEC). Imports nothing of ours (stdlib only), so
`triggers/`, `programs/`, `runtime/` and `space/` all may import it; must not
grow behaviour beyond words and the sets made of them.
"""

from __future__ import annotations

import enum
import re
from datetime import UTC, datetime

# Enums here carry comments, not docstrings: a docstring would enter the API's OpenAPI schema.


class RunStatus(enum.StrEnum):  # how a run record ended (`status`)
    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    REJECTED = "rejected"  # never ran: refused (a full queue, a stale term, shutdown)
    SKIPPED = "skipped"  # never ran: not to run (overlap, open breaker, unknown program, …)
    CANCELLED = "cancelled"  # ran, and was stopped by a newer fire (`overlap: restart`)


RAN = frozenset(
    {RunStatus.OK, RunStatus.ERROR, RunStatus.TIMEOUT, RunStatus.CRASHED, RunStatus.CANCELLED}
)
"""The program ran: a record of one of these is of a fire its device claimed."""
NOT_RAN = frozenset({RunStatus.REJECTED, RunStatus.SKIPPED})
FAILED = frozenset({RunStatus.ERROR, RunStatus.TIMEOUT, RunStatus.CRASHED})
"""The program ran and failed: what counts against the breaker and the failure streak."""
KEPT_LONGER = FAILED | {RunStatus.REJECTED}
"""Run records the space keeps past the ordinary retention: failures, and fires refused."""


class RunReason(enum.StrEnum):
    # Why a run record ended as it did (its `reason`), also its stamp's detail.
    # `STALE_TERM`, `PAUSED` and `BEFORE_ACTIVE` are also the codes of the space's
    # refusal of a claim: the device records the refusal under the same word.
    OVERLAP = "overlap"
    QUEUE_FULL = "queue_full"
    BREAKER_OPEN = "breaker_open"
    STALE_TERM = "stale_term"
    PAUSED = "paused"  # the space refused the claim: the trigger is paused
    BEFORE_ACTIVE = "before_active"  # the space refused the claim: before the record's activeSince
    AHEAD_OF_CLOCK = "ahead_of_clock"  # the space refused the claim: its slot is not near yet
    UNKNOWN_PROGRAM = "unknown_program"
    INVALID_PROGRAM = "invalid_program"
    UNTRUSTED_PROGRAM = "untrusted_program"  # published by another device (`--programs-from`)
    RUN_TOKEN = "run_token"
    SECRET = "secret"  # a `{"secret": NAME}` of its args this device's secrets file lacks
    WITHDRAWN = "withdrawn"
    SLEPT = "slept"  # claimed ahead of its slot, and the machine slept through it
    SHUTDOWN = "shutdown"
    OUTSIDE_WINDOW = "outside_window"  # the space refused the claim: outside the record's window
    BUDGET = "budget"  # the record's budget of runs per period is spent
    CHAT_ACTIVE = "chat_active"  # a person wrote in the record's quiet chat just now
    SUPERSEDED = "superseded"  # cancelled by a newer fire (`overlap: restart`)
    DEVICE_STOPPED = "device_stopped"  # claimed in the owner's ledger; it stopped mid-run


class HealthReason(enum.StrEnum):  # a verdict of the health pass, stamped as `lastStatus`
    UNSUPPORTED_KIND = "unsupported_kind"
    INVALID_SPEC = "invalid_spec"
    INVALID_RECORD = "invalid_record"
    UNSUPPORTED_SOURCE = "unsupported_source"
    UNKNOWN_PROGRAM = "unknown_program"
    SOURCE_NOT_FOUND = "source_not_found"
    OWNER_OFFLINE = "owner_offline"
    MISSED = "missed"
    DONE = "done"
    BREAKER_OPEN = "breaker_open"
    OVERDUE = "overdue"


class TurnOutcome(enum.StrEnum):  # how a chat-watch turn ended; a turn is not a run
    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"


class Overlap(enum.StrEnum):  # `limits.overlap`: a fire while an earlier one still runs
    SKIP = "skip"
    QUEUE = "queue"
    PARALLEL = "parallel"
    RESTART = "restart"  # the new fire cancels the running run, then starts


CLOCK_WARN_S = 2.0
"""A device whose clock is further than this off the space's warns (SPEC "Sleep and clocks"):
in its log, `baton status` and `why`."""


# --- instants as text ------------------------------------------------------------------
# One format for instants on the wire, in fire keys and in stamps' details alike (`iso`).
# A fire key written by an older build (`2026-12-01T08:00:00Z`) names the same fire once
# canonical (`canonical_key`): the space stores and compares keys in that form.


def iso(when: datetime) -> str:
    """An instant on the wire: RFC 3339 in UTC with milliseconds, `2026-12-01T09:00:00.000Z`."""
    return when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def local_instant(when: datetime) -> str:
    """A wall time for people beside the instant: RFC 3339 with its offset and milliseconds,
    `2026-12-01T10:00:00.000+01:00` (only ever shown next to the UTC one)."""
    return when.isoformat(timespec="milliseconds")


def key_instant(when: datetime) -> str:
    """An instant in a fire key: the one format (`iso`)."""
    return iso(when)


MANUAL_PREFIX = (
    "manual:"  # a run by hand's key: `manual:<instant>` (`triggers run`), `manual:<ref>`
)
_KEY = re.compile(r"(manual:)?(\d{4}-\d{2}-\d{2}T[^#]+)(#\d+)?")


def canonical_key(key: str) -> str:
    """A fire key with its instant in the one format: `2026-12-01T08:00:00Z#2` (an older
    build's) → `2026-12-01T08:00:00.000Z#2`. Any other key (a message id) is itself."""
    found = _KEY.fullmatch(key)
    if found is None:
        return key
    try:
        at = datetime.fromisoformat(found.group(2))
    except ValueError:
        return key
    if at.tzinfo is None:
        return key
    return (found.group(1) or "") + iso(at) + (found.group(3) or "")


def detail_instant(when: datetime) -> str:
    """An instant in a stamp's detail words: the one format (`iso`)."""
    return iso(when)
