"""Run records on PostgreSQL: a posted run or list as one transaction, by the database's clock.

Owns the runs' SQL on the PostgreSQL store: the runs (`INSERT … ON CONFLICT DO NOTHING`, so
of two servers posting one `runId` one writes it, the other answers it there already or
409 `run_exists`), their fire's outcome in `fires`, the rollups bumped once per trigger and
status, the prunes, the end of the run's tokens (`pg_tokens.end_runs`) and the trigger's
stamps through `pg_records.stamp_in` (the row locked, the feed's counter row: the same
compare-and-set and gapless seq as every record write). A list locks its stamped records
in id order before the feed row, so two lists never deadlock. What the answers say is
`run_writes`'s and `duties`'s. Must not know HTTP beyond raising `Refusal`.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from core.vocab import KEPT_LONGER, RAN
from core.wire import RunIn
from space import duties, logtable, run_writes, runs
from space.http import Refusal
from space.run_writes import Checked
from space.servertime import iso
from space.store import pg_fires, pg_logs, pg_records, pg_tokens
from space.store.logwire import LogQuery, Poster, RunPosted, RunsPosted
from space.token_store import Principal
from space.trigger_store import Record

_INSERT = """
INSERT INTO runs (space, run_id, trigger_id, status, started_at, failure, body)
SELECT $1, * FROM unnest($2::text[], $3::text[], $4::text[], $5::float8[], $6::bool[],
  $7::text[]) ON CONFLICT DO NOTHING RETURNING run_id
"""
_OUTCOME = (
    "UPDATE fires SET run_id = $4, status = $5, reason = $6, started_at = $7, late_ms = $8 "
    "WHERE space = $1 AND trigger_id = $2 AND key = $3"
)
_BUMP = (
    "INSERT INTO run_rollups AS r VALUES ($1, $2, $3, $4, $5) "
    "ON CONFLICT (space, trigger_id, status) DO UPDATE SET count = r.count + excluded.count, "
    "last_run_at = GREATEST(COALESCE(r.last_run_at, '') COLLATE \"C\", "
    'excluded.last_run_at COLLATE "C")'
)
_CLAIMS = (
    "SELECT trigger_id, key, peer, term FROM fires WHERE space = $1 AND (trigger_id, key) IN "
    "(SELECT * FROM unnest($2::text[], $3::text[]))"
)


class PgRuns:
    """The run records' operations of `PostgresStore`."""

    pool: asyncpg.Pool

    async def post_run(self, space: str, run: RunIn, by: Poster) -> RunPosted:
        async with self.pool.acquire() as conn, conn.transaction():
            try:
                async with conn.transaction():  # a savepoint: a refusal undoes all of the run
                    return await _post_one(conn, space, run, by)
            except Refusal as exc:  # but the end of its tokens (a device's of its own fires)
                ended = await pg_tokens.end_runs(conn, space, [run.runId], by.peer)
                return RunPosted(refusal=exc, ended=ended > 0)

    async def post_runs(self, space: str, posted: list[RunIn], by: Poster) -> RunsPosted:
        async with self.pool.acquire() as conn, conn.transaction():
            checked = await _written(conn, space, await _check(conn, space, posted, by), by)
            ended = {c.run.runId for c in checked if isinstance(c, Checked)}
            await pg_tokens.end_runs(conn, space, sorted(ended), None)
            refused = [
                r.runId for r, c in zip(posted, checked, strict=True) if isinstance(c, Refusal)
            ]
            for run_id in dict.fromkeys(r for r in refused if r not in ended):
                if await pg_tokens.end_runs(conn, space, [run_id], by.peer):
                    ended.add(run_id)
            stamped = await _stamp_list(conn, space, posted, by)
        results = [run_writes.result(r, c, stamped) for r, c in zip(posted, checked, strict=True)]
        return RunsPosted(results, sorted(ended))

    async def runs_page(self, space: str, query: LogQuery) -> list[dict[str, Any]]:
        return await pg_logs.query(self.pool, "runs", space, query)

    async def run_body(self, space: str, run_id: str) -> dict[str, Any] | None:
        return await pg_logs.one(self.pool, "runs", "run_id", space, run_id)

    async def rollups(self, space: str, trigger: str | None) -> list[dict[str, Any]]:
        rows = await self.pool.fetch(
            "SELECT trigger_id, status, count, last_run_at FROM run_rollups WHERE space = $1 "
            'AND ($2::text IS NULL OR trigger_id = $2) ORDER BY trigger_id COLLATE "C", '
            'status COLLATE "C"',
            space,
            trigger,
        )
        return runs.rolled([tuple(row) for row in rows])


async def _post_one(conn: asyncpg.Connection, space: str, posted: RunIn, by: Poster) -> RunPosted:
    [check] = await _written(conn, space, await _check(conn, space, [posted], by), by)
    if isinstance(check, Refusal):
        raise check
    await pg_tokens.end_runs(conn, space, [posted.runId], None)  # its run is over
    if posted.stamps is not None:
        fields = run_writes.stamp_fields(posted.stamps)
        fence = Fence(conn, space, by.who, posted.triggerId)
        await pg_records.stamp_in(conn, space, posted.triggerId, fields, fence=fence)
    return RunPosted(run=check.run, added=check.new)


async def _check(
    conn: asyncpg.Connection, space: str, posted: list[RunIn], by: Poster
) -> list[Checked | Refusal]:
    """Each run as it would be stored, or why it is refused (`run_writes._check`'s twin)."""
    stored = await pg_logs.stored(conn, "runs", "run_id", space, [r.runId for r in posted])
    ran = [r for r in posted if r.status in RAN] if by.who is not None else []
    rows = (
        await conn.fetch(_CLAIMS, space, [r.triggerId for r in ran], [r.key for r in ran])
        if ran
        else []
    )
    claims = {(row[0], row[1]): (row[2], row[3]) for row in rows}
    out: list[Checked | Refusal] = []
    for given in posted:
        try:
            run = run_writes.as_stored(given, by)
            if by.who is not None and run.status in RAN:
                fire = (run.triggerId, run.key)
                duties.check_claimed(claims.get(fire), fire, run.peer, run.term)
            out.append(run_writes.checked(run, stored))
        except Refusal as exc:
            out.append(exc)
    return out


async def _written(
    conn: asyncpg.Connection, space: str, checked: list[Checked | Refusal], by: Poster
) -> list[Checked | Refusal]:
    """The new runs written with their rows; one another server wrote meanwhile is there
    already (its body this one's) or refused (409 `run_exists`)."""
    new = [c for c in checked if isinstance(c, Checked) and c.new]
    if not new:
        return checked
    columns = ([c.run.runId for c in new], [c.run.triggerId for c in new])
    statuses = [c.run.status.value for c in new]
    started = [c.run.startedAt.timestamp() for c in new]
    failure = [c.run.status in KEPT_LONGER for c in new]
    made = {
        row[0]
        for row in await conn.fetch(
            _INSERT, space, *columns, statuses, started, failure, [c.body for c in new]
        )
    }
    lost = [c.run.runId for c in new if c.run.runId not in made]
    there = await pg_logs.stored(conn, "runs", "run_id", space, lost) if lost else {}
    await _rows(conn, space, [c for c in new if c.run.runId in made], by)
    return [_settled(c, made, there) for c in checked]


def _instants(run: RunIn) -> tuple[float, float | None]:
    return run.startedAt.timestamp(), run.lateMs


def _settled(c: Checked | Refusal, made: set[str], there: dict[str, str]) -> Checked | Refusal:
    if not isinstance(c, Checked) or not c.new or c.run.runId in made:
        return c
    if there.get(c.run.runId) == c.body:
        return Checked(run=c.run, body=c.body, new=False)
    return logtable.conflict("run_id", c.run.runId)


async def _rows(conn: asyncpg.Connection, space: str, new: list[Checked], by: Poster) -> None:
    """Of runs just written: each fire's outcome, the rollups bumped once per trigger and
    status (in key order: two lists lock them alike), the prunes once per trigger and kind."""
    if not new:
        return
    await conn.executemany(
        _OUTCOME,
        [
            (space, r.triggerId, r.key, r.runId, r.status.value, r.reason, *_instants(r))
            for r in (c.run for c in new)
        ],
    )
    bumps: dict[tuple[str, str], tuple[int, str]] = {}
    for c in new:
        at = iso(c.run.startedAt)
        count, last = bumps.get((c.run.triggerId, c.run.status.value), (0, ""))
        bumps[(c.run.triggerId, c.run.status.value)] = (count + 1, max(last, at))
    await conn.executemany(
        _BUMP, [(space, tid, st, n, last) for (tid, st), (n, last) in sorted(bumps.items())]
    )
    kinds = {(c.run.triggerId, c.run.status in KEPT_LONGER) for c in new}
    for tid, fails in sorted(kinds):
        await pg_logs.prune_key(conn, "runs", "trigger_id", space, tid, fails, by.keep)
    for fails in sorted({fails for _, fails in kinds}):
        await pg_logs.prune_age(conn, "runs", space, fails, by.keep)


async def _stamp_list(
    conn: asyncpg.Connection, space: str, posted: list[RunIn], by: Poster
) -> dict[str, Refusal | int]:
    """Each trigger's stamps merged in the order posted, written once, fenced as `POST
    …/status` is: the seq of their change (0: unchanged), else the refusal."""
    merged = run_writes.merged_stamps(posted)
    if not merged:
        return {}
    await conn.execute(  # the records before the feed's row, in id order: no deadlock
        'SELECT 1 FROM triggers WHERE space = $1 AND id = ANY($2::text[]) ORDER BY id COLLATE "C" '
        "FOR UPDATE",
        space,
        sorted(merged),
    )
    out: dict[str, Refusal | int] = {}
    for tid, (_, fields) in merged.items():
        fence = Fence(conn, space, by.who, tid)
        try:
            _, out[tid] = await pg_records.stamp_in(
                conn, space, tid, fields, writer=by.writer, fence=fence
            )
        except Refusal as exc:
            out[tid] = exc
    return out


class Fence:
    """`duties.stamp_target` on PostgreSQL: the record's owner, else the lease at the
    database's clock and the record's latest claimer (`who` None: the admin, let by)."""

    def __init__(
        self, conn: asyncpg.Connection, space: str, who: Principal | None, tid: str
    ) -> None:
        self.conn, self.space, self.who, self.tid = conn, space, who, tid

    async def __call__(self, record: Record) -> None:
        if self.who is None or duties.owns(self.who, record):
            return
        row = await self.conn.fetchrow(
            "SELECT l.active, l.term, l.expires_at, l.want, clock_timestamp() AS now, "
            "(SELECT peer FROM fires WHERE space = $1 AND trigger_id = $2 ORDER BY n DESC "
            "LIMIT 1) AS last FROM (SELECT 1) AS one LEFT JOIN leases l ON l.space = $1",
            self.space,
            self.tid,
        )
        lease = pg_fires.lease_of(row)
        duties.check_stamper(self.who, self.tid, record, lease, row["now"], row["last"])
