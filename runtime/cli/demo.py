"""What `baton up --demo` publishes and wires, so a newcomer sees fires within seconds.

Two programs and two triggers, created only when missing (by trigger name), so
running the demo twice changes nothing.
"""

from __future__ import annotations

import logging

from runtime.cli.common import Record
from runtime.client.api import ApiError, SpaceClient

log = logging.getLogger("baton.demo")

HEARTBEAT = '''\
"""Counts its own fires in the trigger's cursor and says when it ran."""


def main(args):
    c = use("any@v1")
    n = c.cursor_get("count", 0) + 1
    c.cursor_set("count", n)
    return {"ok": True, "count": n, "note": args.get("note", "")}
'''

TALLY = '''\
"""Counts the words of each new chat message; answers in the chat every fifth message."""

__any_tool__ = False


def main(args):
    ev = args["event"]
    c = use("any@v1")
    seen = c.cursor_get("messages", 0) + 1
    words = c.cursor_get("words", 0) + len(ev["text"].split())
    c.cursor_set("messages", seen)
    c.cursor_set("words", words)
    if seen % 5 == 0:
        c.chat_send(ev["space"], ev["objectId"],
                    {"text": f"{seen} messages, {words} words so far",
                     "agent": {"name": "demo-tally", "done": True}})
    return {"ok": True, "messages": seen, "words": words}
'''

PROGRAMS = {"demo-heartbeat@v1": HEARTBEAT, "demo-tally@v1": TALLY}


def triggers(general_chat: str) -> list[Record]:
    return [
        {
            "name": "demo heartbeat",
            "kind": "cron",
            "program": "demo-heartbeat@v1",
            "spec": {"expr": "*/10 * * * * *"},
            "args": {"note": "every ten seconds"},
        },
        {
            "name": "demo tally",
            "kind": "event",
            "program": "demo-tally@v1",
            "spec": {"dataset": "chat_messages", "objectId": general_chat},
        },
    ]


async def install(client: SpaceClient, space: str, general_chat: str) -> list[str]:
    """Publish the demo programs and create the demo triggers that are missing; their names."""
    for ref, source in PROGRAMS.items():
        try:
            await client.program_put(space, ref, {"source": source})
        except ApiError as exc:
            if exc.status != 409:
                raise
            log.warning("demo: %s already exists with other source; keeping it", ref)
    existing = {r.get("name") for r in (await client.triggers(space))["triggers"]}
    wanted = [t for t in triggers(general_chat) if t["name"] not in existing]
    for body in wanted:
        await client.trigger_create(space, body)
    return [t["name"] for t in wanted]
