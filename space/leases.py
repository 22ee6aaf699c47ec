"""The election lease of a space: who runs floating triggers, changed only by compare-and-set.

Owns the `leases` table and the lease rules (SPEC "Who runs what"): an acquire (SPEC's
path `…/election/claim`) renews when the peer holds the lease at `term`; acquires it with
`term + 1` when it is free or lapsed by the server's clock and `term` is current; anything
else is a 409 with the current lease. `term` grows by one at every change of holder.
`want` carries a higher-priority device's request; the holder hands over with `handover`.
Decisions are pure functions of (lease, request, now). Time the store could not run (a
unit of work stalled on a hung disk, `dbthread.DbThread.on_stall`) does not expire a lease:
`credit_stall`. Must not know fires or devices.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol, TypeVar

import msgspec
import sqlite_utils
from aiohttp import web

from core.peerwire import HandoverIn, LeaseIn, LeaseOut, WantIn
from space import history, oddrows
from space.appstate import SETTINGS
from space.auth import require_peer
from space.http import Refusal, add_route, answer, read_body
from space.servertime import iso
from space.spaces import require_space
from space.storage import STORAGE
from space.store import STORE

log = logging.getLogger("baton.space")

SCHEMA = """
CREATE TABLE IF NOT EXISTS leases (space TEXT PRIMARY KEY, active TEXT, term INTEGER NOT NULL,
  expires_at REAL, want TEXT);
"""


class Lease(msgspec.Struct, frozen=True, kw_only=True):
    active: str | None = None
    term: int = 0
    expires_at: datetime | None = None
    want: str | None = None

    def lapsed(self, now: datetime) -> bool:
        return self.active is None or self.expires_at is None or now >= self.expires_at


class Conflict(Exception):
    """The compare-and-set did not match; the lease stays as it is."""


def acquire(lease: Lease, peer: str, term: int, now: datetime, length: timedelta) -> Lease:
    if lease.active == peer and lease.term == term and not lease.lapsed(now):
        return msgspec.structs.replace(lease, expires_at=now + length)
    if lease.lapsed(now) and lease.term == term:
        want = None if lease.want == peer else lease.want
        return Lease(active=peer, term=term + 1, expires_at=now + length, want=want)
    raise Conflict


def release(lease: Lease, peer: str, term: int, now: datetime) -> Lease:
    if lease.active != peer or lease.term != term:
        raise Conflict
    return msgspec.structs.replace(lease, active=None, expires_at=None)


def handover(
    lease: Lease, peer: str, term: int, to: str, now: datetime, length: timedelta
) -> Lease:
    if lease.active != peer or lease.term != term or lease.lapsed(now) or to == peer:
        raise Conflict
    return Lease(active=to, term=term + 1, expires_at=now + length, want=None)


def want(lease: Lease, peer: str, wanted: bool) -> Lease:
    if wanted:
        return msgspec.structs.replace(lease, want=peer)
    return msgspec.structs.replace(lease, want=None) if lease.want == peer else lease


def ensure_schema(db: sqlite_utils.Database) -> None:
    db.executescript(SCHEMA)


def credit_stall(db: sqlite_utils.Database, began: float, seconds: float) -> None:
    """The store could not run for `seconds` from `began` (a hung disk): every lease
    still held then lapses that much later, so its holder, which could not renew through
    the store either, keeps it. On the database thread, before any other unit of work."""
    try:
        moved = db.execute(
            "UPDATE leases SET expires_at = expires_at + ? "
            "WHERE active IS NOT NULL AND typeof(expires_at) IN ('real', 'integer') "
            "AND expires_at > ?",
            [seconds, began],
        ).rowcount
    except sqlite3.Error as exc:  # still failing: the next transaction says so
        log.warning("a %.1f s stall of the store: leases not credited: %s", seconds, exc)
        return
    log.warning("the store stalled for %.1f s: %d leases lapse that much later", seconds, moved)


def load(db: sqlite_utils.Database, space: str) -> Lease:
    """The space's lease; an odd row (written past the API) is read as a free lease at the
    last term the history knows, so the next claim replaces it and terms still only grow."""
    row = db.execute(
        "SELECT active, term, expires_at, want FROM leases WHERE space = ?", [space]
    ).fetchone()
    if row is None:
        return Lease()
    good, _ = oddrows.each([row], _decode, lambda _: space, "leases")  # an odd one is logged
    return good[0] if good else Lease(term=_last_term(db, space))


def _decode(row: tuple[object, ...]) -> Lease:
    active, term, expires, want = row
    if not (active is None or isinstance(active, str)) or not (
        want is None or isinstance(want, str)
    ):
        raise TypeError("active and want must be text or null")
    if not isinstance(term, int) or isinstance(term, bool) or term < 0:
        raise TypeError(f"term {term!r} is not a non-negative integer")
    if expires is not None and not isinstance(expires, int | float):
        raise TypeError(f"expires_at {expires!r} is not a number")
    at = None if expires is None else datetime.fromtimestamp(expires, UTC)
    return Lease(active=active, term=term, expires_at=at, want=want)


def _last_term(db: sqlite_utils.Database, space: str) -> int:
    row = db.execute(
        "SELECT MAX(term) FROM history_terms WHERE space = ? AND typeof(term) = 'integer'",
        [space],
    ).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def store(db: sqlite_utils.Database, space: str, lease: Lease) -> None:
    expires = None if lease.expires_at is None else lease.expires_at.timestamp()
    db.execute(
        "INSERT OR REPLACE INTO leases VALUES (?, ?, ?, ?, ?)",
        [space, lease.active, lease.term, expires, lease.want],
    )


def wire(lease: Lease, now: datetime, length: timedelta) -> dict[str, object]:
    live = not lease.lapsed(now)
    expires_in = None
    if lease.expires_at is not None:
        expires_in = max(0, round((lease.expires_at - now).total_seconds() * 1000))
    return {
        "active": lease.active if live else None,
        "term": lease.term,
        "expiresAt": iso(lease.expires_at) if lease.expires_at else None,
        "expiresInMs": expires_in,
        "want": lease.want,
        "serverTime": iso(now),
        "leaseSeconds": length.total_seconds(),
    }


def _length(request: web.Request) -> timedelta:
    return timedelta(seconds=request.app[SETTINGS].lease_seconds)


async def get_election(request: web.Request) -> web.Response:
    space = require_space(request)
    lease, now = await request.app[STORE].lease(space)
    return answer(wire(lease, now, _length(request)))


async def _change(
    request: web.Request,
    space: str,
    step: Callable[[Lease, datetime], Lease],
    seen: Callable[[Lease, datetime], Lease] | None = None,
) -> web.Response:
    """Apply `step(lease, now)` in the store; 409 `lease_conflict` with the lease if refused
    (as `seen` shows it)."""
    change = await request.app[STORE].change_lease(space, step)
    now, length = change.now, _length(request)
    lease = (seen or _as_stored)(change.old, now)
    if change.new is None:
        raise Refusal(
            409, "lease_conflict", _conflict_detail(lease, now), **wire(lease, now, length)
        )
    return answer(wire(change.new, now, length))


def remember(db: sqlite_utils.Database, space: str, old: Lease, new: Lease, now: datetime) -> None:
    """The history of terms, as `term_events` says."""
    for event in term_events(old, new, now):
        if isinstance(event, TermBegan):
            history.term_began(db, space, event.term, event.holder, event.at.timestamp())
        else:
            history.term_ended(db, space, event.term, event.at.timestamp(), event.how)


class TermBegan(msgspec.Struct, frozen=True):
    term: int
    holder: str
    at: datetime


class TermEnded(msgspec.Struct, frozen=True):
    term: int
    at: datetime
    how: str


def term_events(old: Lease, new: Lease, now: datetime) -> list[TermBegan | TermEnded]:
    """What a change of the lease writes into the history of terms: a new term begins, the
    one before ended (released, expired at its `expiresAt`, or handed over while it still
    held). A renewal writes nothing."""
    lapsed = old.lapsed(now) and old.expires_at is not None
    ended = old.expires_at if lapsed and old.expires_at else now
    events: list[TermBegan | TermEnded] = []
    if new.term != old.term:
        if old.active is not None and old.term:
            events.append(TermEnded(old.term, ended, "expired" if lapsed else "handed over"))
        if new.active is not None:
            events.append(TermBegan(new.term, new.active, now))
    elif old.active is not None and new.active is None:
        events.append(TermEnded(old.term, ended, "expired" if lapsed else "released"))
    return events


def holds(lease: Lease, peer: str, term: int, now: datetime) -> bool:
    """Whether `peer` holds the lease at `term` now: what fences a floating trigger's claim."""
    return not lease.lapsed(now) and lease.active == peer and lease.term == term


def _conflict_detail(lease: Lease, now: datetime) -> str:
    if lease.lapsed(now):
        return f"the lease is free at term {lease.term}; acquire it with that term"
    return f"the lease is held by {lease.active!r} at term {lease.term}"


class _ByPeer(Protocol):
    @property
    def peer(self) -> str: ...


B = TypeVar("B", bound=_ByPeer)


async def _peer_body(request: web.Request, kind: type[B]) -> tuple[str, B]:
    """The space and the body of a change asked by a peer for itself."""
    space = require_space(request)
    body = await read_body(request, kind)
    require_peer(request, body.peer)
    return space, body


def kept(lease: Lease, now: datetime) -> Lease:
    """While the store cannot write, a lease its holder could not renew has not lapsed."""
    if lease.active is None or not lease.lapsed(now):
        return lease
    return msgspec.structs.replace(lease, expires_at=now + timedelta(microseconds=1))


async def post_acquire(request: web.Request) -> web.Response:
    space, body = await _peer_body(request, LeaseIn)
    length = _length(request)
    seen = kept if request.app[STORAGE].fault is not None else _as_stored

    def step(lease: Lease, now: datetime) -> Lease:
        return acquire(seen(lease, now), body.peer, body.term, now, length)

    return await _change(request, space, step, seen)


def _as_stored(lease: Lease, _now: datetime) -> Lease:
    return lease


async def post_release(request: web.Request) -> web.Response:
    space, body = await _peer_body(request, LeaseIn)
    return await _change(
        request, space, lambda lease, now: release(lease, body.peer, body.term, now)
    )


async def post_handover(request: web.Request) -> web.Response:
    space, body = await _peer_body(request, HandoverIn)
    length = _length(request)
    return await _change(
        request,
        space,
        lambda lease, now: handover(lease, body.peer, body.term, body.to, now, length),
    )


async def post_want(request: web.Request) -> web.Response:
    space, body = await _peer_body(request, WantIn)
    return await _change(request, space, lambda lease, now: want(lease, body.peer, body.want))


def setup(app: web.Application) -> None:
    add_route(app, "election", get_election, "The lease: who is active", answer=LeaseOut)
    add_route(
        app,
        "election_claim",
        post_acquire,
        "Renew (holder at term) or acquire (free or lapsed, term current) the lease",
        body=LeaseIn,
        answer=LeaseOut,
    )
    add_route(
        app,
        "election_release",
        post_release,
        "Free the lease (holder at term)",
        body=LeaseIn,
        answer=LeaseOut,
    )
    add_route(
        app,
        "election_handover",
        post_handover,
        "Holder at term gives the lease to `to` directly (term + 1)",
        body=HandoverIn,
        answer=LeaseOut,
    )
    add_route(
        app,
        "election_want",
        post_want,
        "Ask for the lease (`want: true`) or withdraw the request",
        body=WantIn,
        answer=LeaseOut,
    )
