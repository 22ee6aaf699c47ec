"""What to run: a `Job` handed to the executor.

Plain data: the program's source and ref, its args, the run's context and its limits,
and its warm key: which runs may share a kept run process (the same trigger of the same
space, program ref, source and memory limit), if its caller asks to keep one at all
(`keep_warm`). Must not know how or where it runs.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from programs.context import RunContext


class Job(msgspec.Struct, frozen=True, kw_only=True):
    source: str
    ref: str  # e.g. "triage@v1"; the file name in the program's tracebacks
    args: dict[str, Any] = {}
    context: RunContext | None = None
    timeout_seconds: float = 60.0
    memory_mb: int = 512
    keep_warm: bool = True  # False: its run process ends with it, whatever its key

    def __post_init__(self) -> None:
        if not self.timeout_seconds > 0:
            raise ValueError(f"timeout_seconds: must be > 0, got {self.timeout_seconds!r}")
        if self.memory_mb <= 0:
            raise ValueError(f"memory_mb: must be > 0, got {self.memory_mb!r}")

    @property
    def warm_key(self) -> str:
        """Runs with the same key may run in one kept process; empty (no trigger, or not
        to be kept): never."""
        if not self.keep_warm or self.context is None or not self.context.trigger_id:
            return ""
        digest = hashlib.blake2b(self.source.encode(), digest_size=16).hexdigest()
        where = f"{self.context.url}\0{self.context.space}\0{self.context.trigger_id}"
        return f"{where}\0{self.ref}\0{self.memory_mb}\0{digest}"
