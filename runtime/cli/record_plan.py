"""What `baton triggers apply` would do: the records of a file against the space's, by name.

Owns the plan: each record of the file is matched by `name` to the space's record of that
name (none: it is created as the file gives it; one: the fields the file gives replace the
record's, and only those whose value differs are patched, on the rev read); records the
file does not name are not in the plan. Values are compared as the runtime reads them
(defaults filled in, instants in UTC), so the output of `triggers get -o json` plans
nothing. Each planned record is checked as the space checks it, and a refusal names the
file, the record's index and name, and the field. Pure: no I/O.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from core.vocab import iso
from runtime.cli.common import Record
from runtime.cli.main import UsageError
from space import record_input, record_view
from space.http import Refusal
from triggers import records

FIRST = ("name", "kind", "spec", "program", "args", "owner", "enabled", "limits")
WRITABLE = (
    *FIRST,
    *(
        f.encode_name
        for f in msgspec.structs.fields(records.CronInput)
        if f.encode_name not in FIRST
    ),
)  # the fields a user writes, in the order `get -o json` gives them
INSTANTS = (("pausedUntil",), ("window", "startAt"), ("window", "endAt"), ("spec", "at"))
ABSENT = msgspec.UNSET


class FieldChange(msgspec.Struct, frozen=True, kw_only=True):
    field: str  # a dotted path: `limits.timeoutSeconds`
    old: Any = ABSENT
    new: Any = ABSENT


class PlanStep(msgspec.Struct, frozen=True, kw_only=True):
    """One record of the file: `create`, `edit` (with `patch`, on `rev`) or `unchanged`."""

    index: int
    name: str
    action: str
    id: str = ""
    rev: int = 0
    body: Record = {}  # what is sent: the whole record (create) or the fields to patch (edit)
    changes: list[FieldChange] = []


def writable(record: Record) -> Record:
    """The fields of a record as the API gives it that a user may write, in a fixed order."""
    return {name: record[name] for name in WRITABLE if name in record}


def plan(source: str, given: list[Record], space: list[Record]) -> list[PlanStep]:
    """The steps of applying `given` (the file `source`'s records) to the records `space`."""
    by_name: dict[str, list[Record]] = {}
    for record in space:
        by_name.setdefault(str(record.get("name", "")), []).append(record)
    return [_step(source, i, doc, by_name.get(doc["name"], [])) for i, doc in enumerate(given)]


def _step(source: str, index: int, doc: Record, named: list[Record]) -> PlanStep:
    where = f"{source}: [{index}] {doc['name']!r}"
    if len(named) > 1:
        ids = ", ".join(str(r.get("id")) for r in named)
        raise UsageError(f"{where}: {len(named)} triggers have this name ({ids}); rename one")
    if not named:
        _check(where, doc)
        return PlanStep(
            index=index, name=doc["name"], action="create", body=doc, changes=diff({}, doc)
        )
    current = named[0]
    if current.get("undecodable"):
        raise UsageError(f"{where}: trigger {current.get('id')} does not decode; fix or delete it")
    was = writable(current)
    merged = {**was, **doc}
    _check(where, merged, str(current.get("id", "")))
    old, new = effective(was), effective(merged)
    patch = {k: v for k, v in doc.items() if old.get(k, ABSENT) != new.get(k, ABSENT)}
    return PlanStep(
        index=index,
        name=doc["name"],
        action="edit" if patch else "unchanged",
        id=str(current["id"]),
        rev=int(current["rev"]),
        body=patch,
        changes=diff(old, new),
    )


def _check(where: str, body: Record, tid: str = "") -> None:
    """Refused as the space would refuse it (`space.record_input.check`)."""
    try:
        record_input.check(body, tid)
    except Refusal as exc:
        raise UsageError(f"{where}: {exc.detail}") from None


def effective(body: Record) -> Record:
    """The user fields as the runtime reads them: defaults filled in, whole numbers as
    integers, instants in UTC (`+01:00` and `Z` for one instant are one value)."""
    try:
        full = record_view.complete(records.to_builtins(records.validate_input(body)))
    except records.InvalidRecord:  # a record stored before a rule: compared as it is
        full = dict(body)
    out = writable(full)
    for path in INSTANTS:
        _utc(out, path)
    return out


def _utc(record: Record, path: tuple[str, ...]) -> None:
    *parents, leaf = path
    for name in parents:
        record = record.get(name)  # type: ignore[assignment]
        if not isinstance(record, dict):
            return
    value = record.get(leaf)
    if isinstance(value, str):
        try:
            at = datetime.fromisoformat(value)
        except ValueError:
            return
        if at.tzinfo is not None:
            record[leaf] = iso(at)


def diff(old: Any, new: Any, prefix: str = "") -> list[FieldChange]:
    """Each leaf that differs, by dotted path; two objects are compared key by key (a new
    object as if it were empty before)."""
    if old is ABSENT and isinstance(new, dict) and new:
        old = {}
    if isinstance(old, dict) and isinstance(new, dict):
        found: list[FieldChange] = []
        for key in [*old, *(k for k in new if k not in old)]:
            path = f"{prefix}.{key}" if prefix else str(key)
            found += diff(old.get(key, ABSENT), new.get(key, ABSENT), path)
        return found
    return [] if old == new else [FieldChange(field=prefix, old=old, new=new)]


def shown(value: Any) -> str:
    """A value in a diff line: JSON, `-` for absent."""
    if value is ABSENT:
        return "-"
    return msgspec.json.encode(value).decode()
