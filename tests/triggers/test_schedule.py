"""Schedule math: cron slots (DST edges, steps, leap days, month ends), catch-up, once, keys."""

from datetime import UTC, datetime, timedelta, timezone

import pytest

from triggers import cron
from triggers.bounds import CronExpr, TimeZoneName
from triggers.records import Catchup, CronSpec, FireKey, OnceSpec
from triggers.schedule import (
    DstNote,
    OnceState,
    arm_cursor,
    due,
    fire_key_cron,
    fire_key_event,
    fire_key_once,
    latest_at_or_before,
    next_fire,
    once_due,
    tolerance,
    upcoming,
)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def spec(expr: str, tz: str = "UTC", **kw) -> CronSpec:
    return CronSpec(expr=CronExpr(expr), tz=TimeZoneName(tz), **kw)


S = timedelta(seconds=1)

NEXT = [
    # Europe/Berlin 2026: spring 29 Mar 01:00Z (02:00 → 03:00), autumn 25 Oct 01:00Z (03:00 → 02:00)
    ("30 2 * * *", "Europe/Berlin", utc(2026, 3, 28, 12), utc(2026, 3, 29, 1)),  # gap → gap end
    ("30 2 * * *", "Europe/Berlin", utc(2026, 3, 29, 1), utc(2026, 3, 30, 0, 30)),
    ("30 2 * * *", "Europe/Berlin", utc(2026, 10, 24, 12), utc(2026, 10, 25, 0, 30)),  # first
    (
        "30 2 * * *",
        "Europe/Berlin",
        utc(2026, 10, 25, 0, 30),
        utc(2026, 10, 26, 1, 30),
    ),  # not twice
    ("0 2 * * *", "Europe/Berlin", utc(2026, 3, 28, 12), utc(2026, 3, 29, 1)),
    ("0 3 * * *", "Europe/Berlin", utc(2026, 3, 28, 12), utc(2026, 3, 29, 1)),
    ("0 2,3 * * *", "Europe/Berlin", utc(2026, 3, 29, 0), utc(2026, 3, 29, 1)),
    ("0 2,3 * * *", "Europe/Berlin", utc(2026, 3, 29, 1), utc(2026, 3, 30, 0)),  # merged with 03:00
    ("*/5 * * * *", "Europe/Berlin", utc(2026, 3, 29, 0, 55), utc(2026, 3, 29, 1)),
    ("*/5 * * * *", "Europe/Berlin", utc(2026, 10, 25, 0, 55), utc(2026, 10, 25, 1)),
    ("30 * * * *", "Europe/Berlin", utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1, 30)),  # twice
    (
        "*/20 2 * * *",
        "Europe/Berlin",
        utc(2026, 3, 29, 0, 40),
        utc(2026, 3, 30, 0),
    ),  # wildcard: none
    # America/New_York 2026: spring 8 Mar 07:00Z, autumn 1 Nov 06:00Z (02:00 → 01:00)
    ("30 2 * * *", "America/New_York", utc(2026, 3, 8), utc(2026, 3, 8, 7)),
    ("30 1 * * *", "America/New_York", utc(2026, 10, 31, 12), utc(2026, 11, 1, 5, 30)),
    ("30 1 * * *", "America/New_York", utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)),
    # Australia/Lord_Howe 2026, 30-minute shifts: autumn 4 Apr 15:00Z (02:00 → 01:30),
    # spring 3 Oct 15:30Z (02:00 → 02:30)
    ("45 1 * * *", "Australia/Lord_Howe", utc(2026, 4, 4), utc(2026, 4, 4, 14, 45)),
    ("45 1 * * *", "Australia/Lord_Howe", utc(2026, 4, 4, 14, 45), utc(2026, 4, 5, 15, 15)),
    ("15 2 * * *", "Australia/Lord_Howe", utc(2026, 10, 3), utc(2026, 10, 3, 15, 30)),
    ("*/5 * * * *", "Australia/Lord_Howe", utc(2026, 4, 4, 14, 55), utc(2026, 4, 4, 15)),
    ("0 * * * *", "Australia/Lord_Howe", utc(2026, 4, 4, 14), utc(2026, 4, 4, 15, 30)),
    # America/Santiago 2026, at midnight: spring 6 Sep 04:00Z (00:00 → 01:00),
    # autumn 5 Apr 03:00Z (24:00 → 23:00)
    ("0 0 * * *", "America/Santiago", utc(2026, 9, 5, 12), utc(2026, 9, 6, 4)),
    ("30 23 * * *", "America/Santiago", utc(2026, 4, 4, 12), utc(2026, 4, 5, 2, 30)),
    ("30 23 * * *", "America/Santiago", utc(2026, 4, 5, 2, 30), utc(2026, 4, 6, 3, 30)),
    # leap days, month ends, steps, seconds first
    ("0 0 29 2 *", "UTC", utc(2025, 1, 1), utc(2028, 2, 29)),
    ("0 0 29 2 *", "Europe/Berlin", utc(2025, 1, 1), utc(2028, 2, 28, 23)),
    ("0 0 29 2 *", "UTC", utc(2096, 3, 1), utc(2104, 2, 29)),  # 2100 is no leap year
    ("0 0 31 * *", "UTC", utc(2026, 4, 1), utc(2026, 5, 31)),
    ("0 0 L * *", "UTC", utc(2026, 2, 1), utc(2026, 2, 28)),
    ("0 0 L * *", "UTC", utc(2028, 2, 1), utc(2028, 2, 29)),
    ("*/7 * * * *", "UTC", utc(2026, 1, 1, 10, 56), utc(2026, 1, 1, 11)),  # step restarts hourly
    ("30 0 9 * * *", "UTC", utc(2026, 1, 1, 9), utc(2026, 1, 1, 9, 0, 30)),  # seconds first
    ("*/15 * * * * *", "Europe/Berlin", utc(2026, 10, 25, 0, 59, 45), utc(2026, 10, 25, 1)),
    ("0 0 9 * * 1", "UTC", utc(2026, 1, 1), utc(2026, 1, 5, 9)),
]


@pytest.mark.parametrize(("expr", "tz", "after", "expected"), NEXT)
def test_next_fire(expr, tz, after, expected):
    assert next_fire(spec(expr, tz), after) == expected


@pytest.mark.parametrize(("expr", "tz", "after", "expected"), NEXT)
def test_latest_at_or_before_mirrors_next_fire(expr, tz, after, expected):
    s = spec(expr, tz)
    assert latest_at_or_before(s, expected) == expected
    before = latest_at_or_before(s, expected - S)
    assert before is None or before <= after
    assert next_fire(s, before) == expected


def test_next_fire_is_strictly_after_even_within_a_second():
    s = spec("0 9 * * *")
    assert next_fire(s, utc(2026, 1, 1, 9)) == utc(2026, 1, 2, 9)
    assert next_fire(s, utc(2026, 1, 1, 8, 59, 59, 999999)) == utc(2026, 1, 1, 9)
    assert next_fire(s, datetime(2026, 1, 1, 10, tzinfo=timezone(timedelta(hours=1)))) == utc(
        2026, 1, 2, 9
    )


def test_naive_instants_are_refused():
    with pytest.raises(cron.NaiveInstant):
        next_fire(spec("0 9 * * *"), datetime(2026, 1, 1))
    with pytest.raises(cron.NaiveInstant):
        latest_at_or_before(spec("0 9 * * *"), datetime(2026, 1, 1))


def test_no_fire_past_the_last_representable_year():
    assert next_fire(spec("0 0 * * *"), utc(9999, 12, 31, 1)) is None


def test_an_expression_that_never_matches_has_no_fire():
    """Records refuse it (test_record_bounds.py); the math still answers a hand-built spec."""
    s = spec("0 0 30 2 *")
    assert next_fire(s, utc(2026, 1, 1)) is None
    assert latest_at_or_before(s, utc(2026, 1, 1)) is None


@pytest.mark.parametrize(
    ("expr", "minutes"),
    [
        # croniter 7 changed `{max}/{step}` and `{start}/{step}`: these pin what 7.0 means
        ("*/7 * * * *", [0, 7, 14, 21, 28, 35, 42, 49, 56]),
        ("50/7 * * * *", [50, 57]),
        ("59/15 * * * *", [59]),  # before 7.0: 0, 15, 30, 45
        ("59/1 * * * *", [59]),
    ],
)
def test_step_expressions_golden(expr, minutes):
    t, seen = utc(2026, 1, 1, 10, 0) - S, []
    while (t := next_fire(spec(expr), t)) < utc(2026, 1, 1, 11):
        seen.append(t.minute)
    assert seen == minutes


def test_dow_max_step_one_means_saturday_only_golden():
    fires = upcoming(spec("0 0 * * 6/1"), utc(2026, 3, 1), 3)  # before 7.0: every day
    assert [f.at for f in fires] == [utc(2026, 3, 7), utc(2026, 3, 14), utc(2026, 3, 21)]


@pytest.mark.parametrize(
    ("expr", "wildcard"),
    [
        ("*/5 * * * *", True),
        ("30 * * * *", True),  # hour wildcard
        ("* 2 * * *", True),
        ("*/5,7 2 * * *", True),
        ("30 2 * * *", False),
        ("0 9-17 * * *", False),
        (
            "0-59 2 * * *",
            False,
        ),  # a written range is not a wildcard (Debian: the field starts with *)
        ("0 30 2 * * *", False),
        ("*/10 30 2 * * *", True),  # seconds wildcard, six fields
        ("0 0 2 * * *", False),
        ("30 2 * * 1-5", False),  # day fields never count
    ],
)
def test_wildcard_classification(expr, wildcard):
    assert cron.is_wildcard(expr) is wildcard


def test_six_field_seconds_wildcard_follows_real_time_in_the_gap():
    s = spec("*/20 30 2 * * *", "Europe/Berlin")
    fires = upcoming(s, utc(2026, 3, 29), 1)
    assert fires[0].at == utc(2026, 3, 30, 0, 30)  # 29 Mar 02:30 never exists


def test_six_field_fixed_job_in_the_gap_fires_once_at_its_end():
    s = spec("0,30 30 2 * * *", "Europe/Berlin")
    fires = [f.at for f in upcoming(s, utc(2026, 3, 29), 3)]
    assert fires == [utc(2026, 3, 29, 1), utc(2026, 3, 30, 0, 30), utc(2026, 3, 30, 0, 30, 30)]


def test_upcoming_marks_dst_notes():
    s = spec("30 2 * * *", "Europe/Berlin")
    spring = upcoming(s, utc(2026, 3, 28), 2)
    autumn = upcoming(s, utc(2026, 10, 24), 3)
    assert [f.dst for f in spring] == [None, DstNote.SHIFTED]
    assert [f.dst for f in autumn] == [None, DstNote.MERGED, None]
    assert spring[1].local.isoformat() == "2026-03-29T03:00:00+02:00"
    assert [
        f.dst for f in upcoming(spec("*/30 * * * *", "Europe/Berlin"), utc(2026, 10, 25), 6)
    ] == [None] * 6


def test_upcoming_includes_a_fire_at_start():
    assert upcoming(spec("0 9 * * *"), utc(2026, 1, 1, 9), 1)[0].at == utc(2026, 1, 1, 9)


# --- catch-up and grace ------------------------------------------------------------------

NONE = spec("0 9 * * *")
LATEST = spec("0 9 * * *", catchup=Catchup.LATEST)
SLOT = utc(2026, 1, 10, 9)


@pytest.mark.parametrize(
    ("s", "expected"),
    [
        (NONE, 30),
        (spec("0 9 * * *", grace_seconds=5), 5),
        (spec("0 9 * * *", grace_seconds=600), 30),  # none never fires a slot over 30 s late
        (spec("0 9 * * *", grace_seconds=0), 1),
        (LATEST, 3600),
        (spec("0 9 * * *", catchup=Catchup.LATEST, grace_seconds=86400), 86400),
    ],
)
def test_tolerance_defaults(s, expected):
    assert tolerance(s) == timedelta(seconds=expected)


@pytest.mark.parametrize(
    ("s", "cursor", "now", "expected"),
    [
        (NONE, SLOT - S, SLOT, SLOT),  # on time
        (NONE, SLOT - 5 * S, SLOT + 29 * S, SLOT),  # tick a little late
        (NONE, SLOT - 5 * S, SLOT + 31 * S, None),  # missed by a suspend
        (NONE, SLOT, SLOT + 10 * S, None),  # already handled
        (NONE, SLOT - S, SLOT - S, None),  # not yet
        (NONE, utc(2025, 1, 1), SLOT + 10 * S, SLOT),  # one slot, never a burst
        (LATEST, SLOT - timedelta(hours=5), SLOT + timedelta(minutes=50), SLOT),
        (LATEST, SLOT - timedelta(hours=5), SLOT + timedelta(hours=2), None),
        (LATEST, utc(2025, 1, 1), SLOT + timedelta(minutes=59), SLOT),  # down a year
        (LATEST, utc(2025, 1, 1), utc(2026, 1, 9, 23), None),  # latest slot past its grace
    ],
)
def test_due(s, cursor, now, expected):
    assert due(s, cursor, now) == expected


def test_due_after_a_year_down_picks_the_latest_slot_of_a_per_second_job():
    s = spec("* * * * * *", catchup=Catchup.LATEST)
    now = utc(2027, 6, 1, 12, 0, 0, 500000)
    assert due(s, utc(2026, 6, 1), now) == utc(2027, 6, 1, 12)


def test_arm_cursor():
    now = utc(2026, 1, 10, 9, 30)
    assert arm_cursor(NONE, now) == now
    assert arm_cursor(LATEST, now) == now - timedelta(hours=1)
    assert due(LATEST, arm_cursor(LATEST, now), now) == SLOT  # missed while down: fires once
    assert due(NONE, arm_cursor(NONE, now), now) is None  # live-only: never


def test_a_ticker_fires_each_slot_exactly_once():
    s, cursor, fired = spec("*/5 * * * *", "Europe/Berlin"), utc(2026, 10, 25, 0), []
    now = cursor
    while now < utc(2026, 10, 25, 2):
        now += timedelta(seconds=7)
        if (slot := due(s, cursor, now)) is not None:
            fired.append(slot)
        cursor = now
    assert len(fired) == len(set(fired)) == 24


# --- once ------------------------------------------------------------------------------

AT = datetime(2026, 12, 1, 9, tzinfo=timezone(timedelta(hours=1)))
ONCE = OnceSpec(at=AT)


@pytest.mark.parametrize(
    ("s", "now", "fired", "expected"),
    [
        (ONCE, AT - S, None, OnceState.WAIT),
        (ONCE, AT, None, OnceState.FIRE),
        (ONCE, AT + timedelta(seconds=3600), None, OnceState.FIRE),
        (ONCE, AT + timedelta(seconds=3601), None, OnceState.MISSED),
        (OnceSpec(at=AT, grace_seconds=60), AT + timedelta(seconds=61), None, OnceState.MISSED),
        (ONCE, AT + S, FireKey("2026-12-01T08:00:00.000Z"), OnceState.DONE),
        (ONCE, AT + timedelta(days=9), FireKey("2026-12-01T08:00:00.000Z"), OnceState.DONE),
        (ONCE, AT + S, FireKey("2026-11-30T08:00:00.000Z"), OnceState.FIRE),  # `at` moved
        (OnceSpec(at=AT.timestamp()), AT, None, OnceState.FIRE),  # unix seconds
    ],
)
def test_once_due(s, now, fired, expected):
    assert once_due(s, now, fired) == expected


def test_once_next_fire():
    assert next_fire(ONCE, AT - S) == utc(2026, 12, 1, 8)
    assert next_fire(ONCE, AT) is None


# --- fire keys -------------------------------------------------------------------------


def test_fire_keys():
    assert fire_key_cron(AT) == "2026-12-01T08:00:00.000Z"
    assert fire_key_cron(utc(2026, 1, 1, 0, 0, 5)) == "2026-01-01T00:00:05.000Z"
    assert fire_key_once(ONCE) == "2026-12-01T08:00:00.000Z"
    assert fire_key_once(OnceSpec(at=1764576000.0)) == "2025-12-01T08:00:00.000Z"
    assert fire_key_once(OnceSpec(at=AT + timedelta(microseconds=250000))) == (
        "2026-12-01T08:00:00.250Z"
    )
    assert fire_key_event("msg_01") == "msg_01"
    assert fire_key_cron(next_fire(spec("30 2 * * *", "Europe/Berlin"), utc(2026, 3, 28, 12))) == (
        "2026-03-29T01:00:00.000Z"
    )
