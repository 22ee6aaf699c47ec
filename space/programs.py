"""Programs published to a space: `name@vN`, immutable, checked before they are stored.

Owns the `programs` table and the publish routes. The ref and the source are
checked by the device's own rules (`programs.refs.parse_ref`,
`programs.source.inspect_source`), so the space stores only what every device
will load; `internal:` refs are never published. The source is also capped in
size by the server's setting; `__any_tool__` is kept as metadata, and who published
it (`publisher`: devices run only the admin's and their own, unless told otherwise).
The same source again is a no-op; another source is 409; a device may not be first
to publish a ref a record pinned to another device runs. Must not run the program.
"""

from __future__ import annotations

from typing import Any

import sqlite_utils
from aiohttp import web

from core.wire import Body, ProgramList, ProgramOut
from programs import refs
from programs import source as source_check
from programs.source import ProgramMeta
from space import trigger_store
from space.appstate import SETTINGS
from space.auth import Role, author, principal
from space.db import add_columns, transaction
from space.dbthread import DB_THREAD, db_call
from space.http import Refusal, add_route, answer, now_of, read_body
from space.servertime import iso
from space.spaces import require_space

SCHEMA = """
CREATE TABLE IF NOT EXISTS programs (space TEXT NOT NULL, name TEXT NOT NULL,
  version INTEGER NOT NULL, source TEXT NOT NULL, sha256 TEXT NOT NULL,
  any_tool INTEGER NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY (space, name, version));
"""
ADDED_COLUMNS = {"publisher": "TEXT"}  # `admin` or `device:<peer>`; NULL: before it was kept


class ProgramIn(Body, frozen=True, kw_only=True):
    source: str


def ensure_schema(db: sqlite_utils.Database) -> None:
    db.executescript(SCHEMA)
    add_columns(db, "programs", ADDED_COLUMNS)


def parse_ref(text: str) -> tuple[str, int]:
    """`(name, N)` of a published ref, by the device's grammar; `internal:` refs are refused."""
    try:
        ref = refs.parse_ref(text)
    except refs.InvalidRef as exc:
        raise Refusal(
            400, "invalid_program_ref", f"program {text!r} is not `name@vN`: {exc}"
        ) from None
    if ref.internal or ref.version is None:
        detail = f"program {text!r} is not `name@vN`: `internal:` refs are not published"
        raise Refusal(400, "invalid_program_ref", detail)
    return ref.name, ref.version


def inspect_source(source: str) -> ProgramMeta:
    """The device loader's check of `source`, its refusal as a 400 `invalid_program`."""
    try:
        return source_check.inspect_source(source)
    except source_check.InvalidProgram as exc:
        raise Refusal(400, "invalid_program", f"{exc} - at `$.source`") from None


def _out(row: dict[str, Any], with_source: bool) -> dict[str, Any]:
    out = {
        "ref": f"{row['name']}@v{row['version']}",
        "name": row["name"],
        "version": row["version"],
        "sha256": row["sha256"],
        "anyTool": bool(row["any_tool"]),
        "createdAt": row["created_at"],
        "publisher": row["publisher"] or "admin",
    }
    return {**out, "source": row["source"]} if with_source else out


def _find(db: sqlite_utils.Database, space: str, name: str, version: int) -> dict[str, Any] | None:
    rows = list(
        db.query(
            "SELECT * FROM programs WHERE space = ? AND name = ? AND version = ?",
            [space, name, version],
        )
    )
    return rows[0] if rows else None


def _not_for_others(db: sqlite_utils.Database, request: web.Request, space: str, ref: str) -> None:
    """A device may not be the first to publish a ref that a record pinned to another
    device runs: that device would run its code (the admin token may)."""
    who = principal(request)
    if who.role is not Role.DEVICE:
        return
    for record in trigger_store.listing(db, space):
        owner = record.get("owner") or ""
        if record.get("program") == ref and owner not in ("", who.peer):
            detail = (
                f"{ref} is the program of trigger {record.get('id')!r}, pinned to {owner!r}: "
                "publishing it needs the admin token"
            )
            raise Refusal(403, "forbidden", detail)


async def put_program(request: web.Request) -> web.Response:
    space = require_space(request)
    name, version = parse_ref(request.match_info["ref"])
    body = await read_body(request, ProgramIn)
    limit = request.app[SETTINGS].max_program_bytes
    if len(body.source.encode()) > limit:
        raise Refusal(413, "program_too_large", f"source over {limit} bytes - at `$.source`")
    meta = inspect_source(body.source)
    any_tool, digest = meta.any_tool, meta.sha256
    row = [space, name, version, body.source, digest, any_tool, iso(now_of(request))]
    existing, found = await db_call(request.app, _publish, request, [*row, author(request).actor])
    if existing is not None and existing["sha256"] != digest:
        raise Refusal(
            409,
            "program_exists",
            f"{name}@v{version} exists with other source; publish a new version",
            sha256=existing["sha256"],
        )
    return answer(_out(found or {}, False), status=200 if existing else 201)


Row = dict[str, Any] | None


def _publish(db: sqlite_utils.Database, request: web.Request, row: list[Any]) -> tuple[Row, Row]:
    """The program as it was (None: new) and as it is, in one unit of work."""
    space, name, version = row[:3]
    with transaction(db):
        existing = _find(db, space, name, version)
        if existing is None:
            _not_for_others(db, request, space, f"{name}@v{version}")
            db.execute(
                "INSERT INTO programs (space, name, version, source, sha256, any_tool, "
                "created_at, publisher) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )
    return existing, _find(db, space, name, version)


async def get_program(request: web.Request) -> web.Response:
    space = require_space(request)
    name, version = parse_ref(request.match_info["ref"])
    row = await db_call(request.app, _find, space, name, version)
    if row is None:
        raise Refusal(404, "unknown_program", f"no program {name}@v{version} in space {space!r}")
    return answer(_out(row, True))


async def list_programs(request: web.Request) -> web.Response:
    space = require_space(request)
    rows = await db_call(request.app, _listing, space)
    return answer({"programs": [_out(r, False) for r in rows]})


def _listing(db: sqlite_utils.Database, space: str) -> list[dict[str, Any]]:
    return list(db.query("SELECT * FROM programs WHERE space = ? ORDER BY name, version", [space]))


def setup(app: web.Application) -> None:
    app[DB_THREAD].blocking(ensure_schema)
    add_route(
        app,
        "program_put",
        put_program,
        "Publish `name@vN` (immutable: same source is a no-op, other source 409)",
        body=ProgramIn,
        answer=ProgramOut,
    )
    add_route(
        app,
        "program_get",
        get_program,
        "One program with its source",
        answer=ProgramOut,
    )
    add_route(app, "programs", list_programs, "List programs (without source)", answer=ProgramList)
