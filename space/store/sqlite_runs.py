"""The embedded store's units of work for runs, turns and idempotency keys.

Owns what one seam call of those areas does on the SQLite file: one unit, run whole on the
app's database thread (`space.dbthread`), a posted run or list in one `BEGIN IMMEDIATE`
transaction, by the store's clock. The SQL stays in the area modules (`run_writes`, `runs`,
`logtable`, `turns`, `idempotency`). Must not be called on the event loop.
"""

from __future__ import annotations

from typing import Any

import sqlite_utils

from core.wire import RunIn, TurnIn
from space import idempotency, logtable, run_writes, runs, turns
from space.appstate import RunRetention
from space.servertime import ServerClock
from space.store.logwire import Kept, LogQuery, Poster, RunPosted, RunsPosted


class RunWork:
    """The runs', turns' and idempotency keys' calls as units of work."""

    def __init__(self, clock: ServerClock) -> None:
        self.clock = clock

    def post_run(self, db: sqlite_utils.Database, space: str, run: RunIn, by: Poster) -> RunPosted:
        return run_writes.post_one(db, space, run, by, self.clock())

    def post_runs(
        self, db: sqlite_utils.Database, space: str, posted: list[RunIn], by: Poster
    ) -> RunsPosted:
        return run_writes.write_list(db, space, posted, by, self.clock())

    def runs_page(
        self, db: sqlite_utils.Database, space: str, query: LogQuery
    ) -> list[dict[str, Any]]:
        return logtable.query(db, "runs", space, query.filters, query.since, query.limit)

    def run_body(self, db: sqlite_utils.Database, space: str, run_id: str) -> dict[str, Any] | None:
        return logtable.one(db, "runs", "run_id", space, run_id)

    def rollups(
        self, db: sqlite_utils.Database, space: str, trigger: str | None
    ) -> list[dict[str, Any]]:
        return runs.rollups(db, space, trigger)

    def post_turn(
        self, db: sqlite_utils.Database, space: str, turn: TurnIn, keep: RunRetention
    ) -> bool:
        return turns.add_turn(db, space, turn, keep, self.clock())

    def turns_page(
        self, db: sqlite_utils.Database, space: str, query: LogQuery
    ) -> list[dict[str, Any]]:
        return logtable.query(db, "agent_turns", space, query.filters, query.since, query.limit)

    def kept_answer(self, db: sqlite_utils.Database, owner: str, key: str) -> Kept | None:
        return idempotency.stored(db, owner, key)

    def keep_answer(self, db: sqlite_utils.Database, owner: str, key: str, kept: Kept) -> None:
        idempotency.insert(db, owner, key, kept, self.clock().timestamp())
