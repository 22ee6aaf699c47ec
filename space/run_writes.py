"""Writing run records on SQLite: one posted run, or a posted list of them, as one write.

Owns the rows a run adds (`runs`, its `run_rollups` count, its fire's outcome in
`history`, the prune of its trigger's runs, the end of its tokens) and the pure parts both
stores share (`wire`, `stamp_fields`, `Checked`, `result`). One POST is one transaction,
its statements grouped: the bodies already stored read in one query, the run tokens ended
in one, each trigger's rollups bumped once per status and its runs pruned once, the age
prune once, each trigger's stamps merged in the order posted and written once. Every
refusal (a run's peer, claim or id; a single run's stamps) comes before anything is written,
so no savepoint is needed; a refused run's tokens end in the same transaction. Must not
decide who may post (space.duties) nor answer HTTP (space.runs).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, NamedTuple

import msgspec
import sqlite_utils

from core.vocab import KEPT_LONGER, RAN
from core.wire import RunIn, RunResult, Stamps, to_wire
from space import duties, fires, history, logtable, token_store, trigger_store
from space.appstate import RunRetention
from space.db import transaction
from space.http import Refusal
from space.servertime import iso
from space.store.logwire import Poster, RunPosted, RunsPosted

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


def post_one(
    db: sqlite_utils.Database, space: str, posted: RunIn, by: Poster, now: datetime
) -> RunPosted:
    """One posted run and its stamps (all or nothing) in one transaction: a unit of work on
    the database thread. Refused, only its tokens end (a device's only of its own fires)."""
    with transaction(db):
        check = _check(db, space, [posted], by)[0]
        try:
            if isinstance(check, Refusal):
                raise check
            held = (
                None
                if posted.stamps is None
                else duties.stamp_target(db, by.who, space, posted.triggerId, now)
            )
        except Refusal as exc:
            ended = token_store.revoke_runs(db, space, [posted.runId], now.timestamp(), by.peer)
            return RunPosted(refusal=exc, ended=ended > 0)
        token_store.revoke_runs(db, space, [posted.runId], now.timestamp())  # its run is over
        if check.new:
            _insert(db, space, [(check.run, check.body)], by.keep, now)
        if held is not None and posted.stamps is not None:
            fields = stamp_fields(posted.stamps)
            trigger_store.stamp_over(db, space, posted.triggerId, held, fields, iso(now))
    return RunPosted(run=check.run, added=check.new)


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
    db: sqlite_utils.Database, space: str, posted: list[RunIn], by: Poster, now: datetime
) -> RunsPosted:
    """Each run of `posted` written or refused on its own, and each trigger's stamps, in one
    transaction (a unit of work on the database thread); one result per run. The tokens of
    the runs taken end here, and those of the refused (a device's only of its own fires)."""
    with transaction(db):
        checked = _check(db, space, posted, by)
        taken = [c for c in checked if isinstance(c, Checked)]
        _insert(db, space, [(c.run, c.body) for c in taken if c.new], by.keep, now)
        ended = {c.run.runId for c in taken}
        token_store.revoke_runs(db, space, sorted(ended), now.timestamp())
        refused = [r.runId for r, c in zip(posted, checked, strict=True) if isinstance(c, Refusal)]
        for run_id in dict.fromkeys(r for r in refused if r not in ended):
            if token_store.revoke_runs(db, space, [run_id], now.timestamp(), by.peer):
                ended.add(run_id)
        stamped = _stamp(db, space, posted, by, now)
    results = [result(run, check, stamped) for run, check in zip(posted, checked, strict=True)]
    return RunsPosted(results, sorted(ended))


def _check(
    db: sqlite_utils.Database, space: str, posted: list[RunIn], by: Poster
) -> list[Checked | Refusal]:
    """Each run as it would be stored, or why it is refused; nothing is written."""
    stored = logtable.stored(db, "runs", "run_id", space, [r.runId for r in posted])
    out: list[Checked | Refusal] = []
    for given in posted:
        try:
            run = as_stored(given, by)
            if by.who is not None and run.status.value in RAN:
                claim = fires.claim_of(db, space, run.triggerId, run.key)
                duties.check_claimed(claim, (run.triggerId, run.key), run.peer, run.term)
            out.append(checked(run, stored))
        except Refusal as exc:
            out.append(exc)
    return out


def as_stored(given: RunIn, by: Poster) -> RunIn:
    """The run as stored: as its device's peer (403 for another's), without its stamps."""
    return msgspec.structs.replace(given, peer=duties.peer_of(by.who, given.peer), stamps=None)


def checked(run: RunIn, stored: dict[str, str]) -> Checked:
    """`run` against the bodies `stored` by run id: new, there already, or 409 `run_exists`
    (a second copy in the same list is there already: `stored` notes each)."""
    body, there = body_of(run), stored.get(run.runId)
    if there is not None and there != body:
        raise logtable.conflict("run_id", run.runId)
    stored[run.runId] = body
    return Checked(run=run, body=body, new=there is None)


def _stamp(
    db: sqlite_utils.Database, space: str, posted: Iterable[RunIn], by: Poster, now: datetime
) -> dict[str, Refusal | int]:
    """Each trigger's stamps, merged in the order posted, written once and fenced as
    `POST …/status` is: the seq of their change where applied (0: they changed nothing),
    else the refusal. A device's are marked with its writer (space.changes)."""
    out: dict[str, Refusal | int] = {}
    for tid, (run, fields) in merged_stamps(posted).items():
        try:
            held = duties.stamp_target(db, by.who, space, run.triggerId, now)
            _, out[tid] = trigger_store.stamp_over(
                db, space, tid, held, fields, iso(now), by.writer
            )
        except Refusal as exc:
            out[tid] = exc
    return out


def merged_stamps(posted: Iterable[RunIn]) -> dict[str, tuple[RunIn, dict[str, Any]]]:
    """Each trigger's stamps merged in the order posted, with its first run that has any."""
    merged: dict[str, tuple[RunIn, dict[str, Any]]] = {}
    for run in posted:
        if run.stamps is not None:
            merged.setdefault(run.triggerId, (run, {}))[1].update(stamp_fields(run.stamps))
    return merged


def result(run: RunIn, check: Checked | Refusal, stamped: dict[str, Refusal | int]) -> RunResult:
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
