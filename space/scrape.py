"""What a `/metrics` scrape reads from the store: one `Scrape`, the same from either store.

Owns the `Scrape` value (spaces, each trigger's failed runs and last lateness, the devices'
rows, the run and fire counts, the leases, and the store's `now` that judges them), its
SQLite read in one unit of work, and the pure parts both stores share (a run body's
`lateMs`). The PostgreSQL read is `store.pg_history`'s; what the families say is
`metrics`' and `alertables`'. Must not write.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import msgspec
import sqlite_utils

from core.vocab import FAILED
from space import leases

Values = dict[tuple[str, str], float]  # (space, trigger) → value


class Scrape(msgspec.Struct, frozen=True, kw_only=True):
    now: datetime  # the store's clock: devices are live, leases lapsed, by it
    spaces: list[str]
    failed: Values  # failed runs (error, timeout, crashed) of each trigger
    late: Values  # how late (seconds) each trigger's last run started
    devices: list[tuple[Any, ...]]  # (space, peer, last_seen, stopped, status) by space, peer
    runs: list[tuple[str, str, int]]  # (space, status, count)
    fires: list[tuple[str, int]]  # (space, claims)
    held: list[tuple[str, leases.Lease]]  # each space's lease


def failed_statuses() -> list[str]:
    return sorted(FAILED)


def lateness_of(rows: Iterable[tuple[str, str, str]]) -> Values:
    """Each trigger's last run `(space, trigger, body)`'s `lateMs` in seconds, if it has one."""
    found: Values = {}
    for space, tid, body in rows:
        try:
            doc = msgspec.json.decode(body)
        except msgspec.DecodeError:
            continue
        ms = doc.get("lateMs") if isinstance(doc, dict) else None
        if isinstance(ms, int | float) and not isinstance(ms, bool) and math.isfinite(ms):
            found[(space, tid)] = max(0.0, ms / 1000)
    return found


def read(db: sqlite_utils.Database, now: datetime) -> Scrape:
    """The SQLite store's scrape, one unit of work on its database thread."""
    marks = ", ".join("?" for _ in FAILED)
    failed = db.execute(
        "SELECT space, trigger_id, SUM(count) FROM run_rollups "
        f"WHERE status IN ({marks}) GROUP BY space, trigger_id",
        failed_statuses(),
    )
    last = db.execute(  # SQLite: the bare columns are MAX's row
        "SELECT space, trigger_id, body, MAX(seq) FROM runs GROUP BY space, trigger_id"
    )
    return Scrape(
        now=now,
        spaces=[space for (space,) in db.execute("SELECT id FROM spaces ORDER BY id")],
        failed={(s, t): float(n) for s, t, n in failed},
        late=lateness_of((s, t, body) for s, t, body, _ in last),
        devices=db.execute(
            "SELECT space, peer, last_seen, stopped, status FROM devices ORDER BY space, peer"
        ).fetchall(),
        runs=db.execute(
            "SELECT space, status, SUM(count) FROM run_rollups GROUP BY space, status"
        ).fetchall(),
        fires=db.execute("SELECT space, COUNT(*) FROM fires GROUP BY space").fetchall(),
        held=[(s, leases.load(db, s)) for (s,) in db.execute("SELECT space FROM leases")],
    )
