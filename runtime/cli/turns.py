"""`baton turns`: the chat responder's turns (`agent_turns`), oldest first.

    baton turns [--chat ID] [--since T] [--limit N] [--json]

Owns the listing of chat-watch's turns: one row a turn, its start in the one instant
format and how long ago, the chat, the outcome, how long it took, how many messages it
answered, the replies it posted and the responder calls it made, the device, and the
error's last line. Turns are not runs (SPEC "chat-watch"), so `baton runs` never lists
them. A shell: parse, call, print; must not judge a turn.
"""

from __future__ import annotations

import argparse
from datetime import datetime

from core.answers import TurnOut
from core.clock import SystemClock, iso
from runtime.cli.common import Target, add_space_options
from runtime.cli.relative import relative
from runtime.cli.runs import Query, parse_limit, parse_since, shown
from runtime.cli.table import render
from runtime.cli.talk import emit, read, talk
from runtime.client.api import SpaceClient

HEADERS = (
    "started",
    "ago",
    "turn",
    "chat",
    "outcome",
    "duration",
    "messages",
    "replies",
    "calls",
    "peer",
    "error",
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("turns", help="the chat responder's turns, oldest first")
    p.add_argument("--chat", metavar="ID", help="turns in this chat only (objectId)")
    p.add_argument("--since", metavar="T", help="RFC 3339 instant, or a duration ago: 15m, 2h, 7d")
    p.add_argument("--limit", default="20", metavar="N", help="how many (default 20, max 1000)")
    add_space_options(p)
    p.set_defaults(func=cmd_turns)


def cmd_turns(args: argparse.Namespace) -> int:
    now = SystemClock().wall()
    since = None if args.since is None else iso(parse_since(args.since, now))
    query: Query = {"chat": args.chat, "since": since, "limit": parse_limit(args.limit)}
    return talk(args, lambda client, where: list_turns(client, where, query, args.json, now))


async def list_turns(
    client: SpaceClient, where: Target, query: Query, as_json: bool, now: datetime
) -> int:
    turns = (await client.turns(where.space, **query))["turns"]
    if as_json:
        emit({"turns": turns})
    elif not turns:
        given = "".join(f" --{k} {query[k]}" for k in ("chat", "since") if query.get(k))
        print(f"no turns in space {where.space}" + (f" matching{given}" if given else ""))
    else:
        rows = [turn_row(t, now) for t in read(turns, list[TurnOut], "turns")]
        print("\n".join(render(HEADERS, rows)))
    return 0


def turn_row(turn: TurnOut, now: datetime) -> tuple[str, ...]:
    return (
        shown(turn.started_at),
        relative(turn.started_at, now),
        turn.turn_id,
        turn.object_id,
        turn.outcome,
        f"{turn.duration_ms or 0:.0f} ms",
        str(len(turn.message_ids)),
        str(turn.replies),
        str(turn.calls),
        turn.peer or "-",
        last_line(turn.error),
    )


def last_line(error: object) -> str:
    lines = [x.strip() for x in str(error or "").splitlines() if x.strip()]
    return lines[-1][:120] if lines else ""
