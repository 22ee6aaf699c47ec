"""The bodies of the space API: what a client sends and what the space answers, as Structs.

Owns the msgspec Structs both sides decode (runs, turns, fire claims, state, run tokens,
stamps, the change feed, programs, spaces). A `Body` (a request) refuses unknown fields; an
`Answer` ignores them and defaults what SPEC leaves optional. Instants are aware (`Aware`).
Imports nothing of ours but `core.vocab` and `core.bounds`; must not know tables or HTTP.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import msgspec

from core.bounds import INT64_MAX
from core.vocab import RunStatus, TurnOutcome, canonical_key, iso

Aware = Annotated[datetime, msgspec.Meta(tz=True)]
"""An instant on the wire: RFC 3339 with an offset (msgspec refuses a naive one)."""


def wire_builtins(value: Any) -> Any:
    """`msgspec.to_builtins` with every instant in the one format (`iso`), nested ones too."""
    return _instants(msgspec.to_builtins(value, builtin_types=(datetime,), str_keys=True))


Text = Annotated[str, msgspec.Meta(min_length=1, max_length=500)]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
Short = Annotated[str, msgspec.Meta(max_length=200)]
Count = Annotated[int, msgspec.Meta(ge=0)]
Peer = Name
Term = Count


def to_wire(value: Any) -> Any:
    """A body as JSON sends it (a Struct as msgspec encodes it: its wire names, unset
    fields left out, and defaults too where it says `omit_defaults`: a body whose defaults
    mean "not given"), every instant by `iso` (milliseconds, `Z`)."""
    return _instants(msgspec.to_builtins(value, builtin_types=(datetime,)))


def _instants(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, dict):
        return {k: _instants(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_instants(v) for v in value]
    return value


def encode(value: Any) -> bytes:
    """The one encoding of a request body: `to_wire`, then JSON."""
    return msgspec.json.encode(to_wire(value))


class Body(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A request body: an unknown field is refused, naming it (subclasses say `kw_only`)."""


class Answer(msgspec.Struct, frozen=True, kw_only=True):
    """An answer: unknown fields are ignored and optional ones defaulted (a newer or a
    foreign space); only a missing required field or a misfit value fails it."""


# --- runs and turns

Ms = Annotated[float, msgspec.Meta(ge=0)]


class Phases(Body, frozen=True, kw_only=True):
    """Where a run's lateness went (SPEC "Runs"): the device reaching the slot, the claim,
    waiting for an executor, the process until `main()`; they sum to `lateMs`."""

    wakeMs: Ms = 0.0
    claimMs: Ms = 0.0
    queueMs: Ms = 0.0
    spawnMs: Ms = 0.0


class RunIn(Body, frozen=True, kw_only=True):
    runId: Text
    triggerId: Text
    program: str = ""
    peer: str = ""
    term: Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)] = 0  # bounded by type (`free_parts`)
    key: str = ""
    dueAt: Aware | None = None  # the slot, the `at`, the message's acceptance; None: manual
    startedAt: Aware  # main() entered, read in the run process; a non-run: when decided
    finishedAt: Aware | None = None
    durationMs: Annotated[float, msgspec.Meta(ge=0)] | None = None
    status: RunStatus
    result: Any = None
    error: str = ""
    stderrTail: str = ""
    lateMs: float | None = None
    phases: Phases | None = None  # lateMs split; None without a `dueAt`
    reason: str = ""
    attempt: Annotated[int, msgspec.Meta(ge=1, le=10)] = 1  # a retry's (SPEC "Trigger policies")
    stamps: Stamps | None = None  # the trigger's stamps, written with the run (never stored in it)

    def __post_init__(self) -> None:  # the key of its fire, as the space keeps it
        msgspec.structs.force_setattr(self, "key", canonical_key(self.key))


class RollupRow(Answer, frozen=True, kw_only=True):
    triggerId: str
    runs: int
    counts: dict[str, int]
    lastRunAt: str | None


class RollupList(Answer, frozen=True, kw_only=True):
    rollups: list[RollupRow]


class RunList(Answer, frozen=True, kw_only=True):
    runs: list[RunIn]


class ItemResult(Answer, frozen=True, kw_only=True):
    """One item of a posted list, taken or refused on its own: its status, and the
    refusal's `error` and `detail` as an error body would carry them."""

    status: int
    error: str | None = None
    detail: str | None = None


class RunResult(ItemResult, frozen=True, kw_only=True):
    """One run of a posted list: its own status (201 written, 200 there already, 4xx
    refused) and, when it carried stamps, theirs (200 applied, 4xx refused)."""

    runId: str
    stamps: int | None = None
    stampsError: str | None = None
    stampsDetail: str | None = None
    stampsSeq: int | None = None  # applied: the seq of their change on the feed (0: unchanged)


class RunResults(Answer, frozen=True, kw_only=True):
    runs: list[RunResult]


class TurnIn(Body, frozen=True, kw_only=True):
    turnId: Text
    space: Text
    objectId: Text
    messageIds: Annotated[list[Text], msgspec.Meta(max_length=1000)]
    calls: Count
    replies: Count
    startedAt: Aware
    finishedAt: Aware
    durationMs: Annotated[float, msgspec.Meta(ge=0)]
    outcome: TurnOutcome
    error: str = ""
    peer: str = ""  # the device that took the turn: its token's peer, filled in when absent


class TurnList(Answer, frozen=True, kw_only=True):
    turns: list[TurnIn]


# --- fires


class RunAsk(Body, frozen=True, kw_only=True):
    """The run a claim asks a token for: the token is scoped to it and dies with it."""

    runId: Name
    ttlSeconds: Annotated[float, msgspec.Meta(gt=0)] = 3600.0  # capped at timeout + margin


class FireIn(Body, frozen=True, kw_only=True, omit_defaults=True):
    triggerId: Text
    key: Text
    term: Annotated[int, msgspec.Meta(ge=0)]
    peer: Text
    claimId: Text | None = None  # one per fire attempt: a retry of the same claim is no conflict
    run: RunAsk | None = None  # answer the run's token with the claim

    def __post_init__(self) -> None:  # an older build's key names the same fire
        msgspec.structs.force_setattr(self, "key", canonical_key(self.key))


class FireOut(Answer, frozen=True, kw_only=True):
    triggerId: str
    key: str
    term: int
    peer: str
    claimedAt: str
    token: str | None = None  # the run's token, when the claim asked for it (`run`)
    expiresAt: str | None = None


class FireResult(ItemResult, frozen=True, kw_only=True):
    """One claim of a posted list: 201 claimed (with its run's token if it asked), or 409."""

    triggerId: str
    key: str
    claimedAt: str | None = None
    token: str | None = None
    expiresAt: str | None = None


class FireResults(Answer, frozen=True, kw_only=True):
    claims: list[FireResult]


class FireList(Answer, frozen=True, kw_only=True):
    fires: list[FireOut]


# --- spaces and programs


class Space(Answer, frozen=True, kw_only=True):
    id: str
    generalChat: str | None
    name: str = ""
    createdAt: str | None = None


class SpaceList(Answer, frozen=True, kw_only=True):
    spaces: list[Space]


class ProgramOut(Answer, frozen=True, kw_only=True):
    """A program as published (SPEC names only its ref and `source`; the rest is ours)."""

    ref: str
    source: str | None = None  # absent from a listing
    name: str = ""
    version: int = 0
    sha256: str = ""
    anyTool: bool = False
    createdAt: str | None = None
    publisher: str = "admin"  # `admin` or `device:<peer>`


class ProgramList(Answer, frozen=True, kw_only=True):
    programs: list[ProgramOut]


# --- state and tokens


class StateIn(Body, frozen=True, kw_only=True):
    value: Any


class StateOut(Answer, frozen=True, kw_only=True):
    triggerId: str
    key: str
    value: Any
    updatedAt: str


class RunTokenIn(Body, frozen=True, kw_only=True):
    triggerId: Name
    runId: Name
    key: Text | None = None  # the fire this run is for: required with a device token
    ttlSeconds: Annotated[float, msgspec.Meta(gt=0)] = 3600.0

    def __post_init__(self) -> None:  # the key of its fire, as the space keeps it
        if self.key is not None:
            msgspec.structs.force_setattr(self, "key", canonical_key(self.key))


class TokenOut(Answer, frozen=True, kw_only=True):
    token: str
    id: str = ""
    expiresAt: str | None = None


# --- triggers


class TriggerPage(Answer, frozen=True, kw_only=True):
    """`GET …/triggers?stored=1&limit=`: raw records, the feed cursor, the next page's `after`
    (absent or null: the last page, also from a server that does not page)."""

    triggers: list[msgspec.Raw]
    seq: int = 0
    next: str | None = None


class Change(Answer, frozen=True, kw_only=True):
    seq: int
    triggerId: str
    op: str
    rev: int
    at: str
    record: dict[str, Any] | None  # as stored: the device salvages a bad one (`records.load`)


class ChangePage(Answer, frozen=True, kw_only=True):
    changes: list[Change]
    next: int
    more: bool


class NextAttempt(Body, frozen=True, kw_only=True):
    """A failed fire's next attempt (SPEC "Trigger policies", retry): its key and due instant,
    stamped so that whichever device holds the trigger then runs it."""

    key: str
    dueAt: Aware
    event: dict[str, Any] | None = None  # an event trigger's message: a takeover runs it


class Stamps(Body, frozen=True, kw_only=True):
    """`POST …/status`: runtime stamps only; absent fields are left as they are."""

    lastStatus: str | msgspec.UnsetType = msgspec.UNSET
    lastStatusDetail: str | msgspec.UnsetType = msgspec.UNSET
    lastRunAt: Aware | msgspec.UnsetType | None = msgspec.UNSET
    nextFireAt: Aware | msgspec.UnsetType | None = msgspec.UNSET
    breaker: dict[str, Any] | msgspec.UnsetType | None = msgspec.UNSET
    rollup: dict[str, Any] | msgspec.UnsetType | None = msgspec.UNSET
    nextAttempt: NextAttempt | msgspec.UnsetType | None = msgspec.UNSET
