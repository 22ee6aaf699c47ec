"""`baton why`: why a trigger fired or did not, from the space's history.

    baton why TRIGGER [T] [--at T | --key K | --since T [--until T]] [--json]

TRIGGER is an id or a name (an unknown or ambiguous one is exit 1 with the closest
names). T is RFC 3339, unix seconds, a wall time in the trigger's zone: "09:00"
(today), "yesterday 09:00", "2026-12-01 09:00", or a duration back from now ("2h").
Without T: the last due slot. Prints the chain of checks with ✓/✗, one sentence, and
the remedy (`--since`: one line per slot). Exit 0 when answered, whatever the verdict.
"""

from __future__ import annotations

import argparse
import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from core.answers import WhyOut, WhyRange
from core.clock import SystemClock
from runtime.cli.common import Record, Target, add_space_options
from runtime.cli.main import UsageError
from runtime.cli.next import instant
from runtime.cli.runs import ago
from runtime.cli.table import render
from runtime.cli.talk import emit, read, talk
from runtime.cli.trigger_names import resolve
from runtime.client.api import SpaceClient

_WALL = re.compile(r"(?:(yesterday|today)\s+|(\d{4}-\d{2}-\d{2})[ T])?(\d{1,2}):(\d{2})")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("why", help="why a trigger fired or did not, from history")
    p.add_argument("trigger", metavar="TRIGGER", help="id or name")
    p.add_argument("when", metavar="T", nargs="?", help="the instant asked about (as --at)")
    asked = p.add_mutually_exclusive_group()
    asked.add_argument(
        "--at", metavar="T", help="RFC 3339, unix seconds, '09:00', 'yesterday 09:00'"
    )
    asked.add_argument("--key", metavar="K", help="a fire key (a slot's instant, a messageId)")
    asked.add_argument("--since", metavar="T", help="every slot from T on (at most --limit)")
    p.add_argument("--until", metavar="T", help="with --since: up to T (default now)")
    p.add_argument("--limit", type=int, default=100, help="with --since: at most N slots")
    add_space_options(p)
    p.set_defaults(func=cmd_why)


def cmd_why(args: argparse.Namespace) -> int:
    if args.when is not None and (args.at or args.key or args.since):
        raise UsageError("T: give the instant once (T or --at), not with --key or --since")
    if args.until is not None and args.since is None:
        raise UsageError("--until: goes with --since")
    return talk(args, lambda c, w: why(c, w, args))


async def why(client: SpaceClient, where: Target, args: argparse.Namespace) -> int:
    record = await client.trigger_get(where.space, await resolve(client, where, args.trigger))
    now, zone = SystemClock().wall(), _zone(record)
    query: dict[str, str | int] = {}
    if args.key:
        query["key"] = args.key
    elif args.since:
        query["since"] = _iso(parse_when("--since", args.since, zone, now))
        if args.until:
            query["until"] = _iso(parse_when("--until", args.until, zone, now))
        query["limit"] = args.limit
    elif args.at or args.when:
        query["at"] = _iso(parse_when("--at" if args.at else "T", args.at or args.when, zone, now))
    got = await client.trigger_why(where.space, record["id"], **query)
    if args.json:
        emit(got)
    elif "answers" in got:
        print("\n".join(range_text(record, read(got, WhyRange, "why"))))
    else:
        print("\n".join(answer_text(record, read(got, WhyOut, "why"))))
    return 0


def _zone(record: Record) -> ZoneInfo:
    spec = record.get("spec")
    name = spec.get("tz") if isinstance(spec, dict) else None
    try:
        return ZoneInfo(name if isinstance(name, str) and name else "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def parse_when(flag: str, text: str, zone: ZoneInfo, now: datetime) -> datetime:
    """An instant: RFC 3339, unix seconds, a wall time in `zone` ("09:00" is today's), or
    a duration back from now (`2h`)."""
    back = ago(text, now)
    if back is not None:
        return back
    wall = _WALL.fullmatch(text.strip())
    if wall is None:
        return instant(flag, text, allow_unix=True)
    word, day, hour, minute = wall.groups()
    local = now.astimezone(zone).date()
    if word == "yesterday":
        local -= timedelta(days=1)
    elif day is not None:
        try:
            local = datetime.fromisoformat(day).date()
        except ValueError:
            raise UsageError(f"{flag}: {day!r} is not a date") from None
    if int(hour) > 23 or int(minute) > 59:
        raise UsageError(f"{flag}: {hour}:{minute} is not a time of day")
    return datetime(local.year, local.month, local.day, int(hour), int(minute), tzinfo=zone)


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def answer_text(record: Record, got: WhyOut) -> list[str]:
    """The chain with ✓/✗, one sentence, the remedy."""
    name = record.get("name") or record["id"]
    head = [
        f"trigger  {record['id']} ({name})",
        f"slot     {got.slot or '-'}" + (f"  key {got.key}" if got.key else ""),
        f"verdict  {got.verdict}: {got.reason}",
        "",
    ]
    width = max(len(c.name) for c in got.checks)
    chain = [f"  {'✓' if c.ok else '✗'} {c.name.ljust(width)}  {c.detail}" for c in got.checks]
    tail = ["", _sentence(got)]
    if got.remedy:
        tail.append(f"remedy: {got.remedy}")
    return head + chain + tail


def _sentence(got: WhyOut) -> str:
    words = {
        "fired": "It fired",
        "not_fired": "It did not fire",
        "not_due": "Nothing was due",
        "pending": "Not decided yet",
    }
    said = words.get(got.verdict, got.verdict)
    why = "" if got.reason == got.verdict else f" ({got.reason})"
    return f"{said}{why}: {got.detail}."


def range_text(record: Record, got: WhyRange) -> list[str]:
    rows = [(a.slot, a.verdict, a.reason, a.detail) for a in got.answers]
    if not rows:
        return [f"no slot of {record['id']} from {got.since} to {got.until}"]
    return render(("slot", "verdict", "reason", "detail"), rows)
