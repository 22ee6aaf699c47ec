"""Who is calling: bearer tokens (stored only as sha256), the principal, and route scopes.

Owns the `tokens` table, minting and checking tokens, the admin token file,
and the middleware that authenticates every `/v1` request and enforces which
routes each role may use — for every area of the API, chats included. Handlers
refine the check with `require_peer` (a device acts only as itself). Must not
know any other table.

The principal, on `request[PRINCIPAL]` (a `web.RequestKey` named "principal";
or call `principal(request)`) for every authenticated `/v1` request, is a
`Principal` (frozen msgspec Struct):

- `role`: `Role.ADMIN` (everything), `Role.DEVICE` (everything but admin
  routes; `peer` is its peer id and it may act only as that peer in heartbeats,
  fire claims and election), or `Role.RUN` (one run: `space`, `trigger_id`,
  `run_id` set).
- A run token may, in its own space only: read records and the change feed,
  patch records, read chats and send chat messages, read programs, and read and
  write its own trigger's state. Nothing else (no election, devices, fires,
  runs, other triggers' state, admin routes).
"""

from __future__ import annotations

import enum
import hashlib
import os
import re
import secrets
from pathlib import Path

import msgspec
import sqlite_utils
from aiohttp import web

from space.appstate import CLOCK
from space.db import DB
from space.http import ApiError, Handler


class Role(enum.StrEnum):
    ADMIN = "admin"
    DEVICE = "device"
    RUN = "run"


class Principal(msgspec.Struct, frozen=True, kw_only=True):
    role: Role
    peer: str | None = None
    space: str | None = None
    trigger_id: str | None = None
    run_id: str | None = None


PRINCIPAL = web.RequestKey("principal", Principal)

SCHEMA = """
CREATE TABLE IF NOT EXISTS tokens (
  hash TEXT PRIMARY KEY, role TEXT NOT NULL, peer TEXT, space TEXT,
  trigger_id TEXT, run_id TEXT, created_at REAL NOT NULL, expires_at REAL
);
"""
_PREFIX = {Role.ADMIN: "bta_", Role.DEVICE: "btd_", Role.RUN: "btr_"}


def ensure_schema(db: sqlite_utils.Database) -> None:
    db.executescript(SCHEMA)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def store_token(
    db: sqlite_utils.Database,
    token: str,
    who: Principal,
    now: float,
    expires_at: float | None = None,
) -> None:
    db.execute(
        "INSERT OR IGNORE INTO tokens VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            token_hash(token),
            who.role.value,
            who.peer,
            who.space,
            who.trigger_id,
            who.run_id,
            now,
            expires_at,
        ],
    )


def mint_token(
    db: sqlite_utils.Database, who: Principal, now: float, expires_at: float | None = None
) -> str:
    """A new token for `who`; only its hash is kept, so it is shown once."""
    token = _PREFIX[who.role] + secrets.token_urlsafe(32)
    store_token(db, token, who, now, expires_at)
    return token


def ensure_admin_token(db: sqlite_utils.Database, path: Path, now: float) -> None:
    """Create the admin token file (mode 0600) at first start; accept an existing one."""
    if path.exists():
        token = path.read_text().strip()
        if not token:
            raise ValueError(f"admin token file {path} is empty")
        store_token(db, token, Principal(role=Role.ADMIN), now)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    token = mint_token(db, Principal(role=Role.ADMIN), now)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.chmod(path, 0o600)


def lookup(db: sqlite_utils.Database, token: str, now: float) -> Principal:
    rows = list(db.query("SELECT * FROM tokens WHERE hash = ?", [token_hash(token)]))
    if not rows:
        raise ApiError(401, "unauthorized", "unknown bearer token")
    row = rows[0]
    if row["expires_at"] is not None and row["expires_at"] <= now:
        raise ApiError(401, "token_expired", "the bearer token has expired")
    return Principal(
        role=Role(row["role"]),
        peer=row["peer"],
        space=row["space"],
        trigger_id=row["trigger_id"],
        run_id=row["run_id"],
    )


def bearer(request: web.Request) -> str:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "unauthorized", "missing `Authorization: Bearer <token>` header")
    if not header.isascii() or not header.isprintable():  # no token we mint is anything else
        raise ApiError(401, "unauthorized", "the bearer token is not printable ASCII")
    return token.strip()


# Routes by canonical path. Admin-only; open to any token; open to run tokens.
ADMIN_ONLY = {("POST", "/v1/spaces"), ("POST", "/v1/tokens/device")}
ANY_TOKEN = {("GET", "/v1/openapi.json")}
_RUN_RULES: tuple[tuple[frozenset[str], re.Pattern[str]], ...] = (
    (frozenset({"GET"}), re.compile(r"/triggers(/\{[^}]+\})?|/changes(/stream)?")),
    (frozenset({"PATCH"}), re.compile(r"/triggers/\{[^}]+\}")),
    (frozenset({"GET"}), re.compile(r"/chats(/.*)?")),
    (frozenset({"POST"}), re.compile(r"/chats/\{[^}]+\}/messages")),
    (frozenset({"GET"}), re.compile(r"/programs(/\{[^}]+\})?")),
    (frozenset({"GET", "PUT"}), re.compile(r"/state/\{triggerId\}/\{key\}")),
)
SPACE_PREFIX = "/v1/spaces/{space}"


def run_may(method: str, canonical: str) -> bool:
    if not canonical.startswith(SPACE_PREFIX + "/"):
        return False
    rest = canonical[len(SPACE_PREFIX) :]
    return any(method in methods and rx.fullmatch(rest) for methods, rx in _RUN_RULES)


def roles_for(method: str, canonical: str) -> list[str]:
    """Which roles may use a route (for the OpenAPI document); `run` may be further limited."""
    if (method, canonical) in ANY_TOKEN:
        return [r.value for r in Role]
    if (method, canonical) in ADMIN_ONLY:
        return [Role.ADMIN.value]
    if run_may(method, canonical):
        return [r.value for r in Role]
    return [Role.ADMIN.value, Role.DEVICE.value]


def authorize(request: web.Request, who: Principal) -> None:
    """Raise 403 if `who` may not use the matched route."""
    route = request.match_info.route
    canonical = route.resource.canonical if route.resource is not None else ""
    key = (request.method, canonical)
    if who.role is Role.ADMIN or key in ANY_TOKEN:
        return
    if key in ADMIN_ONLY:
        raise ApiError(403, "forbidden", f"{request.method} {canonical} needs the admin token")
    if who.role is Role.DEVICE:
        return
    if not run_may(request.method, canonical):
        raise ApiError(403, "forbidden", f"a run token may not use {request.method} {canonical}")
    if request.match_info.get("space") != who.space:
        raise ApiError(403, "forbidden", f"this run token is for space {who.space!r} only")
    tid = request.match_info.get("triggerId")
    if "/state/" in canonical and tid != who.trigger_id:
        raise ApiError(403, "forbidden", f"this run token may use state of {who.trigger_id!r} only")


def principal(request: web.Request) -> Principal:
    return request[PRINCIPAL]


def require_peer(request: web.Request, peer: str) -> None:
    """A device token acts only as its own peer; admin acts as any; run tokens never."""
    who = principal(request)
    if who.role is Role.ADMIN:
        return
    if who.role is Role.DEVICE and who.peer == peer:
        return
    raise ApiError(403, "forbidden", f"this token may not act as peer {peer!r}")


@web.middleware
async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
    if not request.path.startswith("/v1/") or request.match_info.http_exception is not None:
        return await handler(request)
    now = request.app[CLOCK]().timestamp()
    who = lookup(request.app[DB], bearer(request), now)
    authorize(request, who)
    request[PRINCIPAL] = who
    return await handler(request)
