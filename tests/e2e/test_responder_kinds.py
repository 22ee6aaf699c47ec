# ruff: noqa: F811  (pytest fixtures imported from device_support are parameters here)
"""A device answers its chat through the responder its settings choose: a command or a callable.

Real device, real space; the responder is built by `runtime.cli.responder` from the
spec a person would give `--responder`.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import Any

from device_support import (  # noqa: F401  (the fixtures are used by name)
    MakeDevice,
    Space,
    eventually,
    make_device,
    space,
    spaces,
)

from runtime.cli import responder as responder_config
from triggers.records import RESERVED_CHAT_WATCH as CHAT_WATCH

COMMAND = """import json, sys
request = json.load(sys.stdin)
json.dump({"reply": "cmd: " + ",".join(m["text"] for m in request["pending"])}, sys.stdout)
"""


def shout(snapshot: list[dict[str, Any]], pending: list[dict[str, Any]]) -> str:
    return "py: " + " ".join(m["text"].upper() for m in pending)


async def replies(space: Space) -> list[str]:
    return [m.text for m in await space.messages(space.general) if m.agent]


async def answer_with(spec: str, space: Space, make_device: MakeDevice) -> list[str]:
    now = lambda: datetime.now(UTC)  # noqa: E731  (only the builtin responder reads it)
    dev = await make_device(responder=responder_config.build({"responder": spec}, now))
    await dev.active()
    await dev.live(space.general, CHAT_WATCH)
    await space.send(space.general, "hello")
    return await eventually(lambda: replies(space))


async def test_a_command_responder_answers_in_the_chat(space, make_device, tmp_path):
    script = tmp_path / "answer.py"
    script.write_text(COMMAND)
    argv = json.dumps([sys.executable, str(script)])
    assert await answer_with(f"command:{argv}", space, make_device) == ["cmd: hello"]


async def test_a_python_responder_answers_in_the_chat(space, make_device):
    assert await answer_with(f"python:{__name__}:shout", space, make_device) == ["py: HELLO"]
