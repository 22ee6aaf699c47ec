"""The presence bodies of the space API: the election's lease and the devices' heartbeats.

Owns the Structs of who is where (SPEC "Who runs what"): an acquire (or renewal), release,
hand-over or want of the lease and the lease as answered; a heartbeat and the device listing.
On `core.wire`'s two bases: requests refuse unknown fields; answers ignore them and default
what SPEC leaves optional, so a newer or a foreign space breaks no device. Imports
nothing of ours but `core.wire`; must not know tables or HTTP.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from core.wire import Answer, Aware, Body, Peer, Short, Term

# --- election


class LeaseIn(Body, frozen=True, kw_only=True):
    peer: Peer
    term: Term


class HandoverIn(LeaseIn, frozen=True, kw_only=True):
    to: Peer


class WantIn(Body, frozen=True, kw_only=True):
    peer: Peer
    want: bool = True


class LeaseOut(Answer, frozen=True, kw_only=True):
    """The lease (SPEC: `{active, term, expiresAt, want}`) and what our space adds."""

    active: str | None
    term: int
    expiresAt: str | None
    want: str | None
    expiresInMs: int | None = None  # absent: the lease reads as lapsed
    serverTime: str | None = None
    leaseSeconds: float | None = None  # absent: the device keeps its own lease length


# --- heartbeats and devices


Report = dict[str, Any]
"""What a device reports of itself in its heartbeat, as JSON: the space keeps it whole (a
newer device's fields too); `ReportOut` reads the part `baton status` shows."""


class HeartbeatIn(Body, frozen=True, kw_only=True, omit_defaults=True):
    name: Short | None = None
    priority: int | None = None
    status: Report | None = None
    instance: Short | None = None  # one per process run (and per wake): a new one restarts upSince
    stopped: bool = False  # a clean stop: not live from now on, until the next heartbeat
    appliedSeq: Annotated[int, msgspec.Meta(ge=0)] | None = None  # the change feed applied so far
    sleptSeconds: Annotated[float, msgspec.Meta(ge=0, le=1e9)] | None = None  # a suspend just seen
    # the space's clock minus the device's (ms), as the device measures it and fires by
    offsetMs: Annotated[float, msgspec.Meta(ge=-1e12, le=1e12)] | None = None


class DeviceOut(Answer, frozen=True, kw_only=True):
    peer: str
    lastSeen: Aware
    upSince: Aware
    live: bool
    name: str = ""
    priority: int = 0
    stopped: bool = False
    status: Report = msgspec.field(default_factory=dict)


class DeviceList(Answer, frozen=True, kw_only=True):
    devices: list[DeviceOut]


# --- what a device reports of itself, as read (`baton status`)


class ChatOut(Answer, frozen=True, kw_only=True):
    waiting: int = 0  # messages not yet handed to the responder


class WatchOut(Answer, frozen=True, kw_only=True):
    """chat-watch's readiness (`runtime.chat.watch.WatchStatus`), read leniently."""

    ready: bool = True
    reason: str | None = ""
    chats: list[ChatOut] = msgspec.field(default_factory=list)


class FollowedOut(Answer, frozen=True, kw_only=True, rename="camel"):
    """A followed chat (`runtime.feeds.followed.FollowedStatus`), read leniently."""

    chat: str = ""
    state: str = ""
    triggers: list[str] = msgspec.field(default_factory=list)
    last_id: int | str | None = None


class ContainmentOut(Answer, frozen=True, kw_only=True):
    level: str = "unknown"  # full | partial | none
    weaker: list[str] = msgspec.field(default_factory=list)


class ClockOut(Answer, frozen=True, kw_only=True, rename="camel"):
    offset_ms: float | None = None  # the space's clock minus the device's
    warning: bool = False  # more than 2 s off


class ReportOut(Answer, frozen=True, kw_only=True, rename="camel"):
    """A device's `Report` (written as `runtime.device.DeviceReport`) as `baton status`
    reads it: each part optional, so an older or a newer device's report still reads."""

    subscriptions: list[FollowedOut] = msgspec.field(default_factory=list)
    chat_watch: WatchOut | None = None
    responder: str = ""
    containment: ContainmentOut | None = None
    clock: ClockOut | None = None
