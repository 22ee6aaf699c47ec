"""What a run of a program came to: the `Outcome` the executor hands back.

Plain data. Owns the outcome's shape and the words for how a worker process
ended; the statuses are `core.vocab.RunStatus`. Must not know how a run is
performed or recorded.
"""

from __future__ import annotations

import signal
from typing import Any

import msgspec

from core.vocab import FAILED, RunStatus


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """One run's result.

    `duration_ms` runs from the fire (the call to `Executor.run`) to the outcome;
    `main_latency_ms` from the fire to the moment `main()` was entered (None when it
    never was). `result` is the decoded JSON `main` returned (for an oversized result,
    the start of its JSON text with a truncation marker, and status `error`).
    """

    status: RunStatus
    result: Any = None
    error: str = ""
    stdout_tail: str = ""
    stderr_tail: str = ""
    duration_ms: float = 0.0
    main_latency_ms: float | None = None

    @property
    def failed(self) -> bool:
        return self.status in FAILED


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
