"""Writing run records: one run, or a posted list of them as one write.

Owns the rows a run adds (`runs`, its `run_rollups` count, its fire's outcome in
`history`, the prune of its trigger's runs) and, for a list, doing that for the whole
batch in one transaction with its statements grouped: the bodies already stored read in
one query, the run tokens ended in one, each trigger's rollups bumped once per status and
its runs pruned once, the age prune once, and each trigger's stamps merged in the order
posted and written once. Every refusal of a run (its peer, its claim, its id) comes before
anything is written, so no savepoint is needed for one to be refused alone. Must not
decide who may post (space.duties) nor answer HTTP (space.runs).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, NamedTuple

import msgspec
import sqlite_utils
from aiohttp import web

from core.vocab import KEPT_LONGER
from core.wire import RunIn, RunResult, Stamps, to_wire
from space import changes, duties, history, logtable, token_store, trigger_store
from space.appstate import SETTINGS, RunRetention
from space.db import transaction
from space.http import Refusal
from space.servertime import iso

_encoder = msgspec.json.Encoder()
_INSERT = (
    "INSERT INTO runs (space, run_id, trigger_id, status, started_at, failure, body) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_BUMP = (
    "INSERT INTO run_rollups VALUES (?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET "
    "count = count + excluded.count, "
    "last_run_at = MAX(COALESCE(last_run_at, ''), excluded.last_run_at)"
)


def wire(run: RunIn) -> dict[str, Any]:
    """The run as stored and answered: its instants in the one wire format (milliseconds)."""
    data: dict[str, Any] = to_wire(run)
    data.pop("stamps", None)  # written to the trigger, not kept in the run
    return data


def body_of(run: RunIn) -> str:
    return _encoder.encode(wire(run)).decode()


def stamp_fields(stamps: Stamps) -> dict[str, Any]:
    """The stamps given, as the record holds them (instants in the one wire format)."""
    given: dict[str, Any] = to_wire(stamps)
    return given


def add_run(
    db: sqlite_utils.Database, space: str, run: RunIn, keep: RunRetention, now: datetime
) -> bool:
    """Insert `run` and bump its rollup; False if this exact run was there already."""
    body = body_of(run)
    with transaction(db):
        if logtable.written(db, "runs", "run_id", space, run.runId, body):
            return False
        _insert(db, space, [(run, body)], keep, now)
    return True


def _insert(
    db: sqlite_utils.Database,
    space: str,
    new: list[tuple[RunIn, str]],
    keep: RunRetention,
    now: datetime,
) -> None:
    """The rows of runs not stored yet: each run, its fire's outcome; rollups and prunes
    once per trigger (and status, or kind), the age prune once per kind."""
    bumps: dict[tuple[str, str], tuple[int, str]] = {}
    for run, body in new:
        failure = run.status in KEPT_LONGER  # the column `failure`: kept longer
        started = run.startedAt.timestamp()
        row = [space, run.runId, run.triggerId, run.status.value, started, failure, body]
        db.execute(_INSERT, row)
        outcome = (run.runId, run.status.value, run.reason, started, run.lateMs)
        history.outcome(db, space, (run.triggerId, run.key), outcome)
        count, last = bumps.get((run.triggerId, run.status.value), (0, ""))
        bumps[(run.triggerId, run.status.value)] = (count + 1, max(last, iso(run.startedAt)))
    for (tid, status), (count, last) in bumps.items():
        db.execute(_BUMP, [space, tid, status, count, last])
    kinds = {(run.triggerId, run.status in KEPT_LONGER) for run, _ in new}
    for tid, failure in sorted(kinds):
        logtable.prune_key(db, "runs", "trigger_id", space, tid, failure, keep)
    for failure in sorted({failure for _, failure in kinds}):
        logtable.prune_age(db, "runs", space, failure, keep, now)


class Checked(NamedTuple):
    """A run of a list that may be written: as stored, its body, and whether it is new."""

    run: RunIn
    body: str
    new: bool


def write_list(
    db: sqlite_utils.Database, request: web.Request, space: str, posted: list[RunIn], now: datetime
) -> list[RunResult]:
    """Each run of `posted` written or refused on its own, and each trigger's stamps, in one
    transaction (a unit of work on the database thread); one result per run. The tokens of
    the runs taken end here, their streams are the caller's to end."""
    writer = changes.writer(request)  # a bad tag refuses all first
    with transaction(db):
        checked = _check(db, request, space, posted)
        taken = [c for c in checked if isinstance(c, Checked)]
        _insert(db, space, [(c.run, c.body) for c in taken if c.new], _retention(request), now)
        ended = sorted({c.run.runId for c in taken})
        token_store.revoke_runs(db, space, ended, now.timestamp())
        stamped = _stamp(db, request, space, posted, now, writer)
    return [_result(run, check, stamped) for run, check in zip(posted, checked, strict=True)]


def _retention(request: web.Request) -> RunRetention:
    return request.app[SETTINGS].retention


def _check(
    db: sqlite_utils.Database, request: web.Request, space: str, posted: list[RunIn]
) -> list[Checked | Refusal]:
    """Each run as it would be stored, or why it is refused; nothing is written."""
    stored = logtable.stored(db, "runs", "run_id", space, [r.runId for r in posted])
    out: list[Checked | Refusal] = []
    for given in posted:
        try:
            run = msgspec.structs.replace(
                given, peer=duties.own_peer(request, given.peer), stamps=None
            )
            fire = (run.triggerId, run.key)
            duties.require_claimed(db, request, space, fire, run.peer, run.term, run.status.value)
            body, there = body_of(run), stored.get(run.runId)
            if there is not None and there != body:
                raise logtable.conflict("run_id", run.runId)
            stored[run.runId] = body  # a second copy in the same list is there already
            out.append(Checked(run=run, body=body, new=there is None))
        except Refusal as exc:
            out.append(exc)
    return out


def _stamp(
    db: sqlite_utils.Database,
    request: web.Request,
    space: str,
    posted: Iterable[RunIn],
    now: datetime,
    writer: str,
) -> dict[str, Refusal | int]:
    """Each trigger's stamps, merged in the order posted, written once and fenced as
    `POST …/status` is: the seq of their change where applied (0: they changed nothing),
    else the refusal. A device's are marked with its writer (space.changes)."""
    merged: dict[str, dict[str, Any]] = {}
    for run in posted:
        if run.stamps is not None:
            merged.setdefault(run.triggerId, {}).update(stamp_fields(run.stamps))
    out: dict[str, Refusal | int] = {}
    for tid, fields in merged.items():
        try:
            duties.require_stamper(db, request, space, tid)
            _, out[tid] = trigger_store.stamp(db, space, tid, fields, iso(now), writer=writer)
        except Refusal as exc:
            out[tid] = exc
    return out


def _result(run: RunIn, check: Checked | Refusal, stamped: dict[str, Refusal | int]) -> RunResult:
    status, error, detail = (
        (check.status, check.code, check.detail)
        if isinstance(check, Refusal)
        else (201 if check.new else 200, None, None)
    )
    if run.stamps is None:
        return RunResult(runId=run.runId, status=status, error=error, detail=detail)
    done = stamped[run.triggerId]
    if isinstance(done, int):
        return RunResult(
            runId=run.runId, status=status, error=error, detail=detail, stamps=200, stampsSeq=done
        )
    return RunResult(
        runId=run.runId,
        status=status,
        error=error,
        detail=detail,
        stamps=done.status,
        stampsError=done.code,
        stampsDetail=done.detail,
    )
