"""The async `any@v1` client for the daemon and the CLI.

Owns talking to a space over HTTP with aiohttp: one method per route of
`core.routes.ROUTES` (same name), each a thin call of `call(name, …)`, which builds the
request from the route table and turns a refusal into `ApiError` (status, code, detail;
status 0 `unreachable` when there was no answer). What the device reads comes back typed
(`typed`: the `core.wire` Struct, lenient; an answer that does not fit is `ApiError`
`malformed_answer`); the rest, and `call`, answer the JSON as sent (what the CLI prints).
Given a `ClockOffset`, every answer's server time feeds it. The two stream routes return a
`Stream` (runtime.client.stream) sharing one stream session with no connection cap.
Must not interpret what it fetches.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import quote

import aiohttp
import msgspec

from core import chatwire, peerwire, wire
from core.clock import Clock, SystemClock
from core.routes import (
    IDEMPOTENCY_HEADER,
    RETRIES,
    RETRY_DELAY_S,
    ROUTES,
    SERVER_TIME_HEADER,
    ApiError,
    error_from,
    headers,
    path_params,
    target,
    writes,
)
from runtime.client.offset import ClockOffset
from runtime.client.sse import sse_session
from runtime.client.stream import Stream

__all__ = ["ApiError", "SpaceClient"]

JSON = Any
T = TypeVar("T")


def _answer_lost(exc: BaseException) -> bool:
    """Whether the request may have reached the space (a timeout, a dropped connection),
    not refused before it was sent (no route, connection refused). Once one may have,
    every retry carries its key until one is answered."""
    return not isinstance(exc, aiohttp.ClientConnectorError | aiohttp.InvalidURL)


class SpaceClient:
    """One space server, one bearer token. Use `async with`, or call `close()`."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 30.0,
        clock: Clock | None = None,
        session: aiohttp.ClientSession | None = None,
        offset: ClockOffset | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.offset = offset  # fed with each answer's server time (runtime.client.offset)
        self._token = token
        self._clock = clock or SystemClock()
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._own = session is None
        self._session = session  # made at first use, inside the running loop
        self._streams: aiohttp.ClientSession | None = None
        self.on_refused: Callable[[ApiError], object] | None = None  # told of each 401

    async def __aenter__(self) -> SpaceClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._own and self._session is not None:
            await self._session.close()
        if self._streams is not None:
            await self._streams.close()

    def _api(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self._session

    async def call(self, name: str, body: JSON = None, **params: object) -> JSON:
        """Send route `name` with its path/query/header `params` and JSON `body`; the answer."""
        raw = await self._send(name, body, params)
        return msgspec.json.decode(raw) if raw else None

    async def typed(self, name: str, type: type[T], body: JSON = None, **params: object) -> T:
        """Route `name`'s answer decoded into `type` (a `core.wire` Struct); an answer
        that does not fit is the space's fault, an `ApiError` (status 0 is not used)."""
        raw = await self._send(name, body, params)
        try:
            return msgspec.json.decode(raw, type=type)
        except msgspec.DecodeError as exc:  # ValidationError included
            raise ApiError(200, "malformed_answer", f"{name}: {exc}") from exc

    async def _send(self, name: str, body: JSON, params: dict[str, object]) -> bytes:
        """One request; a write carries an `Idempotency-Key` and is sent again (same key) when
        its answer was lost, so a retry never stores twice."""
        route = ROUTES[name]
        if route.body and body is None:
            raise ValueError(f"{name}: a JSON body is required")
        if body is not None and not route.body:
            raise ValueError(f"{name}: takes no body")
        head = {"Authorization": f"Bearer {self._token}", **headers(route, params)}
        data = wire.encode(body) if body is not None else None
        if data is not None:
            head["Content-Type"] = "application/json"
        if writes(route):
            head[IDEMPOTENCY_HEADER] = uuid.uuid4().hex
        url = self.url + target(route, params)
        tries = RETRIES + 1 if writes(route) else 1
        for attempt in range(tries):
            began = self.offset.begin() if self.offset is not None else None
            try:
                async with self._api().request(route.method, url, data=data, headers=head) as r:
                    raw = await r.read()
                    status = r.status
                if began is not None and self.offset is not None:
                    self.offset.observe(began, r.headers.get(SERVER_TIME_HEADER))
                break
            except (aiohttp.ClientError, TimeoutError) as exc:
                if attempt == tries - 1 or (attempt == 0 and not _answer_lost(exc)):
                    detail = f"{route.method} {url}: {no_answer(exc)}"
                    raise ApiError(0, "unreachable", detail) from exc
                await self._clock.sleep(RETRY_DELAY_S * (attempt + 1))  # a restart's window
        if status >= 400:
            error = error_from(status, raw)
            if status == 401 and self.on_refused is not None:  # this token is no good
                self.on_refused(error)
            raise error
        return raw

    async def healthz(self) -> dict[str, Any]:
        """`GET /healthz` (not a `/v1` route): `{"status": "ok"}`, or what fails (a 503's body)."""
        url = self.url + "/healthz"
        try:
            async with self._api().get(url) as resp:
                raw = await resp.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ApiError(0, "unreachable", f"GET {url}: {no_answer(exc)}") from exc
        try:
            found = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            found = None
        return found if isinstance(found, dict) else {"status": f"http_{resp.status}"}

    def subscribe(self, name: str, *, last_id: int | None = None, **options: Any) -> Stream:
        """A `Stream` to stream route `name` (path params and Stream options)."""
        route = ROUTES[name]
        if not route.stream:
            raise ValueError(f"{name}: not a stream route")
        names = (*path_params(route), *route.query)
        params = {k: options.pop(k) for k in names if k in options}
        if self._streams is None:
            self._streams = sse_session()
        url = self.url + target(route, params)
        return Stream(
            url, self._token, clock=self._clock, session=self._streams, last_id=last_id, **options
        )

    # -- spaces and tokens
    async def openapi(self) -> JSON:
        return await self.call("openapi")

    async def space_create(self, body: JSON) -> wire.Space:
        return await self.typed("space_create", wire.Space, body)

    async def spaces(self) -> wire.SpaceList:
        return await self.typed("spaces", wire.SpaceList)

    async def space_get(self, space: str) -> wire.Space:
        return await self.typed("space_get", wire.Space, space=space)

    async def token_device(self, body: JSON) -> JSON:
        return await self.call("token_device", body)

    async def token_run(self, space: str, body: JSON) -> wire.TokenOut:
        return await self.typed("token_run", wire.TokenOut, body, space=space)

    async def tokens(self, all: bool | None = None) -> JSON:
        return await self.call("tokens", all=all)

    async def token_revoke(self, id: str) -> JSON:
        return await self.call("token_revoke", id=id)

    async def token_rotate_admin(self) -> JSON:
        return await self.call("token_rotate_admin")

    # -- trigger records
    async def triggers(self, space: str) -> JSON:
        return await self.call("triggers", space=space)

    async def trigger_page(
        self, space: str, after: str = "", limit: int = 5000
    ) -> wire.TriggerPage:
        """A page of records as stored, undecoded (`records.load` each): no dict per record."""
        return await self.typed(
            "triggers", wire.TriggerPage, space=space, after=after or None, limit=limit, stored=1
        )

    async def trigger_create(self, space: str, body: JSON, note: str = "") -> JSON:
        return await self.call("trigger_create", body, space=space, note=quote(note) or None)

    async def trigger_get(self, space: str, id: str) -> JSON:
        return await self.call("trigger_get", space=space, id=id)

    async def trigger_put(self, space: str, id: str, body: JSON) -> JSON:
        return await self.call("trigger_put", body, space=space, id=id)

    async def trigger_patch(
        self, space: str, id: str, body: JSON, rev: int | None = None, note: str = ""
    ) -> JSON:
        """`note` goes with the revision (`Baton-Note`), for `baton why`."""
        return await self.call(
            "trigger_patch", body, space=space, id=id, rev=rev, note=quote(note) or None
        )

    async def trigger_backfill(self, space: str, id: str, body: JSON) -> JSON:
        return await self.call("trigger_backfill", body, space=space, id=id)

    async def trigger_run(self, space: str, id: str, note: str = "") -> JSON:
        """Ask the device that runs the trigger to run it now; `{key, peer, …}` (202)."""
        return await self.call("trigger_run", space=space, id=id, note=quote(note) or None)

    async def trigger_delete(
        self, space: str, id: str, rev: int | None = None, note: str = ""
    ) -> JSON:
        return await self.call(
            "trigger_delete", space=space, id=id, rev=rev, note=quote(note) or None
        )

    async def trigger_status(self, space: str, id: str, body: JSON) -> JSON:
        return await self.call("trigger_status", body, space=space, id=id)

    async def trigger_why(self, space: str, id: str, **query: object) -> JSON:
        """`at=`, `key=` or `since=`/`until=`/`limit=`: why its slot fired or did not."""
        return await self.call("trigger_why", space=space, id=id, **query)

    async def trigger_next(self, space: str, id: str, count: int | None = None) -> JSON:
        """Its next fires (`count`, default 10) with DST notes, as `triggers show` lists them."""
        return await self.call("trigger_next", space=space, id=id, count=count)

    async def changes(
        self, space: str, since: int | None = None, limit: int | None = None
    ) -> wire.ChangePage:
        return await self.typed("changes", wire.ChangePage, space=space, since=since, limit=limit)

    def changes_stream(
        self, space: str, last_id: int | None = None, omit: str | None = None, **options: Any
    ) -> Stream:
        """`omit`: leave out the stamps this device posted with that writer tag."""
        return self.subscribe("changes_stream", space=space, last_id=last_id, omit=omit, **options)

    # -- chats
    async def chat_create(self, space: str, body: JSON | None = None) -> JSON:
        return await self.call("chat_create", body or {}, space=space)

    async def chats(self, space: str) -> JSON:
        return await self.call("chats", space=space)

    async def chat_send(self, space: str, object_id: str, body: JSON) -> chatwire.Message:
        return await self.typed(
            "chat_send", chatwire.Message, body, space=space, objectId=object_id
        )

    async def chat_edit(
        self, space: str, object_id: str, message_id: str, body: JSON
    ) -> chatwire.Message:
        """Replace an agent message's `text` and/or set its `done` (the reply grows in place)."""
        params = {"space": space, "objectId": object_id, "messageId": message_id}
        return await self.typed("chat_edit", chatwire.Message, body, **params)

    async def chat_messages(
        self,
        space: str,
        object_id: str,
        after: int | None = None,
        limit: int | None = None,
        *,
        latest: bool = False,
    ) -> chatwire.MessagePage[msgspec.Raw]:
        """A history page, oldest first (`latest`: the newest `limit` messages), each
        message as sent: decode them one by one (`core.chatwire.each`)."""
        params = {
            "space": space,
            "objectId": object_id,
            "after": after,
            "limit": limit,
            "latest": 1 if latest else None,
        }
        return await self.typed("chat_messages", chatwire.MessagePage[msgspec.Raw], **params)

    def chat_stream(
        self, space: str, object_id: str, last_id: int | None = None, **options: Any
    ) -> Stream:
        params = {"space": space, "objectId": object_id, **options}
        return self.subscribe("chat_stream", last_id=last_id, **params)

    # -- programs
    async def program_put(self, space: str, ref: str, body: JSON) -> JSON:
        return await self.call("program_put", body, space=space, ref=ref)

    async def program_get(self, space: str, ref: str) -> wire.ProgramOut:
        return await self.typed("program_get", wire.ProgramOut, space=space, ref=ref)

    async def programs(self, space: str) -> wire.ProgramList:
        return await self.typed("programs", wire.ProgramList, space=space)

    # -- devices, election, fires
    async def device_put(self, space: str, peer: str, body: JSON) -> JSON:
        return await self.call("device_put", body, space=space, peer=peer)

    async def devices(self, space: str) -> peerwire.DeviceList:
        return await self.typed("devices", peerwire.DeviceList, space=space)

    async def election(self, space: str) -> peerwire.LeaseOut:
        return await self.typed("election", peerwire.LeaseOut, space=space)

    async def election_claim(self, space: str, body: peerwire.LeaseIn) -> peerwire.LeaseOut:
        return await self.typed("election_claim", peerwire.LeaseOut, body, space=space)

    async def election_release(self, space: str, body: peerwire.LeaseIn) -> peerwire.LeaseOut:
        return await self.typed("election_release", peerwire.LeaseOut, body, space=space)

    async def election_handover(self, space: str, body: peerwire.HandoverIn) -> peerwire.LeaseOut:
        return await self.typed("election_handover", peerwire.LeaseOut, body, space=space)

    async def election_want(self, space: str, body: peerwire.WantIn) -> peerwire.LeaseOut:
        return await self.typed("election_want", peerwire.LeaseOut, body, space=space)

    async def fires_claim(self, space: str, body: JSON) -> JSON:
        return await self.call("fires_claim", body, space=space)

    async def fires_claim_list(self, space: str, claims: list[wire.FireIn]) -> wire.FireResults:
        """Claims in one request, each taken or refused on its own: one result each."""
        return await self.typed("fires_claim", wire.FireResults, claims, space=space)

    async def fires(self, space: str, trigger: str | None = None, limit: int | None = None) -> JSON:
        return await self.call("fires", space=space, trigger=trigger, limit=limit)

    # -- runs, turns and state
    async def run_create(self, space: str, body: JSON) -> JSON:
        return await self.call("run_create", body, space=space)

    async def run_create_list(
        self, space: str, runs: list[wire.RunIn], writer: str | None = None
    ) -> wire.RunResults:
        """Runs (with their stamps) in one request, each written or refused on its own;
        `writer`: the tag the stamps are marked with (`changes_stream(omit=…)`)."""
        return await self.typed("run_create", wire.RunResults, runs, space=space, writer=writer)

    async def runs(self, space: str, **query: object) -> JSON:
        return await self.call("runs", space=space, **query)

    async def run_get(self, space: str, run_id: str) -> JSON:
        return await self.call("run_get", space=space, runId=run_id)

    async def runs_rollup(self, space: str, trigger: str | None = None) -> JSON:
        return await self.call("runs_rollup", space=space, trigger=trigger)

    async def turn_create(self, space: str, body: JSON) -> JSON:
        return await self.call("turn_create", body, space=space)

    async def turns(self, space: str, **query: object) -> JSON:
        return await self.call("turns", space=space, **query)

    async def state_get(self, space: str, trigger_id: str, key: str) -> JSON:
        return await self.call("state_get", space=space, triggerId=trigger_id, key=key)

    async def state_put(self, space: str, trigger_id: str, key: str, body: JSON) -> JSON:
        return await self.call("state_put", body, space=space, triggerId=trigger_id, key=key)


def no_answer(exc: BaseException) -> str:
    """Why there was no answer, in words (`Cannot connect to host 127.0.0.1:9 …`, `timed
    out`), never the exception's repr."""
    if isinstance(exc, TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__
