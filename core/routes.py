"""The `any@v1` route table: every path of the space API, written once.

Owns, per route: its name, method, path template, whether it takes a JSON body,
which query parameters and headers it accepts, and whether it answers with an
SSE stream. The server registers its handlers by route name (`space.http.add_route`),
and both clients, the synchronous one for programs (`programs.anyv1`) and the async
one for the daemon and CLI (`runtime.client.api`), build their requests from it, so
neither side can drift. Also owns what a client raises on a refusal (`ApiError`,
built from the house error body) and the pure helpers that turn a route and its
parameters into a request target. No I/O; imports nothing of ours.
"""

from __future__ import annotations

import json
import string
from collections.abc import Mapping
from urllib.parse import quote, urlencode

import msgspec

PREFIX = "/v1"
SERVER_TIME_HEADER = "Baton-Server-Time"  # on every answer: the space's clock, RFC 3339
IDEMPOTENCY_HEADER = "Idempotency-Key"  # every write carries one; a retry sends it again
RETRIES = 2  # a write whose answer was lost (timeout, dropped connection) is sent again
RETRY_DELAY_S = 0.5  # …after 0.5 s, then 1 s: a space restart's window


class Route(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    method: str
    path: str  # template under PREFIX, e.g. "/spaces/{space}/triggers/{id}"
    body: bool = False  # takes a JSON body
    query: tuple[str, ...] = ()  # accepted query parameters (None values are left out)
    headers: Mapping[str, str] = {}  # parameter name -> HTTP header, e.g. rev -> If-Match
    stream: bool = False  # answers text/event-stream


class ApiError(RuntimeError):
    """A refusal from the space (or no answer at all: status 0, code `unreachable`)."""

    def __init__(self, status: int, code: str, detail: str = "") -> None:
        super().__init__(f"{status} {code}: {detail}" if detail else f"{status} {code}")
        self.status = status
        self.code = code
        self.detail = detail


_S = "/spaces/{space}"
_T = _S + "/triggers/{id}"
_CHAT = _S + "/chats/{objectId}"

ROUTES: dict[str, Route] = {
    r.name: r
    for r in (
        Route(name="openapi", method="GET", path="/openapi.json"),
        Route(name="space_create", method="POST", path="/spaces", body=True),
        Route(name="spaces", method="GET", path="/spaces"),
        Route(name="space_get", method="GET", path=_S),
        Route(name="token_device", method="POST", path="/tokens/device", body=True),
        Route(name="token_run", method="POST", path=_S + "/tokens/run", body=True),
        Route(name="tokens", method="GET", path="/tokens", query=("all",)),
        Route(name="token_revoke", method="DELETE", path="/tokens/{id}"),
        Route(name="token_rotate_admin", method="POST", path="/tokens/admin/rotate"),
        Route(
            name="triggers", method="GET", path=_S + "/triggers", query=("after", "limit", "stored")
        ),
        Route(
            name="trigger_create",
            method="POST",
            path=_S + "/triggers",
            body=True,
            headers={"note": "Baton-Note"},
        ),
        Route(name="trigger_get", method="GET", path=_T),
        Route(name="trigger_put", method="PUT", path=_T, body=True),
        Route(
            name="trigger_patch",
            method="PATCH",
            path=_T,
            body=True,
            headers={"rev": "If-Match", "note": "Baton-Note"},
        ),
        Route(
            name="trigger_delete",
            method="DELETE",
            path=_T,
            headers={"rev": "If-Match", "note": "Baton-Note"},
        ),
        Route(name="trigger_status", method="POST", path=_T + "/status", body=True),
        Route(
            name="trigger_why",
            method="GET",
            path=_T + "/why",
            query=("at", "key", "since", "until", "limit"),
        ),
        Route(name="trigger_next", method="GET", path=_T + "/next", query=("count",)),
        Route(name="trigger_backfill", method="POST", path=_T + "/backfill", body=True),
        Route(
            name="trigger_run",
            method="POST",
            path=_T + "/run",
            headers={"rev": "If-Match", "note": "Baton-Note"},
        ),
        Route(name="changes", method="GET", path=_S + "/changes", query=("since", "limit")),
        Route(
            name="changes_stream",
            method="GET",
            path=_S + "/changes/stream",
            query=("omit",),
            stream=True,
        ),
        Route(name="chat_create", method="POST", path=_S + "/chats", body=True),
        Route(name="chats", method="GET", path=_S + "/chats"),
        Route(name="chat_send", method="POST", path=_CHAT + "/messages", body=True),
        Route(name="chat_edit", method="PATCH", path=_CHAT + "/messages/{messageId}", body=True),
        Route(
            name="chat_messages",
            method="GET",
            path=_CHAT + "/messages",
            query=("after", "limit", "latest"),
        ),
        Route(name="chat_stream", method="GET", path=_CHAT + "/stream", stream=True),
        Route(name="program_put", method="PUT", path=_S + "/programs/{ref}", body=True),
        Route(name="program_get", method="GET", path=_S + "/programs/{ref}"),
        Route(name="programs", method="GET", path=_S + "/programs"),
        Route(name="device_put", method="PUT", path=_S + "/devices/{peer}", body=True),
        Route(name="devices", method="GET", path=_S + "/devices"),
        Route(name="election", method="GET", path=_S + "/election"),
        Route(name="election_claim", method="POST", path=_S + "/election/claim", body=True),
        Route(name="election_release", method="POST", path=_S + "/election/release", body=True),
        Route(name="election_handover", method="POST", path=_S + "/election/handover", body=True),
        Route(name="election_want", method="POST", path=_S + "/election/want", body=True),
        Route(name="fires_claim", method="POST", path=_S + "/fires", body=True),
        Route(name="fires", method="GET", path=_S + "/fires", query=("trigger", "limit")),
        Route(
            name="run_create",
            method="POST",
            path=_S + "/runs",
            body=True,
            headers={"writer": "Baton-Writer"},
        ),
        Route(
            name="runs",
            method="GET",
            path=_S + "/runs",
            query=("trigger", "status", "since", "limit"),
        ),
        Route(name="run_get", method="GET", path=_S + "/runs/{runId}"),
        Route(name="runs_rollup", method="GET", path=_S + "/runs/rollup", query=("trigger",)),
        Route(name="turn_create", method="POST", path=_S + "/turns", body=True),
        Route(name="turns", method="GET", path=_S + "/turns", query=("chat", "since", "limit")),
        Route(name="state_get", method="GET", path=_S + "/state/{triggerId}/{key}"),
        Route(name="state_put", method="PUT", path=_S + "/state/{triggerId}/{key}", body=True),
    )
}


def path_params(route: Route) -> tuple[str, ...]:
    """The names of the `{placeholders}` in the route's path, in order."""
    return tuple(name for _, name, _, _ in string.Formatter().parse(route.path) if name)


def target(route: Route, params: Mapping[str, object]) -> str:
    """The request target (path and query) for `route`; every placeholder must be given."""
    missing = [name for name in path_params(route) if params.get(name) in (None, "")]
    if missing:
        raise ValueError(f"{route.name}: missing path parameter {missing[0]!r}")
    unknown = set(params) - set(path_params(route)) - set(route.query) - set(route.headers)
    if unknown:
        raise ValueError(f"{route.name}: unknown parameter {sorted(unknown)[0]!r}")
    path = route.path.format_map({k: quote(str(params[k]), safe="@:") for k in path_params(route)})
    query = {k: _scalar(params[k]) for k in route.query if params.get(k) is not None}
    return PREFIX + path + ("?" + urlencode(query) if query else "")


def headers(route: Route, params: Mapping[str, object]) -> dict[str, str]:
    """The optional headers the parameters ask for (e.g. `If-Match` from `rev`)."""
    return {h: str(params[k]) for k, h in route.headers.items() if params.get(k) is not None}


def writes(route: Route) -> bool:
    """Whether `route` changes the space (so its requests carry an `Idempotency-Key`)."""
    return route.method != "GET"


def error_from(status: int, body: bytes) -> ApiError:
    """An `ApiError` from an error answer: the house body if it is one, else the raw text."""
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("error"), str):
        return ApiError(status, doc["error"], str(doc.get("detail", "")))
    text = body.decode("utf-8", "replace").strip()[:300]
    return ApiError(status, f"http_{status}", text)


def _scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
