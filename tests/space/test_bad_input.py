"""Every refusal is a 4xx with `{"error", "detail"}`, and nothing is written at all."""

from __future__ import annotations

import json
from typing import Any

import pytest
from space_support import CRON, SPACE, Api, snapshot

S = f"/spaces/{SPACE}"
RAW = object()  # marks a case whose body is sent as raw bytes
FIRE = {"triggerId": "{tid}", "key": "k", "term": 1, "peer": "laptop"}
BIG = 2**64
DEEP_65: Any = 1
for _ in range(64):
    DEEP_65 = [DEEP_65]
RUN = {"runId": "r1", "triggerId": "{tid}", "startedAt": "2026-12-01T09:00:00Z", "status": "ok"}

CASES: list[tuple[str, str, Any, dict[str, str], int, str, str]] = [
    # method, path, body, headers, status, error, a fragment of the detail
    ("POST", "/spaces", {"id": "Bad Id"}, {}, 400, "invalid_body", "`$.id`"),
    ("POST", "/spaces", {"id": SPACE}, {}, 409, "space_exists", SPACE),
    ("POST", "/spaces", {"id": "x", "colour": 1}, {}, 400, "invalid_body", "colour"),
    ("POST", f"{S}/triggers", b"{not json", {}, 400, "invalid_record", "not JSON"),
    ("POST", f"{S}/triggers", b"", {}, 400, "invalid_record", "empty"),
    ("POST", f"{S}/triggers", [CRON], {}, 400, "invalid_record", "Expected `object`"),
    (
        "POST",
        f"{S}/triggers",
        {**CRON, "spec": {"expr": "61 * * * *"}},
        {},
        400,
        "invalid_record",
        "`$.spec.expr`",
    ),
    (
        "POST",
        f"{S}/triggers",
        {**CRON, "spec": {"expr": "* * * * *", "tz": "Mars/Base"}},
        {},
        400,
        "invalid_record",
        "`$.spec.tz`",
    ),
    ("POST", f"{S}/triggers", {**CRON, "colour": "red"}, {}, 400, "invalid_record", "colour"),
    ("POST", f"{S}/triggers", {**CRON, "id": "trg_mine"}, {}, 400, "invalid_record", "`$.id`"),
    ("POST", f"{S}/triggers", {**CRON, "program": "Bad"}, {}, 400, "invalid_record", "`$.program`"),
    ("POST", f"{S}/triggers", {**CRON, "kind": "webhook"}, {}, 400, "invalid_record", "webhook"),
    (
        "POST",
        f"{S}/triggers",
        json.dumps({**CRON, "name": "x" * (2 << 20)}).encode(),
        {},
        413,
        "body_too_large",
        "bytes",
    ),
    ("POST", "/spaces/nowhere/triggers", CRON, {}, 404, "unknown_space", "nowhere"),
    ("PATCH", f"{S}/triggers/trg_none", {"name": "x"}, {}, 404, "unknown_trigger", "trg_none"),
    ("PATCH", f"{S}/triggers/{{tid}}", {"name": "x"}, {"If-Match": "7"}, 409, "rev_mismatch", "7"),
    (
        "PATCH",
        f"{S}/triggers/{{tid}}",
        {"name": "x"},
        {"If-Match": "abc"},
        400,
        "invalid_header",
        "If-Match",
    ),
    (
        "PATCH",
        f"{S}/triggers/{{tid}}",
        {"name": "x"},
        {"If-Match": "²"},
        400,
        "invalid_header",
        "If-Match",
    ),
    (
        "PATCH",
        f"{S}/triggers/{{tid}}",
        {"limits": {"timeoutSeconds": -1}},
        {},
        400,
        "invalid_record",
        "`$.limits.timeoutSeconds`",
    ),
    (
        "PATCH",
        f"{S}/triggers/{{tid}}",
        {"limits": {"timeoutSeconds": 1e12}},
        {},
        400,
        "invalid_record",
        "`$.limits.timeoutSeconds`",
    ),
    (
        "POST",
        f"{S}/triggers",
        {**CRON, "limits": {"timeoutSeconds": 1e300}},
        {},
        400,
        "invalid_record",
        "`$.limits.timeoutSeconds`",
    ),
    (
        "POST",
        f"{S}/triggers",
        {**CRON, "limits": {"memoryMB": 2**40}},
        {},
        400,
        "invalid_record",
        "`$.limits.memoryMB`",
    ),
    (
        "PATCH",
        f"{S}/triggers/{{tid}}",
        {"updatedAt": "2020-01-01T00:00:00Z"},
        {},
        400,
        "invalid_record",
        "`$.updatedAt`",
    ),
    ("DELETE", f"{S}/triggers/{{tid}}", None, {"If-Match": "2"}, 409, "rev_mismatch", "2"),
    ("PUT", f"{S}/triggers/trg_chosen", CRON, {}, 400, "not_reserved", "chat-watch"),
    ("POST", f"{S}/triggers/{{tid}}/status", {"name": "x"}, {}, 400, "invalid_status", "name"),
    (
        "POST",
        f"{S}/triggers/{{tid}}/status",
        {"lastRunAt": "2026-12-01T09:00:00"},
        {},
        400,
        "invalid_status",
        "`$.lastRunAt`",
    ),
    ("POST", f"{S}/election/claim", {"peer": "phone"}, {}, 400, "invalid_body", "term"),
    (
        "POST",
        f"{S}/election/claim",
        {"peer": "phone", "term": -1},
        {},
        400,
        "invalid_body",
        "`$.term`",
    ),
    (
        "POST",
        f"{S}/election/claim",
        {"peer": "phone", "term": 1},
        {},
        409,
        "lease_conflict",
        "laptop",
    ),
    (
        "POST",
        f"{S}/election/release",
        {"peer": "phone", "term": 1},
        {},
        409,
        "lease_conflict",
        "laptop",
    ),
    ("POST", f"{S}/fires", {**FIRE, "key": ""}, {}, 400, "invalid_body", "`$.key`"),
    (
        "POST",
        f"{S}/fires",
        {**FIRE, "triggerId": "trg_none"},
        {},
        404,
        "unknown_trigger",
        "trg_none",
    ),
    ("POST", f"{S}/fires", {**FIRE, "term": 0}, {}, 409, "stale_term", "term 0"),
    ("POST", f"{S}/fires", [FIRE, {"key": "k2"}], {}, 400, "invalid_body", "`$[1]"),
    (
        "PUT",
        f"{S}/programs/Bad@v1",
        {"source": "def main(a): pass"},
        {},
        400,
        "invalid_program_ref",
        "Bad@v1",
    ),
    ("PUT", f"{S}/programs/p@v1", {"source": "main = (\n"}, {}, 400, "invalid_program", "line"),
    ("PUT", f"{S}/programs/p@v1", {"src": "x"}, {}, 400, "invalid_body", "src"),
    ("PUT", f"{S}/devices/laptop", {"priority": "high"}, {}, 400, "invalid_body", "`$.priority`"),
    ("POST", f"{S}/runs", {**RUN, "status": "great"}, {}, 400, "invalid_run", "`$.status`"),
    (
        "POST",
        f"{S}/runs",
        {**RUN, "startedAt": "2026-12-01T09:00:00"},
        {},
        400,
        "invalid_run",
        "`$.startedAt`",
    ),
    ("POST", f"{S}/runs", {**RUN, "extra": 1}, {}, 400, "invalid_run", "extra"),
    ("GET", f"{S}/runs?status=great", None, {}, 400, "invalid_query", "status"),
    ("GET", f"{S}/changes?since=-1", None, {}, 400, "invalid_query", "since"),
    ("GET", f"{S}/changes?since=%C2%B2", None, {}, 400, "invalid_query", "since"),
    ("GET", f"{S}/changes?limit=%C2%B2", None, {}, 400, "invalid_query", "limit"),
    ("GET", f"{S}/runs?limit=%C2%B2", None, {}, 400, "invalid_query", "limit"),
    ("GET", f"{S}/turns?limit=%C2%B2", None, {}, 400, "invalid_query", "limit"),
    ("GET", f"{S}/fires?limit=%C2%B2", None, {}, 400, "invalid_query", "limit"),
    ("PUT", f"{S}/state/{{tid}}/cursor", {"val": 1}, {}, 400, "invalid_body", "val"),
    (
        "POST",
        f"{S}/tokens/run",
        {"triggerId": "{tid}", "runId": "r", "ttlSeconds": 0},
        {},
        400,
        "invalid_body",
        "`$.ttlSeconds`",
    ),
    ("GET", f"{S}/nothing-here", None, {}, 404, "not_found", ""),
    # beyond 64 bits, anywhere: bodies, query strings, headers, program versions
    (
        "POST",
        f"{S}/election/claim",
        {"peer": "laptop", "term": BIG},
        {},
        400,
        "invalid_body",
        "`$.term`",
    ),
    ("PUT", f"{S}/devices/laptop", {"priority": BIG}, {}, 400, "invalid_body", "`$.priority`"),
    ("PUT", f"{S}/devices/laptop", {"priority": -BIG}, {}, 400, "invalid_body", "64 bits"),
    ("POST", f"{S}/fires", {**FIRE, "term": BIG}, {}, 400, "invalid_body", "`$.term`"),
    (
        "POST",
        f"{S}/triggers",
        {**CRON, "args": {"n": [1, BIG]}},
        {},
        400,
        "invalid_record",
        "`$.args.n[1]`",
    ),
    (
        "PUT",
        f"{S}/state/{{tid}}/cursor",
        {"value": {"n": BIG}},
        {},
        400,
        "invalid_body",
        "`$.value.n`",
    ),
    ("GET", f"{S}/changes?since={BIG}", None, {}, 400, "invalid_query", "since"),
    ("GET", f"{S}/changes?since={'9' * 5000}", None, {}, 400, "invalid_query", "since"),
    ("GET", f"{S}/changes?limit={'9' * 5000}", None, {}, 400, "invalid_query", "limit"),
    ("GET", f"{S}/runs?limit={BIG}", None, {}, 400, "invalid_query", "limit"),
    (
        "PATCH",
        f"{S}/triggers/{{tid}}",
        {"name": "x"},
        {"If-Match": str(BIG)},
        400,
        "invalid_header",
        "If-Match",
    ),
    (
        "DELETE",
        f"{S}/triggers/{{tid}}",
        None,
        {"If-Match": "9" * 5000},
        400,
        "invalid_header",
        "If-Match",
    ),
    (
        "GET",
        f"{S}/changes",
        None,
        {"Accept": "text/event-stream", "Last-Event-ID": str(BIG)},
        400,
        "invalid_header",
        "Last-Event-ID",
    ),
    (
        "PUT",
        f"{S}/programs/p@v{BIG}",
        {"source": "def main(a): pass"},
        {},
        400,
        "invalid_program_ref",
        "version",
    ),
    ("GET", f"{S}/programs/p@v{'9' * 5000}", None, {}, 400, "invalid_program_ref", "version"),
    # JSON nested deeper than 64 levels, however deep
    (
        "POST",
        f"{S}/triggers",
        {**CRON, "args": {"deep": DEEP_65}},
        {},
        400,
        "invalid_record",
        "nested deeper than 64",
    ),
    (
        "POST",
        f"{S}/triggers",
        b"[" * 100_000 + b"]" * 100_000,
        {},
        400,
        "invalid_record",
        "nested deeper than 64",
    ),
    (
        "POST",
        f"{S}/runs",
        b'{"a":' * 5000 + b"1" + b"}" * 5000,
        {},
        400,
        "invalid_run",
        "nested deeper than 64",
    ),
    ("DELETE", f"{S}/election", None, {}, 405, "method_not_allowed", ""),
]


def _fill(value: Any, tid: str) -> Any:
    return json.loads(json.dumps(value).replace("{tid}", tid))


@pytest.mark.parametrize(
    ("method", "path", "body", "headers", "status", "error", "fragment"),
    CASES,
    ids=[f"{c[0]} {c[1]} {c[5]}" for c in CASES],
)
async def test_refused_and_nothing_written(
    api: Api,
    method: str,
    path: str,
    body: Any,
    headers: dict[str, str],
    status: int,
    error: str,
    fragment: str,
) -> None:
    trigger = await api.create_trigger()
    assert (await api.post(f"{S}/election/claim", {"peer": "laptop", "term": 0}))[0] == 200
    tid = trigger["id"]
    before = snapshot(api.db_path)
    path = path.replace("{tid}", tid)
    if isinstance(body, bytes):
        got, answer = await api.call(method, path, data=body, headers=headers)
    else:
        got, answer = await api.call(method, path, _fill(body, tid), headers=headers)
    assert (got, answer["error"]) == (status, error), answer
    assert isinstance(answer["detail"], str) and fragment in answer["detail"]
    after = snapshot(api.db_path)
    if path.endswith("/fires") and status == 409:  # the claim ledger keeps the refusal alone
        added = [line for line in after if line not in before]
        assert len(added) == 1 and added[0].startswith('INSERT INTO "history_refusals"'), added
        after = [line for line in after if line not in added]
    assert after == before
