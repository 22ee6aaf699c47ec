"""`baton runs show RUN`: one run's whole record, for people and (`--json`) as the space keeps it.

    baton runs show RUN [--json]

Owns the record's layout: status and reason, the trigger by name and id, the fire's key,
peer and term, the due/started/ended instants (the one format, and how long ago), how late
it started and the phases that add up to it, then the result, the error and the stderr
tail whole. An id the space does not have is exit 1, `unknown_run`, naming it. A shell:
parse, call, print; must not judge the run.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import Any

from core.answers import PhasesOut, RunOut
from core.clock import SystemClock, iso
from runtime.cli.common import Target, add_space_options
from runtime.cli.main import UsageError
from runtime.cli.relative import relative
from runtime.cli.table import align
from runtime.cli.talk import Failure, emit, read, talk
from runtime.client.api import ApiError, SpaceClient

PHASES = (("wake_ms", "wake"), ("claim_ms", "claim"), ("queue_ms", "queue"), ("spawn_ms", "spawn"))


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("show", help="one run's whole record: result, error, stderr, phases")
    p.add_argument("run", metavar="RUN", help="the run's id, as `baton runs` lists it")
    add_space_options(p)
    p.set_defaults(func=cmd_show)


def cmd_show(args: argparse.Namespace) -> int:
    if not args.run.strip():
        raise UsageError("RUN: must not be empty")
    return talk(args, lambda client, where: show(client, where, args.run, args.json))


async def show(client: SpaceClient, where: Target, run_id: str, as_json: bool) -> int:
    sent = await fetch(client, where, run_id)
    if as_json:
        emit(sent)
        return 0
    run = read(sent, RunOut, "run_get")
    name = await trigger_name(client, where, run.trigger_id)
    print(show_text(run, name, SystemClock().wall()))
    return 0


async def fetch(client: SpaceClient, where: Target, run_id: str) -> Any:
    """The run record as the space sent it (what `--json` prints)."""
    try:
        found = await client.run_get(where.space, run_id)
    except ApiError as exc:
        if exc.status != 404 or exc.code not in ("unknown_run", "not_found"):
            raise
        raise Failure("unknown_run", f"no run {run_id!r} in space {where.space!r}") from None
    return found


async def trigger_name(client: SpaceClient, where: Target, trigger_id: str) -> str | None:
    """The trigger's name, or None when the record is gone (its runs outlive it)."""
    try:
        record = await client.trigger_get(where.space, trigger_id)
    except ApiError as exc:
        if exc.code != "unknown_trigger":
            raise
        return None
    return str(record.get("name") or "") if isinstance(record, dict) else None


def show_text(run: RunOut, name: str | None, now: datetime) -> str:
    """The record as aligned `field value` lines, then its result, error and stderr."""
    tid = run.trigger_id
    rows = [
        ("run", run.run_id),
        ("status", run.status),
        ("reason", run.reason or "-"),
        ("trigger", f"{name} ({tid})" if name else f"{tid} (deleted)" if name is None else tid),
        ("program", run.program or "-"),
        ("key", run.key or "-"),
        ("attempt", run.attempt),
        ("peer", run.peer or "-"),
        ("term", run.term),
        ("due", when(run.due_at, now)),
        ("started", when(run.started_at, now)),
        ("ended", when(run.finished_at, now)),
        ("duration", ms(run.duration_ms)),
        ("late", ms(run.late_ms)),
        ("phases", phases(run.phases)),
    ]
    out = align(rows)
    result = run.result
    out += block("result", None if result is None else json.dumps(result, indent=2))
    out += block("error", run.error)
    out += block("stderr", run.stderr_tail)
    return "\n".join(out)


def when(instant: object, now: datetime) -> str:
    """`2026-12-01T09:00:00.000Z (3m ago)`, or `-` for none."""
    try:
        at = datetime.fromisoformat(instant) if isinstance(instant, str) else None
    except ValueError:
        return str(instant)
    return f"{iso(at)} ({relative(instant, now)})" if at and at.tzinfo else "-"


def ms(value: object) -> str:
    return f"{value:.0f} ms" if isinstance(value, int | float) else "-"


def phases(found: PhasesOut | None) -> str:
    """`wake 1 ms, claim 2 ms, queue 0 ms, spawn 30 ms` (they add up to `late`), or `-`."""
    if found is None:
        return "-"
    return ", ".join(f"{label} {ms(getattr(found, field))}" for field, label in PHASES)


def block(title: str, text: object) -> list[str]:
    """A blank line, `title:`, then the text indented; `title: (none)` when there is none."""
    if not isinstance(text, str) or not text.strip():
        return ["", f"{title}: (none)"]
    return ["", f"{title}:", *("  " + x for x in text.rstrip("\n").splitlines())]
