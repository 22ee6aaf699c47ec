"""`why` decided from history facts: every reason from facts built by hand (no I/O, no clock)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import msgspec
import pytest

from triggers import why
from triggers.facts import (
    Applied,
    Claim,
    Facts,
    MessageFact,
    Refused,
    Revision,
    Subscription,
    Term,
    Window,
)
from triggers.records import CronSpec
from triggers.slots import slots_between
from triggers.whywords import REMEDY, Reason, Verdict

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
SLOT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
TID = "trg_1"


def at(seconds: float, base: datetime = SLOT) -> datetime:
    return base + timedelta(seconds=seconds)


def record(**fields: Any) -> dict[str, Any]:
    base = {
        "id": TID,
        "kind": "cron",
        "name": "report",
        "spec": {"expr": "0 * * * *"},
        "program": "p@v1",
        "owner": "",
        "enabled": True,
        "activeSince": T0.isoformat(),
    }
    return {**base, **fields}


CREATED = Revision(rev=1, seq=1, at=T0, op="create", actor="admin", record=record())
UP = Window(peer="box", began=T0, last_seen=at(3600))
HELD = Term(term=1, holder="box", began=T0)
OK = Claim(
    peer="box",
    term=1,
    claimed_at=at(0.01),
    run_id="r1",
    status="ok",
    started_at=at(0.2),
    late_ms=200.0,
)


def facts(**given: Any) -> Facts:
    base: dict[str, Any] = {
        "now": at(3000),
        "kept_since": T0 - timedelta(days=30),
        "revisions": [CREATED],
        "terms": [HELD],
        "windows": [UP],
        "applied": [Applied(peer="box", at=T0, seq=1)],
    }
    return Facts(**{**base, **given})


def ask(when: datetime = SLOT, *, exact: bool = True, **given: Any) -> why.Explanation:
    known = facts(**given)
    where = why.locate(known.revisions, when, exact=exact)
    return why.explain(TID, when, where, known)


def reason(answer: why.Explanation) -> tuple[Verdict, Reason]:
    return answer.verdict, answer.reason


def test_a_slot_that_fired_names_its_run_and_every_check_passed() -> None:
    got = ask(claim=OK, run={"runId": "r1", "phases": {"wakeMs": 150, "spawnMs": 50}})
    assert reason(got) == (Verdict.FIRED, Reason.FIRED)
    assert [c.name for c in got.checks] == [
        "slot",
        "active",
        "enabled",
        "device",
        "up",
        "applied",
        "bridge",
        "claim",
        "run",
    ]
    assert all(c.ok for c in got.checks) and got.remedy is None
    assert "run r1 on box" in got.detail and "wake 150 ms" in got.detail
    assert got.key == "2026-12-01T09:00:00.000Z" and got.slot == "2026-12-01T09:00:00.000Z"


def test_a_late_run_is_fired_late_with_its_phases() -> None:
    late = msgspec.structs.replace(OK, claimed_at=at(41), started_at=at(41.2), late_ms=41200.0)
    got = ask(claim=late, run={"phases": {"wakeMs": 41000, "claimMs": 20}})
    assert reason(got) == (Verdict.FIRED, Reason.FIRED_LATE)
    assert "wake 41000 ms" in got.detail and got.remedy == REMEDY[Reason.FIRED_LATE]


def test_not_a_slot_names_the_slots_around_it_and_now_means_the_last_due_slot() -> None:
    got = ask(at(600))
    assert reason(got) == (Verdict.NOT_DUE, Reason.NOT_A_SLOT)
    assert "09:00" in got.detail and "10:00" in got.detail and got.slot.startswith("2026-12-01T09")
    assert ask(at(600), exact=False, claim=OK).reason is Reason.FIRED  # "now": the slot before


def test_before_the_record_existed_and_before_its_regime() -> None:
    got = ask(T0 - timedelta(hours=2))
    assert reason(got) == (Verdict.NOT_DUE, Reason.BEFORE_ACTIVE)
    assert "did not exist yet" in got.detail and "created at" in got.detail
    later = Revision(
        rev=1,
        seq=1,
        at=T0,
        op="create",
        actor="admin",
        record=record(activeSince=at(60).isoformat()),
    )
    got = ask(revisions=[later])
    assert reason(got) == (Verdict.NOT_FIRED, Reason.BEFORE_ACTIVE)
    assert "09:01:00.000Z" in got.detail


def test_paused_says_by_whom_when_and_the_note() -> None:
    pause = Revision(
        rev=2,
        seq=5,
        at=at(-120),
        op="pause",
        actor="device:phone",
        note="vacation",
        changes={"enabled": [True, False]},
        record=record(enabled=False),
    )
    resume = Revision(
        rev=3,
        seq=6,
        at=at(600),
        op="resume",
        actor="admin",
        changes={"enabled": [False, True]},
        record=record(activeSince=at(600).isoformat()),
    )
    got = ask(revisions=[CREATED, pause, resume])
    assert reason(got) == (Verdict.NOT_FIRED, Reason.PAUSED)
    assert 'paused at 2026-12-01T08:58:00.000Z by device:phone (rev 2): "vacation"' in got.detail
    assert got.remedy == f"`baton triggers resume {TID}` (what passed while paused never fires)"


def test_deleted_before_the_slot() -> None:
    gone = Revision(rev=2, seq=7, at=at(-60), op="delete", actor="admin", record=None)
    got = ask(revisions=[CREATED, gone])
    assert reason(got) == (Verdict.NOT_FIRED, Reason.DELETED) and "deleted at" in got.detail


def test_no_device_up_names_the_last_one_seen() -> None:
    down = Window(peer="box", began=T0, last_seen=at(-600), stopped=True)
    got = ask(
        windows=[down], terms=[Term(term=1, holder="box", began=T0, ended=at(-600), how="released")]
    )
    assert reason(got) == (Verdict.NOT_FIRED, Reason.NO_DEVICE_UP)
    assert "no device was up" in got.detail and "box, last seen 2026-12-01T08:50" in got.detail


def test_a_pinned_trigger_whose_owner_was_down_is_owner_offline() -> None:
    pinned = Revision(rev=1, seq=1, at=T0, op="create", actor="admin", record=record(owner="phone"))
    got = ask(revisions=[pinned])
    assert reason(got) == (Verdict.NOT_FIRED, Reason.OWNER_OFFLINE)
    assert "pinned to phone" in got.detail and "float" in (got.remedy or "")


def test_a_holder_asleep_through_the_slot() -> None:
    before = Window(peer="box", began=T0, last_seen=at(-300))
    woke = Window(peer="box", began=at(600), last_seen=at(900), slept=900.0)
    got = ask(windows=[before, woke])
    assert reason(got) == (Verdict.NOT_FIRED, Reason.HOLDER_ASLEEP)
    assert "asleep from 2026-12-01T08:55:00.000Z to 2026-12-01T09:10:00.000Z" in got.detail


def test_a_holder_that_had_not_applied_the_resume() -> None:
    resume = Revision(
        rev=2,
        seq=9,
        at=at(-5),
        op="resume",
        actor="admin",
        changes={"enabled": [False, True]},
        record=record(activeSince=at(-5).isoformat()),
    )
    applied = [Applied(peer="box", at=T0, seq=1), Applied(peer="box", at=at(40), seq=9)]
    got = ask(revisions=[CREATED, resume], applied=applied)
    assert reason(got) == (Verdict.NOT_FIRED, Reason.NOT_APPLIED)
    assert "to 1" in got.detail and "applied it at 2026-12-01T09:00:40.000Z" in got.detail
    soon = [Applied(peer="box", at=T0, seq=1), Applied(peer="box", at=at(4), seq=9)]
    assert ask(revisions=[CREATED, resume], applied=soon).reason is Reason.HOLDER_ASLEEP


def test_failover_bridges_a_slot_only_while_a_live_device_was_up() -> None:
    terms = [
        Term(term=1, holder="laptop", began=T0, ended=at(-5), how="expired"),
        Term(term=2, holder="box", began=at(20)),
    ]
    windows = [
        Window(peer="laptop", began=T0, last_seen=at(-20), stopped=True),
        Window(peer="box", began=at(10), last_seen=at(600)),
    ]
    got = ask(terms=terms, windows=windows)
    assert reason(got) == (Verdict.NOT_FIRED, Reason.NO_DEVICE_UP)
    assert "bridge fires only what came while a live device was up" in got.detail
    bridged = Claim(
        peer="box",
        term=2,
        claimed_at=at(20),
        run_id="r2",
        status="ok",
        started_at=at(20.1),
        late_ms=20100.0,
    )
    got = ask(terms=terms, windows=windows, claim=bridged)
    assert reason(got) == (Verdict.FIRED, Reason.FIRED_LATE) and "term 2" in got.detail


@pytest.mark.parametrize(
    ("code", "want"),
    [
        ("stale_term", Reason.STALE_TERM),
        ("already_claimed", Reason.CLAIMED_ELSEWHERE),
        ("not_owner", Reason.CLAIMED_ELSEWHERE),
        ("paused", Reason.PAUSED),
    ],
)
def test_a_refused_claim_says_what_the_space_answered(code: str, want: Reason) -> None:
    refused = Refused(at=at(0.01), peer="laptop", term=3, code=code, detail="the space's words")
    got = ask(refusals=[refused])
    assert reason(got) == (Verdict.NOT_FIRED, want)
    assert "laptop's claim at term 3" in got.detail and "the space's words" in got.detail


@pytest.mark.parametrize(
    ("status", "why_", "want"),
    [
        ("skipped", "overlap", Reason.OVERLAP),
        ("rejected", "queue_full", Reason.QUEUE_FULL),
        ("skipped", "breaker_open", Reason.BREAKER_OPEN),
        ("skipped", "unknown_program", Reason.UNKNOWN_PROGRAM),
        ("error", None, Reason.RUN_FAILED),
        ("crashed", None, Reason.RUN_FAILED),
    ],
)
def test_a_claimed_fire_that_did_not_run_well(status: str, why_: str | None, want: Reason) -> None:
    claim = Claim(
        peer="box",
        term=1,
        claimed_at=at(0.01),
        run_id="r1",
        status=status,
        reason=why_,
        started_at=at(0.02),
    )
    got = ask(claim=claim, run={"runId": "r1", "error": "boom"})
    assert got.reason is want and got.run == {"runId": "r1", "error": "boom"}
    assert got.verdict is (Verdict.FIRED if want is Reason.RUN_FAILED else Verdict.NOT_FIRED)


def test_claimed_but_never_ran_and_still_running() -> None:
    claim = Claim(peer="box", term=1, claimed_at=at(0.01))
    got = ask(claim=claim)
    assert reason(got) == (Verdict.NOT_FIRED, Reason.CLAIMED_NOT_RUN)
    assert "no run was ever recorded" in got.detail
    got = ask(claim=claim, now=at(20))
    assert reason(got) == (Verdict.PENDING, Reason.CLAIMED_NOT_RUN) and got.remedy is None


def test_a_slot_just_passed_is_pending_and_one_never_claimed_is_a_stall() -> None:
    assert ask(now=at(5)).verdict is Verdict.PENDING
    got = ask()
    assert reason(got) == (Verdict.NOT_FIRED, Reason.HOLDER_ASLEEP) and "no claim" in got.detail


def test_an_event_message_while_nobody_was_subscribed() -> None:
    event = record(kind="event", spec={"dataset": "chat_messages", "objectId": "c1"})
    rev = Revision(rev=1, seq=1, at=T0, op="create", actor="admin", record=event)
    msg = MessageFact(message_id="m42", accepted=SLOT)
    known = facts(revisions=[rev], message=msg)
    got = why.explain(TID, SLOT, why.locate_message(known.revisions, SLOT, msg), known)
    assert reason(got) == (Verdict.NOT_FIRED, Reason.NO_SUBSCRIBER) and got.key == "m42"
    own = MessageFact(message_id="m43", accepted=SLOT, agent="triage")
    where = why.locate_message(known.revisions, SLOT, own)
    assert why.explain(TID, SLOT, where, known).reason is Reason.NOT_A_SLOT


BERLIN = ZoneInfo("Europe/Berlin")
LORD_HOWE = ZoneInfo("Australia/Lord_Howe")


@pytest.mark.parametrize(
    ("expr", "tz", "asked", "want", "slot"),
    [
        (
            "30 2 * * *",
            "Europe/Berlin",
            datetime(2027, 3, 28, 2, 30, tzinfo=BERLIN),
            Reason.DST_GAP,
            "2027-03-28T01:00:00.000Z",
        ),
        (
            "30 2 * * *",
            "Europe/Berlin",
            datetime(2027, 10, 31, 2, 30, fold=1, tzinfo=BERLIN),
            Reason.DST_REPEAT,
            "2027-10-31T00:30:00.000Z",
        ),
        (
            "15 2 * * *",
            "Australia/Lord_Howe",
            datetime(2027, 10, 3, 2, 15, tzinfo=LORD_HOWE),
            Reason.DST_GAP,
            "2027-10-02T15:30:00.000Z",
        ),
        (
            "45 1 * * *",
            "Australia/Lord_Howe",
            datetime(2027, 4, 4, 1, 45, fold=1, tzinfo=LORD_HOWE),
            Reason.DST_REPEAT,
            "2027-04-03T14:45:00.000Z",
        ),
    ],
)
def test_dst_gap_and_repeat_name_the_slot_that_stood_for_them(
    expr: str, tz: str, asked: datetime, want: Reason, slot: str
) -> None:
    rev = Revision(
        rev=1,
        seq=1,
        at=T0,
        op="create",
        actor="admin",
        record=record(spec={"expr": expr, "tz": tz}),
    )
    when = asked.astimezone(UTC)
    got = ask(when, revisions=[rev], now=datetime(2028, 1, 1, tzinfo=UTC))
    assert reason(got) == (Verdict.NOT_DUE, want) and got.slot == slot
    assert tz in got.detail


def test_every_five_minutes_follows_real_time_through_the_gap() -> None:
    spec = CronSpec(expr="*/30 * * * *", tz="Europe/Berlin")
    lo = datetime(2027, 3, 28, 0, 0, tzinfo=UTC)
    got = slots_between(spec, lo, lo + timedelta(hours=2), 10)
    assert [s.strftime("%H:%M") for s in got] == ["00:00", "00:30", "01:00", "01:30", "02:00"]
    assert len(slots_between(spec, lo, lo + timedelta(days=1), 10)) == 10


def test_a_refusal_proves_its_device_was_up_and_names_the_space_s_words() -> None:
    gone = Window(peer="box", began=T0, last_seen=at(-600))
    refused = Refused(at=at(2), peer="box", term=1, code="stale_term", detail="term 1 is over")
    got = ask(windows=[gone], refusals=[refused])
    assert reason(got) == (Verdict.NOT_FIRED, Reason.STALE_TERM)
    assert "box was up: it claimed the slot" in got.checks[4].detail


def test_a_refusal_the_chain_did_not_reach_is_still_told() -> None:
    gone = Window(peer="box", began=T0, last_seen=at(-600), stopped=True)
    late = Refused(at=at(90), peer="laptop", term=1, code="stale_term", detail="term 1 is over")
    got = ask(windows=[gone], refusals=[late])
    assert reason(got) == (Verdict.NOT_FIRED, Reason.NO_DEVICE_UP)
    assert got.detail.endswith("a claim of it was refused too: laptop at term 1, stale_term")


def event_facts(*streams: Subscription) -> tuple[Facts, why.Located]:
    event = record(kind="event", spec={"dataset": "chat_messages", "objectId": "c1"})
    rev = Revision(rev=1, seq=1, at=T0, op="create", actor="admin", record=event)
    msg = MessageFact(message_id="m7", accepted=SLOT)
    known = facts(revisions=[rev], message=msg, subscriptions=list(streams))
    return known, why.locate_message(known.revisions, SLOT, msg)


def test_an_event_s_stream_live_resumed_or_ended() -> None:
    live = Subscription(peer="box", began=at(-60))
    known, where = event_facts(live)
    got = why.explain(TID, SLOT, where, known)
    assert got.reason is Reason.HOLDER_ASLEEP and "made no claim" in got.detail
    back = Subscription(peer="box", began=at(30), resumed=True)
    ended = Subscription(peer="box", began=at(-60), ended=at(-1))
    known, where = event_facts(ended, back)
    assert why.explain(TID, SLOT, where, known).reason is Reason.HOLDER_ASLEEP  # replayed
    fresh = Subscription(peer="box", began=at(30))
    known, where = event_facts(ended, fresh)
    got = why.explain(TID, SLOT, where, known)
    assert reason(got) == (Verdict.NOT_FIRED, Reason.NO_SUBSCRIBER)
    assert (
        "had ended 2026-12-01T08:59:59.000Z" in got.detail
        and "again 2026-12-01T09:00:30" in got.detail
    )


def test_two_runs_that_look_alike_show_their_keys_and_what_tells_them_apart() -> None:
    spec = {"expr": "30 * * * *", "tz": "Europe/Berlin"}  # a wildcard hour: real time
    rev = Revision(rev=1, seq=1, at=T0, op="create", actor="admin", record=record(spec=spec))
    said = []
    for slot in (
        datetime(2027, 10, 31, 0, 30, tzinfo=UTC),
        datetime(2027, 10, 31, 1, 30, tzinfo=UTC),
    ):
        claim = msgspec.structs.replace(OK, claimed_at=slot, started_at=slot)
        got = ask(slot, revisions=[rev], claim=claim, now=slot + timedelta(hours=1))
        assert got.reason is Reason.FIRED
        said.append((got.key, got.checks[0].detail))
    assert [k for k, _ in said] == ["2027-10-31T00:30:00.000Z", "2027-10-31T01:30:00.000Z"]
    assert "02:30 CEST in Europe/Berlin, the first 02:30 of the day" in said[0][1]
    assert "02:30 CET in Europe/Berlin, the second 02:30 of the day" in said[1][1]
