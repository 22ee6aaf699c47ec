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

from runtime.cli import watch
from runtime.cli.common import Target, add_space_options
from runtime.cli.table import render
from runtime.cli.talk import talk
from runtime.client.api import SpaceClient


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


async def gather(client: SpaceClient, where: Target) -> dict[str, Any]:
    election, devices, triggers, health = await asyncio.gather(  # as the space answers them
        client.call("election", space=where.space),
        client.call("devices", space=where.space),
        client.triggers(where.space),
        client.healthz(),
    )
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
        "responders": [_responder(d) for d in devices["devices"] if _watch(d)],
        "triggers": [_trigger(t) for t in triggers["triggers"]],
    }


def _watch(device: dict[str, Any]) -> dict[str, Any]:
    found = (device.get("status") or {}).get("chatWatch")
    return found if isinstance(found, dict) else {}


def _responder(device: dict[str, Any]) -> dict[str, Any]:
    """What a device said of its chat responder: ready or why not, and what waits. An
    offline device answers nothing, whatever it said last."""
    watch, live = _watch(device), bool(device.get("live"))
    return {
        "peer": device["peer"],
        "responder": (device.get("status") or {}).get("responder", ""),
        "ready": live and bool(watch.get("ready", True)),
        "reason": (watch.get("reason", "") or "") if live else offline(device),
        "waiting": sum(c.get("waiting", 0) for c in watch.get("chats", [])),
    }


def _trigger(raw: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": raw.get("id", ""),
        "name": raw.get("name", ""),
        "kind": raw.get("kind", ""),
        "owner": raw.get("owner", "") or "(floating)",
        "enabled": raw.get("enabled", True),
        "status": raw.get("lastStatus", ""),
        "detail": raw.get("lastStatusDetail", "") or raw.get("decodeError", ""),
        "nextFireAt": raw.get("nextFireAt") or "",
        "lastRunAt": raw.get("lastRunAt") or "",
    }


def offline(device: dict[str, Any]) -> str:
    return f"offline since {device.get('lastSeen') or '?'}"


def containment(device: dict[str, Any]) -> str:
    """How contained the device's runs are: `full`, `partial`, `none` (or `unknown`); an
    offline device runs nothing (`-`)."""
    if not device.get("live"):
        return "-"
    found = (device.get("status") or {}).get("containment")
    return str(found.get("level", "unknown")) if isinstance(found, dict) else "unknown"


def _weaker(device: dict[str, Any]) -> list[str]:
    found = (device.get("status") or {}).get("containment")
    return [str(w) for w in found.get("weaker", [])] if isinstance(found, dict) else []


def human(report: dict[str, Any]) -> str:
    e = report["election"]
    head = (
        f"space {report['space']}: active device {e.get('active') or '(none)'}, "
        f"term {e.get('term', 0)}, lease until {e.get('expiresAt') or '-'}"
    )
    sections = (_devices(report), _responders(report), _subscriptions(report), _triggers(report))
    return "\n".join([head, *_health(report), *(line for section in sections for line in section)])


def _health(report: dict[str, Any]) -> list[str]:
    """One line when the space is not healthy: its writes are refused until it heals."""
    health = report.get("health") or {}
    if health.get("status", "ok") == "ok":
        return []
    what = health.get("storage") or health.get("status")
    since = f" since {health['since']}" if health.get("since") else ""
    return [
        f"space storage unavailable ({what}{since}): {health.get('detail', '')}; "
        "runs, stamps and messages wait until it heals (see docs/operations.md)"
    ]


def _devices(report: dict[str, Any]) -> list[str]:
    devices = [
        [
            d["peer"],
            d["name"],
            d["priority"],
            "yes" if d["live"] else "no",
            d["lastSeen"],
            containment(d),
            clock_offset(d),
        ]
        for d in report["devices"]
    ]
    columns = ["device", "name", "priority", "live", "last seen", "containment", "clock"]
    lines = ["", *render(columns, devices)]
    weaker = [f"{d['peer']}: {w}" for d in report["devices"] if d["live"] for w in _weaker(d)]
    if weaker:
        lines += ["", "containment weaker than full:", *(f"  {w}" for w in weaker)]
    off = [f"  {d['peer']}: {clock_offset(d)}" for d in report["devices"] if _clock_warns(d)]
    if off:
        lines += ["", "clock more than 2 s off the space's (it fires by the space's):", *off]
    return lines


def _clock(device: dict[str, Any]) -> dict[str, Any]:
    found = (device.get("status") or {}).get("clock")
    return found if isinstance(found, dict) else {}


def clock_offset(device: dict[str, Any]) -> str:
    """How far the device's clock is off the space's (`+1.2 s`: ahead), or `-` unknown."""
    offset = _clock(device).get("offsetMs")
    if not isinstance(offset, int | float):
        return "-"
    return f"{0.0 - offset / 1000:+.1f} s"  # `0.0 -`: never "-0.0"


def _clock_warns(device: dict[str, Any]) -> bool:
    return _clock(device).get("warning") is True


def _responders(report: dict[str, Any]) -> list[str]:
    rows = [
        [
            r["peer"],
            r["responder"],
            "ready" if r["ready"] else f"not ready: {r['reason']}",
            r["waiting"],
        ]
        for r in report.get("responders", [])
    ]
    return ["", *render(["device", "responder", "state", "waiting"], rows)] if rows else []


def _subscriptions(report: dict[str, Any]) -> list[str]:
    rows = [
        [
            s["peer"],
            s.get("chat", ""),
            s.get("state", ""),
            ",".join(s.get("triggers", [])),
            s.get("lastId") or "",
        ]
        for s in report["subscriptions"]
    ]
    columns = ["device", "chat", "state", "triggers", "last id"]
    return ["", *render(columns, rows)] if rows else []


def _triggers(report: dict[str, Any]) -> list[str]:
    rows = [
        [
            t["id"],
            t["name"],
            t["kind"],
            t["owner"],
            "yes" if t["enabled"] else "paused",
            t["status"] + (f" ({t['detail']})" if t["detail"] else ""),
            t["nextFireAt"],
        ]
        for t in report["triggers"]
    ]
    columns = ["trigger", "name", "kind", "owner", "on", "status", "next fire"]
    return ["", *render(columns, rows)]
