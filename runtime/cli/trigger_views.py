"""What `baton triggers list|show` print: the rows of records, a record's detail, its fires.

Owns the shape of `show` (`{"record", "next", "runs"}`, SPEC "CLI conventions"):
`next` are the record's next `NEXT_FIRES` fires from now, each
`{"at", "local", "dst"}` (`dst`: `shifted` out of a spring gap, `merged` in a
repeated autumn hour, else null), computed by `triggers.schedule.upcoming_of`; an
event trigger, a paused one and an undecodable one have none. `runs` are its last
runs, oldest first, with their reasons. Pure apart from printing nothing: it
builds strings and documents; the caller prints.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from core.answers import RunOut, WhyOut
from core.clock import iso
from core.vocab import local_instant
from runtime.cli import policies
from runtime.cli.common import Record
from runtime.cli.relative import relative
from runtime.cli.runs import HEADERS, line, run_row
from runtime.cli.table import align, render
from runtime.cli.talk import read
from triggers.records import Salvaged, load
from triggers.schedule import LEGEND, DstNote, upcoming_of

NEXT_FIRES = 10
Fire = dict[str, str | None]  # `{"at", "local", "dst"}`, as `GET …/next` answers each


def when(raw: Record) -> str:
    """A record's schedule in a few words: `*/5 * * * * Europe/Berlin`, `at …`, `chat …`."""
    spec = raw["spec"] if isinstance(raw.get("spec"), dict) else {}
    match raw.get("kind"):
        case "cron":
            extra = " catchup latest" if spec.get("catchup") == "latest" else ""
            return f"{spec.get('expr', '?')} {spec.get('tz', 'UTC')}{extra}"
        case "once":
            return f"at {spec.get('at', '?')}"
        case "event":
            return f"chat {spec.get('objectId', '?')}"
    return f"({raw.get('kind')!s})"


def status(raw: Record) -> str:
    if raw.get("undecodable"):
        return "undecodable"
    detail = raw.get("lastStatusDetail") or ""
    return (raw.get("lastStatus") or "-") + (f" ({detail})" if detail else "")


def list_rows(records: list[Record], now: datetime) -> list[str]:
    """One row a record; LAST (its last run) and NEXT (its next fire) relative to `now`."""
    rows = [
        [
            r.get("id", ""),
            r.get("name", ""),
            r.get("kind", ""),
            when(r),
            r.get("program", ""),
            r.get("owner") or "(floating)",
            "yes" if r.get("enabled", True) else "paused",
            status(r),
            relative(r.get("lastRunAt"), now),
            relative(r.get("nextFireAt"), now),
        ]
        for r in records
    ]
    headers = ["id", "name", "kind", "when", "program", "owner", "on", "status", "last", "next"]
    return render(headers, rows)


def next_fires(raw: Record, now: datetime) -> list[Fire]:
    """The next fires of a cron or once record that is enabled; none otherwise."""
    record = load(raw)
    if isinstance(record, Salvaged):
        return []
    fires = upcoming_of(record, now, NEXT_FIRES)
    return [{"at": iso(f.at), "local": local_instant(f.local), "dst": f.dst} for f in fires]


def show_text(raw: Record, fires: list[Fire], runs: list[RunOut], why: WhyOut | None) -> str:
    rows = [
        ("id", raw.get("id", "")),
        ("name", raw.get("name", "")),
        ("kind", raw.get("kind", "")),
        ("when", when(raw)),
        ("program", raw.get("program", "")),
        ("args", _compact(raw.get("args", {}))),
        ("owner", raw.get("owner") or "(floating)"),
        ("enabled", "yes" if raw.get("enabled", True) else "no (paused)"),
        ("status", status(raw)),
        ("last run", raw.get("lastRunAt") or "-"),
        ("next fire", raw.get("nextFireAt") or "-"),
        ("rev", raw.get("rev", "")),
        ("active since", raw.get("activeSince") or "-"),
        ("updated", raw.get("updatedAt") or "-"),
        *policies.rows(raw),
    ]
    if raw.get("undecodable"):
        rows.append(("decode error", raw.get("decodeError", "")))
    if why is not None:
        rows.append(("last slot", last_slot(why)))
    out = align(rows)
    out += ["", "next fires:", *(_fire_lines(fires, raw) or ["  (none)"])]
    out += ["", "last runs:", *_run_lines(runs)]
    return "\n".join(out)


def runs_of(sent: Any) -> list[RunOut]:
    """Its last runs, as the space sent them, read for the rows."""
    return read(sent, list[RunOut], "runs")


def why_of(sent: Any) -> WhyOut | None:
    """The verdict of its last due slot, as the space sent it (None: none), read."""
    return None if sent is None else read(sent, WhyOut, "why")


def last_slot(why: WhyOut) -> str:
    """`2026-12-01T09:00:00.000Z not_fired: paused (baton why ID --at …)`."""
    return f"{why.slot or '-'} {why.verdict}: {why.reason} (`baton why` says why)"


def _fire_lines(fires: list[Fire], raw: Record) -> list[str]:
    if not fires:
        return []
    zone = (raw.get("spec") or {}).get("tz", "UTC") if raw.get("kind") == "cron" else "at"
    lines = align(
        [("UTC", f"LOCAL ({zone})", "DST"), *((f["at"], f["local"], f["dst"] or "") for f in fires)]
    )
    notes = sorted({f["dst"] for f in fires if f["dst"]})
    return ["  " + x for x in lines] + [f"  {n}: {LEGEND[DstNote(n)]}" for n in notes]


def _run_lines(runs: list[RunOut]) -> list[str]:
    if not runs:
        return ["  (none)"]
    return ["  " + line(HEADERS), *("  " + line(run_row(r)) for r in runs)]


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(", ", ": "))
