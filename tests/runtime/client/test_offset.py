"""The space's clock as a device reads it: the offset from the midpoint of each round trip."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from core.clock import FakeClock
from core.vocab import iso
from runtime.client.offset import ClockOffset, SpaceTime

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def answer(offset: ClockOffset, clock: FakeClock, skew: float, up: float, down: float) -> None:
    """One round trip: `up` seconds to the space (whose clock is `skew` ahead), `down` back."""
    began = offset.begin()
    clock.advance(up)
    server = clock.wall() + timedelta(seconds=skew)
    clock.advance(down)
    offset.observe(began, iso(server))


def test_the_offset_is_read_at_the_midpoint_of_the_round_trip() -> None:
    clock = FakeClock(T0)
    offset = ClockOffset(clock)
    answer(offset, clock, 30.0, 1.5, 1.5)  # 3 s one way each: the midpoint is exact
    assert offset.seconds == pytest.approx(30.0, abs=0.001)
    assert offset.rtt == pytest.approx(3.0)
    assert SpaceTime(offset).wall() - clock.wall() == timedelta(seconds=offset.seconds)


def test_the_offset_is_known_once_an_answer_measured_it() -> None:
    clock = FakeClock(T0)
    offset = ClockOffset(clock)
    assert offset.known() is None  # a heartbeat before any answer says nothing of it
    answer(offset, clock, 0.0, 0.001, 0.001)
    assert offset.known() == 0.0  # measured: in step
    answer(offset, clock, -3.0, 0.001, 0.001)
    assert offset.known() == pytest.approx(-3.0, abs=0.01)


def test_the_shortest_round_trip_wins_so_a_lopsided_slow_answer_moves_it_least() -> None:
    clock = FakeClock(T0)
    offset = ClockOffset(clock)
    answer(offset, clock, -10.0, 0.01, 0.01)
    answer(offset, clock, -10.0, 0.1, 1.9)  # slow and lopsided: its midpoint is off by 0.9 s
    assert offset.seconds == pytest.approx(-10.0, abs=0.001)


def test_a_step_drops_what_was_measured_before_and_is_told() -> None:
    clock = FakeClock(T0)
    steps: list[float] = []
    offset = ClockOffset(clock, on_step=steps.append)
    answer(offset, clock, 0.0, 0.001, 0.001)
    assert offset.seconds == 0.0 and steps == []
    answer(offset, clock, -120.0, 0.05, 0.05)  # this device's clock stepped 120 s ahead
    assert offset.seconds == pytest.approx(-120.0, abs=0.001)
    assert steps == [pytest.approx(-120.0, abs=0.001)]


def test_an_offset_below_the_wires_millisecond_is_none() -> None:
    clock = FakeClock(T0 + timedelta(microseconds=400))
    offset = ClockOffset(clock)
    answer(offset, clock, 0.0, 0.0, 0.0)  # the server's time is written in milliseconds
    assert offset.seconds == 0.0


def test_past_two_seconds_it_warns_once_and_says_so_in_its_status(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock(T0)
    offset = ClockOffset(clock)
    with caplog.at_level(logging.WARNING, "baton.device"):
        answer(offset, clock, 1.5, 0.0, 0.0)
        assert offset.status().warning is False and not caplog.records
        for _ in range(3):
            answer(offset, clock, -2.5, 0.0, 0.0)
    assert [r.getMessage() for r in caplog.records] == [
        "clock: this device is +2.5 s off the space's clock (fires go by the space's)"
    ]
    assert msgspec.to_builtins(offset.status()) == {
        "offsetMs": -2500.0,
        "rttMs": 0.0,
        "warning": True,
    }


def test_an_answer_without_a_server_time_changes_nothing() -> None:
    clock = FakeClock(T0)
    offset = ClockOffset(clock)
    offset.observe(offset.begin(), None)
    offset.observe(offset.begin(), "not a time")
    assert (offset.seconds, offset.samples) == (0.0, 0)


def test_a_right_clock_behind_a_busy_loop_gets_no_offset() -> None:
    """A request sent 2 s late (the loop was busy) looks like a space 1 s ahead: within
    its round trip, so no offset, and nothing fires early."""
    clock = FakeClock(T0)
    offset = ClockOffset(clock)
    answer(offset, clock, 0.0, 2.0, 0.0)
    assert offset.seconds == 0.0
