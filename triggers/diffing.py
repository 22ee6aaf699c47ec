"""The reconcile diff: what changed between the records in the space and the armed registry.

Owns *what changed* (SPEC "Reconcile, registry, health pass") and *which* records this
device is responsible for (SPEC "Who runs what"): add, remove, `rearm` (a fire-relevant
field changed), `update` (name, program, args, limits), `refresh`, and `Skipped` for
undecodable records. The rules are in docs/architecture.md, "Module notes". Pure: no I/O,
no clock, no logging; one record's failure is its own.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from triggers.records import KINDS, Loaded, PeerId, Salvaged, Trigger, TriggerId
from triggers.registry import (
    Armed,
    Deleted,
    Diff,
    Registry,
    Skipped,
    SkipReason,
    args_json,
    arm,
)


class Edit(enum.Enum):
    NONE = "none"
    UPDATE = "update"  # name, program, args or limits: fire times stay
    REARM = "rearm"  # kind, spec, enabled or owner: fire times move


def same_version(prev: Trigger, record: Trigger) -> bool:
    """The same write of the record: the space bumps `rev` and `updatedAt` on every write
    (a backfill request is stamped, so it is compared apart)."""
    stamped = record.rev > 0 and record.updated_at is not None
    return (
        stamped
        and prev.rev == record.rev
        and prev.updated_at == record.updated_at
        and prev.last_run_at == record.last_run_at
        and prev.backfill == record.backfill
    )


def change(old: Armed, record: Trigger) -> Edit:
    """What moving from the armed record to `record` changes; stamps and server fields do not."""
    if old.record is record or same_version(old.record, record):
        return Edit.NONE
    return _moved(old, record)


def _moved(old: Armed, record: Trigger) -> Edit:
    prev = old.record
    if (
        type(prev) is not type(record)  # the class is the kind
        or prev.spec != record.spec
        or prev.owner != record.owner
        or prev.enabled != record.enabled
        or prev.active_since != record.active_since  # a pause and resume seen as one write
    ):
        return Edit.REARM
    if prev.name != record.name or prev.program != record.program or prev.limits != record.limits:
        return Edit.UPDATE
    if prev.backfill != record.backfill:  # a user's backfill request: the ticker takes it
        return Edit.UPDATE
    if prev.run_asked != record.run_asked:  # a user's `triggers run`: runtime.fire.asked takes it
        return Edit.UPDATE
    if args_json.encode(record.args) != old.args_json:
        return Edit.UPDATE
    return Edit.NONE


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
        if moved is not Edit.NONE:
            (self.rearm if moved is Edit.REARM else self.update).append(arm(record))
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

    Runs once per record in the space, so `same_version` is inlined (its backfill test too:
    a listing that carries a backfill request the feed has not brought must not keep it out).
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
        and prev.backfill == record.backfill  # stamped without a rev, yet the ticker's news
    )


def reconcile(registry: Registry, records: Iterable[Loaded], me: PeerId, active: bool) -> Diff:
    """Full diff: `records` is every record in the space; armed ids not among them are removed."""
    records = records if isinstance(records, list | tuple) else list(records)
    collect = _Collect(me, active)
    get = registry._items.get  # the dict's own: this runs once per record in the space
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
