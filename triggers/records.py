"""Trigger records: their shape, how stored records are loaded and how user input is checked.

Owns the wire shape of a record (SPEC "Trigger records") and its two readers: `load` reads a
*stored* record leniently (unknown fields ignored, an undecodable one is `Salvaged`, never
raised); `validate_input` reads *user input* strictly, naming the path. Both hold a record
to `triggers.bounds`. Pure: no I/O beyond reading the zone database, no clock reads.
"""

from __future__ import annotations

import enum
import re
from datetime import UTC, datetime
from typing import Annotated, Any, NewType

import msgspec

from core.vocab import Overlap
from triggers.bounds import (
    CronExpr,
    DiskMB,
    Grace,
    MemoryMB,
    QueueLength,
    RefText,
    TimeoutSeconds,
    TimeZoneName,
    UnixSeconds,
    check_args,
    dec_hook,
    enc_hook,
    within_calendar,
)
from triggers.policies import (
    ActiveWindow,
    ActiveWindowInput,
    Budget,
    BudgetInput,
    Instant,
    JitterSeconds,
    MaxRuns,
    QuietChat,
    QuietChatInput,
    Retry,
    RetryInput,
)
from triggers.sharing import share_fields, share_instants

TriggerId = NewType("TriggerId", str)
PeerId = NewType("PeerId", str)
FireKey = NewType("FireKey", str)

KINDS = ("cron", "once", "event")
CHAT_DATASET = "chat_messages"
ONCE_GRACE_DEFAULT = 3600.0
RESERVED_CHAT_WATCH = TriggerId("chat-watch")
CHAT_WATCH_PROGRAM = "internal:chat-watch"  # its fires go to the conversation watcher
INTERNAL_PREFIX = "internal:"  # programs of the runtime's own records; no other record may use one


class InvalidRecord(ValueError):
    """User input that is not a valid trigger record; the message names the field."""


class Catchup(enum.StrEnum):
    NONE = "none"
    LATEST = "latest"


class Base(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    """Untracked by the cycle collector (`gc=False`): a decoded record holds no cycle, and
    100,000 of them would otherwise be walked at every full collection."""


class CronSpec(Base, frozen=True, kw_only=True):
    expr: CronExpr
    tz: TimeZoneName = "UTC"  # type: ignore[assignment]  # a plain str: JSON schema can show it
    catchup: Catchup = Catchup.NONE
    grace_seconds: Grace | None = None


class OnceSpec(Base, frozen=True, kw_only=True):
    at: Annotated[datetime, msgspec.Meta(tz=True)] | UnixSeconds
    grace_seconds: Grace = ONCE_GRACE_DEFAULT

    def __post_init__(self) -> None:
        if isinstance(self.at, datetime) and not within_calendar(self.at):
            raise ValueError(
                f"`at` {self.at.isoformat()} is not within years 1970 … 9999 once in UTC"
            )

    @property
    def at_utc(self) -> datetime:
        if isinstance(self.at, datetime):
            return self.at.astimezone(UTC)
        return datetime.fromtimestamp(self.at, UTC)


class EventSpec(Base, frozen=True, kw_only=True):
    dataset: str
    object_id: str = ""
    filter: Any = None  # reserved and ignored


class Network(enum.StrEnum):
    """`limits.network`: no TCP, the space's API only (its port), or anywhere."""

    NONE = "none"
    SPACE = "space"
    ANY = "any"


class Limits(Base, frozen=True, kw_only=True):
    timeout_seconds: TimeoutSeconds = 60.0
    memory_mb: MemoryMB = msgspec.field(default=512, name="memoryMB")
    overlap: Overlap | None = None  # None: skip for cron/once, queue for event
    max_queue: QueueLength = 100
    network: Network = Network.SPACE  # what a run may reach (SPEC "Containment")
    disk_mb: DiskMB = msgspec.field(default=64, name="diskMB")  # its scratch directory's quota


class _Fields(Base, frozen=True, kw_only=True, tag_field="kind"):
    """What a person or a program writes."""

    name: str = ""
    program: str = ""
    args: dict[str, Any] = {}
    owner: str = ""
    enabled: bool = True
    limits: Limits = Limits()
    # the policies (SPEC "Trigger policies", triggers.policies); none by default
    retry: Retry | None = None
    paused_until: Instant | None = None
    window: ActiveWindow | None = None
    max_runs: MaxRuns | None = None
    jitter_seconds: JitterSeconds = 0.0
    budget: Budget | None = None
    quiet_chat: QuietChat | None = None

    def __post_init__(self) -> None:
        if self.args:
            check_args(self.args)
        share_fields(self)

    @property
    def kind(self) -> str:
        return self.__struct_config__.tag  # type: ignore[return-value]


class BackfillStamp(Base, frozen=True, kw_only=True):
    """A user's backfill as the space stamped it: the slot keys to fire (space.backfills)."""

    id: str
    keys: tuple[str, ...] = ()
    requested_at: Annotated[datetime, msgspec.Meta(tz=True)] | None = None


class RunAsked(Base, frozen=True, kw_only=True):
    """A user's `triggers run` as the space recorded it: the responsible device fires `key`
    (`manual:<requestedAt>`) once, claimed like any fire (space.run_asks)."""

    key: str
    requested_at: Annotated[datetime, msgspec.Meta(tz=True)]


class Attempt(Base, frozen=True, kw_only=True):
    """A failed fire's next attempt as stamped: whichever device holds the trigger runs it."""

    key: str
    due_at: Annotated[datetime, msgspec.Meta(tz=True)]
    event: dict[str, Any] | None = None  # an event trigger's message, for whoever runs it


class _Stored(_Fields, frozen=True, kw_only=True):
    """A record as the space keeps it: user fields, server fields, runtime stamps."""

    id: TriggerId = TriggerId("")
    rev: int = 0
    created_at: datetime | None = None
    updated_at: datetime | None = None
    active_since: datetime | None = None  # the server's instant its firing regime began
    last_status: str = ""
    last_status_detail: str = ""
    last_run_at: datetime | None = None
    next_fire_at: datetime | None = None
    breaker: dict[str, Any] | None = None
    rollup: dict[str, Any] | None = None
    backfill: BackfillStamp | None = None
    next_attempt: Attempt | None = None
    run_asked: RunAsked | None = None

    def __post_init__(self) -> None:  # `_Fields`'s, and the instants (one call: 100,000 a sync)
        if self.args:
            check_args(self.args)
        share_fields(self)
        share_instants(self)

    @property
    def floating(self) -> bool:
        return self.owner == ""

    @property
    def fires_from(self) -> datetime | None:
        """Nothing of this record fires for an instant before this (SPEC "Active since"):
        `activeSince`, or `createdAt` for a record stored before the space stamped it."""
        since = self.active_since or self.created_at
        if since is None or since.tzinfo is None:
            return None
        snoozed = self.paused_until  # the space moves `activeSince` there; an older one may not
        return snoozed if snoozed is not None and snoozed > since else since

    @property
    def effective_overlap(self) -> Overlap:
        if self.limits.overlap is not None:
            return self.limits.overlap
        return Overlap.QUEUE if self.kind == "event" else Overlap.SKIP


class CronTrigger(_Stored, frozen=True, kw_only=True, tag="cron"):
    spec: CronSpec


class OnceTrigger(_Stored, frozen=True, kw_only=True, tag="once"):
    spec: OnceSpec


class EventTrigger(_Stored, frozen=True, kw_only=True, tag="event"):
    spec: EventSpec


Trigger = CronTrigger | OnceTrigger | EventTrigger


class Salvaged(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A stored record that did not decode: kept as it was, with the reason."""

    id: TriggerId
    kind: str
    raw: dict[str, Any]
    error: str

    @property
    def error_path(self) -> str:
        m = re.search(r"at `([^`]*)`$", self.error)
        return m.group(1) if m else "$"


Loaded = CronTrigger | OnceTrigger | EventTrigger | Salvaged


# Strict twins for user input: unknown fields refused, `program` checked.
class CronSpecInput(CronSpec, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class OnceSpecInput(OnceSpec, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class EventSpecInput(EventSpec, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class LimitsInput(Limits, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class _Input(_Fields, frozen=True, kw_only=True, forbid_unknown_fields=True):
    program: RefText
    limits: LimitsInput = LimitsInput()
    retry: RetryInput | None = None
    window: ActiveWindowInput | None = None
    budget: BudgetInput | None = None
    quiet_chat: QuietChatInput | None = None


class CronInput(_Input, frozen=True, kw_only=True, tag="cron"):
    spec: CronSpecInput


class OnceInput(_Input, frozen=True, kw_only=True, tag="once"):
    spec: OnceSpecInput


class EventInput(_Input, frozen=True, kw_only=True, tag="event"):
    spec: EventSpecInput


TriggerInput = CronInput | OnceInput | EventInput
USER_FIELDS = frozenset(f.encode_name for f in msgspec.structs.fields(CronInput)) | {"kind"}

_stored_json = msgspec.json.Decoder(Trigger, dec_hook=dec_hook)
_input_json = msgspec.json.Decoder(TriggerInput, dec_hook=dec_hook)
_encoder = msgspec.json.Encoder(enc_hook=enc_hook)


def load(raw: bytes | dict[str, Any]) -> Loaded:
    """Decode one stored record; never raises. Undecodable → `Salvaged`."""
    try:
        if isinstance(raw, dict):
            record: Trigger = msgspec.convert(raw, Trigger, dec_hook=dec_hook)
            return record
        return _stored_json.decode(raw)
    except msgspec.ValidationError as exc:
        return _salvage(raw, str(exc))
    except msgspec.DecodeError as exc:
        return _salvage(raw, f"not JSON: {exc}")
    except (RecursionError, ValueError, TypeError, OverflowError) as exc:  # hand-written bodies
        return _salvage(raw, f"{type(exc).__name__}: {exc}")


def load_all(raws: list[bytes] | list[dict[str, Any]]) -> list[Loaded]:
    """Decode records one at a time: a bad one hurts no other."""
    return [load(r) for r in raws]


def _salvage(raw: bytes | dict[str, Any], error: str) -> Salvaged:
    obj: Any = raw
    if not isinstance(raw, dict):
        try:
            obj = msgspec.json.decode(raw)
        except (msgspec.DecodeError, RecursionError):
            obj = {}
    if not isinstance(obj, dict):
        obj = {"value": obj}
    kind = obj.get("kind")
    rid = obj.get("id")
    return Salvaged(
        id=TriggerId(rid if isinstance(rid, str) else ""),
        kind=kind if isinstance(kind, str) else "",
        raw=obj,
        error=error,
    )


def validate_input(raw: bytes | dict[str, Any]) -> TriggerInput:
    """Check user input strictly; raise `InvalidRecord` naming the field and the reason."""
    try:
        if isinstance(raw, dict):
            given: TriggerInput = msgspec.convert(raw, TriggerInput, dec_hook=dec_hook)
            return given
        return _input_json.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise InvalidRecord(str(exc)) from None
    except RecursionError:
        raise InvalidRecord("record nested too deep") from None


def to_json(obj: msgspec.Struct) -> bytes:
    return _encoder.encode(obj)


def to_builtins(obj: msgspec.Struct) -> dict[str, Any]:
    built: dict[str, Any] = msgspec.to_builtins(obj, enc_hook=enc_hook)
    return built
