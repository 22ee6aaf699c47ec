"""`baton devices`: the devices the space has seen, which is live, which holds the lease.

    baton devices [--url U] [--token-file F] [--space ID] [--json]

One row per device: peer, name, priority, live, up since, last seen, and `*` in
ACTIVE for the election holder. With `--json`: `{"devices": [...], "election": {...}}`,
both as the space answers them. Reads the space only.
"""

from __future__ import annotations

import argparse
import asyncio

from core.clock import iso
from core.peerwire import DeviceList, LeaseOut
from runtime.cli.common import Target, add_space_options
from runtime.cli.table import render
from runtime.cli.talk import emit, read, talk
from runtime.client.api import SpaceClient


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("devices", help="the space's devices, live or not, and the lease")
    add_space_options(p)
    p.set_defaults(func=lambda args: talk(args, lambda c, w: devices(c, w, args.json)))


async def devices(client: SpaceClient, where: Target, as_json: bool) -> int:
    found, election = await asyncio.gather(  # printed as the space answers them
        client.call("devices", space=where.space), client.call("election", space=where.space)
    )
    if as_json:
        emit({"devices": found["devices"], "election": election})
        return 0
    listed, lease = read(found, DeviceList, "devices"), read(election, LeaseOut, "election")
    if not listed.devices:
        print(f"no device has joined space {where.space} yet")
        return 0
    rows = [
        [
            "*" if d.peer == lease.active else "",
            d.peer,
            d.name,
            d.priority,
            "yes" if d.live else "no",
            iso(d.upSince),
            iso(d.lastSeen),
        ]
        for d in listed.devices
    ]
    headers = ["active", "peer", "name", "priority", "live", "up since", "last seen"]
    print("\n".join(render(headers, rows)))
    print(f"\nlease: term {lease.term}, until {lease.expiresAt or '-'}")
    return 0
