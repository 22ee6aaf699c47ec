"""`why` for the trigger policies (SPEC "Trigger policies"), from facts built by hand:
snoozed, outside the window, maxRuns reached, budget, quiet chat, a retry's key, a run
superseded under `restart`, and jitter (a slot due at slot + J is not late)."""

from __future__ import annotations

from datetime import timedelta

import msgspec
from test_why import CREATED, OK, SLOT, TID, ask, at, facts, reason, record

from triggers import policies, why
from triggers.facts import Claim, Revision
from triggers.whywords import Reason, Verdict


def revised(**fields: object) -> list[Revision]:
    edit = Revision(
        rev=2,
        seq=2,
        at=at(-600),
        op="edit",
        actor="admin",
        note="off for lunch",
        changes={k: [None, v] for k, v in fields.items()},
        record=record(**fields),
    )
    return [CREATED, edit]


def test_a_slot_in_a_snooze_is_paused_with_who_snoozed_it_and_until_when() -> None:
    until = at(1800).isoformat()
    got = ask(revisions=revised(pausedUntil=until, activeSince=until))
    assert reason(got) == (Verdict.NOT_FIRED, Reason.PAUSED)
    assert "snoozed until 2026-12-01T09:30:00.000Z" in got.detail
    assert 'by admin (rev 2): "off for lunch"' in got.detail


def test_a_slot_outside_the_window_before_or_after_it() -> None:
    before = ask(revisions=revised(window={"startAt": at(60).isoformat()}))
    assert reason(before) == (Verdict.NOT_FIRED, Reason.OUTSIDE_WINDOW)
    assert "starts at 2026-12-01T09:01:00.000Z" in before.detail
    after = ask(revisions=revised(window={"endAt": at(-60).isoformat()}))
    assert after.reason is Reason.OUTSIDE_WINDOW and "ended at" in after.detail
    inside = ask(revisions=revised(window={"endAt": at(60).isoformat()}), claim=OK)
    assert inside.reason is Reason.FIRED


def test_a_slot_after_max_runs_were_reached_is_outside_and_says_when() -> None:
    got = ask(revisions=revised(maxRuns=3), done_at=at(-3600 + 5))
    assert reason(got) == (Verdict.NOT_FIRED, Reason.OUTSIDE_WINDOW)
    assert "maxRuns 3 reached" in got.detail and "08:00:05.000Z" in got.detail
    assert ask(revisions=revised(maxRuns=3), claim=OK).reason is Reason.FIRED  # not yet done


def skipped(why_: str, status: str = "skipped") -> Claim:
    return Claim(peer="box", term=1, claimed_at=at(0.01), run_id="r1", status=status, reason=why_)


def test_budget_quiet_chat_and_superseded_name_the_policy() -> None:
    budget = {"runs": 3, "perSeconds": 60}
    got = ask(revisions=revised(budget=budget), claim=skipped("budget"))
    assert reason(got) == (Verdict.NOT_FIRED, Reason.BUDGET)
    assert "budget of 3 runs per 60 s was spent" in got.detail
    quiet = {"objectId": "chat_1", "seconds": 30}
    got = ask(revisions=revised(quietChat=quiet), claim=skipped("chat_active"))
    assert reason(got) == (Verdict.NOT_FIRED, Reason.CHAT_ACTIVE)
    assert "a person wrote in chat_1 within 30 s" in got.detail
    got = ask(claim=skipped("superseded", "cancelled"))
    assert reason(got) == (Verdict.NOT_FIRED, Reason.OVERLAP)
    assert "cancelled: superseded" in got.detail and "overlap restart" in got.detail


def test_a_retry_key_is_its_slot_s_attempt() -> None:
    known_key = "2026-12-01T09:00:00.000Z#2"
    where = why.locate([CREATED], SLOT, exact=True)
    where = msgspec.structs.replace(where, key=known_key)
    retry = msgspec.structs.replace(OK, claimed_at=at(20), started_at=at(20.1), late_ms=100.0)
    got = why.explain(TID, SLOT, where, facts(claim=retry))
    assert reason(got) == (Verdict.FIRED, Reason.FIRED) and got.key == known_key
    assert "attempt 2, a retry of 2026-12-01T09:00:00.000Z" in got.checks[0].detail


def test_a_jittered_slot_is_due_at_slot_plus_jitter_and_not_late_for_it() -> None:
    revisions = revised(jitterSeconds=600)
    delay = policies.jitter(TID, SLOT, 600)
    assert delay > timedelta(seconds=30)  # this id and slot draw a jitter beyond the slack
    on_time = msgspec.structs.replace(
        OK, claimed_at=SLOT + delay, started_at=SLOT + delay, late_ms=50.0
    )
    got = ask(revisions=revisions, claim=on_time)
    assert reason(got) == (Verdict.FIRED, Reason.FIRED)
    assert f"(jitter {delay.total_seconds():g} s)" in got.checks[0].detail
    waiting = ask(revisions=revisions, now=SLOT + delay - timedelta(seconds=1))
    assert reason(waiting) == (Verdict.PENDING, Reason.CLAIMED_NOT_RUN)  # not yet due
