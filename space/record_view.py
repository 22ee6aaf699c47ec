"""A stored trigger record as the space answers it: defaults filled in, raw fields kept.

Owns how a stored body is read back: decoded records get their defaults
(`enabled`, `limits`, `owner` …) under their raw fields, so fields this build
does not know survive; an undecodable body is answered as stored and flagged,
never written back. Pure: must not touch the database.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from triggers import records
from triggers.bounds import CRON_LATEST_GRACE, LIVE_SLACK

Record = dict[str, Any]


def parse(text: str) -> Record | None:
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):  # a body written past the API: read, never raised
        return None
    return obj if isinstance(obj, dict) else None


def flagged(tid: str, body: str) -> Record:
    """A stored record as read (one or listed): its defaults filled in (`enabled`, `limits`,
    `owner` …) over its raw fields, so fields this build does not know survive; an
    undecodable one as stored, flagged (never written back)."""
    loaded = records.load(body.encode())
    if not isinstance(loaded, records.Salvaged):
        return _with_defaults(records.to_builtins(loaded), json.loads(body))
    obj = parse(body) or {"id": tid, "raw": body}
    return {**obj, "undecodable": True, "decodeError": loaded.error}


def complete(record: Record) -> Record:
    """A record as answered: its defaults filled in when it decodes, else as it is."""
    loaded = records.load(record)
    if isinstance(loaded, records.Salvaged):
        return record
    return _with_defaults(records.to_builtins(loaded), record)


def _with_defaults(full: Record, raw: Record) -> Record:
    """`raw` over the decoded record's fields, one level deep into `spec` and `limits`, and
    the defaults the runtime goes by where a field is left null (`overlap`, a cron's
    `graceSeconds`); a whole number of seconds is an integer, however it was written."""
    merged = {**full, **raw}
    for name in ("spec", "limits"):
        if isinstance(full.get(name), dict) and isinstance(raw.get(name), dict):
            merged[name] = {**full[name], **raw[name]}
    _effective(merged, full)
    return merged


def _effective(merged: Record, full: Record) -> None:
    limits, spec = merged.get("limits"), merged.get("spec")
    if isinstance(limits, dict):
        if limits.get("overlap") is None:
            limits["overlap"] = "queue" if full.get("kind") == "event" else "skip"
        merged["limits"] = {k: _number(v) for k, v in limits.items()}
    if isinstance(spec, dict):
        if full.get("kind") == "cron" and spec.get("graceSeconds") is None:
            latest = spec.get("catchup") == "latest"
            spec["graceSeconds"] = CRON_LATEST_GRACE if latest else LIVE_SLACK
        merged["spec"] = {k: _number(v) for k, v in spec.items()}


def _number(value: Any) -> Any:
    """`60.0` → `60`: one numeric form for a whole number (never a bool, never a fraction)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def as_stored(tid: str, body: str) -> Record | msgspec.Raw:
    data = body.encode()
    try:
        if body.lstrip().startswith("{"):
            return msgspec.json.decode(data, type=msgspec.Raw)  # checks it is JSON
    except (msgspec.DecodeError, RecursionError):
        pass
    return flagged(tid, body)


RUN_VISIBLE = (
    *("id", "name", "kind", "owner", "enabled", "rev"),
    *("lastStatus", "lastStatusDetail", "lastRunAt", "nextFireAt"),
)  # what a run token sees of a record: never its args, spec, program or limits


def for_run(record: Record) -> Record:
    """A record as a run token reads it (listed, read, patched or in the change feed):
    who and what state, not what it is told (`args`, where a planted secret would be)."""
    return {name: record[name] for name in RUN_VISIBLE if name in record}
