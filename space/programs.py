"""Programs published to a space: `name@vN`, immutable, checked before they are stored.

Owns the `programs` table on SQLite (the routes go through the store seam) and the publish
routes. The ref and the source are checked by the device's own rules
(`programs.refs.parse_ref`, `programs.source.inspect_source`), so the space stores only
what every device will load; `internal:` refs are never published. The source is capped in
size by the server's setting; `__any_tool__` is kept as metadata, and who published it
(`publisher`: devices run only the admin's and their own, unless told otherwise). The same
source again is a no-op; another source is 409; a device may not be first to publish a ref
a record pinned to another device runs (`not_for_others`). Must not run the program.
"""

from __future__ import annotations

from typing import Any

import msgspec
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
from space.http import Refusal, add_route, answer, read_body
from space.spaces import require_space
from space.store import STORE

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


class Publication(msgspec.Struct, frozen=True, kw_only=True):
    """A program to publish, checked: `device` is the publishing device's peer (None for
    the admin), refused a ref that a record pinned to another device runs."""

    space: str
    name: str
    version: int
    source: str
    sha256: str
    any_tool: bool
    publisher: str  # `admin` or `device:<peer>`
    device: str | None = None


def view(row: dict[str, Any], with_source: bool) -> dict[str, Any]:
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


def find(db: sqlite_utils.Database, space: str, name: str, version: int) -> dict[str, Any] | None:
    rows = list(
        db.query(
            "SELECT * FROM programs WHERE space = ? AND name = ? AND version = ?",
            [space, name, version],
        )
    )
    return rows[0] if rows else None


def rows(db: sqlite_utils.Database, space: str) -> list[dict[str, Any]]:
    return list(db.query("SELECT * FROM programs WHERE space = ? ORDER BY name, version", [space]))


def publish(db: sqlite_utils.Database, pub: Publication, now: str) -> tuple[dict[str, Any], bool]:
    """The program as stored, and whether this call published it (an existing one is
    answered untouched, whatever its source)."""
    with transaction(db):
        existing = find(db, pub.space, pub.name, pub.version)
        if existing is not None:
            return existing, False
        not_for_others(trigger_store.listing(db, pub.space), pub)
        db.execute(
            "INSERT INTO programs (space, name, version, source, sha256, any_tool, "
            "created_at, publisher) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [*row_of(pub)[:6], now, pub.publisher],
        )
    return find(db, pub.space, pub.name, pub.version) or {}, True


def row_of(pub: Publication) -> tuple[str, str, int, str, str, bool]:
    return pub.space, pub.name, pub.version, pub.source, pub.sha256, pub.any_tool


def not_for_others(records: list[dict[str, Any]], pub: Publication) -> None:
    """A device may not be the first to publish a ref that a record pinned to another
    device runs: that device would run its code (the admin token may)."""
    if pub.device is None:
        return
    ref = f"{pub.name}@v{pub.version}"
    for record in records:
        owner = record.get("owner") or ""
        if record.get("program") == ref and owner not in ("", pub.device):
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
    who = principal(request)
    pub = Publication(
        space=space,
        name=name,
        version=version,
        source=body.source,
        sha256=meta.sha256,
        any_tool=meta.any_tool,
        publisher=author(request).actor,
        device=who.peer if who.role is Role.DEVICE else None,
    )
    row, created = await request.app[STORE].publish_program(pub)
    if not created and row["sha256"] != meta.sha256:
        raise Refusal(
            409,
            "program_exists",
            f"{name}@v{version} exists with other source; publish a new version",
            sha256=row["sha256"],
        )
    return answer(view(row, False), status=201 if created else 200)


async def get_program(request: web.Request) -> web.Response:
    space = require_space(request)
    name, version = parse_ref(request.match_info["ref"])
    row = await request.app[STORE].program(space, name, version)
    if row is None:
        raise Refusal(404, "unknown_program", f"no program {name}@v{version} in space {space!r}")
    return answer(view(row, True))


async def list_programs(request: web.Request) -> web.Response:
    space = require_space(request)
    found = await request.app[STORE].programs(space)
    return answer({"programs": [view(r, False) for r in found]})


def setup(app: web.Application) -> None:
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
