"""What a device may write as its peer: the runs it made, the turns it took, the stamps of
the records it answers for.

Owns those checks (a device token is bound to one peer, SPEC "Containment and
credentials"); admin tokens pass, run tokens never reach these routes. A device stamps a
record pinned to it, any while it holds the lease, or one whose latest claim it made. A run
record names its device's peer; one that says the program ran must be of a fire this peer
claimed at that term. A device may not set what a record pinned to another device runs
(`require_own_programming`). Must not write.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlite_utils
from aiohttp import web

from core.vocab import RAN
from space import fires, leases, trigger_store
from space.auth import Principal, Role, principal
from space.http import Refusal


def device(request: web.Request) -> Principal | None:
    """The device principal of the request, or None for the admin."""
    who = principal(request)
    return None if who.role is Role.ADMIN else who


def own_peer(request: web.Request, written: str, field: str = "peer") -> str:
    """The peer a record is written as: a device's own (when `written` is empty, or is it)."""
    return peer_of(device(request), written, field)


def peer_of(who: Principal | None, written: str, field: str = "peer") -> str:
    """`own_peer` for the device principal `who` (None: the admin), as either store checks it."""
    if who is None or written == who.peer:
        return written
    if not written:
        return str(who.peer)
    detail = f"this token is for peer {who.peer!r}, not {written!r} - at `$.{field}`"
    raise Refusal(403, "forbidden", detail)


def require_claimed(
    db: sqlite_utils.Database,
    request: web.Request,
    space: str,
    fire: tuple[str, str],
    peer: str,
    term: int,
    status: str,
) -> None:
    """A run that ran is of a fire (`(triggerId, key)`) its peer claimed at its term. On the
    database thread, in its caller's unit of work."""
    if device(request) is None or status not in RAN:
        return
    check_claimed(fires.claim_of(db, space, *fire), fire, peer, term)


def check_claimed(
    claim: tuple[str, int] | None, fire: tuple[str, str], peer: str, term: int
) -> None:
    """`require_claimed`'s verdict on the fire's claim `(peer, term)` (None: nobody's), for
    a device's run that ran (either store reads the claim)."""
    tid, key = fire
    if claim != (peer, term):
        detail = (
            f"{tid}@{key} was not claimed by {peer!r} at term {term}; a device "
            "records runs of its own fires - at `$.key`"
        )
        raise Refusal(403, "not_claimed", detail)


PROGRAMMING = ("program", "args", "spec", "kind", "limits")  # what a record makes its device run


def require_own_programming(
    request: web.Request, before: dict[str, Any] | None, changes: dict[str, Any]
) -> None:
    """A device may not set what a record pinned to another device runs (its program, args,
    spec, kind or limits; or create one): that device would run code of its choosing.
    The admin may; repinning or pausing alone is not refused."""
    who = principal(request)
    if who.role is not Role.DEVICE:
        return
    old = (before or {}).get("owner") or ""
    new = changes.get("owner", old) or ""
    other = next((o for o in (old, new) if o not in ("", who.peer)), None)
    touched = [f for f in PROGRAMMING if f in changes] if before is not None else ["program"]
    if other is None or not touched:
        return
    what = (
        "creating a record pinned"
        if before is None
        else f"changing `{touched[0]}` of a record pinned"
    )
    detail = (
        f"{what} to {other!r} needs the admin token (peer {who.peer!r} may not make another "
        f"device run its code) - at `$.{touched[0]}`"
    )
    raise Refusal(403, "forbidden", detail)


def stamp_target(
    db: sqlite_utils.Database, who: Principal | None, space: str, tid: str, now: datetime
) -> tuple[int, dict[str, Any]]:
    """The record `tid` stamps are for, as `current` reads it, refused to a device `who`
    (None: the admin) that does not answer for it by the lease at `now`. On the database
    thread, in its caller's unit of work."""
    held = trigger_store.current(db, space, tid)
    if who is not None and not owns(who, held[1]):
        lease, last = leases.load(db, space), fires.last_claimer(db, space, tid)
        check_stamper(who, tid, held[1], lease, now, last)
    return held


def owns(who: Principal | None, record: dict[str, Any]) -> bool:
    """Whether `who` (None: the admin) stamps `record` without asking the lease or claims."""
    return who is None or record.get("owner") == who.peer


def check_stamper(
    who: Principal,
    tid: str,
    record: dict[str, Any],
    lease: leases.Lease,
    now: datetime,
    last_claimer: str | None,
) -> None:
    """`stamp_target`'s verdict on a record `who` does not own, by the lease at `now` and
    the record's latest claimer (either store reads them)."""
    if not lease.lapsed(now) and lease.active == who.peer:
        return
    if last_claimer == who.peer:
        return
    owner = record.get("owner") or "floating"
    detail = (
        f"peer {who.peer!r} does not answer for trigger {tid!r} ({owner}, lease held "
        f"by {lease.active!r}): stamps come from its owner or the active device"
    )
    raise Refusal(403, "forbidden", detail)
