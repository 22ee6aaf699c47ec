"""One instant format everywhere: every `--json` of every CLI verb and every API answer.

A real `baton up --demo` runs (a device firing the demo cron, chat-watch answering,
the health pass stamping), the test adds what gives every kind of instant a chance to
appear (a missed `once`, an unpublished program, a manual run, a turn), then runs each
verb of the CLI with `--json` and asks every GET route of the space, and walks every
string of every answer: each instant in it must be RFC 3339 in UTC with milliseconds and
`Z` (`2026-12-03T07:04:00.000Z`), keys, stamps' details and rollups included. What a
person wrote is theirs (`spec.at` kept as written, a message's text, a program's source,
args, results and output), and `local` is a wall time for people, so those are skipped.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from support import Procs, eventually, matched

from runtime.client.api import SpaceClient

pytestmark = pytest.mark.e2e

ONE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")
# anything that looks like an instant or a time of day, however it is written
LOOSE = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
    r"|(?<![\d:.-])\d{2}:\d{2}:\d{2}(?:\.\d+)?(?![\d:])"
)
THEIRS = {"at", "text", "source", "args", "result", "stderrTail", "local", "stdoutTail"}
DASHBOARD = re.compile(  # piped, `baton up` names the token file
    r"baton: dashboard on (http://127\.0\.0\.1:\d+)/ \(sign in with the admin token in (\S+)\)$",
    re.M,
)


def odd_instants(doc: Any, path: str = "$") -> list[str]:
    """Every instant in `doc` not in the one format, with where it was found."""
    found: list[str] = []
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key not in THEIRS:
                found += odd_instants(value, f"{path}.{key}")
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            found += odd_instants(value, f"{path}[{i}]")
    elif isinstance(doc, str):
        spans = [m.span() for m in ONE.finditer(doc)]
        for m in LOOSE.finditer(doc):
            if not any(a <= m.start() < b for a, b in spans):
                found.append(f"{path}: {m.group()!r} in {doc!r}")
    return found


def test_the_walker_finds_every_other_format() -> None:
    good = {"a": "2026-12-03T07:04:00.000Z", "key": "manual:2026-12-03T07:04:00.000Z#2"}
    assert odd_instants(good) == []
    for odd in (
        "2026-12-03T07:04:00Z",
        "2026-12-03T07:04:00+02:00",
        "2026-12-03T07:04:00+0200",
        "2026-12-03T07:04:00.123456Z",
        "2026-12-03 07:04:00",
        "due at 07:05:00",
        "2026-12-03",
    ):
        assert len(odd_instants({"d": f"x {odd} y"})) == 1, odd
    assert odd_instants({"spec": {"at": "2026-12-03T09:00:00+01:00"}, "text": "at 07:05:00"}) == []


async def test_every_json_answer_has_one_instant_format(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with Procs(tmp_path) as procs:
        up = await procs.start(
            "up", "up", "--demo", "--data", str(data), "--port", "0", "--peer", "laptop"
        )
        url, token_file = (await matched(up, DASHBOARD, timeout=30)).groups()
        token = Path(token_file).read_text().strip()
        local = ("--data", str(data))

        async def cli(*argv: str) -> Any:
            where = () if argv[0] == "next" else local  # `next` asks no space
            code, output = await procs.run("cli", *argv, *where, "--json")
            assert code == 0, output
            start = output.index("{")  # a warning may come first
            return json.JSONDecoder().raw_decode(output[start:])[0]

        async with SpaceClient(url, token) as api:
            s = "default"
            general = (await api.space_get(s)).generalChat
            await cli(
                "triggers",
                "add",
                "--name",
                "past",
                "--at",
                "2026-01-01T00:00:00+02:00",
                "--program",
                "demo-heartbeat@v1",
            )
            await cli(
                "triggers",
                "add",
                "--name",
                "later",
                "--cron",
                "*/5 * * * *",
                "--program",
                "later@v1",
            )
            await cli("chat", "send", "help")
            beat = next(
                t for t in (await api.triggers(s))["triggers"] if t["name"] == "demo heartbeat"
            )

            async def settled() -> bool:
                stamped = await api.trigger_get(s, beat["id"])
                turns = await api.call("turns", space=s)
                past = [t for t in (await api.triggers(s))["triggers"] if t["name"] == "past"]
                return bool(
                    stamped.get("rollup")
                    and stamped.get("nextFireAt")
                    and turns["turns"]
                    and past[0].get("lastStatus")
                )

            await eventually(settled, timeout=40, what="a run, a turn and a stamp")
            await cli("triggers", "run", beat["id"])
            answers: dict[str, Any] = {}
            for argv in (
                ("space", "list"),
                ("triggers", "list"),
                *(("triggers", "show", t["id"]) for t in (await api.triggers(s))["triggers"]),
                ("runs",),
                ("chat", "tail"),
                ("devices",),
                ("status",),
                ("next", "--cron", "0 2 * * *", "--tz", "Europe/Berlin"),
                ("programs", "list"),
                ("programs", "show", "demo-heartbeat@v1"),
            ):
                answers["baton " + " ".join(argv)] = await cli(*argv)
            triggers = (await api.triggers(s))["triggers"]
            for name, params in (
                ("spaces", {}),
                ("space_get", {"space": s}),
                ("triggers", {"space": s}),
                *(("trigger_get", {"space": s, "id": t["id"]}) for t in triggers),
                ("changes", {"space": s, "since": 0}),
                ("chats", {"space": s}),
                ("chat_messages", {"space": s, "objectId": general}),
                ("programs", {"space": s}),
                ("program_get", {"space": s, "ref": "demo-heartbeat@v1"}),
                ("devices", {"space": s}),
                ("election", {"space": s}),
                ("fires", {"space": s}),
                ("runs", {"space": s}),
                ("runs_rollup", {"space": s}),
                ("turns", {"space": s}),
                ("tokens", {}),
                ("state_get", {"space": s, "triggerId": beat["id"], "key": "count"}),
            ):
                answers[f"GET {name} {params}"] = await api.call(name, **params)
            answers["GET /healthz"] = await api.healthz()
        odd = [f"{where}: {o}" for where, doc in answers.items() for o in odd_instants(doc)]
        assert odd == [], "\n".join(odd)
