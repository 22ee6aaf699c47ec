"""Responders: the built-in demo one, an external command (real processes), a callable, specs.

Commands are tiny Python scripts written to `tmp_path` and run with this interpreter.
"""

import asyncio
import json
import sys
from datetime import UTC, datetime

import pytest

from runtime.chat.choose import load_responder
from runtime.chat.command import CommandResponder
from runtime.chat.responders import (
    HELP,
    BuiltinResponder,
    CallableResponder,
    InvalidResponderSpec,
    Responder,
    ResponderFailed,
    ResponderTimeout,
)

NOON = datetime(2026, 3, 1, 12, 5, tzinfo=UTC)


def msg(text: str, n: int = 1) -> dict:
    return {"messageId": f"m{n}", "seq": n, "objectId": "chat", "text": text}


def script(tmp_path, body: str) -> list[str]:
    path = tmp_path / "responder.py"
    path.write_text("import json, sys\n" + body)
    return [sys.executable, str(path)]


# ---------------------------------------------------------------- builtin


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("help", HELP),
        ("Help!", HELP),
        ("time?", "it is 2026-03-01 12:05 UTC"),
        ("What time is it?", "it is 2026-03-01 12:05 UTC"),
        ("buy milk", "noted: 'buy milk'"),
        ("x" * 100, "noted: '" + "x" * 57 + "...'"),
    ],
)
async def test_builtin_answers_commands_and_acknowledges_the_rest(text, expected):
    reply = await BuiltinResponder(lambda: NOON).respond([], [msg(text)])
    assert reply == f"Answering 1 message:\n- {expected}"


async def test_builtin_names_how_many_messages_it_answers():
    reply = await BuiltinResponder(lambda: NOON).respond([msg("hi")], [msg("a", 2), msg("b", 3)])
    assert reply is not None
    assert reply.splitlines() == ["Answering 2 messages:", "- noted: 'a'", "- noted: 'b'"]
    assert await BuiltinResponder(lambda: NOON).respond([msg("hi")], []) is None


async def test_builtin_answers_why_a_trigger_did_not_fire_from_the_spaces_answer():
    asked: list[str] = []

    async def explain(name: str) -> dict | None:
        asked.append(name)
        if name != "report":
            return None
        return {
            "at": "2026-03-01T12:05:00.000Z",
            "slot": "2026-03-01T12:00:00.000Z",
            "verdict": "not_fired",
            "reason": "paused",
            "detail": 'the trigger was paused: paused at … by admin (rev 2): "holiday"',
            "remedy": "`baton triggers resume trg_1`",
        }

    builtin = BuiltinResponder(lambda: NOON, explain)
    reply = await builtin.respond([], [msg("Why didn't report fire?"), msg("why did nope run", 2)])
    assert asked == ["report", "nope"]
    assert reply is not None
    lines = reply.splitlines()
    assert lines[1] == (
        "- report: not_fired (paused) at 2026-03-01T12:00:00.000Z: the trigger was paused: "
        'paused at … by admin (rev 2): "holiday". Remedy: `baton triggers resume trg_1`'
    )
    assert lines[2] == "- there is no trigger named 'nope'"
    plain = await BuiltinResponder(lambda: NOON).respond([], [msg("why didn't report fire")])
    assert plain is not None and "noted:" in plain  # with no space to ask: acknowledged


# ---------------------------------------------------------------- command

ECHO = """
request = json.load(sys.stdin)
texts = [m["text"] for m in request["pending"]]
json.dump({"reply": f"{len(request['snapshot'])} seen, answering " + ",".join(texts)}, sys.stdout)
"""


async def test_command_gets_json_on_stdin_and_its_reply_is_returned(tmp_path):
    responder = CommandResponder(script(tmp_path, ECHO), timeout=30)
    assert isinstance(responder, Responder) and responder.ready
    reply = await responder.respond([msg("old")], [msg("a", 2), msg("b", 3)])
    assert reply == "1 seen, answering a,b"


async def test_command_with_a_large_request_does_not_stall(tmp_path):
    snapshot = [msg("y" * 1000, n) for n in range(500)]  # ~0.5 MB through the pipe
    reply = await CommandResponder(script(tmp_path, ECHO), timeout=30).respond(snapshot, [msg("a")])
    assert reply == "500 seen, answering a"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('json.dump({"reply": None}, sys.stdout)', None),
        ('json.dump({"reply": "  "}, sys.stdout)', None),
        ('json.dump({"reply": "hi", "extra": 1}, sys.stdout)', "hi"),
        ('print(json.dumps({"reply": "unread stdin is fine"}))', "unread stdin is fine"),
    ],
)
async def test_command_reply_forms(tmp_path, body, expected):
    assert await CommandResponder(script(tmp_path, body), timeout=30).respond([], []) == expected


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (
            'sys.stderr.write("model unavailable\\n"); sys.exit(3)',
            "exited with code 3: model unavail",
        ),
        ("sys.exit(1)", "exited with code 1: (no stderr)"),
        ('sys.stderr.write("e" * 100000 + "END"); sys.exit(2)', "eeeeEND"),
        ('print("not json")', "stdout: not JSON"),
        ('print("[1, 2]")', "stdout: must be a JSON object"),
        ('json.dump({"reply": 5}, sys.stdout)', "reply: must be a string or null, got int"),
    ],
)
async def test_command_failures_carry_a_clear_reason(tmp_path, body, reason):
    with pytest.raises(ResponderFailed, match=r"^command ") as caught:
        await CommandResponder(script(tmp_path, body), timeout=30).respond([], [msg("a")])
    assert reason in str(caught.value)
    assert len(str(caught.value)) < 2200  # a stderr flood is cut to its tail


async def test_command_that_cannot_start_says_so(tmp_path):
    with pytest.raises(ResponderFailed, match="cannot start"):
        await CommandResponder([str(tmp_path / "missing")], timeout=30).respond([], [])


async def test_command_timeout_kills_the_process(tmp_path):
    argv = script(tmp_path, "import time\ntime.sleep(600)\n")
    async with asyncio.timeout(20):  # only a killed process lets respond() return this soon
        with pytest.raises(ResponderTimeout, match=r"timed out after 0\.3 s \(killed\)"):
            await CommandResponder(argv, timeout=0.3).respond([], [msg("a")])


@pytest.mark.parametrize(
    ("argv", "timeout", "field"),
    [([], 1, "argv"), ([""], 1, "argv"), (["x"], 0, "timeout")],
)
def test_command_refuses_bad_arguments(argv, timeout, field):
    with pytest.raises(InvalidResponderSpec, match=rf"^{field}: "):
        CommandResponder(argv, timeout)


# ---------------------------------------------------------------- callable


async def test_callable_sync_and_async():
    def sync(snapshot, pending):
        return f"sync {len(snapshot)}/{len(pending)}"

    async def coro(snapshot, pending):
        return None

    assert await CallableResponder(sync).respond([msg("a")], []) == "sync 1/0"
    assert await CallableResponder(coro).respond([], [msg("a")]) is None


async def test_callable_bad_reply_and_not_callable():
    with pytest.raises(ResponderFailed, match="reply: must be a string or null, got dict"):
        await CallableResponder(lambda s, p: {"reply": "x"}).respond([], [])
    with pytest.raises(InvalidResponderSpec, match="fn: must be callable"):
        CallableResponder("nope")  # type: ignore[arg-type]


# ---------------------------------------------------------------- specs


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    (tmp_path / "cw_plugin.py").write_text(
        "NOT_CALLABLE = 3\n\ndef answer(snapshot, pending):\n    return 'from plugin'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("cw_plugin", None)


async def test_load_responder_forms(plugin, tmp_path):
    assert isinstance(load_responder("builtin", now=lambda: NOON), BuiltinResponder)
    plain = load_responder("command:/usr/local/bin/my responder", now=lambda: NOON)
    assert isinstance(plain, CommandResponder) and plain.argv == ["/usr/local/bin/my responder"]
    argv = json.dumps(script(tmp_path, ECHO))
    command = load_responder(f"command:{argv}", now=lambda: NOON, command_timeout=30)
    assert await command.respond([], [msg("z")]) == "0 seen, answering z"
    python = load_responder("python:cw_plugin:answer", now=lambda: NOON)
    assert await python.respond([], []) == "from plugin"


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ("", "unknown spec ''"),
        ("gpt", "unknown spec 'gpt'"),
        ("builtin:x", "unknown spec"),
        ("command:", "command: needs a path or a JSON argv list"),
        ("command:[1]", "argv must be a non-empty list of strings"),
        ("command:[]", "argv must be a non-empty list of strings"),
        ('command:["a"', "argv is not valid JSON"),
        ("python:cw_plugin", "expected <module>:<function>"),
        ("python:no_such_module_xyz:f", "cannot import module 'no_such_module_xyz'"),
        ("python:cw_plugin:missing", "'cw_plugin' has no 'missing'"),
        ("python:cw_plugin:NOT_CALLABLE", "cw_plugin:NOT_CALLABLE is not callable"),
    ],
)
def test_load_responder_refuses_bad_specs(plugin, spec, reason):
    with pytest.raises(InvalidResponderSpec, match=r"^responder: ") as caught:
        load_responder(spec, now=lambda: NOON)
    assert reason in str(caught.value)
