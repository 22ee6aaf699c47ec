"""What to run: a `Job` handed to the executor.

Plain data: the program's source and ref, its args, the run's context and its limits,
and its warm key: which runs may share a kept run process (the same trigger of the same
space, program ref, source and limits), if its caller asks to keep one at all
(`keep_warm`). Must not know how or where it runs.
"""

from __future__ import annotations

import hashlib
import urllib.parse
from typing import Any

import msgspec

from programs.context import RunContext

NETWORKS = ("none", "space", "any")  # `limits.network`


class Job(msgspec.Struct, frozen=True, kw_only=True):
    source: str
    ref: str  # e.g. "triage@v1"; the file name in the program's tracebacks
    args: dict[str, Any] = {}
    context: RunContext | None = None
    timeout_seconds: float = 60.0
    memory_mb: int = 512
    keep_warm: bool = True  # False: its run process ends with it, whatever its key
    network: str = "any"  # "none" | "space" (TCP to the context's URL port only) | "any"
    disk_mb: int = 64  # the scratch directory's quota

    def __post_init__(self) -> None:
        if not self.timeout_seconds > 0:
            raise ValueError(f"timeout_seconds: must be > 0, got {self.timeout_seconds!r}")
        if self.memory_mb <= 0:
            raise ValueError(f"memory_mb: must be > 0, got {self.memory_mb!r}")
        if self.network not in NETWORKS:
            raise ValueError(f"network: must be one of {', '.join(NETWORKS)}, got {self.network!r}")
        if self.disk_mb <= 0:
            raise ValueError(f"disk_mb: must be > 0, got {self.disk_mb!r}")

    @property
    def ports(self) -> tuple[int, ...] | None:
        """The TCP ports a run may connect to; None: any (no network rule)."""
        if self.network == "any":
            return None
        if self.network == "none" or self.context is None:
            return ()
        url = urllib.parse.urlsplit(self.context.url)
        return (url.port or (443 if url.scheme == "https" else 80),)

    @property
    def warm_key(self) -> str:
        """Runs with the same key may run in one kept process; empty (no trigger, or not
        to be kept): never."""
        if not self.keep_warm or self.context is None or not self.context.trigger_id:
            return ""
        digest = hashlib.blake2b(self.source.encode(), digest_size=16).hexdigest()
        where = f"{self.context.url}\0{self.context.space}\0{self.context.trigger_id}"
        limits = f"{self.memory_mb}\0{self.network}\0{self.disk_mb}"
        return f"{where}\0{self.ref}\0{limits}\0{digest}"
