"""The owner's ledger: the pinned fires this device claimed while the space was away.

Owns one SQLite file in the device's data dir (SPEC "Who runs what": pinned ones run on).
A row is a claim `(space, peer, triggerId, key)`, keyed like the space's, committed
before its run starts; then the run's record; then `claimed` once the space took the claim
after the fact, `done` once it took the record, or `refused` with the space's code (kept,
so the key never runs here again). A claim whose run never ended (the device stopped or
crashed) is found run-less at open: it is recorded `crashed`, never run again. Done and
refused rows are pruned after `KEEP_S`. Sync calls, each one short commit; handing over is
runtime.fire.handover's. Must not claim in the space nor run anything.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime
from pathlib import Path

import msgspec

from core.clock import Clock, iso
from core.vocab import RunReason, RunStatus
from core.wire import FireIn, RunIn
from runtime.fire.dispatch import FireRequest

LEDGER_FILE = "ledger.sqlite"  # in the device's data dir (`baton up --data`)
KEEP_S = 7 * 86400.0  # done and refused claims are kept this long (the key stays claimed here)
HELD, CLAIMED, DONE, REFUSED = "held", "claimed", "done", "refused"

SCHEMA = """
CREATE TABLE IF NOT EXISTS claims (
  space TEXT NOT NULL, peer TEXT NOT NULL, trigger_id TEXT NOT NULL, key TEXT NOT NULL,
  run_id TEXT NOT NULL UNIQUE, program TEXT NOT NULL, due_at TEXT, claimed_at TEXT NOT NULL,
  claim TEXT NOT NULL, run TEXT, state TEXT NOT NULL, outcome TEXT NOT NULL DEFAULT '',
  changed REAL NOT NULL, PRIMARY KEY (space, peer, trigger_id, key));
"""
_encode = msgspec.json.Encoder().encode
_fire = msgspec.json.Decoder(FireIn)
_run = msgspec.json.Decoder(RunIn)


class Ledger:
    """`Ledger(path, space, peer, clock)`: this device's own claims in one space."""

    def __init__(self, path: Path, space: str, peer: str, clock: Clock) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, isolation_level=None)  # autocommit: one row, one commit
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")  # a claim is on disk before its run starts
        self._db.executescript(SCHEMA)
        self._space, self._peer, self._clock = space, peer, clock
        self._open: set[str] = set()  # run ids claimed here by this process, run not yet kept
        self.crashed = self._crashed()

    def close(self) -> None:
        self._db.close()

    def holds(self, tid: str, key: str) -> bool:
        """Whether `(tid, key)` was claimed in this ledger (whatever became of it)."""
        row = self._db.execute(
            "SELECT 1 FROM claims WHERE space = ? AND peer = ? AND trigger_id = ? AND key = ?",
            [self._space, self._peer, tid, key],
        ).fetchone()
        return row is not None

    def claim(self, fire: FireIn, request: FireRequest, run_id: str) -> bool:
        """Claim `fire` here, committed; False if its key was claimed here before."""
        due = iso(request.due_at) if request.due_at is not None else None
        row = [self._space, self._peer, fire.triggerId, fire.key, run_id]
        row += [request.trigger.program, due, iso(self._clock.wall()), _encode(fire).decode()]
        inserted = self._db.execute(
            "INSERT INTO claims (space, peer, trigger_id, key, run_id, program, due_at, "
            "claimed_at, claim, run, state, changed) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?) ON CONFLICT DO NOTHING",
            [*row, HELD, self._clock.wall().timestamp()],
        ).rowcount
        if inserted == 1:
            self._open.add(run_id)
        return inserted == 1

    def kept(self, run: RunIn) -> bool:
        """Keep `run`'s record if its fire was claimed here (True), to be handed over."""
        if run.runId not in self._open:
            return False
        self._open.discard(run.runId)
        self._keep(run)
        return True

    def waiting(self) -> int:
        """Claims with their run's record, not yet handed over."""
        sql = "SELECT count(*) FROM claims WHERE space = ? AND peer = ? AND state IN (?, ?)"
        row = self._db.execute(sql + " AND run IS NOT NULL", self._mine(HELD, CLAIMED))
        return int(row.fetchone()[0])

    def to_claim(self) -> list[FireIn]:
        """The claims the space has not taken yet, whose run has its record, in order."""
        rows = self._rows("claim", HELD)
        return [_fire.decode(row) for row in rows]

    def to_record(self) -> list[RunIn]:
        """The run records of the claims the space took, in order."""
        return [_run.decode(row) for row in self._rows("run", CLAIMED)]

    def mark(self, run_id: str, state: str, outcome: str = "") -> None:
        self._db.execute(
            "UPDATE claims SET state = ?, outcome = ?, changed = ? WHERE run_id = ?",
            [state, outcome, self._clock.wall().timestamp(), run_id],
        )

    def rewrite(self, run: RunIn) -> None:
        """Replace a kept record (the space refused its body: `bodies.refused`)."""
        self._keep(run)

    def outcomes(self) -> dict[str, tuple[str, str]]:
        """Every row's state and outcome, by run id (tests, `status`)."""
        rows = self._db.execute(
            "SELECT run_id, state, outcome FROM claims WHERE space = ? AND peer = ?",
            [self._space, self._peer],
        )
        return {run_id: (state, outcome) for run_id, state, outcome in rows}

    def _mine(self, *more: object) -> list[object]:
        return [self._space, self._peer, *more]

    def _rows(self, column: str, state: str) -> list[bytes]:
        rows = self._db.execute(
            f"SELECT {column} FROM claims WHERE space = ? AND peer = ? AND state = ? "
            "AND run IS NOT NULL ORDER BY rowid",
            self._mine(state),
        )
        return [row[0].encode() for row in rows]

    def _keep(self, run: RunIn) -> None:
        body = _encode(msgspec.structs.replace(run, stamps=None)).decode()
        self._db.execute("UPDATE claims SET run = ? WHERE run_id = ?", [body, run.runId])

    def _crashed(self) -> int:
        """Claims of an earlier process whose run never ended: recorded `crashed`; how many.
        Prunes what is long settled."""
        self._db.execute(
            "DELETE FROM claims WHERE state IN (?, ?) AND changed < ?",
            [DONE, REFUSED, self._clock.wall().timestamp() - KEEP_S],
        )
        rows = self._db.execute(
            "SELECT claim, run_id, program, due_at, claimed_at FROM claims "
            "WHERE space = ? AND peer = ? AND run IS NULL",
            self._mine(),
        ).fetchall()
        for claim, run_id, program, due, claimed in rows:
            self._keep(lost(_fire.decode(claim.encode()), run_id, program, due, claimed))
        return len(rows)


def lost(fire: FireIn, run_id: str, program: str, due: str | None, claimed: str) -> RunIn:
    """The record of a fire claimed here whose run never ended: `crashed`."""
    at = datetime.fromisoformat(claimed)
    due_at = datetime.fromisoformat(due) if due is not None else None
    late = round((at - due_at).total_seconds() * 1000, 1) if due_at is not None else None
    return RunIn(
        runId=run_id,
        triggerId=fire.triggerId,
        program=program,
        peer=fire.peer,
        term=fire.term,
        key=fire.key,
        dueAt=due_at,
        startedAt=at,
        finishedAt=at,
        durationMs=0.0,
        status=RunStatus.CRASHED,
        error="the device stopped before this run ended (claimed in its ledger; not run again)",
        lateMs=late,
        reason=RunReason.DEVICE_STOPPED,
    )
