"""The bridge rule's pure part: from when the space was covered by a device that is still up."""

from datetime import UTC, datetime, timedelta

import pytest

from core.peerwire import DeviceOut
from runtime.election.takeover import bridge_start, covered_since, spans

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
S = timedelta(seconds=1)
W = timedelta(seconds=120)


def at(seconds: float) -> datetime:
    return T0 + seconds * S


@pytest.mark.parametrize(
    ("spans_", "expected"),
    [
        ([(at(-50), at(0))], at(-50)),
        ([(at(-50), at(0)), (at(-90), at(-60))], at(-50)),  # a gap: what is before it is not
        ([(at(-50), at(0)), (at(-90), at(-50))], at(-90)),  # touching: one stretch
        ([(at(-10), at(0)), (at(-30), at(-5)), (at(-60), at(-20))], at(-60)),  # a chain
        ([(at(-10), at(0)), (at(-60), at(-20)), (at(-30), at(-5))], at(-60)),  # in any order
        ([(at(-50), at(-5))], at(0)),  # nobody covers now: nothing
        ([], at(0)),
    ],
)
def test_covered_since_walks_back_through_touching_spans(spans_, expected):
    assert covered_since(spans_, at(0)) == expected


def device(peer: str, up: float, seen: float, live: bool = True, **kw: bool) -> DeviceOut:
    return DeviceOut(peer=peer, upSince=at(up), lastSeen=at(seen), live=live, **kw)


def test_only_devices_that_beat_again_are_up_until_now():
    first = [device("me", -3, -1), device("standby", -300, -4), device("dead", -600, -3)]
    last = [device("me", -3, 1), device("standby", -300, 1), device("dead", -600, -3)]
    got = spans(first, last, "me", at(2))
    assert got == [(at(-3), at(2)), (at(-300), at(2)), (at(-600), at(-3))]


@pytest.mark.parametrize(
    ("name", "first", "last", "expected"),
    [
        (
            "a restarted holder bridges over its own downtime while a standby was up",
            [device("me", -2, -2), device("b", -60, -3)],
            [device("me", -2, 0), device("b", -60, 1)],
            at(-60),
        ),
        (
            "everybody down: a device killed a moment ago does not reopen the downtime",
            [device("me", -2, -2), device("b", -60, -6)],  # still within the live window
            [device("me", -2, 0), device("b", -60, -6)],
            at(-2),
        ),
        (
            "a clean stop ends a device's span at its sign-off",
            [device("me", -1, -1), device("old", -300, -4, live=False, stopped=True)],
            [device("me", -1, 0), device("old", -300, -4, live=False, stopped=True)],
            at(-1),
        ),
        (
            "a clean hand-over: the stopped holder's span touches the standby's",
            [device("me", -100, -1), device("old", -300, -1, live=False, stopped=True)],
            [device("me", -100, 0), device("old", -300, -1, live=False, stopped=True)],
            at(-120),  # never more than W back
        ),
    ],
)
def test_bridge_start(name, first, last, expected):
    assert bridge_start(spans(first, last, "me", at(0)), at(0), W) == expected, name
