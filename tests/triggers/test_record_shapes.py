"""Stored records load leniently and salvage; user input is checked strictly, naming the field."""

from datetime import UTC, datetime

import msgspec
import pytest

from triggers.records import (
    USER_FIELDS,
    Catchup,
    CronTrigger,
    EventTrigger,
    InvalidRecord,
    OnceTrigger,
    Overlap,
    Salvaged,
    load,
    load_all,
    to_builtins,
    to_json,
    validate_input,
)

CRON = {"kind": "cron", "program": "daily@v1", "spec": {"expr": "30 2 * * *"}}


def test_stored_cron_decodes_with_defaults():
    r = load({**CRON, "id": "trg_1"})
    assert isinstance(r, CronTrigger)
    assert (r.kind, r.id, r.spec.tz, r.spec.catchup) == ("cron", "trg_1", "UTC", Catchup.NONE)
    assert (r.enabled, r.owner, r.floating, r.limits.timeout_seconds) == (True, "", True, 60.0)


def test_stored_record_ignores_unknown_fields_from_a_newer_build():
    raw = msgspec.json.encode(
        {**CRON, "id": "t", "futureField": 1, "spec": {**CRON["spec"], "x": 2}}
    )
    assert isinstance(load(raw), CronTrigger)


@pytest.mark.parametrize(
    ("raw", "kind", "path"),
    [
        ({"id": "a", "kind": "webhook", "spec": {}}, "webhook", "$.kind"),
        ({"id": "b", "kind": "cron", "spec": {"expr": "61 * * * *"}}, "cron", "$.spec.expr"),
        (
            {"id": "c", "kind": "cron", "spec": {"expr": "* * * * *", "tz": "Mars/Base"}},
            "cron",
            "$.spec.tz",
        ),
        ({"id": "d", "kind": "once", "spec": {"at": "2026-12-01T09:00:00"}}, "once", "$.spec.at"),
        ({"id": "e", "kind": "event", "spec": {}}, "event", "$.spec"),
        (
            {"id": "f", "kind": "cron", "spec": {"expr": "* * * * *"}, "enabled": "yes"},
            "cron",
            "$.enabled",
        ),
        ({"id": "g"}, "", "$"),
    ],
)
def test_undecodable_record_is_salvaged_with_its_raw_json_and_error(raw, kind, path):
    r = load(raw)
    assert isinstance(r, Salvaged)
    assert (r.id, r.kind, r.raw, r.error_path) == (raw["id"], kind, raw, path)
    assert r.error


def test_salvage_of_bytes_that_are_not_an_object():
    assert load(b"[1, 2]") == Salvaged(
        id="", kind="", raw={"value": [1, 2]}, error="Expected `object`, got `array`"
    )
    assert load(b"{nope").error.startswith("not JSON")


def test_one_bad_record_hurts_no_other():
    loaded = load_all([{**CRON, "id": "ok1"}, {"id": "bad", "kind": "cron"}, {**CRON, "id": "ok2"}])
    assert [type(r) for r in loaded] == [CronTrigger, Salvaged, CronTrigger]


def test_once_accepts_rfc3339_with_offset_or_unix_seconds():
    a = load({"kind": "once", "spec": {"at": "2026-12-01T09:00:00+01:00"}})
    b = load({"kind": "once", "spec": {"at": 1796112000}})
    assert isinstance(a, OnceTrigger) and isinstance(b, OnceTrigger)
    assert a.spec.at_utc == datetime(2026, 12, 1, 8, tzinfo=UTC)
    assert b.spec.at_utc == datetime(2026, 12, 1, 8, tzinfo=UTC)
    assert a.spec.grace_seconds == 3600


def test_effective_overlap_defaults_by_kind():
    cron = load(CRON)
    event = load({"kind": "event", "spec": {"dataset": "chat_messages", "objectId": "c"}})
    pinned = load({**CRON, "owner": "box", "limits": {"overlap": "parallel"}})
    assert isinstance(event, EventTrigger)
    assert (cron.effective_overlap, event.effective_overlap) == (Overlap.SKIP, Overlap.QUEUE)
    assert (pinned.effective_overlap, pinned.floating) == (Overlap.PARALLEL, False)


def test_round_trip_keeps_wire_names():
    r = load({**CRON, "limits": {"memoryMB": 64, "maxQueue": 5}})
    wire = to_builtins(r)
    assert wire["limits"] == {
        "timeoutSeconds": 60.0,
        "memoryMB": 64,
        "overlap": None,
        "maxQueue": 5,
        "network": "space",
        "diskMB": 64,
    }
    assert wire["kind"] == "cron" and "lastStatus" in wire and "nextFireAt" in wire
    assert load(to_json(r)) == r


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({**CRON, "spec": {"expr": "* * * * *", "x": 1}}, "unknown field `x` - at `$.spec`"),
        ({**CRON, "extra": 1}, "unknown field `extra`"),
        ({**CRON, "id": "trg_1"}, "unknown field `id`"),
        ({**CRON, "program": "daily@v0"}, "- at `$.program`"),
        ({**CRON, "program": "Daily"}, "- at `$.program`"),
        ({**CRON, "program": "daily@v1\n"}, "- at `$.program`"),
        ({**CRON, "spec": {"expr": "61 * * * *"}}, "out of range - at `$.spec.expr`"),
        (
            {**CRON, "spec": {"expr": "* * * * * * *"}},
            "7 fields, expected 5 or 6 - at `$.spec.expr`",
        ),
        ({**CRON, "spec": {"expr": 5}}, "Expected `str`, got `int` - at `$.spec.expr`"),
        (
            {**CRON, "spec": {"expr": "* * * * *", "tz": "Nowhere"}},
            "unknown time zone 'Nowhere' - at `$.spec.tz`",
        ),
        ({**CRON, "spec": {"expr": "* * * * *", "catchup": "all"}}, "at `$.spec.catchup`"),
        ({**CRON, "spec": {"expr": "* * * * *", "graceSeconds": -1}}, "at `$.spec.graceSeconds`"),
        ({**CRON, "limits": {"timeoutSeconds": 0}}, "at `$.limits.timeoutSeconds`"),
        ({**CRON, "limits": {"memoryMB": 0}}, "at `$.limits.memoryMB`"),
        ({**CRON, "limits": {"overlap": "replace"}}, "at `$.limits.overlap`"),
        ({**CRON, "limits": {"cpu": 1}}, "unknown field `cpu` - at `$.limits`"),
        ({**CRON, "kind": "webhook"}, "Invalid value 'webhook' - at `$.kind`"),
        ({"kind": "cron", "spec": {"expr": "* * * * *"}}, "missing required field `program`"),
        ({"kind": "once", "program": "a@v1", "spec": {"at": "tomorrow"}}, "at `$.spec.at`"),
        ({"kind": "event", "program": "a@v1", "spec": {"objectId": "c"}}, "`dataset`"),
        ({**CRON, "args": [1]}, "at `$.args`"),
    ],
)
def test_user_input_is_refused_naming_the_field(raw, message):
    with pytest.raises(InvalidRecord, match=None) as exc:
        validate_input(raw)
    assert message in str(exc.value)


def test_user_input_accepts_each_kind_and_internal_refs():
    for raw in (
        CRON,
        {**CRON, "spec": {"expr": "*/10 * * * * *", "tz": "Europe/Berlin", "catchup": "latest"}},
        {"kind": "once", "program": "remind@v2", "spec": {"at": "2026-12-01T09:00:00+01:00"}},
        {
            "kind": "event",
            "program": "internal:chat-watch",
            "spec": {"dataset": "rss", "objectId": "c"},
        },
    ):
        assert validate_input(raw).kind == raw["kind"]
    assert validate_input(msgspec.json.encode(CRON)).program == "daily@v1"


def test_user_fields_are_the_writable_ones():
    record = {"kind", "name", "spec", "program", "args", "owner", "enabled", "limits"}
    policies = {"retry", "pausedUntil", "window", "maxRuns", "jitterSeconds", "budget", "quietChat"}
    assert USER_FIELDS == record | policies
