"""Honest verdicts added by issue 9: a failed once is not `done`; a raising record is isolated."""

from datetime import UTC, datetime

import msgspec

from core.vocab import HealthReason
from triggers.health import HEALTHY, HealthInputs, due, verdict
from triggers.records import OnceTrigger, PeerId, TriggerId, load

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
ONCE = {
    "id": "trg_o",
    "kind": "once",
    "program": "p@v1",
    "spec": {"at": "2026-12-01T09:00:00Z"},
    "lastRunAt": "2026-12-01T09:00:01Z",
}


def inputs(status: str) -> HealthInputs:
    return HealthInputs(
        now=NOW, programs=frozenset({"p@v1"}), last_run_status={TriggerId("trg_o"): status}
    )


def test_a_once_whose_only_run_failed_is_not_done_nor_missed() -> None:
    record = load(ONCE)
    assert verdict(record, inputs("ok")).reason is HealthReason.DONE
    assert verdict(record, inputs("error")) == HEALTHY  # the run's own `error` stamp stands


def test_a_record_whose_verdict_raises_is_stamped_alone() -> None:
    good = load({**ONCE, "id": "trg_ok"})
    odd = load(ONCE)
    assert isinstance(odd, OnceTrigger)
    odd = msgspec.structs.replace(odd, spec=msgspec.structs.replace(odd.spec, at="garbage"))
    me = PeerId("me")
    found = due(
        [odd, good], me, HealthInputs(now=NOW, programs=frozenset({"p@v1"}), active_peer=me)
    )
    by_id = {s.id: s.status for s in found}
    assert by_id["trg_o"] == "invalid_record" and by_id["trg_ok"] == "done"
