"""What a person or a program may write into a trigger record, checked before it is stored.

Owns the fields the server writes (`SERVER_FIELDS`) and the runtime stamps
(`STAMP_FIELDS`), both refused in user input, the record's own rules
(`triggers.records.validate_input`) and the reserved ones: chat-watch's record
keeps its kind and program, and `internal:` programs are for it alone. Pure:
refuses with `Refusal`, must not touch the database.
"""

from __future__ import annotations

from typing import Any

from space.http import Refusal
from triggers import records

Record = dict[str, Any]
SERVER_FIELDS = ("id", "rev", "createdAt", "updatedAt", "activeSince")
STAMP_FIELDS = (
    "lastStatus",
    "lastStatusDetail",
    "lastRunAt",
    "nextFireAt",
    "breaker",
    "rollup",
    "nextAttempt",
)


def check(body: Record, tid: str = "") -> None:
    """A valid record (`records.validate_input`), server and stamp fields refused, and the
    reserved rules: chat-watch keeps its kind and program; `internal:` is for it alone."""
    for name in (*SERVER_FIELDS, *STAMP_FIELDS):
        if name in body:
            raise Refusal(
                400, "invalid_record", f"`{name}` is written by the server - at `$.{name}`"
            )
    try:
        records.validate_input(body)
    except records.InvalidRecord as exc:
        raise Refusal(400, "invalid_record", str(exc)) from None
    _check_reserved(body, tid)


_CHAT_WATCH_FIXED = {"kind": "event", "program": records.CHAT_WATCH_PROGRAM}


def _check_reserved(body: Record, tid: str) -> None:
    if tid == records.RESERVED_CHAT_WATCH:
        for name, fixed in _CHAT_WATCH_FIXED.items():
            if body.get(name) != fixed:
                detail = f"chat-watch's `{name}` is {fixed!r} and cannot change - at `$.{name}`"
                raise Refusal(400, "invalid_record", detail)
    elif str(body.get("program", "")).startswith(records.INTERNAL_PREFIX):
        detail = (
            f"program {body['program']!r}: `internal:` programs are reserved for the "
            "runtime's own records (chat-watch) - at `$.program`"
        )
        raise Refusal(400, "invalid_record", detail)
