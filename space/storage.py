"""Storage faults: a full disk, a read-only, locked or failing database answer 503, never 500.

Owns telling a storage fault (SQLite's FULL, READONLY, IOERR, BUSY, LOCKED, CANTOPEN,
CORRUPT, NOTADB, PROTOCOL, NOMEM) from a bug, the middleware that answers it
`503 {"error": "storage_unavailable", "detail"}` with `Retry-After`, and the app's
`StorageState`: the fault seen last and since when, cleared by the next unit of work whose
writes commit (its `recovered` hooks then hear how long writes failed); the database thread
(`space.dbthread`) tells it. A stall (`Stalled`) is a 503 too. `/healthz` and `/metrics` read
that state. Must not know any table.
"""

from __future__ import annotations

import logging
import sqlite3
from collections import Counter
from collections.abc import Callable
from datetime import datetime

import asyncpg
from aiohttp import web

from space.errors import error_response
from space.http import Handler
from space.servertime import iso

log = logging.getLogger("baton.space")

RETRY_AFTER_S = 5
_FAULTS = {
    5: "busy",
    6: "locked",
    7: "no_memory",
    8: "read_only",
    10: "io_error",
    11: "corrupt",
    13: "disk_full",
    14: "cannot_open",
    15: "protocol",
    26: "not_a_database",
}


def fault_of(exc: BaseException) -> str | None:
    """The storage fault `exc` reports (`disk_full`, `read_only`, …), or None if it is not one."""
    if not isinstance(exc, sqlite3.Error):
        return None
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return _FAULTS.get(code & 0xFF)
    text = str(exc).lower()  # no code: an error raised by the module itself
    return "disk_full" if "disk is full" in text else "read_only" if "readonly" in text else None


class StorageState:
    """The last storage fault and since when (None while writes commit); counts per fault."""

    def __init__(self) -> None:
        self.fault: str | None = None
        self.detail = ""
        self.since: str | None = None
        self.began: datetime | None = None
        self.seen: Counter[str] = Counter()
        self.recovered: list[Callable[[float, float], None]] = []  # (began, seconds)

    def failed(self, fault: str, detail: str, now: datetime) -> None:
        if self.fault is None:
            self.since, self.began = iso(now), now
            log.warning("storage unavailable (%s): %s", fault, detail)
        self.fault, self.detail = fault, detail
        self.seen[fault] += 1

    def committed(self, now: datetime) -> None:
        if self.fault is not None and self.began is not None:
            log.warning("storage available again after %s since %s", self.fault, self.since)
            for hook in self.recovered:
                hook(self.began.timestamp(), (now - self.began).total_seconds())
        self.fault, self.detail, self.since, self.began = None, "", None, None

    def view(self) -> dict[str, object]:
        """What `/healthz` shows of it."""
        if self.fault is None:
            return {}
        return {"storage": self.fault, "detail": self.detail, "since": self.since}


STORAGE = web.AppKey("storage", StorageState)


class Stalled(Exception):
    """The database thread did not take up a unit of work in time (`dbthread.WAIT_S`)."""


STORE_FAULTS = (sqlite3.Error, Stalled, asyncpg.PostgresError, OSError)  # of either store


def refusal(fault: str, detail: str) -> web.Response:
    text = f"the store cannot be used now ({fault}: {detail}); retry later"
    response = error_response(503, "storage_unavailable", text, fault=fault)
    response.headers["Retry-After"] = str(RETRY_AFTER_S)
    return response


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A storage fault or a stall of the handler's database work is a 503 (the database
    thread, `space.dbthread`, has told `StorageState` already)."""
    try:
        return await handler(request)
    except Stalled as exc:
        request.app[STORAGE].seen["stalled"] += 1
        return refusal("stalled", str(exc))
    except sqlite3.Error as exc:
        fault = fault_of(exc)
        if fault is None:
            raise
        return refusal(fault, str(exc))


def setup(app: web.Application) -> None:
    app[STORAGE] = StorageState()
