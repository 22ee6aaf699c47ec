"""Typed answers on the device: lenient to what a newer or a foreign space adds or leaves out.

Against a foreign space on 127.0.0.1 that answers each route with the JSON a test gives it
(any server speaking any@v1 may stand in for ours), per area the device reads — devices,
the election, spaces, chat history pages, chat-watch's posts, and the fire path's claims,
run tokens, program sources and run writes: an unknown field is ignored, a field the SPEC
leaves optional is defaulted, an answer that does not fit is `malformed_answer`, and one
message of a page that does not fit is skipped while the rest are delivered. Requests stay
strict: a body with an unknown field is refused.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from aiohttp import web
from waiting import eventually

from core import answers, chatwire, peerwire, wire
from core.clock import FakeClock
from core.routes import PREFIX, ROUTES, ApiError
from runtime.chat.link import ChatLink
from runtime.client.api import SpaceClient
from runtime.client.seat import Seat
from runtime.election.calls import LeaseCalls, view_of
from runtime.election.decision import Config
from runtime.election.heartbeat import Heartbeat
from runtime.election.loop import Elector
from runtime.election.takeover import Takeover
from runtime.feeds import followed as chatfeed
from triggers.records import PeerId

SPACE, CHAT = "home", "chat_1"
AT = "2026-12-01T09:00:00.000Z"
DEVICE = {"peer": "box", "lastSeen": AT, "upSince": AT, "live": True}
LEASE = {"active": "box", "term": 3, "expiresAt": None, "want": None}
ANSWERED = (
    "devices",
    "device_put",
    "election",
    "election_claim",
    "election_release",
    "space_get",
    "spaces",
    "trigger_put",
    "chat_messages",
    "chat_send",
    "chat_edit",
    "token_run",
    "program_get",
    "fires_claim",
    "run_create",
)


def message(seq: int, **more: Any) -> dict[str, Any]:
    at = f"2026-12-01T09:00:{seq:02}.000Z"
    body = {"messageId": f"msg_{seq}", "seq": seq, "objectId": CHAT, "text": f"m{seq}"}
    return body | {"createdAt": at} | more


class Foreign:
    """A space of another make: answers route `name` with `answers[name]`, keeps what it got."""

    def __init__(self) -> None:
        self.answers: dict[str, Any] = {name: {} for name in ANSWERED}
        self.got: dict[str, Any] = {}
        self.client: SpaceClient

    def seat(self, peer: str = "box") -> Seat:
        return Seat(self.client, SPACE, PeerId(peer), FakeClock())

    def app(self) -> web.Application:
        app = web.Application()
        for name in ANSWERED:
            route = ROUTES[name]
            app.router.add_route(route.method, PREFIX + route.path, self._answer(name))
        return app

    def _answer(self, name: str) -> Any:
        async def handle(request: web.Request) -> web.Response:
            body = await request.read()
            self.got[name] = msgspec.json.decode(body) if body else None
            return web.json_response(self.answers[name])

        return handle


@pytest.fixture
async def foreign(aiohttp_server) -> AsyncIterator[Foreign]:
    space = Foreign()
    server = await aiohttp_server(space.app())
    async with SpaceClient(str(server.make_url("/")), "tok", clock=FakeClock()) as client:
        space.client = client
        yield space


async def malformed(call: Any, route: str) -> None:
    with pytest.raises(ApiError) as caught:
        await call
    assert (caught.value.status, caught.value.code) == (200, "malformed_answer")
    assert route in caught.value.detail


# --- devices


async def test_a_device_listing_ignores_unknown_fields_and_defaults_optional_ones(foreign):
    foreign.answers["devices"] = {"devices": [DEVICE | {"rack": "b2"}], "region": "eu"}
    (box,) = (await foreign.client.devices(SPACE)).devices
    assert (box.peer, box.live, box.name, box.priority, box.stopped, box.status) == (
        "box",
        True,
        "",
        0,
        False,
        {},
    )
    assert box.lastSeen == box.upSince == datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


async def test_heartbeat_and_takeover_read_a_listing_without_priority_or_name(foreign):
    foreign.answers["devices"] = {"devices": [DEVICE, DEVICE | {"peer": "lap", "live": False}]}
    beat = Heartbeat(foreign.seat(), "Box")
    await beat.beat(priority=5, every=5.0)
    assert (beat.live, beat.priorities) == ({"box"}, {"box": 0})
    assert foreign.got["device_put"] == {"name": "Box", "priority": 5}
    first, last = await Takeover(foreign.seat()).confirm(0.0)
    assert [d.peer for d in first] == [d.peer for d in last] == ["box", "lap"]


async def test_a_heartbeat_carries_the_clock_offset_once_it_is_known(foreign):
    foreign.answers["devices"] = {"devices": [DEVICE]}
    beat = Heartbeat(foreign.seat(), "Box")
    offset: list[float | None] = [None]
    beat.offset = lambda: offset[0]
    await beat.beat(priority=0, every=5.0)
    assert "offsetMs" not in foreign.got["device_put"]  # not measured yet: nothing to say
    offset[0] = -1.23456
    await beat.beat(priority=0, every=5.0)
    assert foreign.got["device_put"]["offsetMs"] == -1234.6


@pytest.mark.parametrize(
    "listing",
    [
        {"devices": [DEVICE | {"lastSeen": "2026-12-01T09:00:00"}]},  # no offset
        {"devices": [DEVICE | {"live": "yes"}]},
        {"devices": [{"peer": "box", "live": True}]},  # no lastSeen, no upSince
        {"peers": []},
    ],
)
async def test_a_device_listing_that_does_not_fit_is_malformed(foreign, listing):
    foreign.answers["devices"] = listing
    await malformed(foreign.client.devices(SPACE), "devices")


# --- the election


async def test_a_lease_ignores_unknown_fields_and_defaults_what_our_space_adds(foreign):
    foreign.answers["election"] = LEASE | {"region": "eu"}
    lease = await LeaseCalls(foreign.seat("lap")).read()
    assert (lease.active, lease.term, lease.expiresAt, lease.want) == ("box", 3, None, None)
    assert (lease.expiresInMs, lease.serverTime, lease.leaseSeconds) == (None, None, None)
    view = view_of(lease, now=100.0)
    assert (view.active, view.term, view.expires_at_mono) == ("box", 3, float("-inf"))


async def test_an_acquire_and_a_release_read_the_lease_they_answer(foreign):
    calls = LeaseCalls(foreign.seat())
    foreign.answers["election_claim"] = LEASE | {"expiresInMs": 15000, "extra": [1]}
    claimed = await calls.acquire(3)
    assert claimed is not None and (claimed.active, claimed.expiresInMs) == ("box", 15000)
    assert foreign.got["election_claim"] == {"peer": "box", "term": 3}
    foreign.answers["election_release"] = LEASE | {"active": None}
    released = await foreign.client.election_release(SPACE, {"peer": "box", "term": 3})
    assert released.active is None


@pytest.mark.parametrize(
    ("lease_seconds", "beat"),
    [(None, 1.0), (6.0, 2.0)],  # 3 s configured: renew every 1 s
)
async def test_the_elector_follows_the_spaces_lease_length_only_when_it_says_one(
    foreign, lease_seconds, beat
):
    lease = LEASE | {"active": "lap", "term": 4, "expiresInMs": 3000}
    if lease_seconds is not None:
        lease["leaseSeconds"] = lease_seconds
    foreign.answers["election"] = foreign.answers["election_claim"] = lease
    foreign.answers["devices"] = {"devices": [DEVICE | {"peer": "lap"}]}
    config = Config(lease_s=3.0, renew_s=1.0, margin_s=1.0, poll_s=0.4, settle_s=2.0)
    elector = Elector(foreign.seat("lap"), name="Lap", config=config)
    task = asyncio.create_task(elector.run())
    try:
        await eventually(elector.may_fire, what="the elector holding the lease")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert (elector.term, elector.beat_seconds) == (4, beat)


@pytest.mark.parametrize(
    "lease",
    [
        {"active": "box", "expiresAt": None, "want": None},  # no term
        LEASE | {"term": "three"},
        LEASE | {"leaseSeconds": "fifteen"},
        [],
    ],
)
async def test_a_lease_that_does_not_fit_is_malformed(foreign, lease):
    foreign.answers["election"] = foreign.answers["election_claim"] = lease
    await malformed(LeaseCalls(foreign.seat()).read(), "election")
    await malformed(LeaseCalls(foreign.seat()).acquire(3), "election_claim")


# --- spaces


async def test_a_space_ignores_unknown_fields_and_defaults_name_and_created(foreign):
    foreign.answers["space_get"] = {"id": SPACE, "generalChat": CHAT, "plan": "pro"}
    space = await foreign.client.space_get(SPACE)
    assert (space.id, space.generalChat, space.name, space.createdAt) == (SPACE, CHAT, "", None)
    foreign.answers["spaces"] = {"spaces": [{"id": SPACE, "generalChat": None}], "total": 1}
    assert [(s.id, s.generalChat) for s in (await foreign.client.spaces()).spaces] == [
        (SPACE, None)
    ]


async def test_chat_watch_seeds_its_record_from_a_foreign_spaces_answer(foreign):
    foreign.answers["space_get"] = {"id": SPACE, "generalChat": CHAT, "plan": "pro"}
    assert await ChatLink(foreign.seat()).seed()
    assert foreign.got["trigger_put"]["spec"] == {"dataset": "chat_messages", "objectId": CHAT}


@pytest.mark.parametrize("space", [{"id": 7, "generalChat": CHAT}, {"id": SPACE}, {"name": "Home"}])
async def test_a_space_that_does_not_fit_is_malformed(foreign, space):
    foreign.answers["space_get"] = space
    await malformed(foreign.client.space_get(SPACE), "space_get")
    assert not await ChatLink(foreign.seat()).seed()  # retried later


# --- chat history pages

AGENT = {"name": "triage@v1", "done": True, "model": "llama"}  # a field our space never sent
PAGE = {
    "messages": [message(1), {"seq": "two"}, message(3, agent=AGENT, reactions=[]), "four"],
    "next": 4,
    "more": False,
    "cursor": "opaque",
}


async def test_one_bad_message_of_a_page_is_skipped_and_the_rest_delivered(foreign, caplog):
    foreign.answers["chat_messages"] = PAGE
    with caplog.at_level(logging.WARNING):
        found = [m async for m in chatfeed.history(foreign.client, SPACE, CHAT, 0, 10)]
    assert [(m.message_id, m.text) for m in found] == [("msg_1", "m1"), ("msg_3", "m3")]
    assert found[1].agent == AGENT  # handed to the fire's event as it came
    assert caplog.text.count("history message skipped") == 2


async def test_chat_watch_history_skips_a_bad_message_and_reads_a_newer_agent(foreign, caplog):
    foreign.answers["chat_messages"] = PAGE
    with caplog.at_level(logging.WARNING):
        history = await ChatLink(foreign.seat()).history(SPACE, CHAT, 20)
    assert history == [message(1), message(3, agent={"name": "triage@v1", "done": True})]
    assert caplog.text.count("history message left out") == 2


async def test_a_page_without_next_or_more_is_the_last(foreign):
    foreign.answers["chat_messages"] = {"messages": [message(1), message(2)]}
    page = await foreign.client.chat_messages(SPACE, CHAT)
    assert (len(page.messages), page.next, page.more) == (2, 0, False)
    found = [m.seq async for m in chatfeed.history(foreign.client, SPACE, CHAT, 0, 10)]
    assert found == [1, 2]


@pytest.mark.parametrize(
    "page", [{"messages": "none"}, {"next": 3}, PAGE | {"more": "maybe"}, [message(1)]]
)
async def test_a_page_that_does_not_fit_is_malformed(foreign, page):
    foreign.answers["chat_messages"] = page
    await malformed(foreign.client.chat_messages(SPACE, CHAT), "chat_messages")


async def test_chat_watch_posts_and_grows_a_reply_as_the_space_answers_it(foreign):
    link = ChatLink(foreign.seat())
    foreign.answers["chat_send"] = message(5, agent=AGENT | {"done": False}, reactions=[])
    agent = {"name": "chat-watch", "done": False}
    sent = await link.send(SPACE, CHAT, "He", agent)
    assert sent == message(5, agent={"name": "triage@v1", "done": False})
    assert foreign.got["chat_send"] == {"text": "He", "agent": agent}
    foreign.answers["chat_edit"] = message(5, agent=AGENT, text="Hello")
    grown = await link.edit(SPACE, CHAT, "msg_5", {"text": "Hello", "done": True})
    assert grown == message(5, agent={"name": "triage@v1", "done": True}, text="Hello")
    foreign.answers["chat_send"] = {"messageId": "msg_6", "text": "no seq"}
    await malformed(link.send(SPACE, CHAT, "x", {"name": "chat-watch"}), "chat_send")


# --- the fire path: claims, run tokens, program sources, run writes


async def test_the_fire_paths_answers_ignore_unknown_fields_and_default_optional_ones(foreign):
    client = foreign.client
    foreign.answers["token_run"] = {"token": "btr_1", "scope": "run"}
    assert (await client.token_run(SPACE, {"triggerId": "t", "runId": "r"})).token == "btr_1"
    foreign.answers["program_get"] = {"ref": "tick@v1", "source": "def main(a): ...", "x": 1}
    program = await client.program_get(SPACE, "tick@v1")
    assert (program.source, program.sha256, program.anyTool) == ("def main(a): ...", "", False)
    claim = {"triggerId": "t", "key": "k", "status": 201, "token": "btr_2", "shard": 3}
    foreign.answers["fires_claim"] = {"claims": [claim], "took": 1}
    (claimed,) = (await client.fires_claim_list(SPACE, [{"triggerId": "t"}])).claims
    assert (claimed.status, claimed.token, claimed.error) == (201, "btr_2", None)
    run = {"runId": "r", "status": 409, "error": "run_exists", "stored": 1}
    foreign.answers["run_create"] = {"runs": [run]}
    (written,) = (await client.run_create_list(SPACE, [{"runId": "r"}])).runs
    assert (written.status, written.error, written.stamps) == (409, "run_exists", None)


@pytest.mark.parametrize(
    ("route", "answer"),
    [
        ("token_run", {"id": "tok_1"}),
        ("program_get", {"ref": "tick@v1", "source": 3}),
        ("fires_claim", {"claims": [{"triggerId": "t", "key": "k", "status": "ok"}]}),
        ("run_create", {"runs": {}}),
    ],
)
async def test_a_fire_path_answer_that_does_not_fit_is_malformed(foreign, route, answer):
    foreign.answers[route] = answer
    calls = {
        "token_run": lambda c: c.token_run(SPACE, {}),
        "program_get": lambda c: c.program_get(SPACE, "tick@v1"),
        "fires_claim": lambda c: c.fires_claim_list(SPACE, [{}]),
        "run_create": lambda c: c.run_create_list(SPACE, [{}]),
    }
    await malformed(calls[route](foreign.client), route)


# --- the two bases


def test_requests_refuse_unknown_fields_and_answers_ignore_them():
    with pytest.raises(msgspec.ValidationError, match="unknown field `model`"):
        msgspec.json.decode(
            b'{"text": "x", "agent": ' + msgspec.json.encode(AGENT) + b"}", type=chatwire.MessageIn
        )
    answer = msgspec.json.encode(message(3, agent=AGENT, reactions=[]))
    assert chatwire.WIRE_MESSAGE.decode(answer).agent == chatwire.Agent(name="triage@v1", done=True)


def test_every_wire_struct_is_a_strict_request_or_a_lenient_answer():
    structs = [
        cls
        for module in (wire, peerwire, chatwire, answers)
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, msgspec.Struct) and cls not in (wire.Body, wire.Answer)
    ]
    assert len(structs) > 30
    for cls in structs:
        request = issubclass(cls, wire.Body) or cls is chatwire.AgentIn
        assert request or issubclass(cls, wire.Answer), cls
        assert cls.__struct_config__.forbid_unknown_fields == request, cls
