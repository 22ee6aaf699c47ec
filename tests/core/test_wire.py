"""The one encoding of a request body: Structs in field order, instants by `iso`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import msgspec

from core.chatwire import Message
from core.vocab import RunStatus
from core.wire import FireIn, RunAsk, RunIn, Stamps, encode, to_wire

AT = datetime(2026, 12, 1, 9, 0, 1, 250_999, tzinfo=UTC)


def test_a_run_is_sent_with_its_instants_in_the_one_format() -> None:
    berlin = timezone(timedelta(hours=1))
    run = RunIn(
        runId="run_1",
        triggerId="trg_a",
        startedAt=AT,
        finishedAt=AT.astimezone(berlin) + timedelta(milliseconds=40),
        durationMs=40.0,
        status=RunStatus.OK,
        result={"at": "kept as the program gave it"},
        stamps=Stamps(lastStatus="ok", lastRunAt=AT, nextFireAt=None),
    )
    assert msgspec.json.decode(encode(run)) == {
        "runId": "run_1",
        "triggerId": "trg_a",
        "program": "",
        "peer": "",
        "term": 0,
        "key": "",
        "dueAt": None,
        "startedAt": "2026-12-01T09:00:01.250Z",  # milliseconds, never microseconds
        "finishedAt": "2026-12-01T09:00:01.290Z",  # in UTC, whatever the offset
        "durationMs": 40.0,
        "status": "ok",
        "result": {"at": "kept as the program gave it"},
        "error": "",
        "stderrTail": "",
        "lateMs": None,
        "phases": None,
        "reason": "",
        "attempt": 1,
        "stamps": {  # only the stamps given: absent ones are left as they are
            "lastStatus": "ok",
            "lastRunAt": "2026-12-01T09:00:01.250Z",
            "nextFireAt": None,  # given as none: cleared
        },
    }


def test_the_space_decodes_what_the_device_sends() -> None:
    claim = FireIn(triggerId="trg_a", key="k", term=3, peer="laptop", run=RunAsk(runId="run_1"))
    assert msgspec.json.decode(encode([claim]), type=list[FireIn]) == [claim]
    run = RunIn(runId="run_1", triggerId="trg_a", startedAt=AT, status=RunStatus.SKIPPED)
    decoded = msgspec.json.decode(encode(run), type=RunIn)
    assert decoded == msgspec.structs.replace(run, startedAt=AT.replace(microsecond=250_000))


def test_anything_but_a_body_is_sent_as_given() -> None:
    assert to_wire({"at": "x", "n": [1, 2]}) == {"at": "x", "n": [1, 2]}
    assert to_wire([]) == []
    assert to_wire(AT) == "2026-12-01T09:00:01.250Z"


def test_a_struct_goes_out_under_its_wire_names() -> None:
    message = Message(message_id="m1", seq=2, object_id="c", text="hi", created_at="now")
    assert to_wire(message) == {  # camel names, the unset agent left out (omit_defaults)
        "messageId": "m1",
        "seq": 2,
        "objectId": "c",
        "text": "hi",
        "createdAt": "now",
    }
