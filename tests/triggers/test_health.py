"""Health verdicts per record, who stamps it, and stamps written only when they change."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from core.vocab import HealthReason
from triggers.health import (
    HEALTHY,
    HealthInputs,
    HealthVerdict,
    Stamp,
    due,
    stamp_changed,
    stamp_for,
    stamper,
    verdict,
)
from triggers.records import Loaded, PeerId, TriggerId, load

NOW = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
ME, BOX, PHONE = PeerId("laptop"), PeerId("box"), PeerId("phone")
AT = "2026-12-01T10:00:00+01:00"  # 09:00 UTC, half an hour before NOW

CRON: dict[str, Any] = {
    "id": "trg_c",
    "kind": "cron",
    "program": "digest@v1",
    "spec": {"expr": "*/5 * * * *"},
    "lastStatus": "ok",
}
ONCE: dict[str, Any] = {**CRON, "id": "trg_o", "kind": "once", "spec": {"at": AT}}
EVENT: dict[str, Any] = {
    **CRON,
    "id": "trg_e",
    "kind": "event",
    "spec": {"dataset": "chat_messages", "objectId": "chat_1"},
}


def inputs(**over: Any) -> HealthInputs:
    base: dict[str, Any] = {
        "now": NOW,
        "programs": frozenset({"digest@v1", "internal:chat-watch"}),
        "active_peer": ME,
        "live": frozenset({ME, BOX}),
    }
    return HealthInputs(**{**base, **over})


def ago(minutes: float) -> str:
    return (NOW - timedelta(minutes=minutes)).isoformat()


AT_UTC = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("raw", "over", "reason", "detail_has"),
    [
        ({**CRON, "kind": "webhook"}, {}, HealthReason.UNSUPPORTED_KIND, "webhook"),
        ({**CRON, "spec": {"expr": "61 * * * *"}}, {}, HealthReason.INVALID_SPEC, "$.spec.expr"),
        (
            {**CRON, "spec": {"expr": "* * * * *", "tz": "Mars/Base"}},
            {},
            HealthReason.INVALID_SPEC,
            "Mars",
        ),
        ({**EVENT, "spec": {}}, {}, HealthReason.INVALID_SPEC, "dataset"),
        ({**CRON, "enabled": "yes"}, {}, HealthReason.INVALID_RECORD, "$.enabled"),
        ({"id": "trg_x"}, {}, HealthReason.INVALID_RECORD, "kind"),
        (
            {**EVENT, "spec": {"dataset": "emails", "objectId": "x"}},
            {},
            HealthReason.UNSUPPORTED_SOURCE,
            "emails",
        ),
        ({**CRON, "program": "nope@v1"}, {}, HealthReason.UNKNOWN_PROGRAM, "nope@v1"),
        ({**CRON, "program": "internal:other"}, {}, HealthReason.UNKNOWN_PROGRAM, "internal:other"),
        (EVENT, {"missing_chats": frozenset({"chat_1"})}, HealthReason.SOURCE_NOT_FOUND, "chat_1"),
        (
            {**EVENT, "spec": {"dataset": "chat_messages"}},
            {},
            HealthReason.SOURCE_NOT_FOUND,
            "objectId",
        ),
        ({**CRON, "owner": PHONE}, {}, HealthReason.OWNER_OFFLINE, "phone"),
        ({**ONCE, "lastRunAt": AT}, {}, HealthReason.DONE, "09:00"),
        (
            {**ONCE, "spec": {"at": AT, "graceSeconds": 60}, "lastRunAt": AT},
            {},
            HealthReason.DONE,
            "09:00",
        ),
        ({**ONCE, "spec": {"at": AT, "graceSeconds": 60}}, {}, HealthReason.MISSED, "60 s"),
        (
            CRON,
            {"breaker_until": {TriggerId("trg_c"): NOW + timedelta(minutes=5)}},
            HealthReason.BREAKER_OPEN,
            "09:35",
        ),
        ({**CRON, "nextFireAt": ago(2)}, {}, HealthReason.OVERDUE, "09:28"),
        ({**CRON, "nextFireAt": ago(2), "lastRunAt": ago(3)}, {}, HealthReason.OVERDUE, "09:28"),
        ({**CRON, "owner": BOX, "nextFireAt": ago(2)}, {}, HealthReason.OVERDUE, "09:28"),
    ],
)
def test_verdict(raw, over, reason, detail_has):
    found = verdict(load(raw), inputs(**over))
    assert found.reason is reason
    assert detail_has in found.detail


@pytest.mark.parametrize(
    ("raw", "over"),
    [
        (CRON, {}),
        (EVENT, {}),
        ({**CRON, "program": "internal:chat-watch"}, {}),
        ({**CRON, "owner": BOX}, {}),
        (ONCE, {}),  # 30 min into its 1 h grace, not fired yet: will fire
        ({**ONCE, "spec": {"at": "2026-12-02T09:00:00Z"}}, {}),  # in the future
        (  # ran for an earlier `at`: moving `at` arms it again
            {**ONCE, "spec": {"at": "2026-12-02T09:00:00Z"}, "lastRunAt": AT},
            {},
        ),
        (CRON, {"breaker_until": {TriggerId("trg_c"): NOW}}),  # backoff over: trial fire
        ({**CRON, "nextFireAt": ago(0.5)}, {}),  # due, within the margin
        ({**CRON, "nextFireAt": ago(2)}, {"tick_seconds": 90.0}),  # margin 2 ticks = 3 min
        ({**CRON, "nextFireAt": ago(2), "lastRunAt": ago(2)}, {}),  # ran at its fire time
        ({**CRON, "nextFireAt": ago(2)}, {"active_peer": None}),  # nobody holds the lease
        ({**CRON, "enabled": False, "owner": PHONE, "nextFireAt": ago(60)}, {}),  # paused
    ],
)
def test_healthy(raw, over):
    assert verdict(load(raw), inputs(**over)) == HEALTHY


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ({**CRON, "enabled": False, "program": "nope@v1"}, HealthReason.UNKNOWN_PROGRAM),
        ({**ONCE, "enabled": False, "spec": {"at": AT, "graceSeconds": 0}}, HealthReason.MISSED),
        ({**CRON, "program": "nope@v1", "owner": PHONE}, HealthReason.UNKNOWN_PROGRAM),
        ({**ONCE, "owner": PHONE, "spec": {"at": AT, "graceSeconds": 0}}, HealthReason.MISSED),
        ({**CRON, "owner": PHONE, "nextFireAt": ago(60)}, HealthReason.OWNER_OFFLINE),
    ],
)
def test_the_more_lasting_cause_wins(raw, reason):
    assert verdict(load(raw), inputs()).reason is reason


def test_breaker_outranks_overdue():
    record = load({**CRON, "nextFireAt": ago(10)})
    until = {TriggerId("trg_c"): NOW + timedelta(minutes=1)}
    assert verdict(record, inputs(breaker_until=until)).reason is HealthReason.BREAKER_OPEN


@pytest.mark.parametrize(
    ("owner", "me", "active", "expected"),
    [
        ("", ME, ME, True),  # floating: the active device
        ("", BOX, ME, False),
        ("", ME, None, False),  # nobody active: nobody stamps floating records
        (BOX, BOX, ME, True),  # pinned to a live peer: that peer
        (BOX, ME, ME, False),
        (PHONE, ME, ME, True),  # pinned to a peer not live: the active device
        (PHONE, PHONE, ME, False),
        (PHONE, BOX, None, False),
    ],
)
def test_stamper(owner, me, active, expected):
    record = load({**CRON, "owner": owner})
    assert stamper(record, me, active, frozenset({ME, BOX})) is expected


def test_stamper_of_an_undecodable_record_reads_its_raw_owner():
    record = load({**CRON, "kind": "webhook", "owner": BOX})
    assert stamper(record, BOX, ME, frozenset({ME, BOX}))
    assert not stamper(record, ME, ME, frozenset({ME, BOX}))


def stamped(raw: dict[str, Any], status: str, detail: str = "") -> Loaded:
    return load({**raw, "lastStatus": status, "lastStatusDetail": detail})


OFFLINE = HealthVerdict(
    reason=HealthReason.OWNER_OFFLINE, detail="pinned to phone, which is not live"
)


@pytest.mark.parametrize(
    ("record", "found", "changed"),
    [
        (stamped(CRON, "ok"), HEALTHY, False),  # a run status is left alone
        (stamped(CRON, "error", "boom"), HEALTHY, False),
        (stamped(CRON, "overdue", "due …"), HEALTHY, True),  # a verdict is cleared
        (stamped(CRON, "ok"), OFFLINE, True),
        (stamped(CRON, "owner_offline", OFFLINE.detail), OFFLINE, False),
        (stamped(CRON, "owner_offline", "pinned to box"), OFFLINE, True),  # detail moved
        (stamped(CRON, "missed", "x"), OFFLINE, True),
        (load({**CRON, "kind": "webhook", "lastStatus": "unsupported_kind"}), HEALTHY, True),
    ],
)
def test_stamp_changed(record, found, changed):
    assert stamp_changed(record, found) is changed


def test_cleared_goes_back_to_the_last_run_status():
    record = stamped(CRON, "overdue", "due …")
    back = stamp_for(record, HEALTHY, inputs(last_run_status={TriggerId("trg_c"): "error"}))
    assert back == Stamp(id=TriggerId("trg_c"), status="error", detail="")
    assert stamp_for(record, HEALTHY, inputs()).status == ""


def test_a_pass_writes_each_stamp_once_and_clears_it_when_the_cause_goes():
    records = [
        load({**CRON, "owner": PHONE}),  # owner offline, stamped by the active device
        load({**CRON, "id": "trg_box", "owner": BOX, "program": "nope@v1"}),  # box's to stamp
        load({**EVENT, "lastStatus": "ok"}),  # healthy, nothing to write
        load({**CRON, "id": "", "kind": "webhook"}),  # no id: cannot be stamped
    ]
    first = due(records, ME, inputs())
    assert [(s.id, s.status) for s in first] == [("trg_c", "owner_offline")]
    records[0] = stamped({**CRON, "owner": PHONE}, first[0].status, first[0].detail)
    assert due(records, ME, inputs()) == []
    back = inputs(live=frozenset({ME, BOX, PHONE}), last_run_status={TriggerId("trg_c"): "ok"})
    assert due(records, ME, back) == []  # now phone's record: phone clears it
    assert due(records, PHONE, back) == [Stamp(id=TriggerId("trg_c"), status="ok", detail="")]
