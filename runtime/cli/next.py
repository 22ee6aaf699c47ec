"""`baton next`: the next fire times of a spec or a stored record, with DST notes.

    baton next --cron '30 2 * * *' --tz Europe/Berlin --from 2026-10-24 -n 5
    baton next --at 2026-12-01T09:00:00+01:00
    baton next --record trigger.json --json

Lists the fires at or after `--from` (a date: midnight in the zone; or an RFC 3339
instant; default now) in UTC and in the zone, marking fires the DST rule moved out
of the spring gap (`shifted`) or kept only once in the repeated autumn hour
(`merged`). A shell over triggers.schedule: parse, compute, print. Bad input exits 2
with one line naming the flag.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, date, datetime, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo

from core.clock import Clock, SystemClock
from core.vocab import key_instant, local_instant
from runtime.cli.main import UsageError, flag_value
from runtime.cli.table import align
from triggers import cron
from triggers.bounds import CronExpr, TimeZoneName, zone
from triggers.records import CronSpec, CronTrigger, OnceSpec, OnceTrigger, Salvaged, load
from triggers.schedule import LEGEND, Fire, upcoming

MAX_COUNT = 10_000
YEARS = (1900, 9000)
Spec = CronSpec | OnceSpec


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("next", help="the next fire times of a cron or once spec")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--cron", metavar="EXPR", help="cron expression, 5 fields or 6 (seconds first)"
    )
    source.add_argument(
        "--at", metavar="INSTANT", help="a once spec: RFC 3339 with offset, or unix seconds"
    )
    source.add_argument("--record", metavar="FILE", help="a stored trigger record (JSON)")
    p.add_argument("--tz", help="IANA zone of --cron (default UTC), or the zone to show --at in")
    p.add_argument(
        "--from", dest="start", metavar="WHEN", help="date or RFC 3339 instant (default now)"
    )
    p.add_argument("-n", dest="count", default="5", metavar="N", help="how many fires (default 5)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, clock: Clock | None = None) -> int:
    spec, shown_in = parse_source(args)
    start = parse_start(args.start, shown_in, clock or SystemClock())
    fires = upcoming(spec, start, parse_count(args.count))
    print(render_json(fires, shown_in) if args.json else render_table(fires, shown_in, start))
    return 0


# --- parsing -----------------------------------------------------------------------------


def parse_source(args: argparse.Namespace) -> tuple[Spec, tzinfo]:
    """The spec asked about and the zone its fires are shown in."""
    if args.cron is not None:
        return _cron_spec(args.cron, args.tz or "UTC")
    if args.at is not None:
        once = OnceSpec(at=instant("--at", args.at, allow_unix=True))
        return once, _zone("--tz", args.tz) if args.tz else _own_zone(once)
    if args.tz is not None:
        raise UsageError("--tz: not with --record (the record carries its zone)")
    return _record_spec(args.record)


def _cron_spec(expr: str, tz: str) -> tuple[CronSpec, tzinfo]:
    try:
        cron.is_wildcard(expr)  # checks the expression
    except ValueError as exc:
        raise UsageError(f"--cron: {exc}") from None
    return CronSpec(expr=CronExpr(expr), tz=TimeZoneName(tz)), _zone("--tz", tz)


def _record_spec(path: str) -> tuple[Spec, tzinfo]:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"--record: cannot read {path}: {exc.strerror}") from None
    record = load(raw)
    match record:
        case Salvaged(error=error):
            raise UsageError(f"--record: undecodable record: {error}")
        case CronTrigger(spec=spec):
            return spec, cron.rule_of(spec).tz
        case OnceTrigger(spec=spec):
            return spec, _own_zone(spec)
        case _:
            raise UsageError(f"--record: a {record.kind} trigger has no fire times")


def _zone(flag: str, name: str) -> tzinfo:
    return flag_value(flag, zone, name)


def _own_zone(once: OnceSpec) -> tzinfo:
    if isinstance(once.at, datetime) and once.at.tzinfo is not None:
        return once.at.tzinfo
    return UTC


def instant(flag: str, text: str, *, allow_unix: bool = False) -> datetime:
    if allow_unix:
        try:
            return datetime.fromtimestamp(float(text), UTC)
        except (ValueError, OverflowError, OSError):
            pass
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"{flag}: {text!r} is not an RFC 3339 instant") from None
    if t.tzinfo is None:
        raise UsageError(f"{flag}: {text!r} has no offset (add Z or +hh:mm)")
    return t


def parse_start(text: str | None, zone: tzinfo, clock: Clock) -> datetime:
    """`--from`: a date means the first instant of that local day."""
    if text is None:
        return clock.wall()
    try:
        day = date.fromisoformat(text)
    except ValueError:
        day = instant("--from", text).date()
        start = instant("--from", text).astimezone(UTC) if _in_range(day) else None
    else:
        start = _start_of_day(day, zone) if _in_range(day) else None
    if start is None:
        raise UsageError(f"--from: {text!r} is outside the years {YEARS[0]}-{YEARS[1]}")
    return start


def _in_range(day: date) -> bool:
    return YEARS[0] <= day.year <= YEARS[1]


def _start_of_day(day: date, zone: tzinfo) -> datetime:
    wall = datetime(day.year, day.month, day.day)
    first = wall.replace(tzinfo=zone).astimezone(UTC)
    if not isinstance(zone, ZoneInfo) or first.astimezone(zone).replace(tzinfo=None) == wall:
        return first
    # midnight fell in a spring gap: the day begins where the gap ends
    early = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    return cron.first_change(zone, early, first, cron.offset(zone, early)) or first


def parse_count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        raise UsageError(f"-n: {text!r} is not a whole number") from None
    if not 1 <= count <= MAX_COUNT:
        raise UsageError(f"-n: must be between 1 and {MAX_COUNT}, got {count}")
    return count


# --- output ------------------------------------------------------------------------------


def _local(fire: Fire, zone: tzinfo) -> datetime:
    return fire.at.astimezone(zone)


def render_json(fires: list[Fire], zone: tzinfo) -> str:
    rows = [
        {"at": key_instant(f.at), "local": local_instant(_local(f, zone)), "dst": f.dst}
        for f in fires
    ]
    return json.dumps({"fires": rows})


def render_table(fires: list[Fire], zone: tzinfo, start: datetime) -> str:
    if not fires:
        return f"no fires at or after {key_instant(start)}"
    rows = [("UTC", f"LOCAL ({_zone_label(zone)})", "DST")]
    rows += [(key_instant(f.at), local_instant(_local(f, zone)), f.dst or "") for f in fires]
    lines = align(rows)
    notes = sorted({f.dst for f in fires if f.dst is not None})
    lines += [f"{note}: {LEGEND[note]}" for note in notes]
    return "\n".join(lines)


def _zone_label(zone: tzinfo) -> str:
    key = getattr(zone, "key", None)
    return key if isinstance(key, str) else str(zone)
