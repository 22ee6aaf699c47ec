"""Programs published to a space: `name@vN`, immutable, checked before they are stored.

Owns the `programs` table and the publish rules: the name matches
`[a-z0-9][a-z0-9_-]*`, N ≥ 1, the source is capped in size, compiles, and
defines a top-level `main`; a top-level `__any_tool__ = True/False` is kept as
metadata. The same source again is a no-op; another source is 409. Must not
run the program.
"""

from __future__ import annotations

import ast
import hashlib
import re
from typing import Any

import msgspec
import sqlite_utils
from aiohttp import web

from runtime.space.appstate import SETTINGS
from runtime.space.clock import iso
from runtime.space.db import DB, transaction
from runtime.space.http import ApiError, add_route, answer, now_of, read_body
from runtime.space.spaces import require_space

REF = re.compile(r"(?P<name>[a-z0-9][a-z0-9_-]*)@v(?P<version>[1-9][0-9]*)")

SCHEMA = """
CREATE TABLE IF NOT EXISTS programs (space TEXT NOT NULL, name TEXT NOT NULL,
  version INTEGER NOT NULL, source TEXT NOT NULL, sha256 TEXT NOT NULL,
  any_tool INTEGER NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY (space, name, version));
"""


class ProgramIn(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    source: str


class ProgramOut(msgspec.Struct, frozen=True, kw_only=True):
    ref: str
    name: str
    version: int
    sha256: str
    anyTool: bool
    createdAt: str
    source: str | None = None


class ProgramList(msgspec.Struct, frozen=True, kw_only=True):
    programs: list[ProgramOut]


def ensure_schema(db: sqlite_utils.Database) -> None:
    db.executescript(SCHEMA)


def parse_ref(ref: str) -> tuple[str, int]:
    m = REF.fullmatch(ref)
    if m is None:
        raise ApiError(
            400,
            "invalid_program_ref",
            f"program {ref!r} is not `name@vN` (name [a-z0-9][a-z0-9_-]*, N ≥ 1)",
        )
    return m["name"], int(m["version"])


def inspect_source(source: str) -> bool:
    """Check that `source` compiles and defines a top-level `main`; its `__any_tool__`."""
    try:
        tree = compile(source, "<program>", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
        compile(tree, "<program>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise ApiError(
            400,
            "invalid_program",
            f"does not compile: {exc.msg} at line {exc.lineno} - at `$.source`",
            line=exc.lineno,
        ) from None
    except ValueError as exc:
        raise ApiError(400, "invalid_program", f"does not compile: {exc} - at `$.source`") from None
    if not any(_defines(node, "main") for node in tree.body):
        raise ApiError(400, "invalid_program", "no top-level `main` - at `$.source`")
    return _any_tool(tree)


def _defines(node: ast.stmt, name: str) -> bool:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return node.name == name
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
    return False


def _any_tool(tree: ast.Module) -> bool:
    for node in tree.body:
        if _defines(node, "__any_tool__") and isinstance(node, ast.Assign):
            try:
                return bool(ast.literal_eval(node.value))
            except ValueError:
                raise ApiError(
                    400,
                    "invalid_program",
                    "`__any_tool__` must be a literal True or False - at `$.source`",
                ) from None
    return False


def _out(row: dict[str, Any], with_source: bool) -> dict[str, Any]:
    out = {
        "ref": f"{row['name']}@v{row['version']}",
        "name": row["name"],
        "version": row["version"],
        "sha256": row["sha256"],
        "anyTool": bool(row["any_tool"]),
        "createdAt": row["created_at"],
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


async def put_program(request: web.Request) -> web.Response:
    space = require_space(request)
    name, version = parse_ref(request.match_info["ref"])
    body = await read_body(request, ProgramIn)
    limit = request.app[SETTINGS].max_program_bytes
    if len(body.source.encode()) > limit:
        raise ApiError(413, "program_too_large", f"source over {limit} bytes - at `$.source`")
    any_tool = inspect_source(body.source)
    digest = hashlib.sha256(body.source.encode()).hexdigest()
    db = request.app[DB]
    with transaction(db):
        existing = _find(db, space, name, version)
        if existing is None:
            db.execute(
                "INSERT INTO programs VALUES (?, ?, ?, ?, ?, ?, ?)",
                [space, name, version, body.source, digest, any_tool, iso(now_of(request))],
            )
    if existing is not None and existing["sha256"] != digest:
        raise ApiError(
            409,
            "program_exists",
            f"{name}@v{version} exists with other source; publish a new version",
            sha256=existing["sha256"],
        )
    row = _find(db, space, name, version)
    return answer(_out(row or {}, False), status=200 if existing else 201)


async def get_program(request: web.Request) -> web.Response:
    space = require_space(request)
    name, version = parse_ref(request.match_info["ref"])
    row = _find(request.app[DB], space, name, version)
    if row is None:
        raise ApiError(404, "unknown_program", f"no program {name}@v{version} in space {space!r}")
    return answer(_out(row, True))


async def list_programs(request: web.Request) -> web.Response:
    space = require_space(request)
    rows = request.app[DB].query(
        "SELECT * FROM programs WHERE space = ? ORDER BY name, version", [space]
    )
    return answer({"programs": [_out(r, False) for r in rows]})


def setup(app: web.Application) -> None:
    ensure_schema(app[DB])
    base = "/v1/spaces/{space}/programs"
    add_route(
        app,
        "PUT",
        base + "/{ref}",
        put_program,
        "Publish `name@vN` (immutable: same source is a no-op, other source 409)",
        body=ProgramIn,
        answer=ProgramOut,
    )
    add_route(
        app,
        "GET",
        base + "/{ref}",
        get_program,
        "One program with its source",
        answer=ProgramOut,
    )
    add_route(app, "GET", base, list_programs, "List programs (without source)", answer=ProgramList)
