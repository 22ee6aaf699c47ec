"""`baton runs`: the run history of the space, filtered, and followed as it grows.

    baton runs [--trigger ID] [--status S] [--since T] [--limit N] [--follow] [--json]
    baton runs show RUN [--json]            (runtime.cli.run_show)

Owns the listing (oldest first, the latest `--limit`, or the first from `--since`: an
instant or a duration back) and `--follow`, which polls (the space has no run stream:
`LOOKBACK` before the newest run seen, once a `POLL_S`) until Ctrl-C or SIGTERM. The
details are in docs/architecture.md, "Module notes". A shell: parse, call, print.
"""

from __future__ import annotations

import argparse
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from core.answers import RunOut
from core.clock import Clock, SystemClock, iso
from core.vocab import RAN, RunStatus
from runtime.cli import run_show
from runtime.cli.common import Target, add_space_options, until_signalled
from runtime.cli.main import UsageError
from runtime.cli.next import instant
from runtime.cli.talk import emit, read, talk
from runtime.cli.trigger_names import id_if_named, names
from runtime.client.api import SpaceClient

STATUSES = tuple(s.value for s in RunStatus)
HEADERS = ("STARTED", "RUN", "TRIGGER", "STATUS", "DURATION", "LATE", "PROGRAM", "REASON")
WIDTHS = (24, 20, 20, 8, 10, 10, 16, 0)  # followed lines line up without knowing what comes
POLL_S = 1.0
LOOKBACK = timedelta(minutes=15)
PAGE = 1000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_AGO = re.compile(r"(\d{1,9})([smhd])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
Query = dict[str, str | int | None]  # the query parameters of `GET …/runs`
Sent = Any  # a run as the space sent it: what `--json` prints (read as `RunOut` for a row)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("runs", help="run history, filtered; --follow for new runs")
    p.add_argument("--trigger", metavar="ID", help="runs of this trigger only")
    p.add_argument("--status", metavar="S", help=f"one of {', '.join(STATUSES)}")
    p.add_argument("--since", metavar="T", help="RFC 3339 instant, or a duration ago: 15m, 2h, 7d")
    p.add_argument("--limit", default="20", metavar="N", help="how many (default 20, max 1000)")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new runs")
    add_space_options(p)
    p.set_defaults(func=cmd_runs)
    run_show.register(p.add_subparsers(dest="runs_command", parser_class=type(p)))


def cmd_runs(args: argparse.Namespace) -> int:
    query = parse_query(args, SystemClock())

    async def work(client: SpaceClient, where: Target) -> int:
        if args.trigger:  # a trigger's name stands for its id
            query["trigger"] = await id_if_named(client, where, args.trigger)
        if args.follow:
            return await follow(client, where, query, args.json)
        return await list_runs(client, where, query, args.json)

    return talk(args, work)


# --- parsing -----------------------------------------------------------------------------


def parse_query(args: argparse.Namespace, clock: Clock) -> Query:
    if args.status is not None and args.status not in STATUSES:
        raise UsageError(f"--status: must be one of {', '.join(STATUSES)}, got {args.status!r}")
    since = None if args.since is None else iso(parse_since(args.since, clock.wall()))
    return {
        "trigger": args.trigger,
        "status": args.status,
        "since": since,
        "limit": parse_limit(args.limit),
    }


def ago(text: str, now: datetime) -> datetime | None:
    """`15m`, `2h`, `7d` (also `90s`) back from `now`; None if `text` is no such duration."""
    found = _AGO.fullmatch(text.strip())
    if found is None:
        return None
    return now - timedelta(**{_UNITS[found.group(2)]: int(found.group(1))})


def parse_since(text: str, now: datetime) -> datetime:
    back = ago(text, now)
    if back is not None:
        return back
    try:
        return instant("--since", text)
    except UsageError:
        raise UsageError(
            f"--since: {text!r} is neither an RFC 3339 instant nor a duration like 15m"
        ) from None


def parse_limit(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= PAGE:
        raise UsageError(f"--limit: must be a whole number from 1 to {PAGE}, got {text!r}")
    return int(text)


# --- listing and following -----------------------------------------------------------------


async def list_runs(client: SpaceClient, where: Target, query: Query, as_json: bool) -> int:
    runs: list[Sent] = (await client.runs(where.space, **query))["runs"]
    if as_json:
        emit({"runs": runs})
    elif not runs:
        print(f"no runs in space {where.space}{_matching(query)}")
    else:
        named = await names(client, where)
        rows = (line(run_row(r, named)) for r in read(runs, list[RunOut], "runs"))
        print("\n".join([line(HEADERS), *rows]))
    return 0


async def follow(
    client: SpaceClient,
    where: Target,
    query: Query,
    as_json: bool,
    clock: Clock | None = None,
) -> int:
    """What `list_runs` shows, then each new run, until SIGINT or SIGTERM (from the start)."""
    await until_signalled(_follow(client, where, query, as_json, clock or SystemClock()))
    return 0


async def _follow(
    client: SpaceClient, where: Target, query: Query, as_json: bool, clock: Clock
) -> None:
    first: list[Sent] = (await client.runs(where.space, **query))["runs"]
    if not as_json:
        print(line(HEADERS), flush=True)
    seen = Seen(floor=_floor(query, first))
    named = {} if as_json else await names(client, where)
    for run in seen.new(first):
        _show(run, as_json, named)
    while True:
        await clock.sleep(POLL_S)
        page = {**query, "since": iso(seen.since()), "limit": PAGE}
        fresh = seen.new((await client.runs(where.space, **page))["runs"])
        if not as_json and any(_trigger(r) not in named for r in fresh):
            named = await names(client, where)  # a trigger made (or named) since
        for run in fresh:
            _show(run, as_json, named)


class Seen:
    """The runs printed so far, within the window that later polls still ask about."""

    def __init__(self, floor: datetime | None) -> None:
        self.floor = floor  # runs that started before it were not asked for, or were forgotten
        self.newest: datetime | None = None
        self.ids: dict[str, datetime] = {}

    def new(self, runs: list[Sent]) -> list[Sent]:
        fresh = []
        for sent in runs:
            run = read(sent, RunOut, "runs")
            started = datetime.fromisoformat(run.started_at)
            if run.run_id in self.ids or (self.floor is not None and started < self.floor):
                continue
            self.ids[run.run_id] = started
            self.newest = max(self.newest or started, started)
            fresh.append(sent)
        self.floor = self.since()  # what is older is forgotten: it must not come back as new
        self.ids = {k: t for k, t in self.ids.items() if t >= self.floor}
        return fresh

    def since(self) -> datetime:
        """Where the next poll asks from: `LOOKBACK` before the newest run, not before the floor."""
        back = (self.newest or self.floor or EPOCH) - LOOKBACK
        return max(back, self.floor) if self.floor is not None else back


def _floor(query: Query, first: list[Sent]) -> datetime | None:
    since = query.get("since")
    if isinstance(since, str) and since:
        return datetime.fromisoformat(since)
    return datetime.fromisoformat(read(first[0], RunOut, "runs").started_at) if first else None


def _show(run: Sent, as_json: bool, named: dict[str, str]) -> None:
    if as_json:
        emit(run)
    else:
        print(line(run_row(read(run, RunOut, "runs"), named)), flush=True)


def _trigger(run: Sent) -> str:
    return str(run.get("triggerId", "")) if isinstance(run, dict) else ""


def _matching(query: Query) -> str:
    """` matching --trigger trg_x --status error`: the filters asked for, or nothing."""
    given = [f" --{k} {query[k]}" for k in ("trigger", "status", "since") if query.get(k)]
    return " matching" + "".join(given) if given else ""


# --- rows ----------------------------------------------------------------------------------


def run_row(run: RunOut, named: dict[str, str] | None = None) -> tuple[str, ...]:
    """A run's row; its trigger by name where `named` (id to name) has one, else by id."""
    late = run.late_ms
    return (
        shown(run.started_at),
        run.run_id,
        (named or {}).get(run.trigger_id, run.trigger_id),
        run.status,
        f"{run.duration_ms or 0:.0f} ms" if run.status in RAN else "-",
        f"{late:.0f} ms" if late is not None else "-",
        run.program,
        why(run),
    )


def shown(instant: str) -> str:
    """An instant as people see it everywhere: RFC 3339 UTC with milliseconds and `Z`."""
    try:
        return iso(datetime.fromisoformat(instant))
    except (TypeError, ValueError):
        return str(instant)


def why(run: RunOut) -> str:
    """The reason a run ended as it did: its `reason`, else its error's last line."""
    if run.reason:
        return run.reason
    lines = [x.strip() for x in run.error.splitlines() if x.strip()]
    return lines[-1][:120] if lines else ""


def line(cells: tuple[str, ...]) -> str:
    """One row, each column at least as wide as `WIDTHS` says."""
    return "  ".join(str(c).ljust(w) for c, w in zip(cells, WIDTHS, strict=True)).rstrip()
