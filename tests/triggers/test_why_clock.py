"""`why` names the clock a device went by: the offset its heartbeats reported (pure)."""

from __future__ import annotations

import msgspec
import pytest
from test_why import OK, UP, ask, at

from triggers import why, whyclock
from triggers.facts import Offset, Refused, Window
from triggers.whywords import Reason, Verdict


def checks(answer: why.Explanation) -> dict[str, str]:
    return {c.name: c.detail for c in answer.checks}


@pytest.mark.parametrize(
    ("ms", "words"),
    [
        (0.0, "box's clock was in step with the space's"),
        (0.4, "box's clock was in step with the space's"),
        (40.0, "box's clock was 40 ms behind the space's"),
        (-1250.0, "box's clock was 1.2 s ahead of the space's"),
        (2000.0, "box's clock was 2.0 s behind the space's"),  # at the line: no warning yet
        (
            -3400.0,
            "box's clock was 3.4 s ahead of the space's, past the 2 s warning "
            "(it fires by the space's clock)",
        ),
    ],
)
def test_the_offset_in_words(ms: float, words: str) -> None:
    assert whyclock.words("box", ms) == words


def test_a_fired_slot_names_the_offset_reported_by_its_claim_not_a_later_one() -> None:
    offsets = [
        Offset(peer="box", at=at(-600), ms=-1250.0),
        Offset(peer="box", at=at(0.5), ms=40.0),  # after the claim (at 0.01)
        Offset(peer="laptop", at=at(-5), ms=-9000.0),  # another device's clock
    ]
    got = ask(claim=OK, offsets=offsets)
    assert got.reason is Reason.FIRED
    assert checks(got)["up"] == "the claim says so; box's clock was 1.2 s ahead of the space's"
    assert "clock" not in got.detail  # within the warning: evidence in the check, not the cause


def test_an_offset_of_an_earlier_window_is_not_this_one_s() -> None:
    before = Window(peer="box", began=at(-7200), last_seen=at(-3700))
    now = msgspec.structs.replace(UP, began=at(-60))
    stale = [Offset(peer="box", at=at(-7000), ms=-5000.0)]  # the device restarted since
    got = ask(claim=OK, windows=[before, now], offsets=stale)
    assert checks(got)["up"] == "the claim says so"


def test_a_missed_slot_names_a_skewed_clock_of_the_device_that_was_up() -> None:
    skew = [Offset(peer="box", at=at(-300), ms=3400.0)]
    got = ask(offsets=skew)
    assert (got.verdict, got.reason) == (Verdict.NOT_FIRED, Reason.HOLDER_ASLEEP)
    assert got.detail.endswith(
        "made no claim: its fire path did not reach the slot in time; box's clock was 3.4 s "
        "behind the space's, past the 2 s warning (it fires by the space's clock)"
    )
    assert checks(got)["up"] == (
        "box was up and awake at 2026-12-01T09:00:00.000Z; box's clock was 3.4 s behind the "
        "space's, past the 2 s warning (it fires by the space's clock)"
    )
    calm = ask(offsets=[Offset(peer="box", at=at(-300), ms=120.0)])
    assert calm.reason is Reason.HOLDER_ASLEEP and "clock" not in calm.detail
    assert checks(calm)["up"].endswith("; box's clock was 120 ms behind the space's")


def test_a_claim_refused_as_ahead_of_the_space_s_clock_names_the_device_s_clock() -> None:
    refused = Refused(
        at=at(-9),
        peer="box",
        term=1,
        code="ahead_of_clock",
        detail="slot 2026-12-01T09:00:00Z is 9.0 s ahead of the space's clock",
    )
    got = ask(refusals=[refused], offsets=[Offset(peer="box", at=at(-60), ms=-9000.0)])
    assert (got.verdict, got.reason) == (Verdict.NOT_FIRED, Reason.HOLDER_ASLEEP)
    assert "9.0 s ahead of the space's clock" in got.detail
    assert "box's clock was 9.0 s ahead of the space's, past the 2 s warning" in got.detail
    again = ask(refusals=[refused], claim=OK)  # it claimed again when the slot came
    assert again.reason is Reason.FIRED


def test_a_late_run_names_the_skew_of_the_device_that_ran_it() -> None:
    late = msgspec.structs.replace(OK, claimed_at=at(6), started_at=at(6.1), late_ms=6100.0)
    skew = [Offset(peer="box", at=at(-30), ms=-6000.0)]
    got = ask(claim=late, offsets=skew)
    assert got.reason is Reason.FIRED_LATE
    assert "6100 ms after its slot; box's clock was 6.0 s ahead of the space's" in got.detail
    on_time = ask(claim=OK, offsets=skew)  # a skew its offset corrected: fired, not blamed
    assert on_time.reason is Reason.FIRED and "clock" not in on_time.detail
