"""The alertable families of `/metrics`, read from the space's state at each scrape: each
trigger's failures, lateness and breaker, triggers by breaker phase and by health, each
device live or stopped, its responder ready and the messages waiting, and the build.

Label sets are bounded. Per space, the first `TOP` triggers by creation (`createdAt`, then
id: a new trigger never displaces an older one) carry their name, or their id when unnamed
or named `(other)`; the rest share one series, `trigger="(other)"`. Devices likewise, the
first `TOP` by peer. Phases and health statuses are closed sets. Reads spaces and records
through the store seam, runs and devices from SQLite; must not write.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from importlib import metadata
from typing import Any, NamedTuple

import msgspec
import sqlite_utils
from aiohttp import web

from core.vocab import FAILED, HealthReason, RunStatus
from programs import breaker
from space.appstate import SETTINGS
from space.dbthread import db_call
from space.exposition import family, line
from space.store import STORE

TOP = 50  # series of their own per space: triggers, and devices
OTHER = "(other)"  # the label of the series the rest share
HEALTH = frozenset({*RunStatus, *HealthReason})  # `lastStatus` values; else none, other
UNDATED = datetime.max.replace(tzinfo=UTC)
Values = dict[tuple[str, str], float]  # (space, trigger or peer) → value


class Listed(NamedTuple):  # a trigger record as read, with the label of its series
    space: str
    id: str
    label: str  # its name (or id), or OTHER past the space's first TOP
    record: dict[str, Any]


class DeviceRow(NamedTuple):  # a device's row as the server judges it now
    space: str
    label: str  # its peer, or OTHER past the space's first TOP
    live: bool
    stopped: bool
    watch: dict[str, Any] | None  # its `chatWatch` report; None: it reports none


def version() -> str:
    try:
        return metadata.version("baton")
    except metadata.PackageNotFoundError:
        return "unknown"


class Read(NamedTuple):  # what a scrape reads from SQLite, in one unit of work
    failed: Values
    late: Values
    devices: list[tuple[Any, ...]]


def _read(db: sqlite_utils.Database) -> Read:
    rows = db.execute(
        "SELECT space, peer, last_seen, stopped, status FROM devices ORDER BY space, peer"
    ).fetchall()
    return Read(_failures(db), _lateness(db), rows)


async def lines(app: web.Application, now: datetime) -> list[str]:
    read = await db_call(app, _read)
    triggers = await _triggers(app, [space.id for space in await app[STORE].spaces()])
    devices = _devices(app, now, read.devices)
    build = {"version": version(), "python": platform.python_version()}
    return [
        *family(
            "baton_build_info", "gauge", "The build serving.", [line("baton_build_info", build, 1)]
        ),
        *_trigger_families(read, triggers),
        *_device_families(devices),
    ]


# ------------------------------------------------------------------ triggers


async def _triggers(app: web.Application, spaces: list[str]) -> list[Listed]:
    """Every record of every space, each with the label its series go by."""
    found: list[Listed] = []
    for space in spaces:
        listed, _ = await app[STORE].records_page(space, "", -1, stored=False)
        records = sorted((r for r in listed if isinstance(r, dict)), key=_age)
        for i, r in enumerate(records):
            found.append(Listed(space, str(r.get("id", "")), _name(r) if i < TOP else OTHER, r))
    return found


def _age(record: dict[str, Any]) -> tuple[datetime, str]:
    text = record.get("createdAt")
    try:
        when = datetime.fromisoformat(text) if isinstance(text, str) else UNDATED
    except ValueError:
        when = UNDATED
    return (when if when.tzinfo is not None else UNDATED), str(record.get("id", ""))


def _name(record: dict[str, Any]) -> str:
    name = record.get("name")
    return name if isinstance(name, str) and name and name != OTHER else str(record.get("id"))


def _health(record: dict[str, Any]) -> str:
    status = record.get("lastStatus")
    if record.get("undecodable"):
        return "undecodable"
    if not status:
        return "none"
    return status if isinstance(status, str) and status in HEALTH else "other"


def _phase(record: dict[str, Any]) -> breaker.Phase:
    return breaker.from_dict(record.get("breaker")).phase  # garbled: closed, as a device reads it


def _failures(db: sqlite_utils.Database) -> dict[tuple[str, str], float]:
    marks = ", ".join("?" for _ in FAILED)
    rows = db.execute(
        "SELECT space, trigger_id, SUM(count) FROM run_rollups "
        f"WHERE status IN ({marks}) GROUP BY space, trigger_id",
        sorted(FAILED),
    )
    return {(s, t): float(n) for s, t, n in rows}


def _lateness(db: sqlite_utils.Database) -> dict[tuple[str, str], float]:
    """Each trigger's last run's `lateMs` in seconds (SQLite: the bare column is MAX's row)."""
    rows = db.execute(
        "SELECT space, trigger_id, CASE WHEN json_valid(body) THEN json_extract(body, '$.lateMs') "
        "END, MAX(seq) FROM runs GROUP BY space, trigger_id"
    )
    return {
        (s, t): max(0.0, ms / 1000)
        for s, t, ms, _ in rows
        if isinstance(ms, int | float) and math.isfinite(ms)
    }


def _trigger_families(read: Read, seen: list[Listed]) -> list[str]:
    failed, late = read.failed, read.late
    failures = _merged(((t.space, t.label, failed.get((t.space, t.id), 0.0)) for t in seen), sum)
    lateness = _merged(
        ((t.space, t.label, late[(t.space, t.id)]) for t in seen if (t.space, t.id) in late), max
    )
    opened = _merged(
        ((t.space, t.label, float(_phase(t.record) is not breaker.Phase.CLOSED)) for t in seen), sum
    )
    phases = _counted(
        "baton_triggers_by_breaker", "phase", seen, lambda t: _phase(t.record), breaker.Phase
    )
    health = _counted("baton_triggers_by_health", "status", seen, lambda t: _health(t.record), ())
    return [
        *family(
            "baton_trigger_failures_total",
            "counter",
            f"Failed runs (error, timeout, crashed) of each trigger; past a space's first {TOP} "
            f"triggers, summed under {OTHER}.",
            _series("baton_trigger_failures_total", "trigger", failures),
        ),
        *family(
            "baton_trigger_lateness_seconds",
            "gauge",
            f"How late the trigger's last run started (its lateMs); {OTHER}: the latest.",
            _series("baton_trigger_lateness_seconds", "trigger", lateness),
        ),
        *family(
            "baton_trigger_breaker_open",
            "gauge",
            f"1 while the trigger's breaker is open or half open; {OTHER}: how many are.",
            _series("baton_trigger_breaker_open", "trigger", opened),
        ),
        *family("baton_triggers_by_breaker", "gauge", "Triggers by breaker phase.", phases),
        *family(
            "baton_triggers_by_health",
            "gauge",
            "Triggers by lastStatus (a run status or a health verdict), none, undecodable, other.",
            health,
        ),
    ]


# ------------------------------------------------------------------ devices


def _devices(app: web.Application, now: datetime, rows: list[tuple[Any, ...]]) -> list[DeviceRow]:
    """Each device, `live` by the server's window as `GET …/devices` judges it."""
    window, found, rank = app[SETTINGS].live_seconds, [], dict[str, int]()
    for space, peer, seen, stopped, raw in rows:
        if not isinstance(seen, int | float) or not isinstance(peer, str):
            continue  # an odd row: `GET …/devices` lists it apart, here it has no series
        rank[space] = rank.get(space, -1) + 1
        live = now.timestamp() - float(seen) <= window and not stopped
        label = peer if rank[space] < TOP else OTHER
        found.append(DeviceRow(space, label, live, bool(stopped), _watch(raw)))
    return found


def _watch(raw: str | None) -> dict[str, Any] | None:
    """What the device last said of its chat responder (`chatWatch`), None if nothing."""
    try:
        status = msgspec.json.decode(raw or "{}")
    except msgspec.DecodeError:
        return None
    watch = status.get("chatWatch") if isinstance(status, dict) else None
    return watch if isinstance(watch, dict) else None


def _waiting(watch: dict[str, Any]) -> float:
    chats = watch.get("chats")
    counts = (
        [c.get("waiting") for c in chats if isinstance(c, dict)] if isinstance(chats, list) else []
    )
    return float(sum(n for n in counts if isinstance(n, int) and n > 0))


def _device_families(devices: list[DeviceRow]) -> list[str]:
    live = _merged(((d.space, d.label, float(d.live)) for d in devices), sum)
    stopped = _merged(((d.space, d.label, float(d.stopped)) for d in devices), sum)
    ready = _merged(
        (
            (d.space, d.label, float(d.live and d.watch.get("ready", True) is True))
            for d in devices
            if d.watch is not None
        ),
        sum,
    )
    waiting = _merged(
        ((d.space, d.label, _waiting(d.watch)) for d in devices if d.watch is not None and d.live),
        sum,
    )
    return [
        *family(
            "baton_device_live",
            "gauge",
            f"1 while the device beats within the live window; {OTHER}: how many do.",
            _series("baton_device_live", "peer", live),
        ),
        *family(
            "baton_device_stopped",
            "gauge",
            "1 once the device signed off with a clean stop (until its next beat).",
            _series("baton_device_stopped", "peer", stopped),
        ),
        *family(
            "baton_responder_ready",
            "gauge",
            "1 while the device is live and its chat responder says it is ready.",
            _series("baton_responder_ready", "peer", ready),
        ),
        *family(
            "baton_responder_waiting_messages",
            "gauge",
            "Messages a live device's chat responder has not taken up, as it last reported.",
            _series("baton_responder_waiting_messages", "peer", waiting),
        ),
    ]


# ------------------------------------------------------------------ series


def _merged(
    values: Iterable[tuple[str, str, float]], merge: Callable[[list[float]], float]
) -> Values:
    """One value per (space, label): a label's own, or the merge of all that share OTHER."""
    grouped: dict[tuple[str, str], list[float]] = {}
    for space, label, value in values:
        grouped.setdefault((space, label), []).append(value)
    return {key: float(merge(found)) for key, found in grouped.items()}


def _counted(
    name: str,
    key: str,
    seen: Iterable[Listed],
    value: Callable[[Listed], str],
    always: Iterable[str],
) -> Iterator[str]:
    """How many of each space's `seen` have each value of `key`; each of `always` even at 0."""
    counts: dict[tuple[str, str], int] = {}
    for s in seen:
        counts.setdefault((s.space, value(s)), 0)
        counts[(s.space, value(s))] += 1
    for space in {space for space, _ in counts}:
        for v in always:
            counts.setdefault((space, v), 0)
    for (space, v), n in sorted(counts.items()):
        yield line(name, {"space": space, key: v}, n)


def _series(name: str, key: str, values: Values) -> Iterator[str]:
    for (space, who), value in sorted(values.items()):
        yield line(name, {"space": space, key: who}, value)
