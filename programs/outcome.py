"""What a run of a program came to: the `Outcome` the executor hands back.

Plain data. Owns the outcome's shape and the words for how a worker process
ended; the statuses are `core.vocab.RunStatus`. Must not know how a run is
performed or recorded.
"""

from __future__ import annotations

import signal
from datetime import datetime, timedelta
from typing import Any

import msgspec

from core.vocab import FAILED, RunStatus


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """One run's result.

    `duration_ms` runs from the fire (the call to `Executor.run`) to the outcome;
    `main_latency_ms` from the fire to the moment `main()` was entered (None when it
    never was), `queue_ms` to the moment a worker took it. `result` is the decoded JSON
    `main` returned (for an oversized result, the start of its JSON text with a
    truncation marker, and status `error`).
    """

    status: RunStatus
    result: Any = None
    error: str = ""
    stdout_tail: str = ""
    stderr_tail: str = ""
    duration_ms: float = 0.0
    main_latency_ms: float | None = None
    queue_ms: float = 0.0
    handed_at: datetime | None = None  # a worker took it, on the daemon's clock (`dated`)
    entered_at: datetime | None = None  # main() entered, on the daemon's clock (`dated`)

    @property
    def failed(self) -> bool:
        return self.status in FAILED


def dated(outcome: Outcome, called: datetime, now: datetime) -> Outcome:
    """`outcome` of a call to `Executor.run` made at `called` and answered at `now` on the
    daemon's clock, with its instants on that clock: its latencies count on from the call
    (read in this process and, for main()'s entry, in the run process, on the machine's
    one monotonic clock), never past `now` (a clock that did not move, as a test's)."""
    if outcome.main_latency_ms is None:
        return outcome
    return msgspec.structs.replace(
        outcome,
        handed_at=min(now, called + timedelta(milliseconds=outcome.queue_ms)),
        entered_at=min(now, called + timedelta(milliseconds=outcome.main_latency_ms)),
    )


def exit_reason(returncode: int | None) -> str:
    """How a process of a run ended, in words: `worker killed by SIGKILL`."""
    if returncode is None:
        return "worker stopped answering"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"worker killed by {name}"
    return f"worker exited with code {returncode}"
