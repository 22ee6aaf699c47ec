"""The space's answers a client reads for people: runs, turns, `why`, `/healthz`.

Owns the lenient read of what `baton` shows in its tables (on `core.wire.Answer`: unknown
fields ignored, optional ones defaulted), so a newer space breaks no table. A run is
written as `core.wire.RunIn` and read back as `RunOut`; a turn `TurnIn`/`TurnOut`; `why`
is `triggers.why.Explanation` read with its words as strings (`WhyOut`). Instants stay the
strings the space sent (shown as sent). Imports nothing of ours but `core.wire`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from core.wire import Answer

# --- runs and turns


class PhasesOut(Answer, frozen=True, kw_only=True, rename="camel"):
    """`core.wire.Phases` as answered: a phase the space left out is None (shown `-`)."""

    wake_ms: float | None = None
    claim_ms: float | None = None
    queue_ms: float | None = None
    spawn_ms: float | None = None


class RunOut(Answer, frozen=True, kw_only=True, rename="camel"):
    """A run record as the space keeps it (`GET …/runs`, `…/runs/{runId}`, `POST …/runs`)."""

    run_id: str
    started_at: str
    trigger_id: str = ""
    status: str = ""  # a `RunStatus`, or a newer one shown as it is
    program: str = ""
    peer: str = ""
    term: int = 0
    key: str = ""
    attempt: int = 1
    due_at: str | None = None
    finished_at: str | None = None
    duration_ms: float | None = None
    late_ms: float | None = None
    phases: PhasesOut | None = None
    result: Any = None  # the program's result: its own JSON
    error: str = ""
    stderr_tail: str = ""
    reason: str = ""


class RunsOut(Answer, frozen=True, kw_only=True):
    runs: list[RunOut]


class TurnOut(Answer, frozen=True, kw_only=True, rename="camel"):
    """A chat-watch turn as the space keeps it (`GET …/turns`), written as `TurnIn`."""

    turn_id: str = ""
    object_id: str = ""
    started_at: str = ""
    outcome: str = ""
    duration_ms: float | None = None
    message_ids: list[str] = msgspec.field(default_factory=list)
    replies: int = 0
    calls: int = 0
    peer: str = ""
    error: str = ""


class TurnsOut(Answer, frozen=True, kw_only=True):
    turns: list[TurnOut]


# --- why


class CheckOut(Answer, frozen=True, kw_only=True):
    """One link of the chain (`triggers.whychain.Check`)."""

    name: str
    ok: bool
    detail: str


class WhyOut(Answer, frozen=True, kw_only=True):
    """`GET …/triggers/{id}/why?at=|key=`: `triggers.why.Explanation`, its verdict and reason
    as strings (a newer space's new reason is shown, not refused)."""

    slot: str | None = None
    key: str | None = None
    verdict: str
    reason: str
    detail: str
    checks: list[CheckOut]
    remedy: str | None = None


class WhyRange(Answer, frozen=True, kw_only=True):
    """`…/why?since=&until=`: every slot of the range, each answered, oldest first."""

    since: str
    until: str
    answers: list[WhyOut]


# --- health


class Health(Answer, frozen=True, kw_only=True):
    """`GET /healthz`: `ok`, or what fails (`storage`, since when, why)."""

    status: str = "ok"
    storage: str | None = None
    since: str | None = None
    detail: str = ""
