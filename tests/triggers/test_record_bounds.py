"""Records are bounded where the runtime computes with them, at input and when stored."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from triggers.records import (
    CronTrigger,
    InvalidRecord,
    OnceTrigger,
    Salvaged,
    load,
    validate_input,
)

CRON = {"kind": "cron", "program": "daily@v1", "spec": {"expr": "30 2 * * *"}}
ONCE = {"kind": "once", "program": "remind@v1", "spec": {"at": "2026-12-01T09:00:00+01:00"}}
DAY7 = 7 * 24 * 3600
DAY1 = 24 * 3600

REFUSED: list[tuple[dict[str, Any], str]] = [
    # (record, a fragment naming the field)
    ({**ONCE, "spec": {**ONCE["spec"], "graceSeconds": 1e308}}, "`$.spec.graceSeconds`"),
    ({**ONCE, "spec": {**ONCE["spec"], "graceSeconds": DAY7 + 1}}, "`$.spec.graceSeconds`"),
    ({**ONCE, "spec": {**ONCE["spec"], "graceSeconds": -1}}, "`$.spec.graceSeconds`"),
    ({**CRON, "spec": {**CRON["spec"], "graceSeconds": 1e308}}, "`$.spec.graceSeconds`"),
    ({**ONCE, "spec": {"at": 1e300}}, "`$.spec.at`"),
    ({**ONCE, "spec": {"at": -1}}, "`$.spec.at`"),
    ({**ONCE, "spec": {"at": "9999-12-31T23:59:59-14:00"}}, "`at`"),
    ({**ONCE, "spec": {"at": "0001-01-01T00:00:00+14:00"}}, "`at`"),
    ({**ONCE, "spec": {"at": "1969-12-31T23:59:59Z"}}, "`at`"),
    ({**CRON, "spec": {"expr": "0 0 30 2 *"}}, "`$.spec.expr`"),
    ({**CRON, "spec": {"expr": "0 0 31 4,6,9,11 *"}}, "never matches"),
    ({**CRON, "limits": {"timeoutSeconds": 1e12}}, "`$.limits.timeoutSeconds`"),
    ({**CRON, "limits": {"timeoutSeconds": 1e300}}, "`$.limits.timeoutSeconds`"),
    ({**CRON, "limits": {"timeoutSeconds": DAY1 + 1}}, "`$.limits.timeoutSeconds`"),
    ({**CRON, "limits": {"memoryMB": 2**40}}, "`$.limits.memoryMB`"),
    ({**CRON, "limits": {"maxQueue": 10**6}}, "`$.limits.maxQueue`"),
    ({**CRON, "args": {"n": 2**64}}, "`$.args.n`"),
    ({**CRON, "args": {"deep": [{"x": -(2**63) - 1}]}}, "`$.args.deep[0].x`"),
    ({**CRON, "args": {"f": float("inf")}}, "`$.args.f`"),
]

ACCEPTED: list[dict[str, Any]] = [
    {**ONCE, "spec": {**ONCE["spec"], "graceSeconds": DAY7}},
    {**ONCE, "spec": {**ONCE["spec"], "graceSeconds": 0}},
    {**ONCE, "spec": {"at": 0}},
    {**ONCE, "spec": {"at": 253402300799}},
    {**ONCE, "spec": {"at": "9999-12-31T23:59:59Z"}},
    {**ONCE, "spec": {"at": "1970-01-01T01:00:00+01:00"}},
    {**CRON, "spec": {"expr": "0 0 29 2 *"}},  # leap days: within every 28 years
    {**CRON, "spec": {"expr": "0 0 30 2 mon"}},  # day-of-month or day-of-week
    {**CRON, "args": {"n": 2**63 - 1, "m": -(2**63), "f": 1e308}},
    {**CRON, "limits": {"timeoutSeconds": DAY1, "memoryMB": 1024 * 1024, "maxQueue": 100_000}},
]


@pytest.mark.parametrize(("raw", "fragment"), REFUSED, ids=[f for _, f in REFUSED])
def test_input_beyond_the_bounds_is_refused_naming_the_field(
    raw: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(InvalidRecord) as refused:
        validate_input(raw)
    assert fragment in str(refused.value)


@pytest.mark.parametrize(("raw", "fragment"), REFUSED, ids=[f for _, f in REFUSED])
def test_a_stored_record_beyond_the_bounds_is_salvaged_not_raised(
    raw: dict[str, Any], fragment: str
) -> None:
    loaded = load({**raw, "id": "trg_odd"})
    assert isinstance(loaded, Salvaged) and loaded.id == "trg_odd"
    assert fragment in loaded.error


@pytest.mark.parametrize("raw", ACCEPTED)
def test_records_at_the_bounds_are_accepted(raw: dict[str, Any]) -> None:
    assert validate_input(raw).kind == raw["kind"]
    assert isinstance(load({**raw, "id": "t"}), CronTrigger | OnceTrigger)


def test_a_stored_record_nested_beyond_the_stack_is_salvaged() -> None:
    body = b'{"id":"trg_deep","kind":"cron","program":"p@v1","spec":{"expr":"* * * * *"},'
    body += b'"args":{"x":' + b"[" * 50_000 + b"]" * 50_000 + b"}}"
    loaded = load(body)
    assert isinstance(loaded, Salvaged)
    with pytest.raises(InvalidRecord):
        validate_input(body)
    assert isinstance(load(msgspec.json.encode({**CRON, "id": "ok"})), CronTrigger)
