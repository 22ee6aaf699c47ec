"""When the health pass looks at a record again by the clock alone: `healthstamps.turn`, the
`Rechecks` that hold those instants, and the `Touched` ids the parts hand it. Pure, no server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from core.clock import iso
from runtime.health.rechecks import Rechecks, ceil_second
from runtime.health.touched import Touched
from runtime.health.verdicts import turn
from triggers import health
from triggers.records import Loaded, TriggerId, load

START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
US = timedelta(microseconds=1)
CRON = {"id": "t", "kind": "cron", "program": "tick@v1", "spec": {"expr": "* * * * *"}}


def record(**fields: object) -> Loaded:
    return load({**CRON, **fields})


def once(at: str, grace: float = 3600) -> Loaded:
    return record(kind="once", spec={"at": at, "graceSeconds": grace})


INPUTS = health.HealthInputs(now=START, programs=frozenset())


@pytest.mark.parametrize(
    ("rec", "want", "breaker", "expected"),
    [
        # a stamped fire: looked at when it comes due, then when it turns overdue
        (
            record(nextFireAt=iso(START + timedelta(minutes=3))),
            None,
            None,
            START + timedelta(minutes=3),
        ),
        (
            record(nextFireAt=iso(START - timedelta(seconds=30))),
            None,
            None,
            START + timedelta(seconds=30) + US,
        ),
        (record(nextFireAt=iso(START - timedelta(minutes=2))), None, None, None),
        # an unstamped armed fire: when it comes within the horizon, to the hour
        (record(), START + timedelta(days=40), None, START + timedelta(days=39)),
        (record(), START + timedelta(hours=24, minutes=30), None, START + timedelta(hours=1)),
        (record(), START + timedelta(hours=3), None, None),  # within already: written now
        (record(), None, None, None),  # not armed here: nothing turns by the clock
        # a once: when it passes its grace unfired; never near the end of the calendar
        (once(iso(START - timedelta(minutes=10))), None, None, START + timedelta(minutes=50) + US),
        (once("9999-12-31T23:59:59Z", grace=7 * 86400), None, None, None),
        # an open breaker: when it closes
        (record(), None, START + timedelta(minutes=5), START + timedelta(minutes=5)),
        (load({**CRON, "spec": {"expr": "nope"}}), START + timedelta(days=2), None, None),
    ],
)
def test_turn(
    rec: Loaded, want: datetime | None, breaker: datetime | None, expected: datetime | None
) -> None:
    inputs = INPUTS
    if breaker is not None:
        inputs = health.HealthInputs(
            now=START, programs=frozenset(), breaker_until={TriggerId("t"): breaker}
        )
    assert turn(rec, want, inputs) == expected


@pytest.mark.parametrize(
    ("at", "expected"),
    [
        (START, START),
        (START + US, START + timedelta(seconds=1)),
        (START + timedelta(seconds=2, microseconds=999_999), START + timedelta(seconds=3)),
        (datetime.max.replace(tzinfo=UTC), datetime.max.replace(microsecond=0, tzinfo=UTC)),
    ],
)
def test_ceil_second(at: datetime, expected: datetime) -> None:
    assert ceil_second(at) == expected


def test_turns_group_ids_by_the_second_and_give_them_back_when_due() -> None:
    turns = Rechecks()
    a, b, c = TriggerId("a"), TriggerId("b"), TriggerId("c")
    turns.push(START + timedelta(milliseconds=200), a)
    turns.push(START + timedelta(milliseconds=700), b)  # the same second as a
    turns.push(START + timedelta(seconds=5), c)
    turns.push(START + timedelta(seconds=5), c)  # judged twice: two mentions, one look
    assert turns.held == 4 and turns.earliest() == START + timedelta(seconds=1)
    assert turns.pop_due(START + timedelta(milliseconds=999)) == set()
    assert turns.pop_due(START + timedelta(seconds=1)) == {a, b}
    assert turns.held == 2 and turns.earliest() == START + timedelta(seconds=5)
    assert turns.pop_due(START + timedelta(hours=1)) == {c}
    assert turns.held == 0 and turns.earliest() is None
    turns.push(START, a)
    turns.clear()
    assert turns.held == 0 and turns.pop_due(START) == set()


def test_touched_hands_over_what_was_added_once() -> None:
    touched = Touched()
    touched.add(TriggerId("a"))
    touched.update([TriggerId("b"), TriggerId("a")])
    assert len(touched) == 2
    assert touched.take() == {"a", "b"}
    assert touched.take() == set() and len(touched) == 0
