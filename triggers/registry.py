"""The registry of armed triggers and the reconcile diff that keeps it current.

Owns *which* records this device is responsible for (SPEC "Who runs what") and
*what changed* between the records in the space and the registry armed now
(SPEC "Reconcile, registry, health pass"). Pure: no I/O, no clock, no logging;
the caller fetches records, logs the skipped ones and arms timers and
subscriptions from the `Diff`.

- A record enters the registry only when it decoded, is enabled, and is this
  device's: floating (`owner == ""`) while this device is election-active,
  pinned only when `owner` is this device. Undecodable records (`Salvaged`,
  unknown kinds among them) never enter it and are returned as `Skipped`.
- A change is sorted by what it moves. `rearm`: a fire-relevant field changed
  (`kind`, `spec`, `enabled`, `owner`, `activeSince`), fire times are recomputed. `update`:
  only `name`, `program`, `args` or `limits` changed, the armed entry is
  refreshed and its fire times stay. Anything else (server fields `rev`,
  `updatedAt`, the runtime's status stamps) asks nothing of the caller: it is
  listed in `refresh` only so that `apply` keeps the newest record, and the
  next full reconcile knows it by its version. Pausing and resuming show as
  `remove` and `add`, since a disabled record is never armed.
- A full `reconcile` takes every record in the space, each id once (the
  space's key), and trusts the space's `(rev, updatedAt)` pair, with the
  record's `lastRunAt`, as the identity of a write: the same triple is the same
  record and costs one comparison (stamps keep `rev`, so `lastRunAt` tells a
  run another device stamped). Records without a `rev` or an `updatedAt` are
  compared by value.
- One record's failure is its own: a record whose sorting raises is returned
  as `Skipped` (`failed`, with the error) and the others are sorted as usual.
- `apply` returns a new `Registry` (a dict copy, about a millisecond per
  100,000 entries); its owner (the reconciler) uses `absorb` instead, which
  changes the registry in place at the cost of the diff alone, and `restamp`,
  which keeps an armed entry's stamps current without a diff (a stamp-only feed
  change never moves a fire).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping

import msgspec

from triggers.records import KINDS, Loaded, PeerId, Salvaged, Trigger, TriggerId

_args_json = msgspec.json.Encoder()


class SkipReason(enum.StrEnum):
    UNKNOWN_KIND = "unknown_kind"
    UNDECODABLE = "undecodable"
    FAILED = "failed"  # decoded, but sorting it raised: isolated, never armed


class Skipped(msgspec.Struct, frozen=True, kw_only=True):
    """A record that cannot be armed; the caller logs `warning`."""

    id: TriggerId
    kind: str
    reason: SkipReason
    error: str

    @property
    def warning(self) -> str:
        if self.reason is SkipReason.UNKNOWN_KIND:
            return f"skipping trigger {self.id}: unknown kind {self.kind!r}"
        if self.reason is SkipReason.FAILED:
            return f"skipping trigger {self.id} (kind {self.kind!r}): cannot be armed: {self.error}"
        return f"skipping trigger {self.id} (kind {self.kind!r}): undecodable: {self.error}"


class Deleted(msgspec.Struct, frozen=True, kw_only=True):
    """A deletion from the change feed."""

    id: TriggerId


class Armed(msgspec.Struct, frozen=True, kw_only=True):
    """One registry entry: the record and the fingerprint of its `args`."""

    record: Trigger
    args_json: bytes  # `True` and `1` are equal in Python, not to the program


class Change(enum.Enum):
    NONE = "none"
    UPDATE = "update"  # name, program, args or limits: fire times stay
    REARM = "rearm"  # kind, spec, enabled or owner: fire times move


class Diff(msgspec.Struct, frozen=True, kw_only=True):
    add: tuple[Armed, ...] = ()
    remove: tuple[TriggerId, ...] = ()
    rearm: tuple[Armed, ...] = ()
    update: tuple[Armed, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    refresh: tuple[Armed, ...] = ()  # a newer write, nothing moved: for `apply` only

    @property
    def summary(self) -> str:
        """One log line's worth: `add 1, remove 0, rearm 2, update 0, skipped 1, refresh 0`."""
        counts = (len(getattr(self, f)) for f in self.__struct_fields__)
        return ", ".join(f"{f} {n}" for f, n in zip(self.__struct_fields__, counts, strict=True))

    @property
    def empty(self) -> bool:
        """True when there is nothing to arm or disarm (skipped and refreshed records aside)."""
        return not (self.add or self.remove or self.rearm or self.update)


class Registry(Mapping[TriggerId, Armed]):
    """A mapping id → `Armed`; `apply` makes the next one, `absorb` changes this one."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[TriggerId, Armed] | None = None) -> None:
        self._items: dict[TriggerId, Armed] = dict(items or {})

    def __getitem__(self, key: TriggerId) -> Armed:
        return self._items[key]

    def __iter__(self) -> Iterator[TriggerId]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def get(self, key: TriggerId, default: Armed | None = None) -> Armed | None:  # type: ignore[override]
        return self._items.get(key, default)

    def __repr__(self) -> str:
        return f"Registry({len(self._items)} armed)"

    @classmethod
    def _adopt(cls, items: dict[TriggerId, Armed]) -> Registry:
        new = cls.__new__(cls)
        new._items = items
        return new


_NO_ARGS = b"{}"


def arm(record: Trigger) -> Armed:
    encoded = _args_json.encode(record.args) if record.args else _NO_ARGS  # one shared `{}`
    return Armed(record=record, args_json=encoded)


def same_version(prev: Trigger, record: Trigger) -> bool:
    """The same write of the record: the space bumps `rev` and `updatedAt` on every write."""
    stamped = record.rev > 0 and record.updated_at is not None
    return (
        stamped
        and prev.rev == record.rev
        and prev.updated_at == record.updated_at
        and prev.last_run_at == record.last_run_at
    )


def change(old: Armed, record: Trigger) -> Change:
    """What moving from the armed record to `record` changes; stamps and server fields do not."""
    if old.record is record or same_version(old.record, record):
        return Change.NONE
    return _moved(old, record)


def _moved(old: Armed, record: Trigger) -> Change:
    prev = old.record
    if (
        type(prev) is not type(record)  # the class is the kind
        or prev.spec != record.spec
        or prev.owner != record.owner
        or prev.enabled != record.enabled
        or prev.active_since != record.active_since  # a pause and resume seen as one write
    ):
        return Change.REARM
    if prev.name != record.name or prev.program != record.program or prev.limits != record.limits:
        return Change.UPDATE
    if _args_json.encode(record.args) != old.args_json:
        return Change.UPDATE
    return Change.NONE


def responsible(record: Loaded, me: PeerId, active: bool) -> bool:
    """Whether this device arms `record`: decoded, enabled, and floating-while-active or ours."""
    if isinstance(record, Salvaged) or not record.enabled:
        return False
    return active if record.owner == "" else record.owner == me


def skipped(record: Salvaged) -> Skipped:
    unknown = record.error_path == "$.kind" and record.kind not in KINDS
    reason = SkipReason.UNKNOWN_KIND if unknown else SkipReason.UNDECODABLE
    return Skipped(id=record.id, kind=record.kind, reason=reason, error=record.error)


class _Collect:
    """Accumulates one diff; `visit` sorts one record against its armed entry."""

    def __init__(self, me: PeerId, active: bool) -> None:
        self.me, self.active = me, active
        self.add: list[Armed] = []
        self.remove: list[TriggerId] = []
        self.rearm: list[Armed] = []
        self.update: list[Armed] = []
        self.skipped: list[Skipped] = []
        self.refresh: list[Armed] = []

    def visit(self, old: Armed | None, record: Loaded) -> None:
        """Sort one record; if that raises, the record is skipped (and disarmed) alone."""
        try:
            self._visit(old, record)
        except Exception as exc:
            self.skipped.append(
                Skipped(
                    id=record.id,
                    kind=record.kind,
                    reason=SkipReason.FAILED,
                    error=f"{type(exc).__name__}: {exc}",
                )
            )
            if old is not None:
                self.remove.append(old.record.id)

    def _visit(self, old: Armed | None, record: Loaded) -> None:
        if isinstance(record, Salvaged):
            self.skipped.append(skipped(record))
        if not responsible(record, self.me, self.active):
            if old is not None:
                self.remove.append(old.record.id)
        elif old is None:
            self.add.append(arm(record))  # type: ignore[arg-type]
        elif old.record is not record:
            self._sort(old, record)  # type: ignore[arg-type]

    def _sort(self, old: Armed, record: Trigger) -> None:
        prev = old.record
        if same_version(prev, record):
            return
        moved = _moved(old, record)
        if moved is not Change.NONE:
            (self.rearm if moved is Change.REARM else self.update).append(arm(record))
        elif (prev.rev, prev.updated_at, prev.last_run_at) != (
            record.rev,
            record.updated_at,
            record.last_run_at,
        ):
            self.refresh.append(Armed(record=record, args_json=old.args_json))

    def diff(self) -> Diff:
        return Diff(
            add=tuple(self.add),
            remove=tuple(self.remove),
            rearm=tuple(self.rearm),
            update=tuple(self.update),
            skipped=tuple(self.skipped),
            refresh=tuple(self.refresh),
        )


def _kept(old: Armed, record: Loaded, active: bool) -> bool:
    """Nothing to do: the armed write itself, and still ours (armed ⇒ enabled, floating or mine).

    Runs once per record in the space, so `same_version` is inlined.
    """
    prev = old.record
    if type(prev) is not type(record) or not (active or prev.owner):
        return False  # a Salvaged record, another kind, or a floating one while standby
    if prev is record:
        return True
    at = record.updated_at
    return (
        at is not None
        and prev.updated_at == at
        and record.rev > 0
        and prev.rev == record.rev
        and prev.last_run_at == record.last_run_at
    )


def reconcile(registry: Registry, records: Iterable[Loaded], me: PeerId, active: bool) -> Diff:
    """Full diff: `records` is every record in the space; armed ids not among them are removed."""
    records = records if isinstance(records, list | tuple) else list(records)
    collect = _Collect(me, active)
    get = registry._items.get
    matched = 0
    for record in records:
        old = get(record.id)
        if old is not None:
            matched += 1
            if _kept(old, record, active):
                continue
        collect.visit(old, record)
    if matched != len(registry):  # ids are unique in the space: only then is one missing
        seen = {record.id for record in records}
        collect.remove.extend(i for i in registry if i not in seen)
    return collect.diff()


def reconcile_changes(
    registry: Registry, changes: Iterable[Loaded | Deleted], me: PeerId, active: bool
) -> Diff:
    """Incremental diff for change-feed entries in feed order; the last entry per id wins."""
    latest: dict[TriggerId, Loaded | Deleted] = {}
    for entry in changes:
        latest.pop(entry.id, None)
        latest[entry.id] = entry
    collect = _Collect(me, active)
    for tid, entry in latest.items():
        old = registry.get(tid)
        if not isinstance(entry, Deleted):
            collect.visit(old, entry)
        elif old is not None:
            collect.remove.append(tid)
    return collect.diff()


def reconcile_one(registry: Registry, entry: Loaded | Deleted, me: PeerId, active: bool) -> Diff:
    return reconcile_changes(registry, (entry,), me, active)


def apply(registry: Registry, diff: Diff) -> Registry:
    """The registry after `diff`."""
    if diff.empty and not diff.refresh:
        return registry
    items = dict(registry._items)
    for tid in diff.remove:
        items.pop(tid, None)
    for armed in (*diff.add, *diff.rearm, *diff.update, *diff.refresh):
        items[armed.record.id] = armed
    return Registry._adopt(items)


def absorb(registry: Registry, diff: Diff) -> Registry:
    """`registry` itself, changed in place by `diff`: O(changes), never a copy.

    For the one owner of a registry; a caller that keeps older registries uses `apply`.
    """
    items = registry._items
    for tid in diff.remove:
        items.pop(tid, None)
    for armed in (*diff.add, *diff.rearm, *diff.update, *diff.refresh):
        items[armed.record.id] = armed
    return registry


def restamp(registry: Registry, record: Trigger) -> bool:
    """Keep an armed entry's record current after a stamp-only write (same `rev` and
    `updatedAt`: user fields unchanged), without a diff; whether `record` is armed."""
    old = registry._items.get(record.id)
    if old is None or type(old.record) is not type(record):
        return False
    registry._items[record.id] = Armed(record=record, args_json=old.args_json)
    return True
