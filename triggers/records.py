"""Trigger records: their shape, how stored records are loaded and how user input is checked.

Owns the wire shape of a record (SPEC "Trigger records"). Two readers exist:

- `load` reads a *stored* record leniently: unknown fields are ignored (an older
  device must read what a newer one wrote), and a record that does not decode is
  returned as `Salvaged` with its raw JSON and the error, never raised.
- `validate_input` reads *user input* (CLI, HTTP) strictly: unknown fields and bad
  values are refused with msgspec's path, e.g. ``at `$.spec.expr` ``.

Pure: no I/O beyond reading the zone database, no clock reads.
"""

from __future__ import annotations

import enum
import functools
import re
from datetime import UTC, datetime
from typing import Annotated, Any, NewType
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec
from croniter import croniter

TriggerId = NewType("TriggerId", str)
PeerId = NewType("PeerId", str)
FireKey = NewType("FireKey", str)

KINDS = ("cron", "once", "event")
CHAT_DATASET = "chat_messages"
ONCE_GRACE_DEFAULT = 3600.0
RESERVED_CHAT_WATCH = TriggerId("chat-watch")
CHAT_WATCH_PROGRAM = "internal:chat-watch"  # its fires go to the conversation watcher
PROGRAM_REF = re.compile(r"[a-z0-9][a-z0-9_-]*@v[1-9][0-9]*|internal:[a-z0-9][a-z0-9_-]*")


class InvalidRecord(ValueError):
    """User input that is not a valid trigger record; the message names the field."""


class Catchup(enum.StrEnum):
    NONE = "none"
    LATEST = "latest"


class Overlap(enum.StrEnum):
    SKIP = "skip"
    QUEUE = "queue"
    PARALLEL = "parallel"


# Marker types: checked by `_dec_hook`, so a bad value fails with the field's own path.
class CronExpr(str):
    """A cron expression: 5 fields, or 6 with seconds first."""


class TimeZoneName(str):
    """An IANA time zone name."""


class ProgramRef(str):
    """`name@vN` or `internal:<name>`."""


def cron_fields(expr: str) -> tuple[str, ...]:
    """Split and check a cron expression; raise ValueError naming what is wrong."""
    fields = expr.split()
    if len(fields) not in (5, 6):
        raise ValueError(f"cron expression {expr!r} has {len(fields)} fields, expected 5 or 6")
    if not croniter.is_valid(expr, second_at_beginning=True):
        try:
            croniter(expr, second_at_beginning=True)
        except (ValueError, KeyError) as exc:
            raise ValueError(f"invalid cron expression {expr!r}: {exc}") from None
        raise ValueError(f"invalid cron expression {expr!r}")
    return tuple(fields)


def zone(name: str) -> ZoneInfo:
    """The zone named `name`; ValueError if there is none."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r}") from None


def check_program_ref(ref: str) -> None:
    if not PROGRAM_REF.fullmatch(ref):
        raise ValueError(f"program {ref!r} is not `name@vN` or `internal:<name>`")


_CHECKS = {CronExpr: cron_fields, TimeZoneName: zone, ProgramRef: check_program_ref}


def _dec_hook(typ: type, obj: Any) -> Any:
    if typ not in _CHECKS:
        raise NotImplementedError(typ)
    if not isinstance(obj, str):
        raise TypeError(f"Expected `str`, got `{type(obj).__name__}`")
    return _checked(typ, obj)


@functools.lru_cache(maxsize=8192)
def _checked(typ: type, text: str) -> str:
    """A checked marker value; cached, since records repeat a few expressions and zones."""
    _CHECKS[typ](text)
    return typ(text)


def _enc_hook(obj: Any) -> Any:
    if isinstance(obj, str):  # the marker types above
        return str(obj)
    raise NotImplementedError(type(obj))


class Base(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    pass


class CronSpec(Base, kw_only=True):
    expr: CronExpr
    tz: TimeZoneName = TimeZoneName("UTC")
    catchup: Catchup = Catchup.NONE
    grace_seconds: Annotated[float, msgspec.Meta(ge=0)] | None = None


class OnceSpec(Base, kw_only=True):
    at: Annotated[datetime, msgspec.Meta(tz=True)] | float
    grace_seconds: Annotated[float, msgspec.Meta(ge=0)] = ONCE_GRACE_DEFAULT

    @property
    def at_utc(self) -> datetime:
        if isinstance(self.at, datetime):
            return self.at.astimezone(UTC)
        return datetime.fromtimestamp(self.at, UTC)


class EventSpec(Base, kw_only=True):
    dataset: str
    object_id: str = ""
    filter: Any = None  # reserved and ignored


class Limits(Base, kw_only=True):
    timeout_seconds: Annotated[float, msgspec.Meta(gt=0)] = 60.0
    memory_mb: Annotated[int, msgspec.Meta(gt=0)] = msgspec.field(default=512, name="memoryMB")
    overlap: Overlap | None = None  # None: skip for cron/once, queue for event
    max_queue: Annotated[int, msgspec.Meta(ge=0)] = 100


class _Fields(Base, kw_only=True, tag_field="kind"):
    """What a person or a program writes."""

    name: str = ""
    program: str = ""
    args: dict[str, Any] = {}
    owner: str = ""
    enabled: bool = True
    limits: Limits = Limits()

    @property
    def kind(self) -> str:
        return self.__struct_config__.tag  # type: ignore[return-value]


class _Stored(_Fields, kw_only=True):
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

    @property
    def floating(self) -> bool:
        return self.owner == ""

    @property
    def fires_from(self) -> datetime | None:
        """Nothing of this record fires for an instant before this (SPEC "Active since"):
        `activeSince`, or `createdAt` for a record stored before the space stamped it."""
        since = self.active_since or self.created_at
        return since if since is not None and since.tzinfo is not None else None

    @property
    def effective_overlap(self) -> Overlap:
        if self.limits.overlap is not None:
            return self.limits.overlap
        return Overlap.QUEUE if self.kind == "event" else Overlap.SKIP


class CronTrigger(_Stored, kw_only=True, tag="cron"):
    spec: CronSpec


class OnceTrigger(_Stored, kw_only=True, tag="once"):
    spec: OnceSpec


class EventTrigger(_Stored, kw_only=True, tag="event"):
    spec: EventSpec


Trigger = CronTrigger | OnceTrigger | EventTrigger


class Salvaged(msgspec.Struct, frozen=True, kw_only=True):
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
class _StrictCronSpec(CronSpec, kw_only=True, forbid_unknown_fields=True):
    pass


class _StrictOnceSpec(OnceSpec, kw_only=True, forbid_unknown_fields=True):
    pass


class _StrictEventSpec(EventSpec, kw_only=True, forbid_unknown_fields=True):
    pass


class _StrictLimits(Limits, kw_only=True, forbid_unknown_fields=True):
    pass


class _Input(_Fields, kw_only=True, forbid_unknown_fields=True):
    program: ProgramRef
    limits: _StrictLimits = _StrictLimits()


class CronInput(_Input, kw_only=True, tag="cron"):
    spec: _StrictCronSpec


class OnceInput(_Input, kw_only=True, tag="once"):
    spec: _StrictOnceSpec


class EventInput(_Input, kw_only=True, tag="event"):
    spec: _StrictEventSpec


TriggerInput = CronInput | OnceInput | EventInput
USER_FIELDS = frozenset(f.encode_name for f in msgspec.structs.fields(CronInput)) | {"kind"}

_stored_json = msgspec.json.Decoder(Trigger, dec_hook=_dec_hook)
_input_json = msgspec.json.Decoder(TriggerInput, dec_hook=_dec_hook)
_encoder = msgspec.json.Encoder(enc_hook=_enc_hook)


def load(raw: bytes | dict[str, Any]) -> Loaded:
    """Decode one stored record; never raises. Undecodable → `Salvaged`."""
    try:
        if isinstance(raw, dict):
            return msgspec.convert(raw, Trigger, dec_hook=_dec_hook)
        return _stored_json.decode(raw)
    except msgspec.ValidationError as exc:
        return _salvage(raw, str(exc))
    except msgspec.DecodeError as exc:
        return _salvage(raw, f"not JSON: {exc}")


def load_all(raws: list[bytes] | list[dict[str, Any]]) -> list[Loaded]:
    """Decode records one at a time: a bad one hurts no other."""
    return [load(r) for r in raws]


def _salvage(raw: bytes | dict[str, Any], error: str) -> Salvaged:
    obj: Any = raw
    if not isinstance(raw, dict):
        try:
            obj = msgspec.json.decode(raw)
        except msgspec.DecodeError:
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
            return msgspec.convert(raw, TriggerInput, dec_hook=_dec_hook)
        return _input_json.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise InvalidRecord(str(exc)) from None


def to_json(obj: msgspec.Struct) -> bytes:
    return _encoder.encode(obj)


def to_builtins(obj: msgspec.Struct) -> dict[str, Any]:
    return msgspec.to_builtins(obj, enc_hook=_enc_hook)
