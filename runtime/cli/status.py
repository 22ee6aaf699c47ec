"""`baton status`: which device is the agent right now, and how every trigger stands.

    baton status [--url U] [--token-file F] [--space ID] [--data DIR] [--json] [--watch S]

Reads the space only: its health (a storage fault is a line under the head), the election,
the devices (with what each reports of itself in its heartbeat: its chat subscriptions,
whether its chat responder is ready and if not why, how contained its runs are, how far its
clock is off the space's, warned past 2 s; an offline device is shown offline, never ready,
whatever it said last), and the triggers with owner, status and next fire. Failures go to
stderr (`--json`: as a JSON error object).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

import msgspec

from core.answers import Health
from core.clock import iso
from core.peerwire import DeviceList, DeviceOut, LeaseOut, ReportOut, WatchOut
from runtime.cli import watch
from runtime.cli.common import Record, Target, add_space_options
from runtime.cli.table import render
from runtime.cli.talk import read, talk
from runtime.client.api import SpaceClient

Doc = dict[str, Any]
"""What `--json` prints: the space's answers as sent (a newer space's fields kept), each
device's subscriptions with its peer, and the rows below; `human` reads it as a `Status`."""


class FollowedRow(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A chat a device follows (its report's `subscriptions`), with the device's peer."""

    peer: str
    chat: str = ""
    state: str = ""
    triggers: list[str] = []
    last_id: int | str | None = None


class ResponderRow(msgspec.Struct, frozen=True, kw_only=True):
    """What a device said of its chat responder: ready or why not, and what waits."""

    peer: str
    responder: str
    ready: bool
    reason: str
    waiting: int


class TriggerRow(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    id: str
    name: str
    kind: str
    owner: str
    enabled: bool
    status: str
    detail: str
    next_fire_at: str
    last_run_at: str


class Status(msgspec.Struct, frozen=True, kw_only=True):
    """`Doc` as read: what the tables show."""

    space: str
    health: Health
    election: LeaseOut
    devices: list[DeviceOut]
    subscriptions: list[FollowedRow]
    responders: list[ResponderRow]
    triggers: list[TriggerRow]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("status", help="the active device, devices, subscriptions, triggers")
    add_space_options(p)
    watch.add_option(p)
    p.set_defaults(func=run_status)


def run_status(args: argparse.Namespace) -> int:
    return talk(
        args, lambda c, w: watch.show(lambda: report(c, w, args.json), args, w, "baton status")
    )


async def report(client: SpaceClient, where: Target, as_json: bool) -> str:
    found = await gather(client, where)
    return json.dumps(found) if as_json else human(found)


async def gather(client: SpaceClient, where: Target) -> Doc:
    election, devices, triggers, health = await asyncio.gather(  # as the space answers them
        client.call("election", space=where.space),
        client.call("devices", space=where.space),
        client.triggers(where.space),
        client.healthz(),
    )
    read_devices = read(devices, DeviceList, "devices").devices
    return {
        "space": where.space,
        "health": health,
        "election": election,
        "devices": devices["devices"],
        "subscriptions": [
            {"peer": d["peer"], **s}
            for d in devices["devices"]
            for s in d.get("status", {}).get("subscriptions", [])
        ],
        "responders": msgspec.to_builtins(
            [_responder(d, r) for d in read_devices if (r := report_of(d)).chat_watch]
        ),
        "triggers": msgspec.to_builtins([_trigger(t) for t in triggers["triggers"]]),
    }


def report_of(device: DeviceOut) -> ReportOut:
    """What the device says of itself; a report that does not read is an empty one."""
    try:
        return msgspec.convert(device.status, ReportOut)
    except msgspec.ValidationError:
        return ReportOut()


def _responder(device: DeviceOut, report: ReportOut) -> ResponderRow:
    """An offline device answers nothing, whatever it said last."""
    watch, live = report.chat_watch or WatchOut(), device.live
    return ResponderRow(
        peer=device.peer,
        responder=report.responder,
        ready=live and watch.ready,
        reason=(watch.reason or "") if live else offline(device),
        waiting=sum(c.waiting for c in watch.chats),
    )


def _trigger(raw: Record) -> TriggerRow:
    return TriggerRow(
        id=raw.get("id", ""),
        name=raw.get("name", ""),
        kind=raw.get("kind", ""),
        owner=raw.get("owner", "") or "(floating)",
        enabled=raw.get("enabled", True),
        status=raw.get("lastStatus", ""),
        detail=raw.get("lastStatusDetail", "") or raw.get("decodeError", ""),
        next_fire_at=raw.get("nextFireAt") or "",
        last_run_at=raw.get("lastRunAt") or "",
    )


def offline(device: DeviceOut) -> str:
    return f"offline since {iso(device.lastSeen)}"


def containment(device: DeviceOut) -> str:
    """How contained the device's runs are: `full`, `partial`, `none` (or `unknown`); an
    offline device runs nothing (`-`)."""
    if not device.live:
        return "-"
    found = report_of(device).containment
    return found.level if found is not None else "unknown"


def _weaker(device: DeviceOut) -> list[str]:
    found = report_of(device).containment
    return found.weaker if found is not None else []


def human(report: Doc) -> str:
    status = read(report, Status, "status")
    e = status.election
    head = (
        f"space {status.space}: active device {e.active or '(none)'}, "
        f"term {e.term}, lease until {e.expiresAt or '-'}"
    )
    sections = (_devices(status), _responders(status), _subscriptions(status), _triggers(status))
    return "\n".join([head, *_health(status), *(line for section in sections for line in section)])


def _health(status: Status) -> list[str]:
    """One line when the space is not healthy: its writes are refused until it heals."""
    health = status.health
    if health.status == "ok":
        return []
    what = health.storage or health.status
    since = f" since {health.since}" if health.since else ""
    return [
        f"space storage unavailable ({what}{since}): {health.detail}; "
        "runs, stamps and messages wait until it heals (see docs/operations.md)"
    ]


def _devices(status: Status) -> list[str]:
    devices = [
        [
            d.peer,
            d.name,
            d.priority,
            "yes" if d.live else "no",
            iso(d.lastSeen),
            containment(d),
            clock_offset(d),
        ]
        for d in status.devices
    ]
    columns = ["device", "name", "priority", "live", "last seen", "containment", "clock"]
    lines = ["", *render(columns, devices)]
    weaker = [f"{d.peer}: {w}" for d in status.devices if d.live for w in _weaker(d)]
    if weaker:
        lines += ["", "containment weaker than full:", *(f"  {w}" for w in weaker)]
    off = [f"  {d.peer}: {clock_offset(d)}" for d in status.devices if _clock_warns(d)]
    if off:
        lines += ["", "clock more than 2 s off the space's (it fires by the space's):", *off]
    return lines


def clock_offset(device: DeviceOut) -> str:
    """How far the device's clock is off the space's (`+1.2 s`: ahead), or `-` unknown."""
    clock = report_of(device).clock
    if clock is None or clock.offset_ms is None:
        return "-"
    return f"{0.0 - clock.offset_ms / 1000:+.1f} s"  # `0.0 -`: never "-0.0"


def _clock_warns(device: DeviceOut) -> bool:
    clock = report_of(device).clock
    return clock is not None and clock.warning is True


def _responders(status: Status) -> list[str]:
    rows = [
        [r.peer, r.responder, "ready" if r.ready else f"not ready: {r.reason}", r.waiting]
        for r in status.responders
    ]
    return ["", *render(["device", "responder", "state", "waiting"], rows)] if rows else []


def _subscriptions(status: Status) -> list[str]:
    rows = [
        [s.peer, s.chat, s.state, ",".join(s.triggers), s.last_id or ""]
        for s in status.subscriptions
    ]
    columns = ["device", "chat", "state", "triggers", "last id"]
    return ["", *render(columns, rows)] if rows else []


def _triggers(status: Status) -> list[str]:
    rows = [
        [
            t.id,
            t.name,
            t.kind,
            t.owner,
            "yes" if t.enabled else "paused",
            t.status + (f" ({t.detail})" if t.detail else ""),
            t.next_fire_at,
        ]
        for t in status.triggers
    ]
    columns = ["trigger", "name", "kind", "owner", "on", "status", "next fire"]
    return ["", *render(columns, rows)]
