"""`any@v1`: the small synchronous space client a program gets from `use("any@v1")`.

Owns the program-facing calls (SPEC "Programs"): send and read chat messages, list and
patch trigger records, ask `why` one fired or did not, and this trigger's persistent
cursor, all with the run's token. Requests are built from `core.routes` and sent with the
standard library only; a refusal raises `ApiError`, no answer at all is status 0
`unreachable`. A write carries an `Idempotency-Key` and is sent again with it when its
answer was lost, so a retry never stores twice. Must not import the runtime; holds no
connection between calls (a program may run for a second or an hour).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping
from datetime import datetime
from http.client import HTTPException
from typing import Any

from core.routes import (
    IDEMPOTENCY_HEADER,
    RETRIES,
    RETRY_DELAY_S,
    ROUTES,
    ApiError,
    error_from,
    headers,
    target,
    writes,
)
from programs.context import RunContext

__all__ = ["AnyV1", "ApiError"]

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class AnyV1:
    """The space client of one run, scoped to its token, space and trigger."""

    def __init__(self, ctx: RunContext, *, timeout: float = 30.0) -> None:
        self._ctx = ctx
        self._base = ctx.url.rstrip("/")
        self._timeout = timeout

    @property
    def context(self) -> dict[str, Any]:
        """Who this run is: trigger, run, program, peer, space, term and fire key."""
        c = self._ctx
        return {
            "trigger_id": c.trigger_id,
            "run_id": c.run_id,
            "program": c.program,
            "peer": c.peer,
            "space": c.space,
            "term": c.term,
            "key": c.key,
        }

    def chat_send(self, space: str, object_id: str, message: Mapping[str, Any]) -> dict[str, Any]:
        """Send `{"text", "agent"?}`; the stored message (`messageId`, `seq`, …)."""
        sent: dict[str, Any] = self._call(
            "chat_send", dict(message), space=space, objectId=object_id
        )
        return sent

    def chat_messages(
        self, space: str, object_id: str, after: int | None = None, limit: int = 50
    ) -> list[dict[str, Any]]:
        """Up to `limit` messages with `seq` > `after`, oldest first."""
        page = self._call(
            "chat_messages", space=space, objectId=object_id, after=after, limit=limit
        )
        messages: list[dict[str, Any]] = page["messages"]
        return messages

    def triggers(self, space: str) -> list[dict[str, Any]]:
        """The space's raw trigger records."""
        records: list[dict[str, Any]] = self._call("triggers", space=space)["triggers"]
        return records

    def trigger_patch(
        self, space: str, id: str, patch: Mapping[str, Any], rev: int | None = None
    ) -> dict[str, Any]:
        """A partial update of record `id`; with `rev`, only if the record is still at it."""
        record: dict[str, Any] = self._call(
            "trigger_patch", dict(patch), space=space, id=id, rev=rev
        )
        return record

    def why(
        self, trigger: str, at: str | datetime | None = None, key: str | None = None
    ) -> dict[str, Any]:
        """Why `trigger` (its id, or its name) fired or did not at `at` (default: its last due
        slot), or for the fire `key`: `{verdict, reason, detail, checks, remedy?, …}`."""
        space = self._ctx.space
        tid = trigger
        if not any(r.get("id") == trigger for r in self.triggers(space)):
            named = [r["id"] for r in self.triggers(space) if r.get("name") == trigger]
            tid = named[0] if len(named) == 1 else trigger  # else: the space says 404
        when = at.isoformat() if isinstance(at, datetime) else at
        answer: dict[str, Any] = self._call("trigger_why", space=space, id=tid, at=when, key=key)
        return answer

    def cursor_get(self, key: str, default: Any = None) -> Any:
        """This trigger's stored value under `key`, or `default` if none was set."""
        try:
            return self._call("state_get", **self._state(key))["value"]
        except ApiError as exc:
            if exc.status == 404 and exc.code == "unknown_state":
                return default
            raise

    def cursor_set(self, key: str, value: Any) -> None:
        """Store `value` (JSON) under `key` for this trigger; it outlives the run."""
        self._call("state_put", {"value": value}, **self._state(key))

    def close(self) -> None:
        """Nothing to release: no connection is held between calls."""

    def _state(self, key: str) -> dict[str, str]:
        if not isinstance(key, str) or not key:
            raise ValueError(f"key: must be a non-empty string, got {key!r}")
        return {"space": self._ctx.space, "triggerId": self._ctx.trigger_id, "key": key}

    def _call(self, name: str, body: Any = None, **params: Any) -> Any:
        route = ROUTES[name]
        extra = headers(route, params)
        if writes(route):
            extra[IDEMPOTENCY_HEADER] = uuid.uuid4().hex
        request = urllib.request.Request(
            self._base + target(route, params),
            method=route.method,
            data=None if body is None else json.dumps(body).encode(),
            headers=self._headers(body, extra),
        )
        tries = RETRIES + 1 if writes(route) else 1
        for attempt in range(tries):
            try:
                return _send(request, self._timeout)
            except _AnswerLost as lost:
                if attempt == tries - 1 or (attempt == 0 and not lost.maybe_landed):
                    raise lost.error from None
                time.sleep(RETRY_DELAY_S * (attempt + 1))  # the same key: stored at most once
        raise AssertionError("unreachable")

    def _headers(self, body: Any, extra: dict[str, str]) -> dict[str, str]:
        head = {"Authorization": f"Bearer {self._ctx.token}", "Accept": "application/json"}
        if body is not None:
            head["Content-Type"] = "application/json"
        return head | extra


class _AnswerLost(Exception):
    """No answer; `maybe_landed` unless the connection was refused before anything was sent."""

    def __init__(self, error: ApiError, maybe_landed: bool) -> None:
        super().__init__(str(error))
        self.error, self.maybe_landed = error, maybe_landed


def _send(request: urllib.request.Request, timeout: float) -> Any:
    """The decoded JSON answer; `ApiError` for a refusal, `_AnswerLost` for no answer."""
    try:
        with _NO_PROXY.open(request, timeout=timeout) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        with exc:
            raise error_from(exc.code, exc.read()) from None
    except (urllib.error.URLError, HTTPException, OSError) as exc:
        where = f"{request.get_method()} {request.full_url}"
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        refused = isinstance(reason, ConnectionRefusedError)
        raise _AnswerLost(ApiError(0, "unreachable", f"{where}: {exc}"), not refused) from None
    return json.loads(raw) if raw else None
