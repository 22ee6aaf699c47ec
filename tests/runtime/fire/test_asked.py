"""Runs asked by hand: each ask a diff brings is one catch-up fire of its key, handed over once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from runtime.fire.asked import FRESH, RunAsks
from triggers.diffing import reconcile, reconcile_changes
from triggers.records import PeerId, Trigger, load
from triggers.registry import Diff, Registry, apply

ME = PeerId("box")
AT = "2026-12-01T09:00:00.000Z"
NOW = datetime(2026, 12, 1, 9, 0, 1, tzinfo=UTC)
RECORD: dict[str, Any] = {
    "id": "trg_a",
    "kind": "cron",
    "name": "lamp",
    "program": "lamp@v1",
    "owner": "box",
    "spec": {"expr": "0 0 1 1 *"},
    "rev": 1,
    "updatedAt": "2026-11-01T10:00:00.000Z",
}


def record(rev: int = 1, at: str | None = None, **over: Any) -> Trigger:
    asked = {"runAsked": {"key": "manual:" + at, "requestedAt": at}} if at else {}
    loaded = load({**RECORD, "rev": rev, **asked, **over})
    assert not hasattr(loaded, "raw"), loaded
    return loaded  # type: ignore[return-value]


def test_an_ask_arriving_as_an_update_is_one_catchup_fire_of_its_key():
    registry = apply(Registry(), reconcile(Registry(), [record()], ME, True))
    diff = reconcile_changes(registry, [record(2, AT)], ME, True)
    assert len(diff.update) == 1 and diff.rearm == ()  # fire times stay
    asked = RunAsks()
    [fire] = asked.take(diff, NOW)
    due = datetime.fromisoformat(AT)
    assert (fire.key, fire.due_at, fire.catchup) == ("manual:" + AT, due, True)
    assert fire.trigger.id == "trg_a" and fire.event is None
    assert asked.take(diff, NOW) == []  # the same ask again: handed over once
    later = "2026-12-01T09:00:05.000Z"
    [again] = asked.take(Diff(update=_armed(record(3, later))), NOW)
    assert again.key == "manual:" + later  # a new ask is a new fire


def test_an_edit_after_the_ask_does_not_fire_it_again():
    asked = RunAsks()
    assert len(asked.take(Diff(add=_armed(record(2, AT))), NOW)) == 1
    edited = record(3, AT, name="lamp, renamed")
    assert asked.take(Diff(update=_armed(edited)), NOW) == []


def test_a_record_not_armed_here_an_old_ask_or_a_paused_record_is_not_fired():
    asked = RunAsks()
    mine = reconcile(Registry(), [record(2, AT, owner="elsewhere")], ME, True)
    assert mine.add == () and asked.take(mine, NOW) == []
    stale = NOW + FRESH + timedelta(seconds=1)
    assert asked.take(Diff(add=_armed(record(2, AT))), stale) == []
    assert asked.take(Diff(add=_armed(record())), NOW) == []  # no ask at all
    paused, asked = record(2, AT, enabled=False), RunAsks()  # taken once it is resumed
    assert asked.take(Diff(add=_armed(paused)), NOW) == []
    assert len(asked.take(Diff(update=_armed(record(3, AT))), NOW)) == 1


def test_removed_then_armed_again_hands_the_key_over_again_for_the_claim_to_refuse():
    asked = RunAsks()
    assert len(asked.take(Diff(add=_armed(record(2, AT))), NOW)) == 1
    assert asked.take(Diff(remove=("trg_a",)), NOW) == []  # type: ignore[arg-type]
    assert len(asked.take(Diff(add=_armed(record(2, AT))), NOW)) == 1


def _armed(rec: Trigger) -> tuple:
    return reconcile(Registry(), [rec], ME, True).add
