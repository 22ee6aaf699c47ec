"""Reading the space's trigger records: listing pages, change-feed pages and entries.

Owns the shapes the reconciler reads (SPEC "Reconcile, registry, health pass"): a
listing fetched page by page and decoded from the raw bytes, a listing brought
forward with the feed pages after its `seq`, one feed entry as the registry takes it,
a `hello`'s cursor, and what in a record is the user's (`edited`, `fingerprint`).
Must not hold state nor write anything: `runtime.feeds.reconciler` keeps what these read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import msgspec

from core.wire import Change
from runtime.client.api import SpaceClient
from runtime.client.sse import SseEvent
from triggers import diffing
from triggers import registry as reg
from triggers.records import Loaded, Salvaged, TriggerId, load

LIST_PAGE = 2000  # records per listing page
NOT_USER = frozenset(
    {
        "rev",
        "createdAt",
        "updatedAt",
        "undecodable",
        "decodeError",
        "lastStatus",
        "lastStatusDetail",
        "lastRunAt",
        "nextFireAt",
        "breaker",
        "rollup",
    }
)
_fingerprint = msgspec.json.Encoder(order="sorted")


async def listing(
    client: SpaceClient, space: str, kept: Callable[[Loaded], Loaded]
) -> tuple[dict[TriggerId, Loaded], int]:
    """Every record, fetched in pages and decoded page by page from the raw bytes;
    the `seq` of the first page (later writes come in through the fold).

    The next page is asked for before this one is decoded, so the space reads it while the
    device decodes (two cores: the listing of 100,000 costs about the decoding alone)."""
    loaded: dict[TriggerId, Loaded] = {}
    page = await client.trigger_page(space, limit=LIST_PAGE)
    seq = page.seq
    while True:
        ahead = (
            asyncio.ensure_future(client.trigger_page(space, after=page.next, limit=LIST_PAGE))
            if page.next
            else None
        )
        try:
            if ahead is not None:
                await asyncio.sleep(0)  # let the request go out before the loop is held
            for raw in page.triggers:
                record = kept(load(raw))
                loaded[record.id] = record
        except BaseException:
            if ahead is not None:
                ahead.cancel()
            raise
        if ahead is None:
            return loaded, seq
        page = await ahead


async def fold_pages(
    client: SpaceClient, space: str, loaded: dict[TriggerId, Loaded], since: int
) -> int:
    """Bring a listing taken at `since` forward with the feed pages after it."""
    while True:
        page = await client.changes(space, since=since)
        for change in page.changes:
            entry = item(change)
            if isinstance(entry, reg.Deleted):
                loaded.pop(entry.id, None)
            else:
                loaded[entry.id] = entry
            since = change.seq
        if not (page.more and page.changes):
            return max(since, page.next or since)


def item(change: Change) -> Loaded | reg.Deleted:
    """One feed entry as the registry takes it."""
    tid = TriggerId(change.triggerId)
    record = change.record  # a dict on purpose: `load` salvages a record that does not decode
    if change.op == "delete" or record is None:
        return reg.Deleted(id=tid)
    loaded = load(record)
    if isinstance(loaded, Salvaged) and loaded.id != tid:
        loaded = msgspec.structs.replace(loaded, id=tid)
    return loaded


def cursor(event: SseEvent) -> int:
    try:
        cursor = event.json().get("cursor")
    except (ValueError, AttributeError):
        return 0
    return cursor if isinstance(cursor, int) else 0


def merge(first: reg.Diff, second: reg.Diff) -> reg.Diff:
    """Both diffs as one summary (each was already published on its own)."""
    fields = first.__struct_fields__
    return reg.Diff(**{f: getattr(first, f) + getattr(second, f) for f in fields})


def edited(prev: Loaded | None, item: Loaded | reg.Deleted) -> bool:
    """Whether a feed change touched user fields (not only stamps or server fields)."""
    if prev is None or isinstance(item, reg.Deleted):
        return True
    if isinstance(prev, Salvaged) or isinstance(item, Salvaged):
        return not (
            isinstance(prev, Salvaged) and isinstance(item, Salvaged) and prev.raw == item.raw
        )
    return diffing.change(reg.arm(prev), item) is not diffing.Edit.NONE


def fingerprint(raw: dict[str, Any]) -> bytes:
    """The user fields of a raw record, as comparable bytes."""
    return _fingerprint.encode({k: v for k, v in raw.items() if k not in NOT_USER})
