"""The election decision, table-tested on a monotonic timeline (seconds)."""

from math import inf

import pytest

from runtime.election.decision import (
    Act,
    Config,
    LeaseView,
    State,
    decide,
    may_fire,
    observe,
    on_lost,
    on_renewed,
    on_slept,
    renew_at,
)

CFG = Config(lease_s=15, renew_s=5, margin_s=5, poll_s=2, settle_s=10)


def view(active, term, expires_at, want=None):
    return LeaseView(active=active, term=term, expires_at_mono=expires_at, want=want)


def holder(sent=100.0, term=3, priority=0):
    return on_renewed(State(me="a", priority=priority), CFG, term=term, sent=sent)


def test_follower_acquires_a_free_lease_with_the_current_term():
    step = decide(State(me="a"), view(None, 7, 0), CFG, now=50, priorities={})
    assert (step.act, step.term) == (Act.ACQUIRE, 7)


def test_follower_acquires_only_once_the_space_says_the_lease_lapsed():
    live = view("b", 4, expires_at=115)
    assert decide(State(me="a"), live, CFG, now=110, priorities={}).act == Act.WAIT
    assert decide(State(me="a"), live, CFG, now=115, priorities={}).act == Act.ACQUIRE


def test_follower_polls_no_later_than_the_expiry():
    step = decide(State(me="a"), view("b", 4, expires_at=111), CFG, now=110, priorities={})
    assert (step.act, step.at) == (Act.WAIT, 111)
    step = decide(State(me="a"), view("b", 4, expires_at=130), CFG, now=110, priorities={})
    assert (step.act, step.at) == (Act.WAIT, 112)


def test_holder_acts_until_lease_minus_margin_after_it_sent_the_renewal():
    s = holder(sent=100)
    assert may_fire(s, 100) and may_fire(s, 109.99)
    assert not may_fire(s, 110)


def test_holder_renews_every_renew_interval_and_keeps_trying_when_renewals_fail():
    s = holder(sent=100)
    assert decide(s, view("a", 3, 115), CFG, now=103, priorities={}).act == Act.WAIT
    assert decide(s, view("a", 3, 115), CFG, now=105, priorities={}).act == Act.RENEW
    # renewals failing: past the margin it may not fire, and it still renews
    assert not may_fire(s, 111)
    assert decide(s, view("a", 3, 115), CFG, now=111, priorities={}).act == Act.RENEW


@pytest.mark.parametrize(
    ("seen", "holding"),
    [
        (view("a", 3, 0), True),
        (view("b", 4, 0), False),
        (view("a", 4, 0), False),
        (view(None, 3, 0), False),
    ],
)
def test_seeing_another_holder_or_term_ends_the_tenure_at_once(seen, holding):
    s = observe(holder(), seen)
    assert s.holding is holding
    assert may_fire(s, 101) is holding


def test_conflict_and_sleep_stop_firing_until_a_renewal():
    assert not may_fire(on_lost(holder()), 101)
    slept = on_slept(holder(), now=101)
    assert slept.holding and not may_fire(slept, 101)
    assert decide(slept, view("a", 3, 115), CFG, now=101, priorities={}).act == Act.RENEW
    assert may_fire(on_renewed(slept, CFG, term=3, sent=102), 102)


def test_incumbent_is_not_preempted_by_an_equal_or_lower_priority_device():
    s = State(me="c", priority=0, live_since=0)
    assert decide(s, view("b", 4, 200), CFG, now=100, priorities={"b": 0}).act == Act.WAIT
    assert decide(s, view("b", 4, 200), CFG, now=100, priorities={"b": 5}).act == Act.WAIT


def test_higher_priority_device_asks_once_settled_and_holder_hands_over():
    box = State(me="box", priority=10, live_since=95)
    lease = view("a", 3, 200)
    assert decide(box, lease, CFG, now=100, priorities={"a": 0}).act == Act.WAIT
    assert decide(box, lease, CFG, now=105, priorities={"a": 0}).act == Act.WANT
    asked = view("a", 3, 200, want="box")
    assert decide(box, asked, CFG, now=106, priorities={"a": 0}).act == Act.WAIT
    step = decide(holder(sent=100), asked, CFG, now=105, priorities={"box": 10})
    assert (step.act, step.to, step.term) == (Act.HANDOVER, "box", 3)


def test_holder_ignores_a_want_from_a_device_it_does_not_see_as_higher():
    asked = view("a", 3, 200, want="phone")
    step = decide(holder(sent=100, priority=5), asked, CFG, now=105, priorities={"phone": 1})
    assert step.act == Act.RENEW


@pytest.mark.parametrize(
    ("acts_until", "rtt", "last_sent", "expected"),
    [
        (110.0, 0.01, -inf, 109.4875),  # a fast space: just before the deadline (the loop's first)
        (110.0, 6.0, -inf, 102.0),  # 3 s each way: early enough for the answer to come back
        (110.0, 6.0, 103.0, 104.0),  # past that point: one more a second, several in flight
        (-inf, 0.01, 50.0, 51.0),  # must renew now (a sleep), yet never more than once a second
    ],
)
def test_the_renewal_task_renews_in_time_for_its_answer(
    acts_until: float, rtt: float, last_sent: float, expected: float
) -> None:
    state = State(me="a", holding=True, term=3, acts_until=acts_until)
    assert renew_at(state, rtt, last_sent) == pytest.approx(expected)


def test_a_late_renewal_never_moves_the_acting_deadline_back() -> None:
    state = on_renewed(State(me="a"), CFG, 3, sent=100.0)
    assert on_renewed(state, CFG, 3, sent=98.0).acts_until == state.acts_until
