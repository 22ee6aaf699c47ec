"""What the runs, turns and idempotency-key parts of the seam take and answer, either store.

Owns those values: who posts runs and how long they are kept (`Poster`), a posted run's
and a posted list's outcome (`RunPosted`, `RunsPosted`), a log's listing (`LogQuery`), and
an answer kept under an `Idempotency-Key` (`Kept`). Must not hold SQL nor know HTTP beyond
carrying a `Refusal`.
"""

from __future__ import annotations

import msgspec

from core.wire import RunIn, RunResult
from space.appstate import RunRetention
from space.http import Refusal
from space.token_store import Principal


class Poster(msgspec.Struct, frozen=True, kw_only=True):
    """Who posts runs: a device (None: the admin), the retention of runs, the mark of a
    device's stamps in a list (`space.changes.writer`)."""

    who: Principal | None
    keep: RunRetention
    writer: str = ""

    @property
    def peer(self) -> str | None:
        """Whose fires a refused run's tokens are ended of (None: any, the admin's post)."""
        return None if self.who is None else self.who.peer


class RunPosted(msgspec.Struct, frozen=True, kw_only=True):
    """One posted run: as stored and whether this post added it; or why it was refused,
    nothing written but, when `ended`, the end of its tokens."""

    run: RunIn | None = None
    added: bool = False
    refusal: Refusal | None = None
    ended: bool = False


class RunsPosted(msgspec.Struct, frozen=True):
    """A posted list: one result per run, and the runs whose tokens ended (their streams too)."""

    results: list[RunResult]
    ended: list[str]


class LogQuery(msgspec.Struct, frozen=True, kw_only=True):
    """A log's listing: `filters` column → value (the columns are the code's, never input),
    from `since` (unix seconds) oldest first, else the latest `limit`."""

    filters: dict[str, str]
    since: float | None
    limit: int


class Kept(msgspec.Struct, frozen=True, kw_only=True):
    """An answer kept under its key, with the digest of the request it answered."""

    digest: str
    status: int
    content_type: str
    headers: str  # JSON: the kept headers
    body: bytes
