"""Decoded records share what they repeat: `{}` args, program and owner strings, and the
instant of a record never edited. Sharing changes no value a record reads or writes."""

from __future__ import annotations

import msgspec
import pytest

from triggers.records import CronTrigger, load, to_builtins
from triggers.sharing import NO_ARGS

BASE = {"kind": "cron", "spec": {"expr": "0 9 * * *"}, "rev": 1}
AT = "2026-12-01T09:00:00.000Z"


def cron(**fields: object) -> CronTrigger:
    record = load(msgspec.json.encode({**BASE, **fields}))
    assert isinstance(record, CronTrigger), record
    return record


def test_repeated_strings_and_empty_args_are_one_object() -> None:
    a = cron(id="a", program="tick" + "@v1", owner="lap" + "top")
    b = cron(id="b", program="tick@v1", owner="laptop", args={})
    assert a.program is b.program and a.owner is b.owner
    assert a.args is NO_ARGS and b.args is NO_ARGS
    assert cron(id="c", args={"n": 1}).args == {"n": 1}  # args of its own stay its own


@pytest.mark.parametrize(
    ("updated", "since", "shared"),
    [
        (AT, AT, (True, True)),  # never edited: one instant object
        ("2026-12-01T10:00:00.000Z", AT, (False, True)),  # edited, same regime
        ("2026-12-01T10:00:00.000Z", "2026-12-01T10:00:00.000Z", (False, False)),
        ("2026-12-01T10:00:00.000+01:00", AT, (False, True)),  # same instant, its own offset
    ],
)
def test_a_record_never_edited_holds_one_instant(
    updated: str, since: str, shared: tuple[bool, bool]
) -> None:
    record = cron(id="a", createdAt=AT, updatedAt=updated, activeSince=since)
    assert (record.updated_at is record.created_at, record.active_since is record.created_at) == (
        shared
    )
    wire = to_builtins(record)
    assert (wire["updatedAt"], wire["activeSince"]) == (
        to_builtins(cron(id="a", updatedAt=updated))["updatedAt"],
        to_builtins(cron(id="a", updatedAt=since))["updatedAt"],
    )  # each field still says what was stored
