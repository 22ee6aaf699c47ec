"""Health rules: why a record cannot run, which device stamps it, and when a stamp is written.

Owns the verdicts of the health pass (SPEC "Reconcile, registry, health pass"), first rule
wins; clearing a verdict back to the last run's status; and who stamps (the owner when
pinned to a live peer, else the election-active device). The rules in order are in
docs/architecture.md, "Module notes". Pure: the caller builds one `HealthInputs` per pass
and writes the stamps `due` returns; details never depend on `now`.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

import msgspec

from core.vocab import HealthReason, detail_instant
from triggers.policies import runs_done
from triggers.records import (
    CHAT_DATASET,
    EventTrigger,
    Loaded,
    OnceTrigger,
    PeerId,
    Salvaged,
    Trigger,
    TriggerId,
)

TICK_SECONDS = 30.0
MIN_OVERDUE_MARGIN = timedelta(seconds=60)


REASONS = frozenset(r.value for r in HealthReason)


class HealthVerdict(msgspec.Struct, frozen=True, kw_only=True):
    reason: HealthReason | None = None  # None: healthy
    detail: str = ""

    @property
    def healthy(self) -> bool:
        return self.reason is None


HEALTHY = HealthVerdict()


class HealthInputs(msgspec.Struct, frozen=True, kw_only=True):
    """What one health pass knows; built once per pass."""

    now: datetime
    programs: frozenset[str]  # published `name@vN` refs and the runtime's `internal:` refs
    active_peer: PeerId | None = None
    live: frozenset[PeerId] = frozenset()
    missing_chats: frozenset[str] = frozenset()
    breaker_until: dict[TriggerId, datetime] = {}  # open breakers only
    last_run_status: dict[TriggerId, str] = {}
    tick_seconds: float = TICK_SECONDS

    @property
    def overdue_margin(self) -> timedelta:
        return max(MIN_OVERDUE_MARGIN, timedelta(seconds=2 * self.tick_seconds))


class Stamp(msgspec.Struct, frozen=True, kw_only=True):
    """A status stamp to write: `lastStatus` and `lastStatusDetail` of one record."""

    id: TriggerId
    status: str
    detail: str


def done_detail(at: datetime) -> str:
    """The detail of a fired once; the fire pipeline stamps the very same words."""
    return f"fired for {detail_instant(at)}"


def breaker_detail(until: datetime) -> str:
    """The detail of an open breaker; the fire pipeline stamps the very same words."""
    return f"until {detail_instant(until)}"


def verdict(record: Loaded, inputs: HealthInputs) -> HealthVerdict:
    """The health of one record under `inputs`; see the module docstring for the order."""
    if isinstance(record, Salvaged):
        return _undecodable(record)
    found = (
        _source(record, inputs)
        or _program(record, inputs)
        or _once(record, inputs)
        or _ran_out(record)
    )
    if found or not record.enabled:
        return found or HEALTHY
    return _owner(record, inputs) or _breaker(record, inputs) or _overdue(record, inputs) or HEALTHY


def _undecodable(record: Salvaged) -> HealthVerdict:
    path = record.error_path
    if path == "$.kind":
        return HealthVerdict(reason=HealthReason.UNSUPPORTED_KIND, detail=f"kind {record.kind!r}")
    if path == "$.spec" or path.startswith(("$.spec.", "$.spec[")):
        return HealthVerdict(reason=HealthReason.INVALID_SPEC, detail=record.error)
    return HealthVerdict(reason=HealthReason.INVALID_RECORD, detail=record.error)


def _source(record: Trigger, inputs: HealthInputs) -> HealthVerdict | None:
    if not isinstance(record, EventTrigger):
        return None
    spec = record.spec
    if spec.dataset != CHAT_DATASET:
        detail = f"dataset {spec.dataset!r} is not {CHAT_DATASET!r}"
        return HealthVerdict(reason=HealthReason.UNSUPPORTED_SOURCE, detail=detail)
    if not spec.object_id:
        return HealthVerdict(reason=HealthReason.SOURCE_NOT_FOUND, detail="no objectId given")
    if spec.object_id in inputs.missing_chats:
        detail = f"chat {spec.object_id} does not exist"
        return HealthVerdict(reason=HealthReason.SOURCE_NOT_FOUND, detail=detail)
    return None


def unknown_program_detail(ref: str) -> str:
    """The detail of an unpublished program; the fire pipeline stamps the very same words."""
    return f"program {ref!r} is not published" if ref else "no program"


def _program(record: Trigger, inputs: HealthInputs) -> HealthVerdict | None:
    if record.program in inputs.programs:
        return None
    detail = unknown_program_detail(record.program)
    return HealthVerdict(reason=HealthReason.UNKNOWN_PROGRAM, detail=detail)


def runs_done_detail(max_runs: int) -> str:
    """The detail of a record that ran its `maxRuns`; the fire pipeline stamps the same words."""
    return f"ran {max_runs} of maxRuns {max_runs}"


def ok_runs(record: Trigger) -> int:
    """How many runs of the record ended `ok`, as its rollup stamp counts them."""
    ok = record.rollup.get("ok") if record.rollup else None
    return ok if isinstance(ok, int) else 0


def _ran_out(record: Trigger) -> HealthVerdict | None:
    if record.max_runs is None or not runs_done(record.max_runs, ok_runs(record)):
        return None
    return HealthVerdict(reason=HealthReason.DONE, detail=runs_done_detail(record.max_runs))


def _once(record: Trigger, inputs: HealthInputs) -> HealthVerdict | None:
    if not isinstance(record, OnceTrigger):
        return None
    at = record.spec.at_utc
    if record.last_run_at is not None and record.last_run_at >= at:  # its fire ran for this `at`
        if inputs.last_run_status.get(record.id, "ok") != "ok":
            return None  # its one run failed: the run's own stamp shows that, not `done`
        return HealthVerdict(reason=HealthReason.DONE, detail=done_detail(at))
    grace = timedelta(seconds=record.spec.grace_seconds)
    if inputs.now - at > grace:  # not `at + grace`: an `at` near 9999 would overflow
        detail = f"{detail_instant(at)} passed its {record.spec.grace_seconds:g} s grace unfired"
        return HealthVerdict(reason=HealthReason.MISSED, detail=detail)
    return None


def _owner(record: Trigger, inputs: HealthInputs) -> HealthVerdict | None:
    if record.owner == "" or record.owner in inputs.live:
        return None
    detail = f"pinned to {record.owner}, which is not live"
    return HealthVerdict(reason=HealthReason.OWNER_OFFLINE, detail=detail)


def _breaker(record: Trigger, inputs: HealthInputs) -> HealthVerdict | None:
    until = inputs.breaker_until.get(record.id)
    if until is None or until <= inputs.now:
        return None
    return HealthVerdict(reason=HealthReason.BREAKER_OPEN, detail=breaker_detail(until))


def _overdue(record: Trigger, inputs: HealthInputs) -> HealthVerdict | None:
    due = record.next_fire_at
    if due is None or inputs.now - due <= inputs.overdue_margin:
        return None
    if record.owner == "" and inputs.active_peer is None:
        return None  # nobody is meant to run it right now
    if record.last_run_at is not None and record.last_run_at >= due:
        return None
    return HealthVerdict(
        reason=HealthReason.OVERDUE, detail=f"due {detail_instant(due)}, no run since"
    )


def owner_of(record: Loaded) -> str:
    if isinstance(record, Salvaged):
        owner = record.raw.get("owner")
        return owner if isinstance(owner, str) else ""
    return record.owner


def stamper(
    record: Loaded, me: PeerId, active_peer: PeerId | None, live: frozenset[PeerId]
) -> bool:
    """Whether `me` stamps `record`: its live owner, else the active device."""
    owner = owner_of(record)
    if owner and owner in live:
        return owner == me
    return active_peer is not None and active_peer == me


def current_stamp(record: Loaded) -> tuple[str, str]:
    if isinstance(record, Salvaged):
        status, detail = record.raw.get("lastStatus"), record.raw.get("lastStatusDetail")
        return (
            status if isinstance(status, str) else "",
            detail if isinstance(detail, str) else "",
        )
    return record.last_status, record.last_status_detail


def stamp_changed(record: Loaded, verdict: HealthVerdict) -> bool:
    """Whether `verdict` needs a write: a new or different problem, or a problem to clear."""
    status, detail = current_stamp(record)
    if verdict.reason is None:
        return status in REASONS
    return (status, detail) != (verdict.reason.value, verdict.detail)


def stamp_for(record: Loaded, verdict: HealthVerdict, inputs: HealthInputs) -> Stamp:
    """The stamp that records `verdict`; healthy clears back to the last run's status."""
    if verdict.reason is None:
        status = inputs.last_run_status.get(record.id, "")
        return Stamp(id=record.id, status=status, detail="")
    return Stamp(id=record.id, status=verdict.reason.value, detail=verdict.detail)


def due(records: Iterable[Loaded], me: PeerId, inputs: HealthInputs) -> list[Stamp]:
    """The stamps `me` writes this pass: records it stamps whose stamp changes.

    A record whose verdict raises is stamped `invalid_record` with the error: one
    record never stops the pass."""
    stamps = []
    for record in records:
        if not record.id or not stamper(record, me, inputs.active_peer, inputs.live):
            continue
        found = safe_verdict(record, inputs)
        if stamp_changed(record, found):
            stamps.append(stamp_for(record, found, inputs))
    return stamps


def safe_verdict(record: Loaded, inputs: HealthInputs) -> HealthVerdict:
    try:
        return verdict(record, inputs)
    except Exception as exc:
        return HealthVerdict(
            reason=HealthReason.INVALID_RECORD, detail=f"{type(exc).__name__}: {exc}"
        )
