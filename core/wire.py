"""The bodies of the space API: what a client sends and what the space answers, as Structs.

Owns the msgspec Structs the server decodes its requests into and documents its
answers with (`space/`), shared so the device can decode the very same shapes
(`runtime/client.py`): runs, turns, fire claims, the lease, heartbeats, state,
run tokens, stamps, the change feed, programs and spaces (chat messages are
`core.chatwire`'s); the
device decodes every answer it reads into these, field names as the API answers
them. Requests refuse unknown fields (user input at the edge); instants are
aware (`Aware`). Imports nothing of ours but `core.vocab`; must not know tables
or HTTP. Bodies only one side reads stay next to their routes in `space/`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import msgspec

from core.vocab import RunStatus, TurnOutcome

Aware = Annotated[datetime, msgspec.Meta(tz=True)]
"""An instant on the wire: RFC 3339 with an offset (msgspec refuses a naive one)."""
Text = Annotated[str, msgspec.Meta(min_length=1, max_length=500)]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
Short = Annotated[str, msgspec.Meta(max_length=200)]
Count = Annotated[int, msgspec.Meta(ge=0)]
Peer = Name
Term = Count


# --- runs and turns


class RunIn(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    runId: Text
    triggerId: Text
    program: str = ""
    peer: str = ""
    term: Annotated[int, msgspec.Meta(ge=0)] = 0
    key: str = ""
    startedAt: Aware
    finishedAt: Aware | None = None
    durationMs: Annotated[float, msgspec.Meta(ge=0)] | None = None
    status: RunStatus
    result: Any = None
    error: str = ""
    stderrTail: str = ""
    lateMs: float | None = None
    reason: str = ""
    stamps: Stamps | None = None  # the trigger's stamps, written with the run (never stored in it)


class Rollup(msgspec.Struct, frozen=True, kw_only=True):
    triggerId: str
    runs: int
    counts: dict[str, int]
    lastRunAt: str | None


class RollupList(msgspec.Struct, frozen=True, kw_only=True):
    rollups: list[Rollup]


class RunList(msgspec.Struct, frozen=True, kw_only=True):
    runs: list[RunIn]


class RunResult(msgspec.Struct, frozen=True, kw_only=True):
    """One run of a posted list: its own status (201 written, 200 there already, 4xx
    refused) and, when it carried stamps, theirs (200 applied, 4xx refused)."""

    runId: str
    status: int
    error: str | None = None
    detail: str | None = None
    stamps: int | None = None
    stampsError: str | None = None
    stampsDetail: str | None = None


class RunResults(msgspec.Struct, frozen=True, kw_only=True):
    runs: list[RunResult]


class TurnIn(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
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


class TurnList(msgspec.Struct, frozen=True, kw_only=True):
    turns: list[TurnIn]


# --- fires


class RunAsk(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The run a claim asks a token for: the token is scoped to it and dies with it."""

    runId: Name
    ttlSeconds: Annotated[float, msgspec.Meta(gt=0)] = 3600.0  # capped at timeout + margin


class FireIn(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    triggerId: Text
    key: Text
    term: Annotated[int, msgspec.Meta(ge=0)]
    peer: Text
    claimId: Text | None = None  # one per fire attempt: a retry of the same claim is no conflict
    run: RunAsk | None = None  # answer the run's token with the claim


class FireOut(msgspec.Struct, frozen=True, kw_only=True):
    triggerId: str
    key: str
    term: int
    peer: str
    claimedAt: str
    token: str | None = None  # the run's token, when the claim asked for it (`run`)
    expiresAt: str | None = None


class FireResult(msgspec.Struct, frozen=True, kw_only=True):
    triggerId: str
    key: str
    status: int
    error: str | None = None
    detail: str | None = None
    claimedAt: str | None = None
    token: str | None = None
    expiresAt: str | None = None


class FireResults(msgspec.Struct, frozen=True, kw_only=True):
    claims: list[FireResult]


class FireList(msgspec.Struct, frozen=True, kw_only=True):
    fires: list[FireOut]


# --- election


class ClaimIn(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    peer: Peer
    term: Term


class HandoverIn(ClaimIn, frozen=True, kw_only=True, forbid_unknown_fields=True):
    to: Peer


class WantIn(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    peer: Peer
    want: bool = True


class LeaseOut(msgspec.Struct, frozen=True, kw_only=True):
    active: str | None
    term: int
    expiresAt: str | None
    expiresInMs: int | None
    want: str | None
    serverTime: str
    leaseSeconds: float


# --- devices, spaces and programs


class HeartbeatIn(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: Short | None = None
    priority: int | None = None
    status: dict[str, Any] | None = None  # what the device reports of itself, for `baton status`
    instance: Short | None = None  # one per process run (and per wake): a new one restarts upSince
    stopped: bool = False  # a clean stop: not live from now on, until the next heartbeat


class DeviceOut(msgspec.Struct, frozen=True, kw_only=True):
    peer: str
    name: str
    priority: int
    lastSeen: str
    upSince: str
    live: bool
    stopped: bool = False
    status: dict[str, Any] = {}


class DeviceList(msgspec.Struct, frozen=True, kw_only=True):
    devices: list[DeviceOut]


class Space(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str
    generalChat: str | None
    createdAt: str


class ProgramOut(msgspec.Struct, frozen=True, kw_only=True):
    ref: str
    name: str
    version: int
    sha256: str
    anyTool: bool
    createdAt: str
    source: str | None = None


class ProgramList(msgspec.Struct, frozen=True, kw_only=True):
    programs: list[ProgramOut]


# --- state and tokens


class StateIn(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    value: Any


class StateOut(msgspec.Struct, frozen=True, kw_only=True):
    triggerId: str
    key: str
    value: Any
    updatedAt: str


class RunTokenIn(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    triggerId: Name
    runId: Name
    key: Text | None = None  # the fire this run is for: required with a device token
    ttlSeconds: Annotated[float, msgspec.Meta(gt=0)] = 3600.0


class TokenOut(msgspec.Struct, frozen=True, kw_only=True):
    token: str
    id: str
    expiresAt: str | None = None


# --- triggers


class Change(msgspec.Struct, frozen=True, kw_only=True):
    seq: int
    triggerId: str
    op: str
    rev: int
    at: str
    record: dict[str, Any] | None  # as stored: the device salvages a bad one (`records.load`)


class ChangePage(msgspec.Struct, frozen=True, kw_only=True):
    changes: list[Change]
    next: int
    more: bool


class Stamps(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """`POST …/status`: runtime stamps only; absent fields are left as they are."""

    lastStatus: str | msgspec.UnsetType = msgspec.UNSET
    lastStatusDetail: str | msgspec.UnsetType = msgspec.UNSET
    lastRunAt: Aware | msgspec.UnsetType | None = msgspec.UNSET
    nextFireAt: Aware | msgspec.UnsetType | None = msgspec.UNSET
    breaker: dict[str, Any] | msgspec.UnsetType | None = msgspec.UNSET
    rollup: dict[str, Any] | msgspec.UnsetType | None = msgspec.UNSET

