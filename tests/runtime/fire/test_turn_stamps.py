"""The stamps a chat-watch turn leaves: one conversation start, a status from its outcome."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from core.wire import TurnIn, to_wire
from programs import rollup
from runtime.fire.bodies import turn_stamps

AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def entry(**fields: object) -> TurnIn:
    """A turn as chat-watch records it; `fields` as the wire has them."""
    base = {
        "turnId": "turn_1",
        "space": "home",
        "objectId": "general",
        "messageIds": ["m1"],
        "calls": 1,
        "replies": 1,
        "finishedAt": "2026-12-01T09:00:01Z",
        "durationMs": 1000.0,
    }
    return msgspec.convert({**base, **fields}, TurnIn)


@pytest.mark.parametrize(
    ("outcome", "error", "status", "detail"),
    [
        ("ok", "", "ok", ""),
        (
            "error",
            "Traceback (most recent call last):\n  x\nValueError: no",
            "error",
            "ValueError: no",
        ),
        ("timeout", "responder timed out after 120 s", "error", "responder timed out after 120 s"),
        (
            "cancelled",
            "chat-watch closed during the turn",
            "error",
            "chat-watch closed during the turn",
        ),
    ],
)
def test_a_turn_adds_one_start_and_stamps_its_outcome(
    outcome: str, error: str, status: str, detail: str
) -> None:
    seed = rollup.Rollup(starts=4, runs=2)
    turn = {"startedAt": "2026-12-01T10:00:00+01:00", "outcome": outcome, "error": error}
    after, stamps = turn_stamps(seed, entry(**turn))
    assert (after.starts, after.runs, after.last_run_at) == (5, 2, AT)
    assert after.last_status == status  # the health pass restores a cleared stamp from it
    assert to_wire(stamps) == {
        "lastStatus": status,
        "lastStatusDetail": detail,
        "lastRunAt": "2026-12-01T09:00:00.000Z",
        "rollup": rollup.to_dict(after),
    }


def test_an_older_turn_finishing_late_does_not_move_the_last_run_back() -> None:
    seed = rollup.conversation_started(rollup.EMPTY, AT)
    after, stamps = turn_stamps(seed, entry(startedAt="2026-12-01T08:59:00Z", outcome="ok"))
    assert after.starts == 2 and to_wire(stamps)["lastRunAt"] == "2026-12-01T09:00:00.000Z"


@pytest.mark.parametrize("started", [None, "soon", "2026-12-01T09:00:00"])
def test_a_turn_without_an_aware_start_is_refused_naming_the_field(started: object) -> None:
    with pytest.raises(ValueError, match=r"\$\.startedAt"):  # the turn cannot even be built
        turn_stamps(rollup.EMPTY, entry(startedAt=started, outcome="ok"))
