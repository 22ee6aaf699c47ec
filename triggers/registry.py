"""The registry of armed triggers and the shapes of the reconcile diff that changes it.

Owns *which* records this device has armed: a `Registry` maps id → `Armed` (the record and
the fingerprint of its `args`), and a `Diff` (computed by `triggers.diffing`) says what to
add, remove, rearm, update or refresh. Pure: no I/O, no clock, no logging.

- `apply` returns a new `Registry` (a dict copy, about a millisecond per
  100,000 entries); its owner (the reconciler) uses `absorb` instead, which
  changes the registry in place at the cost of the diff alone, and `restamp`,
  which keeps an armed entry's stamps current without a diff (a stamp-only feed
  change never moves a fire).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping

import msgspec

from triggers.records import Trigger, TriggerId

args_json = msgspec.json.Encoder()  # the `args` fingerprint; `diffing` compares with it too


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


class Armed(msgspec.Struct, frozen=True, kw_only=True, gc=False):  # holds no cycle
    """One registry entry: the record and the fingerprint of its `args`."""

    record: Trigger
    args_json: bytes  # `True` and `1` are equal in Python, not to the program


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
    encoded = args_json.encode(record.args) if record.args else _NO_ARGS  # one shared `{}`
    return Armed(record=record, args_json=encoded)


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
