"""chat-watch on its own: a fake responder and a fake space stand at the world's edge.

`Edge` records what the watcher sends, which histories it reads and which turns it
logs, and wakes waiters on every change; tests wait on it under a deadline. Time goes
through a FakeClock, so the responder timeout is reached by advancing it.
"""

import asyncio
import json
import sys
from collections.abc import Callable

import msgspec
import pytest

from core.chatwire import AgentIn, MessageEdit
from core.clock import FakeClock
from core.wire import TurnIn, to_wire
from runtime.chat.command import CommandResponder
from runtime.chat.responders import ResponderUnavailable
from runtime.chat.watch import ChatWatch

SPACE = "home"


def event(n: int, chat: str = "general", text: str | None = None, agent=None) -> dict:
    fire = {"space": SPACE, "objectId": chat, "messageId": f"m{n}", "text": text or f"text {n}"}
    if agent is not None:
        fire["agent"] = agent
    return fire


class Edge:
    """The space as the watcher sees it: posts, history reads, turn log."""

    def __init__(self) -> None:
        self.sent: list[dict] = []
        self.histories: list[tuple[str, str, int]] = []
        self.stored: dict[str, list[dict]] = {}
        self.turns: list[dict] = []
        self.fail_record = False
        self.record_attempts = 0
        self._changed = asyncio.Condition()

    async def send(self, space: str, object_id: str, text: str, agent: AgentIn) -> dict:
        message = {
            "messageId": f"r{len(self.sent)}",
            "objectId": object_id,
            "text": text,
            "agent": to_wire(agent),
        }
        self.sent.append({"space": space, **message})
        await self._bump()
        return message

    async def history(self, space: str, object_id: str, limit: int) -> list[dict]:
        self.histories.append((space, object_id, limit))
        await self._bump()
        return list(self.stored.get(object_id, []))

    async def record_turn(self, turn: TurnIn) -> None:
        self.record_attempts += 1
        if not self.fail_record:
            self.turns.append(to_wire(turn))
        await self._bump()
        if self.fail_record:
            raise OSError("space unreachable")

    async def _bump(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def until(self, check: Callable[[], bool]) -> None:
        async with asyncio.timeout(5), self._changed:
            await self._changed.wait_for(check)


class FakeResponder:
    """The LLM's stand-in: records calls, can be held at a gate; `boom` fails, `hang` hangs."""

    def __init__(self, ready: bool = True) -> None:
        self.ready = ready
        self.calls: list[tuple[list[dict], list[dict]]] = []
        self.gates: dict[str, asyncio.Event] = {}  # chat → gate held until set
        self.entered = asyncio.Event()
        self.active: dict[str, int] = {}  # chat → calls in progress
        self.most_active = {"any chat": 0, "one chat": 0}

    async def respond(self, snapshot: list[dict], pending: list[dict]) -> str | None:
        chat = pending[0]["objectId"]
        self.active[chat] = self.active.get(chat, 0) + 1
        most = self.most_active
        most["one chat"] = max(most["one chat"], self.active[chat])
        most["any chat"] = max(most["any chat"], sum(self.active.values()))
        try:
            return await self._respond(snapshot, pending)
        finally:
            self.active[chat] -= 1

    async def _respond(self, snapshot: list[dict], pending: list[dict]) -> str | None:
        self.calls.append((snapshot, pending))
        self.entered.set()
        texts = [m["text"] for m in pending]
        if gate := self.gates.get(pending[0]["objectId"]):
            await gate.wait()
        if "boom" in texts:
            raise RuntimeError("model exploded")
        if "hang" in texts:
            await asyncio.Event().wait()
        if "silent" in texts:
            return None
        return f"answering {len(pending)}: " + ",".join(m["messageId"] for m in pending)

    def hold(self, chat: str = "general") -> asyncio.Event:
        self.gates[chat] = asyncio.Event()
        self.entered.clear()
        return self.gates[chat]

    async def wait_entered(self) -> None:
        async with asyncio.timeout(5):
            await self.entered.wait()


@pytest.fixture
def edge() -> Edge:
    return Edge()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def make_watch(edge, clock):
    made: list[ChatWatch] = []

    def make(responder=None, **overrides) -> ChatWatch:
        watch = ChatWatch(
            responder or FakeResponder(),
            edge.send,
            edge.history,
            record_turn=edge.record_turn,
            clock=clock,
            **overrides,
        )
        made.append(watch)
        return watch

    yield make
    for watch in made:
        await watch.close()


async def test_a_message_is_answered_in_one_logged_turn(make_watch, edge):
    watch = make_watch()
    await watch.offer(event(1))
    await edge.until(lambda: edge.turns)
    reply = {"space": SPACE, "messageId": "r0", "objectId": "general", "text": "answering 1: m1"}
    assert edge.sent == [{**reply, "agent": {"name": "chat-watch", "done": True}}]
    turn = edge.turns[0]
    assert turn["turnId"].startswith("turn_")
    assert (turn["space"], turn["objectId"], turn["messageIds"]) == (SPACE, "general", ["m1"])
    assert (turn["outcome"], turn["error"], turn["calls"], turn["replies"]) == ("ok", "", 1, 1)
    assert (
        turn["startedAt"] == turn["finishedAt"] == "2026-01-01T00:00:00.000Z"
    )  # the one instant format
    assert watch.counters.starts == 1 and watch.counters.answered == 1
    assert watch.status().chats == []


async def test_the_same_message_is_answered_at_most_once(make_watch, edge):
    responder = FakeResponder()
    watch = make_watch(responder)
    await watch.offer(event(1))
    await watch.offer(event(1))  # redelivered while waiting
    await edge.until(lambda: edge.turns)
    await watch.offer(event(1))  # redelivered after the answer
    assert watch.status().chats == []  # nothing was queued, so no turn can follow
    assert [[m["messageId"] for m in p] for _, p in responder.calls] == [["m1"]]
    assert watch.counters.duplicates == 2 and len(edge.sent) == 1


async def test_seen_memory_is_bounded(make_watch, edge):
    watch = make_watch(FakeResponder(ready=False), seen_capacity=2)
    for n in (1, 2, 3, 1):  # m1 was forgotten when m3 came
        await watch.offer(event(n))
    assert watch.status().chats[0].waiting == 4 and watch.counters.duplicates == 0


@pytest.mark.parametrize(
    ("agent", "answered"),
    [
        (None, True),
        ({}, False),  # `agent` present means the agent wrote it
        ({"name": "trigger:digest"}, True),  # a nudge is answered like user input
        ({"name": "trigger:digest", "done": True}, True),
        ({"name": "chat-watch", "done": True}, False),  # its own reply
        ({"name": "triage", "done": True}, False),
        ({"name": "trigger:"}, False),
        ({"name": 5}, False),
        ("garbled", False),
    ],
)
async def test_which_messages_are_answered(make_watch, edge, agent, answered):
    watch = make_watch()
    await watch.offer(event(1, agent=agent))
    if not answered:
        assert watch.status().chats == [] and watch.counters.ignored == 1
        return
    await edge.until(lambda: edge.turns)
    assert edge.turns[0]["messageIds"] == ["m1"]
    assert watch.counters.nudges == (1 if agent else 0)


@pytest.mark.parametrize(
    ("fire", "field"),
    [
        ("text", "event: must be an object"),
        ({"objectId": "c", "messageId": "m"}, "event.space"),
        ({"space": SPACE, "messageId": "m"}, "event.objectId"),
        ({"space": SPACE, "objectId": "c", "messageId": ""}, "event.messageId"),
        ({"space": SPACE, "objectId": "c", "messageId": "m", "text": 3}, "event.text"),
    ],
)
async def test_a_malformed_fire_is_ignored_loudly(make_watch, caplog, fire, field):
    watch = make_watch()
    await watch.offer(fire)
    assert watch.counters.malformed == 1 and watch.status().chats == []
    assert field in caplog.text


async def test_a_message_during_a_turn_joins_that_turn(make_watch, edge):
    responder = FakeResponder()
    gate = responder.hold()
    watch = make_watch(responder)
    await watch.offer(event(1))
    await responder.wait_entered()
    await watch.offer(event(2))
    [chat] = watch.status().chats
    assert chat.turn_id and chat.waiting == 1  # queued in the live turn, no second turn
    gate.set()
    await edge.until(lambda: edge.turns)
    [turn] = edge.turns
    assert (turn["messageIds"], turn["calls"], turn["replies"]) == (["m1", "m2"], 2, 2)
    assert [[m["messageId"] for m in p] for _, p in responder.calls] == [["m1"], ["m2"]]
    second_snapshot = [m["messageId"] for m in responder.calls[1][0]]
    assert second_snapshot == ["m1", "r0"]  # the turn so far: what it answered and said
    assert [s["agent"]["done"] for s in edge.sent] == [True, True]  # each reply ends itself
    assert len(edge.histories) == 1 and watch.counters.starts == 1
    assert responder.most_active["one chat"] == 1


async def test_messages_wait_while_not_ready_then_are_answered_together(make_watch, edge):
    responder = FakeResponder(ready=False)
    watch = make_watch(responder)
    assert not watch.ready
    for n in (1, 2, 3):
        await watch.offer(event(n))
    [chat] = watch.status().chats
    assert (chat.turn_id, chat.waiting) == ("", 3) and edge.histories == []
    watch.set_ready(True)
    await edge.until(lambda: edge.turns)
    assert [[m["messageId"] for m in p] for _, p in responder.calls] == [["m1", "m2", "m3"]]
    assert edge.sent[0]["text"] == "answering 3: m1,m2,m3"
    assert edge.turns[0]["calls"] == 1 and watch.counters.starts == 1


async def test_a_full_waiting_queue_drops_the_oldest_and_counts_it(make_watch, edge, caplog):
    responder = FakeResponder(ready=False)
    watch = make_watch(responder, max_waiting=2)
    for n in (1, 2, 3):
        await watch.offer(event(n))
    assert watch.counters.dropped == 1 and "dropped waiting message m1" in caplog.text
    watch.set_ready(True)
    await edge.until(lambda: edge.turns)
    assert edge.turns[0]["messageIds"] == ["m2", "m3"]


async def test_not_ready_mid_turn_ends_the_turn_and_later_messages_wait(make_watch, edge):
    responder = FakeResponder()
    gate = responder.hold()
    watch = make_watch(responder)
    await watch.offer(event(1))
    await responder.wait_entered()
    await watch.offer(event(2))
    watch.set_ready(False)
    gate.set()
    await edge.until(lambda: edge.turns)
    assert edge.turns[0]["messageIds"] == ["m1"] and edge.sent[0]["agent"]["done"] is True
    assert [(c.turn_id, c.waiting) for c in watch.status().chats] == [("", 1)]
    watch.set_ready(True)
    await edge.until(lambda: len(edge.turns) == 2)
    assert edge.turns[1]["messageIds"] == ["m2"] and watch.counters.starts == 2


async def test_a_turn_sees_a_snapshot_of_recent_history_taken_once(make_watch, edge):
    edge.stored["general"] = [
        {"messageId": f"h{n}", "seq": n, "objectId": "general", "text": f"old {n}"}
        for n in (5, 1, 4, 2, 3)  # out of order: sorted by seq, last 3 kept
    ] + [{"messageId": "m1", "seq": 6, "objectId": "general", "text": "text 1"}]
    responder = FakeResponder()
    watch = make_watch(responder, snapshot_size=4)
    await watch.offer(event(1))
    await edge.until(lambda: edge.turns)
    assert edge.histories == [(SPACE, "general", 4)]
    snapshot, pending = responder.calls[0]
    assert [m["messageId"] for m in snapshot] == ["h3", "h4", "h5"]  # the answered one is pending
    assert pending == [event(1)]


async def test_one_chats_failure_is_its_own(make_watch, edge):
    responder = FakeResponder()
    gate = responder.hold("other")
    watch = make_watch(responder)
    await watch.offer(event(1, chat="other"))
    await responder.wait_entered()
    await watch.offer(event(2, text="boom"))  # runs while the other chat's turn is live
    await edge.until(lambda: edge.turns)
    [failed] = edge.turns
    assert (failed["objectId"], failed["outcome"]) == ("general", "error")
    assert failed["error"] == "RuntimeError: model exploded"
    assert edge.sent[0]["text"] == "Sorry, I could not answer that just now."
    assert [c.object_id for c in watch.status().chats] == ["other"]
    gate.set()
    await edge.until(lambda: len(edge.turns) == 2)
    assert (edge.turns[1]["objectId"], edge.turns[1]["outcome"]) == ("other", "ok")
    await watch.offer(event(3))  # the failed chat answers again
    await edge.until(lambda: len(edge.turns) == 3)
    assert edge.turns[2]["outcome"] == "ok" and watch.counters.failed == 1
    assert responder.most_active == {"any chat": 2, "one chat": 1}  # chats ran side by side


async def test_a_responder_timeout_fails_the_turn(make_watch, edge, clock):
    responder = FakeResponder()
    watch = make_watch(responder, reply_timeout=90, apology=None)
    await watch.offer(event(1, text="hang"))
    await responder.wait_entered()
    async with asyncio.timeout(5):
        await clock.wait_for_sleepers(1)
    clock.advance(90)
    await edge.until(lambda: edge.turns)
    assert edge.turns[0]["outcome"] == "timeout"
    assert edge.turns[0]["error"] == "TimeoutError: responder timed out after 90 s"
    assert edge.turns[0]["durationMs"] == 90_000 and edge.sent == []


async def test_messages_left_behind_by_a_failed_turn_start_a_new_one(make_watch, edge):
    responder = FakeResponder()
    gate = responder.hold()
    watch = make_watch(responder, apology=None)
    await watch.offer(event(1, text="boom"))
    await responder.wait_entered()
    await watch.offer(event(2))
    del responder.gates["general"]
    gate.set()
    await edge.until(lambda: len(edge.turns) == 2)
    assert [(t["messageIds"], t["outcome"]) for t in edge.turns] == [
        (["m1"], "error"),
        (["m2"], "ok"),
    ]


@pytest.mark.parametrize(("reply", "outcome", "sent"), [("silent", "ok", 0), ("fine", "ok", 1)])
async def test_no_reply_posts_nothing(make_watch, edge, reply, outcome, sent):
    watch = make_watch()
    await watch.offer(event(1, text=reply))
    await edge.until(lambda: edge.turns)
    assert (edge.turns[0]["outcome"], edge.turns[0]["replies"], len(edge.sent)) == (
        outcome,
        sent,
        sent,
    )


async def test_a_bad_reply_type_fails_the_turn(make_watch, edge):
    class Bad(FakeResponder):
        async def respond(self, snapshot, pending):
            return {"reply": "x"}

    watch = make_watch(Bad())
    await watch.offer(event(1))
    await edge.until(lambda: edge.turns)
    assert edge.turns[0]["error"] == "ResponderFailed: reply: must be a string or null, got dict"


async def test_a_turn_log_failure_is_counted_and_the_watch_goes_on(make_watch, edge, caplog):
    watch = make_watch()
    edge.fail_record = True
    await watch.offer(event(1))
    await edge.until(lambda: edge.record_attempts == 1)
    edge.fail_record = False
    await watch.offer(event(2))  # the first turn is over: this one starts the next
    await edge.until(lambda: edge.turns)
    assert edge.turns[0]["messageIds"] == ["m2"]
    assert watch.counters.unrecorded == 1 and "not recorded: OSError" in caplog.text


async def test_close_cancels_live_turns_and_leaves_no_task(make_watch, edge):
    responder = FakeResponder()
    responder.hold()
    watch = make_watch(responder)
    await watch.offer(event(1))
    await responder.wait_entered()
    await watch.offer(event(2, chat="other"))
    await watch.close()
    assert asyncio.all_tasks() == {asyncio.current_task()}
    by_chat = {t["objectId"]: t["outcome"] for t in edge.turns}
    assert by_chat["general"] == "cancelled"
    assert watch.status().closed and watch.status().chats == []
    await watch.offer(event(3))
    assert watch.status().chats == [] and watch.counters.offered == 2


async def test_status_is_plain_data(make_watch, edge):
    watch = make_watch(FakeResponder(ready=False))
    await watch.offer(event(1))
    raw = msgspec.to_builtins(watch.status())
    assert raw["ready"] is False
    assert raw["chats"] == [{"space": SPACE, "objectId": "general", "turnId": "", "waiting": 1}]
    assert raw["counters"]["offered"] == 1


@pytest.mark.parametrize("field", ["snapshot_size", "max_waiting", "reply_timeout"])
def test_bad_settings_name_the_field(edge, field):
    with pytest.raises(ValueError, match=f"^{field}: must be > 0"):
        ChatWatch(
            FakeResponder(), edge.send, edge.history, record_turn=edge.record_turn, **{field: 0}
        )


async def test_with_a_real_command_responder(make_watch, edge, tmp_path):
    path = tmp_path / "reply.py"
    path.write_text(
        "import json, sys\nr = json.load(sys.stdin)\n"
        "json.dump({'reply': f\"{len(r['pending'])} from command\"}, sys.stdout)\n"
    )
    watch = make_watch(CommandResponder([sys.executable, str(path)], timeout=30))
    await watch.offer(event(1))
    await edge.until(lambda: edge.turns)
    assert edge.sent[0]["text"] == "1 from command"
    assert json.loads(json.dumps(edge.turns[0]))["outcome"] == "ok"


# ---------------------------------------------------------------- streaming and unavailability


class StreamingResponder:
    """A model that writes its reply piece by piece, as the test feeds it (None ends it)."""

    ready = True

    def __init__(self) -> None:
        self.pieces: asyncio.Queue[str | None] = asyncio.Queue()
        self.asked = 0  # times the watcher came back for a piece (done with the last one)
        self.fed = 0  # pieces given so far
        self.snapshots: list[list[dict]] = []  # what each call was shown before its pending
        self._asked = asyncio.Condition()

    async def respond(self, snapshot, pending):  # pragma: no cover - stream is preferred
        raise AssertionError("a streaming responder is asked to stream")

    async def stream(self, snapshot, pending):
        self.snapshots.append(list(snapshot))
        while True:
            async with self._asked:
                self.asked += 1
                self._asked.notify_all()
            if (piece := await self.pieces.get()) is None:
                return
            if piece == "BOOM":
                raise RuntimeError("the model crashed mid-reply")
            yield piece

    async def feed(self, piece: str | None) -> None:
        """Give the next piece and wait until the watcher has dealt with it."""
        await self.pieces.put(piece)
        if piece is not None:
            self.fed += 1  # the watcher asking once more than it was fed: done with this one
            async with asyncio.timeout(5), self._asked:
                await self._asked.wait_for(lambda: self.asked > self.fed)


class EditingEdge(Edge):
    def __init__(self) -> None:
        super().__init__()
        self.edits: list[dict] = []

    async def edit(self, space: str, object_id: str, message_id: str, edit: MessageEdit) -> dict:
        body = {k: v for k, v in to_wire(edit).items() if v is not None}  # None: left as it is
        self.edits.append({"messageId": message_id, **body})
        (message,) = [m for m in self.sent if m["messageId"] == message_id]
        message["text"] = body.get("text", message["text"])
        if "done" in body:
            message["agent"] = {**message["agent"], "done": body["done"]}
        await self._bump()
        return {k: v for k, v in message.items() if k != "space"}


async def test_a_streamed_reply_is_one_message_that_grows_then_is_done(clock):
    edge, responder = EditingEdge(), StreamingResponder()
    watch = ChatWatch(
        responder,
        edge.send,
        edge.history,
        record_turn=edge.record_turn,
        clock=clock,
        edit=edge.edit,
        stream_interval=1.0,
    )
    try:
        await watch.offer(event(1))
        await responder.feed("  ")  # blank: nothing posted yet
        assert edge.sent == []
        await responder.feed("Hel")
        assert edge.sent[0]["text"] == "  Hel" and edge.sent[0]["agent"]["done"] is False
        await responder.feed("lo")  # within the interval: not sent on its own
        assert edge.edits == []
        clock.advance(1.0)
        await responder.feed(" there")
        assert edge.edits == [{"messageId": "r0", "text": "  Hello there"}]
        await responder.feed(None)
        await edge.until(lambda: edge.turns)
    finally:
        await watch.close()
    assert edge.edits[-1] == {"messageId": "r0", "done": True}
    assert len(edge.sent) == 1 and edge.sent[0]["agent"] == {"name": "chat-watch", "done": True}
    assert edge.turns[0]["outcome"] == "ok" and edge.turns[0]["replies"] == 1


class UnavailableOnce:
    ready = True

    def __init__(self) -> None:
        self.calls = 0

    async def respond(self, snapshot, pending):
        self.calls += 1
        if self.calls == 1:
            raise ResponderUnavailable("http://model/v1 unreachable: refused")
        return "answered " + ",".join(m["messageId"] for m in pending)


async def test_an_unavailable_responder_defers_the_messages_without_an_apology(make_watch, edge):
    responder = UnavailableOnce()
    watch = make_watch(responder)
    kicked = []
    watch.on_unavailable = lambda: kicked.append(True)
    await watch.offer(event(1))
    await edge.until(lambda: edge.turns)
    status = watch.status()
    assert not status.ready and status.reason == "http://model/v1 unreachable: refused"
    assert [(c.object_id, c.waiting) for c in status.chats] == [("general", 1)]
    assert edge.sent == [] and kicked == [True]  # no apology: the message will be answered
    assert edge.turns[0]["outcome"] == "error" and "messages wait" in edge.turns[0]["error"]

    watch.set_ready(True)
    await edge.until(lambda: edge.sent)
    assert edge.sent[0]["text"] == "answered m1"
    assert watch.status().reason == ""


async def test_a_streamed_reply_cut_short_keeps_its_words_and_ends(clock):
    edge, responder = EditingEdge(), StreamingResponder()
    watch = ChatWatch(
        responder,
        edge.send,
        edge.history,
        record_turn=edge.record_turn,
        clock=clock,
        edit=edge.edit,
        stream_interval=1.0,
    )
    try:
        await watch.offer(event(1))
        await responder.feed("Half a")
        await responder.feed(" thought")
        await responder.pieces.put("BOOM")
        await edge.until(lambda: edge.turns)
    finally:
        await watch.close()
    cut, apology = edge.sent
    assert cut["text"] == "Half a thought [cut off: the model failed]"
    assert cut["agent"]["done"] is True
    assert apology["text"].startswith("Sorry") and apology["agent"]["done"] is True
    assert edge.turns[0]["outcome"] == "error" and "crashed mid-reply" in edge.turns[0]["error"]
