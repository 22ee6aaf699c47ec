"""`POST …/triggers/{id}/run`: a user's ask that a trigger run now, on the device that runs it.

Owns the route (SPEC "CLI conventions", `triggers run`): the record must decode, run a
user's program (no `internal:` one), be enabled, and the device responsible for it (its
owner, or the lease's holder for a floating one) must be live, else 409 naming it. Then
the ask is written through the store (`runAsked: {key: manual:<now>, requestedAt}`, a
compare-and-set write at the next rev, its revision op `run` with the asker as actor) and
the answer is 202 with the key. The device fires that key once, claimed like any fire
(runtime.fire.asked), so a second device or a restart never runs it twice. Must not claim
or run.
"""

from __future__ import annotations

from aiohttp import web

from core.wire import Answer
from space import trigger_store
from space.appstate import SETTINGS
from space.auth import author
from space.changes import notify
from space.http import Refusal, add_route, answer
from space.spaces import require_space
from space.store import STORE
from space.triggers import if_match
from triggers.records import INTERNAL_PREFIX, Salvaged, Trigger, load


class RunAskOut(Answer, frozen=True, kw_only=True, rename="camel"):
    trigger_id: str
    key: str  # the run's fire key, `manual:<requestedAt>`
    requested_at: str
    peer: str  # the device that runs it
    rev: int  # the record's rev with the ask written


async def post_run(request: web.Request) -> web.Response:
    space, tid = require_space(request), request.match_info["id"]
    store = request.app[STORE]
    _, raw = trigger_store.parsed(space, tid, await store.record_row(space, tid))
    record = load(raw)
    if isinstance(record, Salvaged):
        raise Refusal(409, "undecodable_record", f"trigger {tid!r} does not decode: {record.error}")
    if record.program.startswith(INTERNAL_PREFIX):
        detail = f"trigger {tid!r} runs {record.program}, which only the runtime runs"
        raise Refusal(409, "internal_program", detail)
    if not record.enabled:
        detail = f"trigger {tid!r} is paused: resume it first (`baton triggers resume {tid}`)"
        raise Refusal(409, "paused", detail)
    peer = await _runner(request, space, record)
    written = await store.ask_run(space, tid, if_match(request), author(request))
    notify(request.app, space)
    asked = written["runAsked"]
    out = RunAskOut(
        trigger_id=tid,
        key=asked["key"],
        requested_at=asked["requestedAt"],
        peer=peer,
        rev=written["rev"],
    )
    return answer(out, 202)


async def _runner(request: web.Request, space: str, record: Trigger) -> str:
    """The live device that runs `record` now; 409 `device_offline` naming it if none."""
    tid = record.id
    if record.owner:
        peer, whose = record.owner, f"trigger {tid!r} is pinned to {record.owner!r}"
    else:
        lease, at = await request.app[STORE].lease(space)
        if lease.lapsed(at) or lease.active is None:
            detail = f"trigger {tid!r} floats and no device holds the lease: no device is up"
            raise Refusal(409, "device_offline", detail)
        peer, whose = lease.active, f"trigger {tid!r} floats, run by {lease.active!r}"
    window = request.app[SETTINGS].live_seconds
    live, seen = await request.app[STORE].last_seen(space, peer, window)
    if not live:
        when = f"last seen {seen}" if seen else "never seen"
        detail = f"{whose}, which is offline ({when}): nothing runs it until it is back"
        raise Refusal(409, "device_offline", detail, peer=peer)
    return peer


def setup(app: web.Application) -> None:
    add_route(
        app,
        "trigger_run",
        post_run,
        "Ask the device that runs the trigger to run it now (202): a fire with key "
        "`manual:<requestedAt>`, claimed like any other; 409 when that device is offline",
        answer=RunAskOut,
    )
